"""Training configuration: one dataclass, with defaults chosen by what the environment is.

The family of an environment follows from its kind (:func:`rl.env_kind.env_kind`, which makes
it once), not from its id; each family's defaults were tuned on the environments in
:data:`TUNED_ENVS`:

* ``mujoco`` (a ``gymnasium.envs.mujoco.MujocoEnv``; tuned on InvertedPendulum-v5, Hopper-v5,
  HalfCheetah-v5): one env, 2,048-step batches, 10 epochs of 64-sample minibatches,
  observation and reward normalisation;
* ``classic_discrete`` (``Discrete`` actions otherwise; CartPole-v1, Acrobot-v1): categorical
  policy, four small envs;
* ``classic_continuous`` (``Box`` actions otherwise; Pendulum-v1): Gaussian policy, four envs
  of 512 steps, reward normalisation. ``gamma = 0.9`` was tuned on Pendulum's 200-step
  episodes of dense reward; it is kept for time limits up to :data:`SHORT_EPISODE_STEPS`
  steps; longer or unlimited episodes (MountainCarContinuous-v0: 999 steps, its reward at the
  goal) get the dataclass's ``0.99``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from rl.env_kind import EnvKind, env_kind

ALGORITHMS = ("projected", "ppo")
GAUSSIAN_KINDS = ("full", "diag")
ACTIVATIONS = ("tanh", "relu")

VECTOR_KINDS = ("sync", "async")

#: the config fields a resumed run may change: its step budget, and how the envs are stepped
#: (sync and async vector envs give the same results). Its ``logdir`` may change too (a run
#: directory may be moved).
RESUMABLE_FIELDS = ("total_steps", "vector")

#: the environments the family defaults were tuned on (and the benchmark judges).
TUNED_ENVS = (
    "CartPole-v1",
    "Acrobot-v1",
    "Pendulum-v1",
    "InvertedPendulum-v5",
    "Hopper-v5",
    "HalfCheetah-v5",
)

#: classic continuous tasks with time limits up to this many steps keep Pendulum's gamma 0.9.
SHORT_EPISODE_STEPS = 200


@dataclass
class TrainConfig:
    """Everything a training run depends on (saved as ``{logdir}/config.json``)."""

    env_id: str = "CartPole-v1"
    """Gymnasium environment id: any environment with ``Discrete`` or bounded 1-D ``Box`` actions
    and observations that flatten to a vector (see :mod:`rl.env_kind`)."""
    algo: str = "projected"
    """``"projected"`` (projected policy iteration, Akrour et al. 2019) or ``"ppo"`` (PPO-clip)."""
    total_steps: int = 100_000
    """Environment steps to train for, rounded up to whole batches of ``num_envs * num_steps``
    (the step budget, which a resumed run may change)."""
    seed: int = 0
    """Seed of the network initialisation, the numpy generator and the environments."""
    num_envs: int = 4
    """Environments stepped in lock-step by a gymnasium vector env (same-step autoreset)."""
    vector: str = "sync"
    """``"sync"``: ``gymnasium.vector.SyncVectorEnv`` (all envs in this process); ``"async"``:
    ``AsyncVectorEnv`` (one process per env). Both give the same results; a resumed run may
    change it."""
    num_steps: int = 128
    """Steps per environment and iteration; the batch has ``num_envs * num_steps`` samples."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE(lambda) trace parameter."""
    update_epochs: int = 4
    """Passes over the batch per iteration (policy and value function)."""
    minibatch_size: int = 128
    """Samples per Adam step; the remainder of a shuffled batch is dropped."""
    policy_lr: float = 2.5e-4
    """Adam learning rate of the policy network."""
    value_lr: float = 2.5e-4
    """Adam learning rate of the value network."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clipping of each Adam step (both algorithms, both networks)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and of the (separate) value MLP."""
    activation: str = "tanh"
    """Hidden activation, ``"tanh"`` or ``"relu"`` (mirrored by the numpy actor)."""
    gaussian: str = "full"
    """Continuous actions: ``"full"`` (state-independent full covariance, as in the paper) or
    ``"diag"`` (state-dependent diagonal covariance)."""
    init_std: float = 1.0
    """Initial standard deviation of each action dimension (Gaussian policies)."""
    normalize_obs: bool = False
    """Running mean/std observation normalisation (updated once per iteration, in a way that
    leaves the executed policy and the value function unchanged)."""
    normalize_rewards: bool = False
    """Divide rewards by a running std of the discounted return (value targets only)."""
    obs_norm_warmup_steps: int = 0
    """Steps of a uniformly random policy used to initialise the observation statistics
    (not counted in ``global_step``, no training data)."""
    normalize_advantages: bool = True
    """Standardise advantages over the whole batch."""
    kl_bound: float = 0.01
    """KL trust region ``eps``: ``KL(pi_new || pi_old) <= eps`` between consecutive executed
    policies (projected; for Gaussians, ``eps / 2`` for the mean part and ``eps / 2`` for the
    covariance part)."""
    per_state: bool = False
    """Constrain every state (KL max / entropy min) instead of the batch average (KL mean /
    entropy mean). Also selects the statistic logged as ``constraints/kl`` and
    ``constraints/entropy``."""
    entropy_bound: float | None = None
    """Initial entropy lower bound (nats), active from the start. ``None``: no bound until the
    executed entropy falls below ``entropy_activation_fraction`` of its initial value."""
    entropy_activation_fraction: float = 0.5
    """Automatic activation threshold: the bound switches on at
    ``H0 - (1 - fraction) |H0|``, ``H0`` the entropy of the initial policy."""
    entropy_decay: float = 0.0
    """Decrease of the entropy bound per iteration once active (nats)."""
    distill_epochs: int = 5
    """Passes of the distillation that fits the network to the projected policy (projected)."""
    distill_minibatch_size: int = 256
    """Minibatch size of the distillation."""
    distill_margin: float = 0.1
    """The distillation target is projected with the tighter bounds ``(1 - m) eps`` and
    ``entropy_bound + m eps`` (``m`` this margin), so that the fitted network usually lands
    inside the true constraints and the safeguard keeps the whole step."""
    trust_region_coef: float = 10.0
    """Weight of the trust-region regression term ``E_s[KL(pi_proj || pi_theta)]`` (projection
    held fixed) added to the projected policy loss, as in Otto et al. (2021, "Differentiable
    trust region layers"): it keeps the network near its own projection, so that the
    distillation lands on the projected policy and the safeguard keeps the whole step. The
    constraints do not depend on it (0: the pure projected objective). Projected only; PPO
    ignores it."""
    safeguard_steps: int = 20
    """Bisection steps of the final parameter interpolation that makes the executed policy
    satisfy the constraints exactly on the batch states."""
    clip_coef: float = 0.2
    """PPO ratio clipping range."""
    ent_coef: float = 0.0
    """PPO entropy bonus coefficient."""
    checkpoint_every: int = 10
    """Save a checkpoint every this many iterations (and after the last one)."""
    logdir: str = "runs/rl/default"
    """Directory of ``progress.csv``, TensorBoard events, ``config.json`` and checkpoints."""

    @property
    def batch_size(self) -> int:
        """Samples per iteration, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations needed for ``total_steps``."""
        return max(1, math.ceil(self.total_steps / self.batch_size))

    def validate(self) -> None:
        """Raises ``ValueError`` naming the field and value for settings that cannot work."""
        env_kind(self.env_id)  # an unknown id or an unsupported space raises
        if self.algo not in ALGORITHMS:
            raise ValueError(f"algo must be one of {ALGORITHMS}. Received: algo={self.algo!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {ACTIVATIONS}. Received: activation={self.activation!r}"
            )
        if self.vector not in VECTOR_KINDS:
            raise ValueError(f"vector must be one of {VECTOR_KINDS}. Received: vector={self.vector!r}")
        if self.gaussian not in GAUSSIAN_KINDS:
            raise ValueError(
                f"gaussian must be one of {GAUSSIAN_KINDS}. Received: gaussian={self.gaussian!r}"
            )
        positive_ints = (
            "total_steps",
            "num_envs",
            "num_steps",
            "update_epochs",
            "minibatch_size",
            "distill_epochs",
            "distill_minibatch_size",
            "checkpoint_every",
        )
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**32:  # numpy's global seed
            raise ValueError(f"seed must be an integer in [0, 2**32). Received: seed={self.seed!r}")
        if not isinstance(self.obs_norm_warmup_steps, int) or self.obs_norm_warmup_steps < 0:
            raise ValueError(
                "obs_norm_warmup_steps must be an integer >= 0. "
                f"Received: obs_norm_warmup_steps={self.obs_norm_warmup_steps!r}"
            )
        if not all(isinstance(width, int) and width > 0 for width in self.hidden_sizes):
            raise ValueError(
                f"hidden_sizes must be positive integers. Received: hidden_sizes={self.hidden_sizes!r}"
            )
        for name in ("kl_bound", "policy_lr", "value_lr", "init_std", "max_grad_norm", "clip_coef"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0. Received: {name}={value!r}")
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]. Received: {name}={value!r}")
        if self.minibatch_size > self.batch_size:
            raise ValueError(
                f"minibatch_size must be <= num_envs * num_steps = {self.batch_size}. "
                f"Received: minibatch_size={self.minibatch_size}"
            )
        if self.entropy_bound is not None and not math.isfinite(self.entropy_bound):
            raise ValueError(
                f"entropy_bound must be finite or None. Received: entropy_bound={self.entropy_bound!r}"
            )
        if not 0.0 <= self.distill_margin < 1.0:
            raise ValueError(
                f"distill_margin must be in [0, 1). Received: distill_margin={self.distill_margin!r}"
            )
        if not 0.0 <= self.entropy_activation_fraction <= 1.0:
            raise ValueError(
                "entropy_activation_fraction must be in [0, 1]. "
                f"Received: entropy_activation_fraction={self.entropy_activation_fraction!r}"
            )
        nonnegative = ("entropy_decay", "ent_coef", "trust_region_coef", "safeguard_steps")
        for name in nonnegative:
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0. Received: {name}={value!r}")

    def to_json(self) -> str:
        """The config as a JSON object (tuples become lists)."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    def settings(self) -> dict[str, object]:
        """The settings a run keeps for its whole life, as JSON values: every field but
        :data:`RESUMABLE_FIELDS` and ``logdir`` (checkpoints record them)."""
        values = json.loads(self.to_json())
        for name in (*RESUMABLE_FIELDS, "logdir"):
            del values[name]
        return values

    def save(self, path: str | Path) -> None:
        """Writes :meth:`to_json` to ``path`` whole, never through a symlink.

        Raises:
            UnsafePathError: ``path`` or its folder is a symlink.
        """
        # Imported here: importing keras_structured imports TensorFlow, which the command line
        # avoids until it trains.
        from keras_structured.run_directory import write_text

        write_text(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        """Reads a config written by :meth:`save` (a field missing from the file takes its
        default).

        Raises:
            FileNotFoundError: there is no such file.
            ValueError: the file cannot be read as a config (not UTF-8, not JSON, a key that is
                not a field, a value of another type than its field's) or holds one that
                cannot work (:meth:`validate`): the message names the file, the field and the
                value (:func:`keras_structured.run_settings.read_settings`).
        """
        from keras_structured.run_settings import read_settings  # see save

        return read_settings(path, cls, check=cls.validate)


def field_docs() -> dict[str, str]:
    """Each :class:`TrainConfig` field's docstring (the string under it), on one line.

    Read from the source with :mod:`ast`, since Python keeps no attribute docstrings.
    """
    import ast
    import inspect

    body = ast.parse(inspect.getsource(TrainConfig)).body[0].body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr):
            if isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def env_family(env_id: str) -> str:
    """The family of ``env_id`` (``classic_discrete``, ``classic_continuous`` or ``mujoco``).

    Raises:
        ValueError: gymnasium cannot make ``env_id``, or one of its spaces is unsupported.
    """
    return env_kind(env_id).family


#: per-family overrides of the dataclass defaults (shared by both algorithms).
_FAMILY_DEFAULTS: dict[str, dict] = {
    "classic_discrete": dict(
        num_envs=4,
        num_steps=128,
        update_epochs=10,
        minibatch_size=128,
        policy_lr=1e-3,
        value_lr=1e-3,
        kl_bound=0.02,
        entropy_decay=0.005,
        ent_coef=0.01,
    ),
    "classic_continuous": dict(
        num_envs=4,
        num_steps=512,
        gamma=0.9,
        update_epochs=10,
        minibatch_size=64,
        policy_lr=1e-3,
        value_lr=1e-3,
        kl_bound=0.03,
        entropy_decay=0.02,
        normalize_rewards=True,
    ),
    "mujoco": dict(
        num_envs=1,
        num_steps=2048,
        update_epochs=10,
        minibatch_size=64,
        policy_lr=3e-4,
        value_lr=3e-4,
        kl_bound=0.05,
        entropy_decay=0.02,
        normalize_obs=True,
        normalize_rewards=True,
        obs_norm_warmup_steps=1000,
    ),
}


def family_defaults(kind: EnvKind) -> dict[str, object]:
    """The overrides of the dataclass defaults for an environment of ``kind``.

    Example:
        >>> family_defaults(EnvKind(discrete=False, mujoco=False, max_episode_steps=999))["gamma"]
        0.99
    """
    values = dict(_FAMILY_DEFAULTS[kind.family])
    short = kind.max_episode_steps is not None and kind.max_episode_steps <= SHORT_EPISODE_STEPS
    if kind.family == "classic_continuous" and not short:
        values["gamma"] = TrainConfig.gamma
    return values


def default_config(env_id: str, algo: str = "projected", **overrides) -> TrainConfig:
    """The defaults of ``env_id``'s family (:func:`family_defaults`) for ``algo``, then
    ``overrides`` (validated).

    Example:
        >>> default_config("Hopper-v5", total_steps=10_000).batch_size
        2048
    """
    values = family_defaults(env_kind(env_id))
    values.update(env_id=env_id, algo=algo, logdir=f"runs/rl/{env_id}__{algo}__s{overrides.get('seed', 0)}")
    values.update(overrides)
    unknown = set(values) - {f.name for f in dataclasses.fields(TrainConfig)}
    if unknown:
        raise ValueError(f"Unknown config fields: {sorted(unknown)}")
    config = TrainConfig(**values)
    config.validate()
    return config


__all__ = [
    "ALGORITHMS",
    "RESUMABLE_FIELDS",
    "SHORT_EPISODE_STEPS",
    "TUNED_ENVS",
    "VECTOR_KINDS",
    "TrainConfig",
    "default_config",
    "env_family",
    "family_defaults",
    "field_docs",
]
