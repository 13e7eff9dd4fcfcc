"""Projected policy iteration (Akrour, Pajarinen, Peters, Neumann, ICML 2019).

The policy loss is the importance-weighted advantage of the *projected* policy,
``-E[pi_proj(a|s) / pi_old(a|s) A(s, a)]`` with ``pi_proj = proj(pi_theta(.|s); pi_old(.|s))``
(entropy projection, then KL projection, :mod:`keras_structured.projections.policy`), minimised
by plain minibatch Adam through the projection: no constraint penalty, no clipping. With
``trust_region_coef > 0`` (the default) the loss also has Otto et al.'s (2021) regression term
``trust_region_coef * E_s[KL(pi_proj || pi_theta)]`` with the projection held fixed: it does not
enforce anything (the projection and the safeguard below do), it keeps the network near the
projected policy it will be fitted to, so the safeguard keeps the whole step (on HalfCheetah
without it, the safeguard kept 10-50% of the step late in training).

**How the projected policy becomes the executed one.** After the epochs
(:meth:`ProjectedPolicyIteration._finish_update`):

1. the projected parameters on all batch states are computed once (the target), with the
   bounds tightened by ``distill_margin`` (``(1 - m) eps`` and ``bound + m eps``, the latter at
   most halfway to the maximum entropy) so that the fitted network usually lands inside the
   true constraints;
2. state-independent parameters are set to the target exactly (the full covariance);
3. the network is distilled onto the target, ``min KL(pi_target || pi_theta)`` over the
   batch states (minibatch Adam, ``distill_epochs`` passes);
4. safeguard: the executed parameters are ``theta_old + alpha (theta - theta_old)`` with the
   largest ``alpha`` in ``[0, 1]`` found by bisection (``alpha = 1`` tried first, exactly
   ``theta``) such that the constraints hold between the executed old and new policies on the
   batch states; ``alpha = 0`` is the old policy, which always qualifies (``KL = 0`` and the
   bound never exceeds its entropy), so the logged ``constraints/kl <= eps`` and
   ``constraints/entropy >= constraints/entropy_bound`` hold at every update by construction.

**Entropy bound schedule** (:class:`EntropySchedule`): no bound until the executed entropy
falls to ``H0 - (1 - entropy_activation_fraction) |H0|`` (``H0``: initial entropy; or from the
start at ``entropy_bound`` if set); then the bound starts there and decreases by
``entropy_decay`` per iteration, never above the entropy of the data-generating policy.
"""

from __future__ import annotations

import math

import tensorflow as tf

from rl.algorithms.base import Batch, Trainer, adam
from rl.checkpoint import inconsistent_state
from rl.config import TrainConfig


def _is_finite_number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (not a bool), as read from JSON."""
    return type(value) in (int, float) and math.isfinite(value)


class EntropySchedule:
    """The entropy lower bound per iteration (``None`` while inactive); see the module docstring."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.initial: float | None = None
        self.start: tuple[int, float] | None = None

    def __call__(self, iteration: int, old_entropy: float) -> float | None:
        """The bound at ``iteration``, given the constrained entropy of the data-generating policy."""
        config = self.config
        if self.initial is None:
            self.initial = old_entropy
        if self.start is None:
            if config.entropy_bound is not None:
                self.start = (iteration, config.entropy_bound)
            else:
                threshold = self.initial - (1.0 - config.entropy_activation_fraction) * abs(self.initial)
                if old_entropy > threshold:
                    return None
                self.start = (iteration, threshold)
        start_iteration, start_value = self.start
        return min(start_value - config.entropy_decay * (iteration - start_iteration), old_entropy)

    def get_state(self) -> dict:
        """Initial entropy and activation point (checkpointed as JSON)."""
        return {"initial": self.initial, "start": self.start}

    @staticmethod
    def is_state(value: object, iteration: int) -> bool:
        """Whether ``value`` is a :meth:`get_state` (read back from JSON) after ``iteration``
        iterations: the initial entropy is known from the first one on."""
        if not isinstance(value, dict) or value.keys() != {"initial", "start"}:
            return False
        start = value["start"]
        started = start is None or (
            isinstance(start, list)
            and len(start) == 2
            and type(start[0]) is int
            and 1 <= start[0] <= iteration
            and _is_finite_number(start[1])
        )
        return _is_finite_number(value["initial"]) and started

    def set_state(self, state: dict) -> None:
        """Restores :meth:`get_state` (JSON turned the activation point into a list)."""
        self.initial = state["initial"]
        self.start = None if state["start"] is None else tuple(state["start"])


class ProjectedPolicyIteration(Trainer):
    """Policy iteration with entropy and KL constraints satisfied by construction."""

    def __init__(self, config: TrainConfig, verbose: bool = False):
        super().__init__(config, verbose)
        self.schedule = EntropySchedule(config)
        self.distill_optimizer = adam(config.policy_lr, config.max_grad_norm)
        self.distill_optimizer.build(self.policy.distill_variables)
        self._project_batch = tf.function(self._project_batch_impl)
        self._distill_epochs = tf.function(self._distill_epochs_impl)
        self._blend = tf.function(self._blend_impl)

    def _policy_loss(self, params, old_params, actions, old_log_prob, advantages, entropy_bound):
        projected, _ = self.policy.project(
            params, old_params, entropy_bound, self.config.kl_bound, self.config.per_state
        )
        ratio = tf.exp(self.policy.log_prob(projected, actions) - old_log_prob)
        loss = -tf.reduce_mean(ratio * advantages)
        if self.config.trust_region_coef > 0:
            # Otto et al. (2021): pull the network towards its (fixed) projection.
            target = tf.nest.map_structure(tf.stop_gradient, projected)
            loss += self.config.trust_region_coef * tf.reduce_mean(self.policy.kl(target, params))
        return loss

    def _entropy_bound(self, batch: Batch) -> float | None:
        return self.schedule(self.iteration, self._old_entropy(batch))

    def _finish_update(self, batch, entropy_bound, old_weights):
        bound = tf.constant(self._bound_value(entropy_bound), tf.float32)
        target_bound = self._tightened_entropy_bound(entropy_bound)
        target_bound = tf.constant(self._bound_value(target_bound), tf.float32)
        target, entropy_active, kl_active = self._project_batch(
            batch.obs, batch.old_params, bound, target_bound
        )
        self.policy.assign_exact(target)
        distill_loss = self._distill(batch.obs, target)
        alpha = self._safeguard(batch, entropy_bound, old_weights)
        return {
            "losses/distill_loss": distill_loss,
            "constraints/eps": self.config.kl_bound,
            "constraints/entropy_projection_active": float(entropy_active),
            "constraints/kl_projection_active": float(kl_active),
            "constraints/safeguard_alpha": alpha,
        }

    def _tightened_entropy_bound(self, entropy_bound: float | None) -> float | None:
        """``bound + m eps``, but at most halfway from the bound to the maximum entropy: a
        categorical policy's bound may sit just below ``log K``, and the entropy projection needs
        its uniform anchor strictly above the bound it projects onto."""
        if entropy_bound is None:
            return None
        margin = self.config.distill_margin * self.config.kl_bound
        return entropy_bound + min(margin, (self.policy.max_entropy - entropy_bound) / 2)

    def _project_batch_impl(self, obs, old_params, entropy_bound, target_bound):
        """The distillation target (tightened bounds) and the active fractions (true bounds)."""
        config = self.config
        params = self.policy.params(obs)
        _, info = self.policy.project(params, old_params, entropy_bound, config.kl_bound, config.per_state)
        target, _ = self.policy.project(
            params,
            old_params,
            target_bound,
            (1.0 - config.distill_margin) * config.kl_bound,
            config.per_state,
        )
        return target, tf.reduce_mean(info.entropy_active), tf.reduce_mean(info.kl_active)

    def _distill(self, obs: tf.Tensor, target) -> float:
        """Fits the network to the projected ``target``; returns the mean ``KL(target || pi)``."""
        perms = self._shuffled_minibatches(self.config.distill_minibatch_size, self.config.distill_epochs)
        try:
            return float(self._distill_epochs(obs, target, tf.constant(perms, tf.int32)))
        except tf.errors.InvalidArgumentError as error:
            raise self._divergence("the distillation met non-finite values") from error

    def _distill_epochs_impl(self, obs, target, perms):
        total = tf.constant(0.0)
        variables = self.policy.distill_variables
        for epoch in tf.range(tf.shape(perms)[0]):
            for m in tf.range(tf.shape(perms)[1]):
                idx = perms[epoch, m]
                with tf.GradientTape() as tape:
                    current = self.policy.params(tf.gather(obs, idx))
                    loss = tf.reduce_mean(self.policy.kl(self.policy.select(target, idx), current))
                grads = tape.gradient(loss, variables)
                self.distill_optimizer.apply_gradients(zip(grads, variables, strict=True))
                total += loss
        return total / tf.cast(tf.shape(perms)[0] * tf.shape(perms)[1], tf.float32)

    def _blend_impl(self, old_weights, new_weights, alpha):
        for variable, old, new in zip(self.policy.variables, old_weights, new_weights, strict=True):
            variable.assign(tf.where(alpha >= 1.0, new, old + alpha * (new - old)))

    def _safeguard(self, batch: Batch, entropy_bound: float | None, old_weights: list[tf.Tensor]) -> float:
        """Largest ``alpha`` (bisection) with feasible executed parameters; leaves them assigned."""
        config = self.config
        new_weights = [tf.identity(v) for v in self.policy.variables]

        def feasible(alpha: float) -> bool:
            self._blend(old_weights, new_weights, tf.constant(alpha, tf.float32))
            constraints = self._constraints(batch)
            entropy_ok = entropy_bound is None or constraints.entropy(config.per_state) >= entropy_bound
            return constraints.kl(config.per_state) <= config.kl_bound and entropy_ok

        if feasible(1.0):
            return 1.0
        low, high = 0.0, 1.0
        for _ in range(config.safeguard_steps):
            middle = 0.5 * (low + high)
            if feasible(middle):
                low = middle
            else:
                high = middle
        if not feasible(low):
            raise RuntimeError(
                f"Iteration {self.iteration}: the old policy violates the constraints on its own batch "
                f"(entropy bound {entropy_bound!r}); this is a bug."
            )
        return low

    def _variables(self):
        return {**super()._variables(), "distill_optimizer": self.distill_optimizer.variables}

    def _optimizer_steps(self):
        steps = self.config.distill_epochs * self._minibatches(self.config.distill_minibatch_size)[0]
        return {**super()._optimizer_steps(), "distill_optimizer": (self.distill_optimizer, steps)}

    def _state(self):
        return {**super()._state(), "schedule": self.schedule.get_state()}

    def _check_state(self, checkpoint, state):
        super()._check_state(checkpoint, state)
        schedule = state.get("schedule")
        if not EntropySchedule.is_state(schedule, state["iteration"]):
            raise inconsistent_state(
                checkpoint,
                "schedule must be {'initial': a finite number, 'start': null or [an iteration <= "
                f"{state['iteration']}, a finite number]}}",
                f"schedule={schedule!r}",
            )

    def _set_state(self, state):
        super()._set_state(state)
        self.schedule.set_state(state["schedule"])
