"""Active-set solver for SparseMAP (Martins et al. 2015, Algorithm 3).

At each iteration the relaxed QP restricted to the active set ``I``,

    max_y <theta_I, y> - ||M_I y||^2 / 2   s.t.  1^T y = 1,

is solved through its KKT system ``[[0, 1^T], [1, M_I M_I^T]] [tau; y] = [1; theta_I]``.
The inverse of that matrix is maintained incrementally: adding a structure is a
bordered (Schur-complement) update and removing one a rank-one downdate, both
O(|I|^2). A structure whose unary part lies in the affine hull of the active ones
makes the system singular; it then enters by a pivot that keeps ``u`` fixed and
moves weight onto it until an active structure leaves (a simplex-method step).
"""

from __future__ import annotations

import numpy as np

from keras_structured.engine.compiled_active_set import REFINEMENTS, ROUNDING_GAP
from keras_structured.engine.support import SupportState

# Squared distance (relative to ||m||^2) below which a new unary vector counts as
# lying in the affine hull of the active ones.
_AFFINE_TOL = 1e-10
# KKT residual (relative to the scores) above which the incremental inverse is rebuilt.
_RESIDUAL_TOL = 1e-9


def _affinely_dependent(schur: float, m: np.ndarray) -> bool:
    """Whether ``m``, with Schur complement ``schur`` against the active set, lies in the
    active structures' affine hull (up to ``_AFFINE_TOL``)."""
    return schur <= _AFFINE_TOL * max(1.0, m @ m)


class ActiveSetSolver(SupportState):
    """One SparseMAP problem solved by the active-set method; see the module docstring.

    Args:
        exact: once the gap is within ``tol``, go on to the method's finite
            termination: the MAP structure adds nothing, being active or in the
            affine hull of the active ones, or its gap is rounding error
            (``ROUNDING_GAP``). The support then spans the solution's face, and the
            Jacobian built from it is exact. A problem stopped between the two (by
            ``max_iter``) reports ``converged=False``.
        Other arguments: see :class:`SupportState`.
    """

    def __init__(self, eta_u, eta_v, m, n, code, tol, record_history=False, exact=True):
        super().__init__(eta_u, eta_v, m, n, code, tol, record_history)
        self.theta = np.array([eta_u @ m + eta_v @ n])
        self.kkt_inverse = np.array([[-(m @ m), 1.0], [1.0, 0.0]])
        self._stalls = 0
        self.exact = exact
        self._tol_reached = False
        self._refined = False  # since the active set last changed

    def step(self, m: np.ndarray, n: np.ndarray, code: np.ndarray) -> None:
        """Take the MAP structure at the current point; add it unless converged."""
        finished = self.check_gap(m, n, min(self.tol, ROUNDING_GAP) if self.exact else self.tol)
        active = self.index_of(code) is not None
        if self.exact and not finished:
            self._tol_reached = self._tol_reached or self.gap_within(self.tol)
            # Terminated: the MAP structure adds nothing to the support's affine hull.
            finished = self._tol_reached and (active or _affinely_dependent(self._border(m)[1], m))
        if self.exact and finished and not self._refined:
            # Decide on gaps exact to rounding: rebuild the factorization, ask again.
            self.done = self.converged = False
            self._refactor()
            self._solve_relaxed()
            self._refined = True
            return
        if finished:
            self.done = self.converged = True
            return
        if active:
            # An active structure cannot have a positive gap in exact arithmetic:
            # rebuild the factorization once, then give up (reported as not converged).
            self._stalls += 1
            self.done = self._stalls > 1
            self._refactor()
            self._solve_relaxed()
            return
        self._enter(m, n, code)
        self._refined = False
        self._solve_relaxed()

    def weight_jacobian(self) -> np.ndarray:
        return self.kkt_inverse[1:, 1:]

    def _border(self, m):
        """``w = K^{-1} [1; M_I m]`` and the Schur complement of ``m``, measured directly
        (with refined ``w``) near the affine hull, as in ``compiled_active_set._hull_distance``."""
        border = np.concatenate([[1.0], self.M @ m])
        w = self.kkt_inverse @ border
        schur = float(m @ m - border @ w)
        if not _affinely_dependent(schur, m):
            return w, schur
        for _ in range(REFINEMENTS):
            residual = m - w[1:] @ self.M
            w = w + self.kkt_inverse @ np.concatenate([[1.0 - w[1:].sum()], self.M @ residual - w[0]])
        residual = m - w[1:] @ self.M
        return w, float(residual @ residual)

    def _enter(self, m, n, code) -> None:
        weight = 0.0
        w, schur = self._border(m)
        while _affinely_dependent(schur, m):
            # m = M_I^T alpha with sum(alpha) = 1: moving weight along e_s - alpha keeps
            # u fixed; move until the first active structure hits zero and leaves.
            alpha = w[1:]
            blocking = np.flatnonzero(alpha > 1e-12)
            if blocking.size == 0:
                break
            ratios = self.y[blocking] / alpha[blocking]
            leave = blocking[np.argmin(ratios)]
            gamma = float(np.min(ratios))
            self.y = np.maximum(self.y - gamma * alpha, 0.0)
            weight += gamma
            self._drop(leave)
            w, schur = self._border(m)
        k = self.kkt_inverse.shape[0]
        grown = np.empty((k + 1, k + 1))
        grown[:k, :k] = self.kkt_inverse + np.outer(w, w) / schur
        grown[:k, k] = grown[k, :k] = -w / schur
        grown[k, k] = 1.0 / schur
        self.kkt_inverse = grown
        self.append(m, n, code, weight)
        self.theta = np.append(self.theta, self.eta_u @ m + self.eta_v @ n)

    def _drop(self, i: int) -> None:
        """Remove active structure ``i`` and downdate the KKT inverse."""
        j = i + 1
        pivot = self.kkt_inverse[j, j]
        column = np.delete(self.kkt_inverse[:, j], j)
        shrunk = np.delete(np.delete(self.kkt_inverse, j, axis=0), j, axis=1)
        self.remove(i)
        self.theta = np.delete(self.theta, i)
        if abs(pivot) < 1e-12:
            self._refactor()
        else:
            self.kkt_inverse = shrunk - np.outer(column, column) / pivot

    def _refactor(self) -> None:
        # The active rows are affinely independent, so the KKT matrix is invertible:
        # LU is exact on small integer systems, the pseudo-inverse only a fallback.
        kkt = self.kkt_matrix()
        try:
            self.kkt_inverse = np.linalg.inv(kkt)
        except np.linalg.LinAlgError:
            self.kkt_inverse = np.linalg.pinv(kkt)

    def _solve_relaxed(self) -> None:
        """Solve the KKT system on the active set; drop structures until it is feasible."""
        refactored = False
        while True:
            tau, *y_hat = self.kkt_inverse @ np.concatenate([[1.0], self.theta])
            y_hat = np.array(y_hat)
            residual = self.M @ (y_hat @ self.M) + tau - self.theta
            drifted = abs(y_hat.sum() - 1.0) > 1e-8 or np.abs(residual).max() > _RESIDUAL_TOL * max(
                1.0, np.abs(self.theta).max()
            )
            if drifted and not refactored:
                # The incremental inverse no longer solves the KKT system: rebuild it once.
                self._refactor()
                refactored = True
                continue
            negative = np.flatnonzero(y_hat < 0.0)
            if negative.size == 0:
                self.y = y_hat
                break
            ratios = self.y[negative] / (self.y[negative] - y_hat[negative])
            leave = negative[np.argmin(ratios)]
            self.y = np.maximum(self.y + float(np.min(ratios)) * (y_hat - self.y), 0.0)
            self._drop(leave)
            refactored = False
        self.update_point()
