"""Running mean / variance statistics (parallel Welford update) for observations and returns."""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Mean and variance of all samples seen so far, merged batch by batch (Chan et al. 1979).

    Args:
        shape: shape of one sample.
        epsilon: initial pseudo-count (also keeps ``std`` away from 0 before any data).

    Example:
        >>> rms = RunningMeanStd((1,), epsilon=0.0)
        >>> rms.update(np.array([[1.0], [3.0]]))
        >>> rms.mean, rms.var
        (array([2.]), array([1.]))
    """

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = float(epsilon)

    @property
    def std(self) -> np.ndarray:
        """``sqrt(var + 1e-8)``."""
        return np.sqrt(self.var + 1e-8)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """``(x - mean) / std`` in float32, the networks' input."""
        return ((x - self.mean) / self.std).astype(np.float32)

    def update(self, batch: np.ndarray) -> None:
        """Merges the statistics of ``batch`` (samples along axis 0)."""
        batch_mean, batch_var, batch_count = batch.mean(axis=0), batch.var(axis=0), batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean = self.mean + delta * batch_count / total
        self.var = m2 / total
        self.count = total

    def get_state(self) -> dict:
        """The statistics as a dict of arrays (checkpointed)."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def set_state(self, state: dict) -> None:
        """Restores :meth:`get_state`."""
        self.mean, self.var, self.count = state["mean"].copy(), state["var"].copy(), float(state["count"])


class ReturnScaler:
    """Scales rewards by the running std of the discounted return (as SB3's ``VecNormalize``).

    Only the value targets see the scaled rewards; logged returns are raw.
    """

    def __init__(self, num_envs: int, gamma: float):
        self.gamma = gamma
        self.returns = np.zeros(num_envs)
        self.rms = RunningMeanStd(())

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """Updates the statistics with one step of ``rewards`` and returns them scaled."""
        self.returns = self.returns * self.gamma + rewards
        self.rms.update(self.returns)
        self.returns[dones] = 0.0
        return rewards / self.rms.std

    def get_state(self) -> dict:
        """Running returns and statistics (checkpointed)."""
        return {"returns": self.returns.copy(), "rms": self.rms.get_state()}

    def set_state(self, state: dict) -> None:
        """Restores :meth:`get_state`."""
        self.returns = state["returns"].copy()
        self.rms.set_state(state["rms"])
