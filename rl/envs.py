"""Environments stepped in lock-step by a gymnasium vector env, with checkpointable state.

:class:`VectorEnvs` runs ``num_envs`` copies of an environment in a
``gymnasium.vector.SyncVectorEnv`` (``vector="sync"``) or ``AsyncVectorEnv`` (``"async"``, one
process per env), and sums each episode's rewards and steps itself (a gymnasium
``RecordEpisodeStatistics`` wrapper costs more per step, and its pending reset flags would not
be in a checkpoint).

Autoreset: the vector env uses gymnasium's ``SAME_STEP`` mode. When an episode ends, the env
is reset within the same step: the step returns the first observation of the next episode,
and the true last observation in ``infos["final_obs"]``. Every step is then a real
transition, and GAE can bootstrap a truncated episode from the value of its true final
observation (a terminated one is not bootstrapped). gymnasium's default, ``NEXT_STEP``, would
instead return the final observation and spend the *next* step on the reset (action ignored,
reward 0): a transition that must never enter a batch, and one that would also make the
batch hold fewer real steps than it counts.

The complete state of every env (pickle, physics, RNG), the current observations and the
unfinished episodes' statistics can be saved and restored, with either kind of vector env:
a resumed run continues identically, and sync and async give the same results.
"""

from __future__ import annotations

import functools
import pickle

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rl.env_kind import make_env


def _get_state(env: gym.Env) -> dict:
    """Everything needed to continue ``env`` identically: pickle + physics + RNG."""
    unwrapped = env.unwrapped
    state = {"pickle": pickle.dumps(env), "rng": unwrapped.np_random.bit_generator.state}
    data = getattr(unwrapped, "data", None)  # MuJoCo: pickling rebuilds the model, not the state
    if data is not None:
        state["mujoco"] = {
            "qpos": data.qpos.copy(),
            "qvel": data.qvel.copy(),
            "act": data.act.copy(),
            "qacc_warmstart": data.qacc_warmstart.copy(),
            "time": float(data.time),
        }
    return state


def _set_state(state: dict) -> gym.Env:
    env = pickle.loads(state["pickle"])
    unwrapped = env.unwrapped
    unwrapped.np_random.bit_generator.state = state["rng"]
    if "mujoco" in state:
        saved = state["mujoco"]
        for name in ("qpos", "qvel", "act", "qacc_warmstart"):
            getattr(unwrapped.data, name)[:] = saved[name]
        unwrapped.data.time = saved["time"]
    return env


class SnapshotEnv(gym.Wrapper):
    """The outermost wrapper of each env of a vector env: its complete state as the attribute
    ``snapshot``, which a vector env reads with ``get_attr`` and restores with ``set_attr``
    (in the env's own process under ``AsyncVectorEnv``).

    It also drops the env's own ``info`` dict at each step: the trainer uses none of it (the
    vector env adds the final observations and the episode statistics itself), and merging it
    into the vector env's ``infos`` on every step made a Hopper step about a tenth slower.

    Args:
        env: the environment (the wrapped chain is replaced as a whole on restore).
    """

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, reward, terminated, truncated, {}

    @property
    def snapshot(self) -> dict:
        """A picklable snapshot of the wrapped env (see :func:`_get_state`)."""
        return _get_state(self.env)

    @snapshot.setter
    def snapshot(self, state: dict) -> None:
        self.env.close()
        self.env = _set_state(state)


def make_snapshot_env(env_id: str) -> SnapshotEnv:
    """:func:`rl.env_kind.make_env` under :class:`SnapshotEnv` (picklable as a ``partial``)."""
    return SnapshotEnv(make_env(env_id))


class VectorEnvs:
    """``num_envs`` copies of ``env_id`` in a gymnasium vector env with same-step autoreset.

    Args:
        env_id: gymnasium id (see :func:`rl.env_kind.make_env`).
        num_envs: number of environments.
        seed: env ``i`` is reset with seed ``seed + i`` (then unseeded at each autoreset).
        vector: ``"sync"`` (``SyncVectorEnv``) or ``"async"`` (``AsyncVectorEnv``, one process
            per env, started with ``spawn``: the trainer's process has TensorFlow's threads,
            which ``fork`` would copy in an unknown state).

    Attributes:
        obs: current observations ``(num_envs, obs_dim)`` (after any reset).
        single_observation_space / single_action_space: the spaces of one env.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, vector: str = "sync"):
        env_fns = [functools.partial(make_snapshot_env, env_id)] * num_envs
        if vector == "sync":
            envs = SyncVectorEnv(env_fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
        elif vector == "async":
            envs = AsyncVectorEnv(
                env_fns, copy=False, context="spawn", autoreset_mode=AutoresetMode.SAME_STEP
            )
        else:
            raise ValueError(f"vector must be 'sync' or 'async'. Received: vector={vector!r}")
        self.envs = envs
        self.single_observation_space = envs.single_observation_space
        self.single_action_space = envs.single_action_space
        self.episode_returns = np.zeros(num_envs)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)
        obs, _ = envs.reset(seed=seed)
        self.obs = obs.copy()  # copy=False: the vector env reuses its buffer (a deepcopy is slower)

    def step(self, actions: np.ndarray):
        """Steps every env; returns ``(next_obs, rewards, terminated, truncated, final_obs, finished)``.

        ``final_obs`` is the true next observation of each env (the last one of the episode
        where it ended), ``next_obs`` the observation after autoreset; ``finished`` is a list
        of ``(return, length)`` of the episodes that ended, in env order.
        """
        next_obs, rewards, terminated, truncated, infos = self.envs.step(actions)
        self.episode_returns += rewards
        self.episode_lengths += 1
        final_obs = next_obs.copy()
        finished = []
        if "_final_obs" in infos:
            ended = infos["_final_obs"]
            final_obs[ended] = np.stack(infos["final_obs"][ended])
            for i in np.flatnonzero(ended):
                finished.append((float(self.episode_returns[i]), int(self.episode_lengths[i])))
            self.episode_returns[ended] = 0.0
            self.episode_lengths[ended] = 0
        self.obs = next_obs.copy()
        return self.obs.copy(), rewards, terminated, truncated, final_obs, finished

    def get_state(self) -> dict:
        """A picklable snapshot of all envs, observations and unfinished episodes' statistics."""
        return {
            "envs": list(self.envs.get_attr("snapshot")),
            "obs": self.obs.copy(),
            "episode_returns": self.episode_returns.copy(),
            "episode_lengths": self.episode_lengths.copy(),
        }

    def set_state(self, state: dict) -> None:
        """Restores a snapshot from :meth:`get_state` (taken with either kind of vector env)."""
        self.envs.set_attr("snapshot", list(state["envs"]))
        self.obs = state["obs"].copy()
        self.episode_returns = state["episode_returns"].copy()
        self.episode_lengths = state["episode_lengths"].copy()

    def close(self) -> None:
        """Closes every env (and the worker processes of an async vector env)."""
        self.envs.close()
