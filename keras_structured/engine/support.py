"""Per-example solver state shared by all SparseMAP solvers.

The SparseMAP problem solved for one example is

    max_{y in simplex}  <theta, y> - ||M y||^2 / 2,   theta_s = <eta_u, m_s> + <eta_v, n_s>,

whose solution gives ``u = M y`` (the unary marginals) and ``v = N y``. A state
keeps the active structures (rows of ``M`` and ``N``), their weights ``y``, the
current ``(u, v)``, the MAP-call count and the Wolfe gap.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_structured.engine.jacobian import sparse_rows


class ExampleSolution(NamedTuple):
    """Solution of one SparseMAP problem, as every solver reports it."""

    u: np.ndarray
    v: np.ndarray
    m_indices: np.ndarray
    m_values: np.ndarray
    n_indices: np.ndarray
    n_values: np.ndarray
    codes: np.ndarray
    weights: np.ndarray
    weight_jacobian: np.ndarray
    objective: float
    gap: float
    map_calls: int
    converged: bool


class SupportState:
    """Active structures and weights of one SparseMAP problem.

    Args:
        eta_u: flat unary scores ``(du,)``.
        eta_v: flat higher-order scores ``(dv,)``.
        m, n: flat indicator vectors of the first (MAP) structure.
        code: the structure's integer code, as returned by the oracle.
        tol: relative Wolfe-gap tolerance, ``gap <= tol * max(1, |objective|)``.
        record_history: keep ``(objective, gap)`` at every MAP call.
    """

    def __init__(self, eta_u, eta_v, m, n, code, tol: float, record_history: bool = False):
        self.eta_u, self.eta_v, self.tol = eta_u, eta_v, tol
        self.M, self.N = m[None, :], n[None, :]
        self.codes = [code]
        self.keys = [code.tobytes()]
        self.y = np.ones(1)
        self.u, self.v = m.copy(), n.copy()
        self.map_calls = 1
        self.gap = np.inf
        self.done = False
        self.converged = False
        self.history = [] if record_history else None

    @property
    def objective(self) -> float:
        """SparseMAP objective ``<eta_u, u> + <eta_v, v> - ||u||^2 / 2`` at the current point."""
        return float(self.eta_u @ self.u + self.eta_v @ self.v - 0.5 * self.u @ self.u)

    def map_scores(self) -> np.ndarray:
        """The unary scores of the next MAP call: ``eta_u - u``, the gradient at the point."""
        return self.eta_u - self.u

    def linear_scores(self, M: np.ndarray, N: np.ndarray) -> np.ndarray:
        """Scores of structures under the objective linearised at the current point."""
        return M @ (self.eta_u - self.u) + N @ self.eta_v

    def check_gap(self, m: np.ndarray, n: np.ndarray, tol: float | None = None) -> bool:
        """Record the Wolfe gap given the MAP structure ``(m, n)``; True when converged,
        that is when the gap is within ``tol`` (default: the solver's) relative to the
        objective."""
        self.map_calls += 1
        self.gap = max(float((m - self.u) @ (self.eta_u - self.u) + (n - self.v) @ self.eta_v), 0.0)
        if self.history is not None:
            self.history.append((self.objective, self.gap))
        if self.gap_within(self.tol if tol is None else tol):
            self.done = self.converged = True
        return self.converged

    def gap_within(self, tol: float) -> bool:
        """Whether the last Wolfe gap is at most ``tol * max(1, |objective|)``."""
        return self.gap <= tol * max(1.0, abs(self.objective))

    def index_of(self, code: np.ndarray) -> int | None:
        """Position of a structure in the active set, or None."""
        key = code.tobytes()
        return self.keys.index(key) if key in self.keys else None

    def append(self, m, n, code, weight: float) -> None:
        self.M = np.vstack([self.M, m])
        self.N = np.vstack([self.N, n])
        self.codes.append(code)
        self.keys.append(code.tobytes())
        self.y = np.append(self.y, weight)

    def remove(self, i: int) -> None:
        self.M = np.delete(self.M, i, axis=0)
        self.N = np.delete(self.N, i, axis=0)
        del self.codes[i], self.keys[i]
        self.y = np.delete(self.y, i)

    def update_point(self) -> None:
        """Recompute ``(u, v)`` from the weights."""
        self.u, self.v = self.y @ self.M, self.y @ self.N

    def kkt_matrix(self) -> np.ndarray:
        """The bordered KKT matrix ``[[0, 1^T], [1, M_I M_I^T]]`` of the active set."""
        k = self.y.size
        kkt = np.zeros((k + 1, k + 1))
        kkt[0, 1:] = kkt[1:, 0] = 1.0
        kkt[1:, 1:] = self.M @ self.M.T
        return kkt

    def result(self) -> ExampleSolution:
        """The solution in the form shared by all solvers."""
        return ExampleSolution(
            self.u,
            self.v,
            *sparse_rows(self.M),
            *sparse_rows(self.N),
            np.stack(self.codes),
            self.y.copy(),
            self.weight_jacobian(),
            self.objective,
            self.gap,
            self.map_calls,
            self.converged,
        )

    def weight_jacobian(self) -> np.ndarray:
        """``d y_I / d theta_I`` on the support: the lower-right block of the KKT inverse.

        Uses a pseudo-inverse, so affinely dependent supports (possible for the
        Frank-Wolfe variants) give the minimum-norm generalized Jacobian.
        """
        return np.linalg.pinv(self.kkt_matrix())[1:, 1:]
