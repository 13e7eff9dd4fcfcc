"""Generalised advantage estimation (Schulman et al. 2016) with terminations and truncations."""

from __future__ import annotations

import numpy as np


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    done: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and value targets, arrays of shape ``(T, num_envs)`` (time first).

    ``delta_t = r_t + gamma (1 - terminated_t) V(s'_t) - V(s_t)`` and
    ``A_t = delta_t + gamma lam (1 - done_t) A_{t+1}``, where ``s'_t`` is the true next state
    of step ``t`` (the final observation when the episode ended), so a truncated episode is
    bootstrapped with ``V(s'_t)`` and a terminated one is not, and no trace crosses an
    episode end (``done = terminated or truncated``). Returns ``(A, A + V)``.

    Example:
        >>> adv, ret = gae(np.ones((2, 1)), np.zeros((2, 1)), np.ones((2, 1)),
        ...                np.zeros((2, 1), bool), np.zeros((2, 1), bool), 0.5, 1.0)
        >>> adv[:, 0].tolist()
        [2.25, 1.5]
    """
    advantages = np.zeros_like(values, dtype=np.float64)
    last = np.zeros(values.shape[1:], np.float64)
    not_terminated = 1.0 - terminated.astype(np.float64)
    not_done = 1.0 - done.astype(np.float64)
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * not_terminated[t] * next_values[t] - values[t]
        last = delta + gamma * lam * not_done[t] * last
        advantages[t] = last
    return advantages, advantages + values
