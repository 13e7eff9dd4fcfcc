"""Shared machinery of both algorithms: rollouts, GAE, the compiled update, logging, checkpoints.

:class:`Trainer.train` reads top to bottom: collect a batch with the executed policy,
normalise and evaluate it, take ``update_epochs`` passes of minibatch Adam steps on the
policy loss (the one thing subclasses define, :meth:`Trainer._policy_loss`) and the value
loss inside a single ``tf.function``, let the subclass finish the update
(:meth:`Trainer._finish_update`: the projected algorithm makes the executed policy equal
to the projected one there), then measure the constraints between the consecutive
executed policies on the batch states, log and checkpoint.
"""

from __future__ import annotations

import abc
import contextlib
import math
import time
from pathlib import Path
from typing import NamedTuple

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from keras_structured.divergence import DivergenceError
from keras_structured.run_directory import RunLock
from rl.checkpoint import (
    WEIGHTS_FILE,
    CheckpointError,
    assign_variables,
    checkpoint_dirs,
    checkpoint_iteration,
    flatten_arrays,
    inconsistent_state,
    read_arrays,
    read_resume_state,
    read_state,
    save_checkpoint,
    unflatten_arrays,
    variable_arrays,
)
from rl.config import TrainConfig
from rl.env_kind import make_env
from rl.envs import VectorEnvs
from rl.gae import gae
from rl.logger import Logger
from rl.normalization import ReturnScaler, RunningMeanStd
from rl.policies import NO_BOUND, Params, ValueNetwork, make_policy, preserve_first_layer
from rl.run_dir import LIBRARY_REMEDY, check_new_run

#: what usually makes a run diverge, for the messages.
LIKELY_CAUSES = (
    "a learning rate (policy_lr, value_lr) or max_grad_norm too large, or observations or rewards "
    "too large or not finite (see normalize_obs and normalize_rewards)"
)


def adam(learning_rate: float, max_grad_norm: float) -> keras.optimizers.Adam:
    """Adam with global gradient-norm clipping (every optimizer of both algorithms)."""
    return keras.optimizers.Adam(learning_rate, global_clipnorm=max_grad_norm)


class Batch(NamedTuple):
    """One iteration of data, flattened to ``N = num_steps * num_envs`` samples (tensors)."""

    obs: tf.Tensor
    actions: tf.Tensor
    advantages: tf.Tensor
    returns: tf.Tensor
    old_params: Params
    old_log_prob: tf.Tensor


class Rollout(NamedTuple):
    """Raw arrays of one rollout, time first ``(num_steps, num_envs, ...)``."""

    obs: np.ndarray
    next_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    done: np.ndarray
    episodes: list[tuple[float, int]]


class Constraints(NamedTuple):
    """Constraint statistics between the old and new executed policies on the batch states."""

    kl_mean: float
    kl_max: float
    entropy_mean: float
    entropy_min: float

    def kl(self, per_state: bool) -> float:
        """The constrained KL: max over states per state, else the mean."""
        return self.kl_max if per_state else self.kl_mean

    def entropy(self, per_state: bool) -> float:
        """The constrained entropy: min over states per state, else the mean."""
        return self.entropy_min if per_state else self.entropy_mean


class Trainer(abc.ABC):
    """On-policy actor-critic trainer; subclasses define the policy loss and finish the update.

    Args:
        config: the run configuration (validated here, before anything is built).
        verbose: show a progress bar.

    Raises:
        ValueError: for an invalid config, unknown env, unsupported action space, or an
            entropy bound at or above the maximum entropy of the policy.
    """

    def __init__(self, config: TrainConfig, verbose: bool = False):
        config.validate()
        self.config = config
        self.verbose = verbose
        keras.utils.set_random_seed(config.seed)
        self.envs = VectorEnvs(config.env_id, config.num_envs, config.seed, config.vector)
        obs_dim = self.envs.single_observation_space.shape[0]
        self.action_space = self.envs.single_action_space
        self.policy = make_policy(
            obs_dim,
            self.action_space,
            config.hidden_sizes,
            config.activation,
            config.seed,
            config.gaussian,
            config.init_std,
        )
        if config.entropy_bound is not None and config.entropy_bound >= self.policy.max_entropy:
            raise ValueError(
                f"entropy_bound must be below the maximum entropy {self.policy.max_entropy!r} of the "
                f"{config.env_id} policy. Received: entropy_bound={config.entropy_bound!r}"
            )
        self.value = ValueNetwork(obs_dim, config.hidden_sizes, config.activation, config.seed + 100)
        self.policy_optimizer = adam(config.policy_lr, config.max_grad_norm)
        self.value_optimizer = adam(config.value_lr, config.max_grad_norm)
        self.policy_optimizer.build(self.policy.variables)
        self.value_optimizer.build(self.value.variables)
        self.obs_rms = RunningMeanStd((obs_dim,)) if config.normalize_obs else None
        self.reward_scaler = ReturnScaler(config.num_envs, config.gamma) if config.normalize_rewards else None
        self.rng = np.random.default_rng(config.seed)
        self.iteration = 0
        self.global_step = 0
        self._continuous = isinstance(self.action_space, gym.spaces.Box)
        self._train_epochs = tf.function(self._train_epochs_impl)
        self._evaluate_batch = tf.function(self._evaluate_batch_impl)
        self._measure = tf.function(self._measure_impl)
        if self.obs_rms is not None and config.obs_norm_warmup_steps > 0:
            self._warm_up_obs_rms(config.obs_norm_warmup_steps)

    # ----------------------------------------------------------------------------------- loop
    def train(self, lock: RunLock | None = None) -> dict[str, float]:
        """Trains until ``config.total_steps``; returns the last logged row.

        The run directory is locked while training (:class:`~keras_structured.run_directory.RunLock`),
        so that a second process cannot write it at the same time.

        Args:
            lock: a lock this process already holds on ``config.logdir`` (the command line takes
                it before it reads or clears the run); ``None``: one is taken for this call.

        Raises:
            RunLockedError: another process is writing ``config.logdir`` (nothing is written).
            FileExistsError: a trainer that was not restored from a checkpoint would train into
                a logdir holding a run (its CSV, events and checkpoints would mix with this one's).
            CheckpointError: a restored trainer's logdir lacks the ``progress.csv`` rows of the
                checkpoint's iterations (nothing is written).
            DivergenceError: a loss, a weight, an optimizer state or a running statistic became
                NaN or infinite; names the iteration. No checkpoint of it is written; those
                written before are kept untouched.
        """
        logdir = Path(self.config.logdir)
        if lock is not None and not (lock.held and lock.logdir.resolve() == logdir.resolve()):
            raise ValueError(
                f"lock must be held on the run's logdir {str(logdir)!r}. "
                f"Received: lock on {str(lock.logdir)!r} (held: {lock.held})"
            )
        with RunLock(logdir) if lock is None else contextlib.nullcontext():
            return self._train(logdir)

    def _train(self, logdir: Path) -> dict[str, float]:
        """:meth:`train`, the run directory locked."""
        config = self.config
        resumed = self.iteration > 0
        if not resumed:
            check_new_run(logdir, overwrite=False, remedy=LIBRARY_REMEDY)
        logger = Logger(  # checks a resumed run's log before anything is written
            logdir,
            self.iteration if resumed else None,
            config.num_iterations * config.batch_size if self.verbose else None,
            self.global_step,
        )
        start_time, start_step = time.perf_counter(), self.global_step
        row: dict[str, float] = {}
        try:
            config.save(logdir / "config.json")
            while self.iteration < config.num_iterations:
                self.iteration += 1
                rollout = self._collect()
                batch = self._prepare(rollout)
                entropy_bound = self._entropy_bound(batch)
                old_weights = [tf.identity(v) for v in self.policy.variables]
                policy_loss, value_loss = self._update(batch, entropy_bound)
                self._check_finite({"losses/policy_loss": policy_loss, "losses/value_loss": value_loss})
                extra = self._finish_update(batch, entropy_bound, old_weights)
                self._check_finite({k: v for k, v in extra.items() if k.startswith("losses/")})
                constraints = self._constraints(batch)
                self.global_step += config.batch_size
                row = self._row(rollout, policy_loss, value_loss, constraints, entropy_bound, extra)
                row["time/sps"] = (self.global_step - start_step) / (time.perf_counter() - start_time)
                logger.log(row)
                if self.iteration % config.checkpoint_every == 0 or self.iteration == config.num_iterations:
                    self.save()
        finally:
            logger.close()
        return row

    # ------------------------------------------------------------------------------- rollout
    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        return obs.astype(np.float32) if self.obs_rms is None else self.obs_rms.normalize(obs)

    def _collect(self) -> Rollout:
        """Steps the envs ``num_steps`` times with the executed policy (numpy forward pass)."""
        config = self.config
        shape = (config.num_steps, config.num_envs)
        obs_shape = shape + self.envs.obs.shape[1:]
        obs, next_obs = np.empty(obs_shape), np.empty(obs_shape)
        actions = np.empty(shape + self.action_space.shape, np.float32 if self._continuous else np.int64)
        rewards, terminated, done = np.empty(shape), np.empty(shape, bool), np.empty(shape, bool)
        weights = self.policy.numpy_weights()
        episodes = []
        low, high = (self.action_space.low, self.action_space.high) if self._continuous else (None, None)
        for t in range(config.num_steps):
            obs[t] = self.envs.obs
            actions[t] = self.policy.act_numpy(weights, self._normalize(obs[t]), self.rng)
            env_actions = np.clip(actions[t], low, high) if self._continuous else actions[t]
            _, rewards[t], terminated[t], truncated, next_obs[t], finished = self.envs.step(env_actions)
            done[t] = terminated[t] | truncated
            if self.reward_scaler is not None:
                rewards[t] = self.reward_scaler(rewards[t], done[t])
            episodes.extend(finished)
        return Rollout(obs, next_obs, actions, rewards, terminated, done, episodes)

    def _warm_up_obs_rms(self, steps: int) -> None:
        """Initialises the observation statistics from ``steps`` uniformly random actions."""
        env = make_env(self.config.env_id)
        env.action_space.seed(self.config.seed + 54321)
        obs, _ = env.reset(seed=self.config.seed + 54321)
        samples = [obs]
        for _ in range(steps - 1):
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                obs, _ = env.reset()
            samples.append(obs)
        env.close()
        self.obs_rms.update(np.asarray(samples))

    # ------------------------------------------------------------------------------- batch
    def _prepare(self, rollout: Rollout) -> Batch:
        """Observation statistics, values, GAE and the old policy's parameters on the batch."""
        obs_dim = rollout.obs.shape[-1]
        if self.obs_rms is not None:
            old_mean, old_std = self.obs_rms.mean, self.obs_rms.std
            self.obs_rms.update(rollout.obs.reshape(-1, obs_dim))
            for network in (self.policy.network, self.value.network):
                preserve_first_layer(network, old_mean, old_std, self.obs_rms.mean, self.obs_rms.std)
        obs = tf.constant(self._normalize(rollout.obs.reshape(-1, obs_dim)))
        next_obs = tf.constant(self._normalize(rollout.next_obs.reshape(-1, obs_dim)))
        actions = tf.constant(rollout.actions.reshape((-1,) + rollout.actions.shape[2:]))
        values, next_values, old_params, old_log_prob = self._evaluate_batch(obs, next_obs, actions)
        shape = rollout.rewards.shape
        advantages, returns = gae(
            rollout.rewards,
            values.numpy().reshape(shape),
            next_values.numpy().reshape(shape),
            rollout.terminated,
            rollout.done,
            self.config.gamma,
            self.config.gae_lambda,
        )
        advantages = advantages.reshape(-1)
        if self.config.normalize_advantages:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return Batch(
            obs,
            actions,
            tf.constant(advantages, tf.float32),
            tf.constant(returns.reshape(-1), tf.float32),
            old_params,
            old_log_prob,
        )

    def _evaluate_batch_impl(self, obs, next_obs, actions):
        params = self.policy.params(obs)
        return self.value(obs), self.value(next_obs), params, self.policy.log_prob(params, actions)

    # ------------------------------------------------------------------------------- update
    def _update(self, batch: Batch, entropy_bound: float | None) -> tuple[float, float]:
        """``update_epochs`` shuffled passes of minibatch Adam steps; returns the mean losses."""
        perms = self._shuffled_minibatches(self.config.minibatch_size, self.config.update_epochs)
        bound = tf.constant(self._bound_value(entropy_bound), tf.float32)
        try:
            policy_loss, value_loss = self._train_epochs(batch, tf.constant(perms, tf.int32), bound)
        except tf.errors.InvalidArgumentError as error:
            raise self._divergence("the policy update met non-finite values") from error
        return float(policy_loss), float(value_loss)

    def _train_epochs_impl(self, batch: Batch, perms: tf.Tensor, entropy_bound: tf.Tensor):
        policy_total, value_total = tf.constant(0.0), tf.constant(0.0)
        for epoch in tf.range(tf.shape(perms)[0]):
            for m in tf.range(tf.shape(perms)[1]):
                idx = perms[epoch, m]
                obs = tf.gather(batch.obs, idx)
                with tf.GradientTape() as tape:
                    policy_loss = self._policy_loss(
                        self.policy.params(obs),
                        self.policy.select(batch.old_params, idx),
                        tf.gather(batch.actions, idx),
                        tf.gather(batch.old_log_prob, idx),
                        tf.gather(batch.advantages, idx),
                        entropy_bound,
                    )
                grads = tape.gradient(policy_loss, self.policy.variables)
                self.policy_optimizer.apply_gradients(zip(grads, self.policy.variables, strict=True))
                with tf.GradientTape() as tape:
                    error = self.value(obs) - tf.gather(batch.returns, idx)
                    value_loss = 0.5 * tf.reduce_mean(tf.square(error))
                grads = tape.gradient(value_loss, self.value.variables)
                self.value_optimizer.apply_gradients(zip(grads, self.value.variables, strict=True))
                policy_total += policy_loss
                value_total += value_loss
        count = tf.cast(tf.size(perms) // tf.shape(perms)[2], tf.float32)
        return policy_total / count, value_total / count

    @abc.abstractmethod
    def _policy_loss(
        self,
        params: Params,
        old_params: Params,
        actions: tf.Tensor,
        old_log_prob: tf.Tensor,
        advantages: tf.Tensor,
        entropy_bound: tf.Tensor,
    ) -> tf.Tensor:
        """The minibatch policy loss (minimised), traced inside the compiled update."""

    def _entropy_bound(self, batch: Batch) -> float | None:
        """The entropy lower bound of this iteration (``None``: no bound)."""
        return None

    def _finish_update(
        self, batch: Batch, entropy_bound: float | None, old_weights: list[tf.Tensor]
    ) -> dict[str, float]:
        """Runs after the epochs; returns extra CSV values (none by default)."""
        return {}

    @staticmethod
    def _bound_value(entropy_bound: float | None) -> float:
        """The bound as passed to the compiled functions (:data:`NO_BOUND` when inactive)."""
        return NO_BOUND if entropy_bound is None else entropy_bound

    # --------------------------------------------------------------------------- constraints
    def _measure_impl(self, obs, old_params):
        params = self.policy.params(obs)
        return self.policy.kl(params, old_params), self.policy.entropy(params)

    def _constraints(self, batch: Batch) -> Constraints:
        """KL(new || old) and entropy of the executed policies on the batch states."""
        kl, entropy = (x.numpy().astype(np.float64) for x in self._measure(batch.obs, batch.old_params))
        return Constraints(float(kl.mean()), float(kl.max()), float(entropy.mean()), float(entropy.min()))

    def _old_entropy(self, batch: Batch) -> float:
        """The constrained entropy statistic of the old (executed) policy on the batch states."""
        entropy = self.policy.entropy(batch.old_params).numpy().astype(np.float64)
        return float(entropy.min() if self.config.per_state else entropy.mean())

    # ------------------------------------------------------------------------------- logging
    def _row(
        self,
        rollout: Rollout,
        policy_loss: float,
        value_loss: float,
        constraints: Constraints,
        entropy_bound: float | None,
        extra: dict[str, float],
    ) -> dict[str, float]:
        per_state = self.config.per_state
        returns = [r for r, _ in rollout.episodes]
        lengths = [n for _, n in rollout.episodes]
        row = {
            "global_step": self.global_step,
            "iteration": self.iteration,
            "charts/episodic_return": float(np.mean(returns)) if returns else math.nan,
            "charts/episodic_length": float(np.mean(lengths)) if lengths else math.nan,
            "charts/episodes": len(returns),
            "losses/policy_loss": policy_loss,
            "losses/value_loss": value_loss,
            "constraints/kl": constraints.kl(per_state),
            "constraints/kl_mean": constraints.kl_mean,
            "constraints/kl_max": constraints.kl_max,
            "constraints/entropy": constraints.entropy(per_state),
            "constraints/entropy_mean": constraints.entropy_mean,
            "constraints/entropy_min": constraints.entropy_min,
            "constraints/entropy_bound": math.nan if entropy_bound is None else entropy_bound,
        }
        row.update(extra)
        return row

    def _divergence(self, what: str) -> DivergenceError:
        """The error that stops a run at this iteration because ``what`` happened."""
        found = checkpoint_dirs(self.config.logdir)
        kept = str(found[-1]) if found else "none written yet"
        return DivergenceError(
            f"Training diverged at iteration {self.iteration}: {what}. Training stopped and no "
            f"checkpoint of this state was written; last good checkpoint (kept): {kept}. "
            f"Likely cause: {LIKELY_CAUSES}."
        )

    def _check_finite(self, losses: dict[str, float]) -> None:
        """Raises :meth:`_divergence` if a loss, or an array of the trainer's state, is NaN or
        infinite."""
        for name, value in losses.items():
            if not math.isfinite(value):
                raise self._divergence(f"{name} is {value}")
        self._finite_arrays()

    def _finite_arrays(self) -> dict[str, np.ndarray]:
        """:meth:`_arrays` after checking that they are finite (else :meth:`_divergence`)."""
        arrays = self._arrays()
        for name, array in arrays.items():
            if not np.all(np.isfinite(array)):
                raise self._divergence(f"the array {name} is not finite")
        return arrays

    # --------------------------------------------------------------------------- checkpoints
    def _variables(self) -> dict[str, list[tf.Variable]]:
        """Everything saved as arrays: networks and optimizer states."""
        return {
            "policy": self.policy.variables,
            "value": self.value.variables,
            "policy_optimizer": self.policy_optimizer.variables,
            "value_optimizer": self.value_optimizer.variables,
        }

    def _statistics(self) -> dict[str, RunningMeanStd | ReturnScaler]:
        """The running statistics in use, by name (saved in ``weights.npz`` as arrays)."""
        found = {"obs_rms": self.obs_rms, "reward_scaler": self.reward_scaler}
        return {name: statistics for name, statistics in found.items() if statistics is not None}

    def _arrays(self) -> dict[str, np.ndarray]:
        """The arrays of a checkpoint: :meth:`_variables` and :meth:`_statistics`."""
        arrays = variable_arrays(self._variables())
        for name, statistics in self._statistics().items():
            arrays.update(flatten_arrays(name, statistics.get_state()))
        return arrays

    def _optimizer_steps(self) -> dict[str, tuple[keras.optimizers.Optimizer, int]]:
        """Each optimizer, by its group in :meth:`_variables`, with its steps per iteration."""
        steps = self.config.update_epochs * self._minibatches(self.config.minibatch_size)[0]
        return {
            "policy_optimizer": (self.policy_optimizer, steps),
            "value_optimizer": (self.value_optimizer, steps),
        }

    def _minibatches(self, size: int) -> tuple[int, int]:
        """``(count, size)`` of the minibatches of at most ``size`` samples in a batch (the
        remainder of a shuffled batch is dropped)."""
        size = min(size, self.config.batch_size)
        return self.config.batch_size // size, size

    def _shuffled_minibatches(self, size: int, epochs: int) -> np.ndarray:
        """Sample indices of ``epochs`` shuffled passes over the batch in minibatches of at most
        ``size`` (:meth:`_minibatches`), shape ``(epochs, count, size)``."""
        count, size = self._minibatches(size)
        permutations = [self.rng.permutation(self.config.batch_size) for _ in range(epochs)]
        return np.stack([p[: count * size].reshape(count, size) for p in permutations])

    def _state(self) -> dict:
        """The plain values a resumed run needs besides arrays and environments (``state.json``),
        and the run's settings, to check that a checkpoint belongs to the run restoring it."""
        return {
            "iteration": self.iteration,
            "global_step": self.global_step,
            "rng": self.rng.bit_generator.state,
            "settings": self.config.settings(),
        }

    def _check_state(self, checkpoint: Path, state: dict) -> None:
        """Raises :class:`CheckpointError` unless ``state`` (``state.json``) holds the values of a
        checkpoint of this run named ``checkpoint``: types, ranges, the iteration of its name,
        the step count, the run's settings (when recorded) and the RNG state."""
        iteration, global_step = state.get("iteration"), state.get("global_step")
        if type(iteration) is not int or iteration < 1:
            raise inconsistent_state(
                checkpoint, "iteration must be an integer >= 1", f"iteration={iteration!r}"
            )
        named = checkpoint_iteration(checkpoint)
        if iteration != named:
            raise inconsistent_state(
                checkpoint,
                f"iteration must be {named} (the checkpoint's name is {checkpoint.name})",
                f"iteration={iteration!r}",
            )
        steps = iteration * self.config.batch_size
        if type(global_step) is not int or global_step != steps:
            raise inconsistent_state(
                checkpoint,
                f"global_step must be {steps} ({iteration} iterations of {self.config.batch_size} steps)",
                f"global_step={global_step!r}",
            )
        settings, current = state.get("settings", {}), self.config.settings()  # none before rl recorded them
        if not isinstance(settings, dict):
            raise inconsistent_state(checkpoint, "settings must be a JSON object", f"settings={settings!r}")
        changed = [
            f"{name}={value!r} (this run: {current[name]!r})"
            for name, value in settings.items()
            if name in current and value != current[name]
        ]
        if changed:
            raise inconsistent_state(
                checkpoint, "settings must be this run's (config.json)", ", ".join(changed)
            )
        generator = type(self.rng.bit_generator)
        try:
            generator().state = state.get("rng")
        except (TypeError, ValueError, KeyError) as error:
            raise inconsistent_state(
                checkpoint,
                f"rng must be the state of a numpy {generator.__name__} generator ({error})",
                f"rng={state.get('rng')!r}",
            ) from None

    def _check_arrays(self, checkpoint: Path, arrays: dict[str, np.ndarray], iteration: int) -> None:
        """Raises :class:`CheckpointError` unless ``arrays`` (``weights.npz``) are finite, have
        this trainer's names and shapes, and hold optimizers that took the steps of ``iteration``
        iterations."""
        path = str(checkpoint / WEIGHTS_FILE)
        expected = self._arrays()
        if arrays.keys() != expected.keys():
            raise CheckpointError(
                f"{path!r} does not hold the arrays of this run (another architecture or config): "
                f"missing {sorted(expected.keys() - arrays.keys())}, "
                f"unknown {sorted(arrays.keys() - expected.keys())}"
            )
        for name, array in arrays.items():
            finite = bool(np.all(np.isfinite(array)))
            if array.shape != expected[name].shape or not finite:
                raise CheckpointError(
                    f"The array {name!r} of {path!r} must be finite and of shape {expected[name].shape}, "
                    f"as in this run. Received: shape {array.shape}, finite: {finite}"
                )
        for group, (optimizer, per_iteration) in self._optimizer_steps().items():
            index = next(i for i, v in enumerate(optimizer.variables) if v is optimizer.iterations)
            taken = int(arrays[f"{group}/{index}"])
            if taken != iteration * per_iteration:
                raise inconsistent_state(
                    checkpoint,
                    f"iteration must be that of {WEIGHTS_FILE}, whose {group} took {taken} steps, "
                    f"those of {taken / per_iteration:g} iterations ({per_iteration} per iteration)",
                    f"iteration={iteration}",
                )

    def _set_state(self, state: dict) -> None:
        """Restores :meth:`_state` (checked by :meth:`_check_state`)."""
        self.iteration, self.global_step = state["iteration"], state["global_step"]
        self.rng.bit_generator.state = state["rng"]

    def save(self) -> Path:
        """Writes a checkpoint of the current iteration to ``{logdir}/checkpoints``: arrays, plain
        values, and the environments' internals as the pickled resume state.

        Raises:
            DivergenceError: an array is not finite (nothing is written).
        """
        resume_state = {"envs": self.envs.get_state()}
        return save_checkpoint(
            self.config.logdir, self.iteration, self._finite_arrays(), self._state(), resume_state
        )

    def restore(self, checkpoint: str | Path) -> None:
        """Loads a checkpoint written by :meth:`save`; the run continues identically.

        Everything is checked before anything is assigned: ``state.json`` against the
        checkpoint's name, this run's settings and the arrays (:meth:`_check_state`), and the
        arrays of ``weights.npz`` against this trainer's (:meth:`_check_arrays`). This unpickles
        the checkpoint's resume state (:func:`~rl.checkpoint.read_resume_state`), which can run
        any code: restore only checkpoints you wrote yourself.

        Raises:
            CheckpointError: an old-format checkpoint, another format version, a file that
                does not match the SHA-256 recorded when it was written, or values that do not
                match the checkpoint or this run (nothing is restored).
        """
        checkpoint = Path(checkpoint)
        arrays, state = read_arrays(checkpoint), read_state(checkpoint)
        self._check_state(checkpoint, state)
        self._check_arrays(checkpoint, arrays, state["iteration"])
        resume_state = read_resume_state(checkpoint)
        assign_variables(arrays, self._variables())
        for name, statistics in self._statistics().items():
            statistics.set_state(unflatten_arrays(arrays, name))
        self._set_state(state)
        self.envs.set_state(resume_state["envs"])

    def close(self) -> None:
        """Closes the environments (and the worker processes of ``vector="async"``)."""
        self.envs.close()
