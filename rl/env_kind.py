"""What an environment is: the spaces ``rl`` supports, and the kind that picks its defaults.

Any gymnasium environment works whose action space is ``Discrete`` or a bounded 1-D ``Box``
and whose observation space flattens to a fixed-size vector: a ``Box`` of any shape,
``Discrete`` / ``MultiDiscrete`` (one-hot), ``MultiBinary``, or a ``Dict`` / ``Tuple`` of
these. Observations that are not already a 1-D ``Box`` are flattened by gymnasium's
``FlattenObservation`` (concatenation, one-hot for discrete parts).

:func:`env_kind` makes the environment once (then caches the answer) to read its action
space, whether it is a MuJoCo environment and its episode length; :mod:`rl.config` chooses
the defaults from that. Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

#: observation spaces that flatten to a fixed-size vector (with Dict / Tuple of them).
FLAT_OBSERVATION_SPACES = (
    gym.spaces.Box,
    gym.spaces.Discrete,
    gym.spaces.MultiDiscrete,
    gym.spaces.MultiBinary,
)


def check_action_space(space: gym.Space) -> None:
    """Raises ``ValueError`` unless ``space`` is ``Discrete`` or a finite 1-D ``Box``."""
    if isinstance(space, gym.spaces.Discrete):
        return
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        if np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)):
            return
    raise ValueError(
        "Unsupported action space: only Discrete and bounded 1-D Box actions are supported. "
        f"Received: action_space={space!r}"
    )


def _flattens(space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Dict):
        return all(_flattens(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return all(_flattens(s) for s in space.spaces)
    return isinstance(space, FLAT_OBSERVATION_SPACES)


def check_observation_space(space: gym.Space) -> None:
    """Raises ``ValueError`` unless ``space`` flattens to a fixed-size vector (see the module)."""
    if not _flattens(space):
        raise ValueError(
            "Unsupported observation space: only Box, Discrete, MultiDiscrete, MultiBinary and "
            f"Dict / Tuple of them are supported. Received: observation_space={space!r}"
        )


def make_env(env_id: str) -> gym.Env:
    """``gym.make(env_id)``, its observations flattened to a 1-D ``Box`` where needed.

    Raises:
        ValueError: gymnasium cannot make ``env_id`` (its message, e.g. an unknown id or a
            missing dependency, is included), or a space is unsupported (it is named).
    """
    try:
        env = gym.make(env_id)
    except gym.error.Error as error:
        raise ValueError(
            f"gymnasium cannot make the environment: {error} Received: env_id={env_id!r}"
        ) from error
    try:
        check_action_space(env.action_space)
        check_observation_space(env.observation_space)
    except ValueError:
        env.close()
        raise
    space = env.observation_space
    if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
        env = gym.wrappers.FlattenObservation(env)
    return env


def _is_mujoco(env: gym.Env) -> bool:
    try:
        from gymnasium.envs.mujoco import MujocoEnv
    except ImportError:  # mujoco is not installed: no environment can be one
        return False
    return isinstance(env.unwrapped, MujocoEnv)


@dataclass(frozen=True)
class EnvKind:
    """What :mod:`rl.config` chooses the defaults of an environment by.

    Attributes:
        discrete: the action space is ``Discrete`` (else a bounded 1-D ``Box``).
        mujoco: the environment is a ``gymnasium.envs.mujoco.MujocoEnv``.
        max_episode_steps: the spec's time limit (``None``: none).
    """

    discrete: bool
    mujoco: bool
    max_episode_steps: int | None

    @property
    def family(self) -> str:
        """``"mujoco"``, else ``"classic_discrete"`` or ``"classic_continuous"``."""
        if self.mujoco:
            return "mujoco"
        return "classic_discrete" if self.discrete else "classic_continuous"


@functools.cache
def env_kind(env_id: str) -> EnvKind:
    """The :class:`EnvKind` of ``env_id``, from one instance made with :func:`make_env`.

    Raises:
        ValueError: as :func:`make_env`.

    Example:
        >>> env_kind("Pendulum-v1")
        EnvKind(discrete=False, mujoco=False, max_episode_steps=200)
    """
    env = make_env(env_id)
    kind = EnvKind(
        discrete=isinstance(env.action_space, gym.spaces.Discrete),
        mujoco=_is_mujoco(env),
        max_episode_steps=env.spec.max_episode_steps if env.spec is not None else None,
    )
    env.close()
    return kind


__all__ = [
    "FLAT_OBSERVATION_SPACES",
    "EnvKind",
    "check_action_space",
    "check_observation_space",
    "env_kind",
    "make_env",
]
