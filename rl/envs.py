"""Environments: creation with clear errors, and a list of envs stepped in lock-step.

:class:`EnvList` steps a plain list of gymnasium environments (faster than a vector env for
a few cheap environments) with same-step autoreset: when an episode ends, the true final
observation is returned separately (for the value bootstrap of truncated episodes) and the
environment is reset at once. Its complete state (including physics and RNG) can be saved
and restored, so that a resumed run continues identically.
"""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np

from rl.config import env_family


def make_env(env_id: str) -> gym.Env:
    """``gym.make(env_id)`` after checking the id is supported and the action space is usable.

    Raises:
        ValueError: unknown id, or an action space other than ``Discrete`` / bounded 1-D ``Box``.
    """
    env_family(env_id)
    env = gym.make(env_id)
    check_action_space(env.action_space)
    return env


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


class EnvList:
    """``num_envs`` copies of ``env_id`` stepped in lock-step with same-step autoreset.

    Attributes:
        obs: current observations ``(num_envs, obs_dim)`` (after any reset).
        episode_returns / episode_lengths: running sums of the unfinished episodes.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int):
        self.envs = [make_env(env_id) for _ in range(num_envs)]
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        self.episode_returns = np.zeros(num_envs)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)

    def step(self, actions: np.ndarray):
        """Steps every env; returns ``(next_obs, rewards, terminated, truncated, final_obs, finished)``.

        ``final_obs`` is the true next observation of each env (the last one of the episode
        where it ended), ``next_obs`` the observation after autoreset; ``finished`` is a list
        of ``(return, length)`` of the episodes that ended.
        """
        n = len(self.envs)
        final_obs = np.empty_like(self.obs)
        rewards = np.empty(n)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        finished = []
        for i, env in enumerate(self.envs):
            obs, reward, term, trunc, _ = env.step(actions[i])
            final_obs[i] = obs
            rewards[i], terminated[i], truncated[i] = reward, term, trunc
            self.episode_returns[i] += reward
            self.episode_lengths[i] += 1
            if term or trunc:
                finished.append((float(self.episode_returns[i]), int(self.episode_lengths[i])))
                self.episode_returns[i] = 0.0
                self.episode_lengths[i] = 0
                obs, _ = env.reset()
            self.obs[i] = obs
        return self.obs.copy(), rewards, terminated, truncated, final_obs, finished

    def get_state(self) -> dict:
        """A picklable snapshot of all envs, observations and episode statistics."""
        return {
            "envs": [_get_state(env) for env in self.envs],
            "obs": self.obs.copy(),
            "episode_returns": self.episode_returns.copy(),
            "episode_lengths": self.episode_lengths.copy(),
        }

    def set_state(self, state: dict) -> None:
        """Restores a snapshot from :meth:`get_state`."""
        self.close()
        self.envs = [_set_state(env_state) for env_state in state["envs"]]
        self.obs = state["obs"].copy()
        self.episode_returns = state["episode_returns"].copy()
        self.episode_lengths = state["episode_lengths"].copy()

    def close(self) -> None:
        """Closes every env."""
        for env in self.envs:
            env.close()
