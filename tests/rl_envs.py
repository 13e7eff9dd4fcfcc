"""Tiny gymnasium environments of the ``rl`` tests, registered on import.

Make them as ``gym.make("tests.rl_envs:Counting-v0")``: gymnasium imports this module first,
which registers them, also in the worker processes of an ``AsyncVectorEnv``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

#: episodes of ``Counting-v0`` alternate: terminated after this many steps, then truncated
#: by the time limit after ``TIME_LIMIT`` steps.
TERMINAL_STEP = 3
TIME_LIMIT = 4


class CountingEnv(gym.Env):
    """Observation ``[t]`` (steps taken in the episode), reward ``t`` after step ``t``.

    Even-numbered episodes terminate at ``t = TERMINAL_STEP``; odd-numbered ones run until
    the ``TIME_LIMIT`` truncation. Actions (two) are ignored.
    """

    observation_space = gym.spaces.Box(0.0, 10.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.t = 0
        self.episode = -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.episode += 1
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.episode % 2 == 0 and self.t == TERMINAL_STEP
        return np.array([self.t], np.float32), float(self.t), terminated, False, {}


class SpaceEnv(gym.Env):
    """An environment with the given spaces (never stepped: only its spaces matter)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


gym.register("Counting-v0", CountingEnv, max_episode_steps=TIME_LIMIT)
gym.register(
    "TextObservation-v0",
    SpaceEnv,
    kwargs=dict(observation_space=gym.spaces.Text(8), action_space=gym.spaces.Discrete(2)),
)
gym.register(
    "MultiDiscreteAction-v0",
    SpaceEnv,
    kwargs=dict(observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=gym.spaces.MultiDiscrete([2, 3])),
)
gym.register(
    "DictObservation-v0",
    SpaceEnv,
    kwargs=dict(
        observation_space=gym.spaces.Dict(
            position=gym.spaces.Box(-1, 1, (2, 2)), mode=gym.spaces.Discrete(3)
        ),
        action_space=gym.spaces.Box(-1, 1, (2,)),
    ),
)
