"""Evaluation of a checkpointed policy: deterministic (mode) and stochastic returns.

:func:`load_policy` reads ``weights.npz`` (``allow_pickle=False``) and JSON only: evaluating a
run directory someone shared never unpickles anything from it (see :mod:`rl.checkpoint`).
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np

from rl.checkpoint import assign_variables, read_arrays, resolve_checkpoint, unflatten_arrays
from rl.config import TrainConfig
from rl.env_kind import make_env
from rl.normalization import RunningMeanStd
from rl.policies import Policy, make_policy


def load_policy(checkpoint: str | Path) -> tuple[TrainConfig, Policy, RunningMeanStd | None]:
    """The config, policy and observation statistics of a checkpoint (or of a run's newest).

    The config is read from ``config.json`` in the run directory (two levels above the
    checkpoint directory), the weights and statistics from ``weights.npz``; nothing is unpickled.

    Args:
        checkpoint: a checkpoint directory or a run directory (its newest checkpoint).

    Returns:
        ``(config, policy, obs_rms)``, ``obs_rms`` ``None`` without observation normalisation.

    Raises:
        FileNotFoundError: no checkpoint in ``checkpoint``.
        CheckpointError: an old-format checkpoint, another format version, or a ``weights.npz``
            that does not match its recorded SHA-256.
    """
    path = resolve_checkpoint(checkpoint)
    config = TrainConfig.load(path.parent.parent / "config.json")
    env = make_env(config.env_id)
    policy = make_policy(
        env.observation_space.shape[0],
        env.action_space,
        config.hidden_sizes,
        config.activation,
        config.seed,
        config.gaussian,
        config.init_std,
    )
    env.close()
    arrays = read_arrays(path)
    assign_variables(arrays, {"policy": policy.variables})
    statistics = unflatten_arrays(arrays, "obs_rms")
    obs_rms = None
    if statistics is not None:
        obs_rms = RunningMeanStd(statistics["mean"].shape)
        obs_rms.set_state(statistics)
    return config, policy, obs_rms


def run_episodes(
    config: TrainConfig,
    policy: Policy,
    obs_rms: RunningMeanStd | None,
    episodes: int,
    deterministic: bool,
    seed: int,
) -> np.ndarray:
    """Undiscounted returns of ``episodes`` episodes (env seeds ``seed, seed + 1, ...``)."""
    env = make_env(config.env_id)
    weights = policy.numpy_weights()
    rng = np.random.default_rng(seed)
    returns = np.zeros(episodes)
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            normalized = obs[None].astype(np.float32) if obs_rms is None else obs_rms.normalize(obs[None])
            action = policy.act_numpy(weights, normalized, rng, deterministic)[0]
            if isinstance(env.action_space, gym.spaces.Box):
                action = np.clip(action, env.action_space.low, env.action_space.high)
            obs, reward, terminated, truncated, _ = env.step(action)
            returns[episode] += reward
            done = terminated or truncated
    env.close()
    return returns


def evaluate(checkpoint: str | Path, episodes: int = 10, seed: int = 10_000) -> dict[str, float]:
    """Mean and std of deterministic and stochastic returns over ``episodes`` episodes each."""
    config, policy, obs_rms = load_policy(checkpoint)
    results = {}
    for name, deterministic in (("deterministic", True), ("stochastic", False)):
        returns = run_episodes(config, policy, obs_rms, episodes, deterministic, seed)
        results[f"{name}_mean"] = float(returns.mean())
        results[f"{name}_std"] = float(returns.std())
    return results
