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

from keras_structured.engine import tolerances
from keras_structured.engine.support import SupportState


def _affinely_dependent(schur: float, m: np.ndarray) -> bool:
    """Whether ``m``, with Schur complement ``schur`` against the active set, lies in the
    active structures' affine hull (up to ``tolerances.AFFINE_TOL``)."""
    return schur <= tolerances.AFFINE_TOL * max(1.0, m @ m)


class ActiveSetSolver(SupportState):
    """One SparseMAP problem solved by the active-set method; see the module docstring.

    Args:
        exact: once the gap is within ``tol``, go on to the method's finite
            termination: the MAP structure adds nothing, being active or in the
            affine hull of the active ones, or its gap is rounding error
            (``tolerances.ROUNDING_GAP``), and the face certificate holds: the MAP structures at
            the scores moved by +-r, r random and orthogonal to the support's affine
            hull, are in the hull too (structures of the solution's face that the
            oracle's tie-breaking never returns are found this way and enter). The
            support then spans the solution's face, and the Jacobian built from it is
            exact. A problem stopped between the two (by ``max_iter``) reports
            ``converged=False``. The rules and tolerances are the compiled kernel's
            (:mod:`~keras_structured.engine.tolerances`).
        Other arguments: see :class:`SupportState`.
    """

    def __init__(self, eta_u, eta_v, m, n, code, tol, record_history=False, exact=True):
        super().__init__(eta_u, eta_v, m, n, code, tol, record_history)
        self.theta = np.array([eta_u @ m + eta_v @ n])
        self.kkt_inverse = np.array([[-(m @ m), 1.0], [1.0, 0.0]])
        self._start(exact)

    def _start(self, exact: bool) -> None:
        """Reset what one solve accumulates (the active set, weights and KKT inverse stay)."""
        self._stalls = 0
        self.exact = exact
        self._tol_reached = False
        self._near = False  # the gap came within tolerances.NEAR_GAP (or tol): work to rounding
        self._refined = False  # since the active set last changed
        self._entered = b""  # the key of the structure that entered last
        self._reentries = 0  # times in a row it entered again after leaving at once
        # The face certificate: the sign of the perturbation of the MAP scores (0: none),
        # the perturbation, how many times it was shrunk and the face's score.
        self._sign, self._direction, self._shrinks, self._face_score = 0, None, 0, 0.0

    def restart(self, eta_u: np.ndarray, eta_v: np.ndarray, tol: float, exact: bool) -> None:
        """Warm start: go on solving a new problem, with scores ``(eta_u, eta_v)``, from the
        active set and weights reached on the previous one.

        The weights stay feasible (nonnegative, summing to one), so the relaxed QP on the
        active set is solved at once from them, as after a structure enters; the KKT
        inverse depends on the active set only and carries over (it is rebuilt when its
        residual drifts). The gap, the flags and ``map_calls`` start afresh (``map_calls``
        at 1: the active set stands for the first MAP call). A sequence of close problems,
        such as the factor subproblems of an ADMM, then takes a few MAP calls each.

        Args:
            eta_u: flat unary scores ``(du,)``.
            eta_v: flat higher-order scores ``(dv,)``.
            tol: relative Wolfe-gap tolerance of the new solve.
            exact: go on to the exact termination (see the class docstring).

        Example: a second problem, close to the first, takes one MAP call (to check the gap):

            >>> from keras_structured.engine import SimplexStructure
            >>> simplex = SimplexStructure()
            >>> def best(scores):  # the MAP structure (m, n, code)
            ...     code = simplex.map(scores[None], None)
            ...     m, n = simplex.indicators(code, (3,), (0,))
            ...     return m[0], n[0], code[0]
            >>> def run(solver):
            ...     while not solver.done:
            ...         solver.step(*best(solver.map_scores()))
            ...     return solver.u.round(6).tolist(), solver.map_calls
            >>> eta = np.array([1.0, 0.5, -1.0])
            >>> solver = ActiveSetSolver(eta, np.zeros(0), *best(eta), tol=1e-12, exact=False)
            >>> run(solver)
            ([0.75, 0.25, 0.0], 3)
            >>> solver.restart(eta + [0.0, 0.2, 0.0], np.zeros(0), tol=1e-12, exact=False)
            >>> run(solver)
            ([0.65, 0.35, 0.0], 2)
        """
        self.eta_u, self.eta_v, self.tol = eta_u, eta_v, tol
        self.theta = self.M @ eta_u + self.N @ eta_v
        self.map_calls, self.gap, self.done, self.converged = 1, np.inf, False, False
        self._start(exact)
        self._solve_relaxed()

    def map_scores(self) -> np.ndarray:
        scores = super().map_scores()
        return scores if self._sign == 0 else scores + self._sign * self._direction

    def step(self, m: np.ndarray, n: np.ndarray, code: np.ndarray) -> None:
        """Take the MAP structure at the current point; add it unless converged."""
        if self._sign != 0:
            self._certify(m, n, code)
            return
        finished = self.check_gap(m, n, min(self.tol, tolerances.ROUNDING_GAP) if self.exact else self.tol)
        active = self.index_of(code) is not None
        # The gap of this point, not of an earlier one (as the compiled kernel).
        self._tol_reached = self.gap_within(max(self.tol, tolerances.ROUNDING_GAP))
        returned = not active and code.tobytes() == self._entered
        self._near = self._near or self.gap_within(max(self.tol, tolerances.NEAR_GAP))
        if self.exact and not finished:
            # Terminated: the MAP structure adds nothing to the support's affine hull.
            finished = self._tol_reached and self._in_hull(m, code)
        if self.exact and finished and not self._refined:
            # Decide on gaps exact to rounding: rebuild the factorization, ask again.
            self.done = self.converged = False
            self._solve_relaxed(rebuild=True)
            self._refined = True
            return
        if finished:
            self.done = self.converged = not (self.exact and self._start_certificate())
            return
        if active or (returned and self._reentries > 0):
            # An active structure cannot have a positive gap in exact arithmetic, nor one
            # that left at once after entering with a rebuilt factorization: rebuild it
            # once, then give up (reported as not converged), as the compiled kernel.
            self._stalls += 1
            self.done = self._stalls > 1
            self._solve_relaxed(rebuild=True)
            return
        if returned:
            # It left at once in spite of its gap: enter it with a rebuilt factorization.
            self._refactor()
        self._reentries = self._reentries + 1 if returned else 0
        self._enter(m, n, code)
        self._refined = False
        self._solve_relaxed()

    def weight_jacobian(self) -> np.ndarray:
        # From a fresh inverse, as the kernel's: the rank-one updates drift (1e-3 relative
        # seen in the Jacobian of a tree of 50 words).
        self._refactor()
        return self.kkt_inverse[1:, 1:]

    def _in_hull(self, m, code) -> bool:
        """Whether the structure adds nothing to the support's affine hull: it is active, in
        the hull, or it entered last time and left at once (numerically in the hull: the
        KKT solve cannot tell its weight from zero, and entering it again would cycle)."""
        return (
            self.index_of(code) is not None
            or code.tobytes() == self._entered
            or _affinely_dependent(self._border(m)[1], m)
        )

    def _start_certificate(self) -> bool:
        """Draw the certificate's direction: a uniform random vector projected orthogonally
        to the support's affine hull, ``r = g - M_I^T c`` with ``(lambda, c) = K^{-1} [0;
        M_I g]``, of norm ``tolerances.CERTIFICATE_STEP * scale``. False when the hull fills the whole
        space (nothing to certify)."""
        g = np.random.default_rng(self.map_calls).uniform(-1.0, 1.0, self.u.size)
        c = self.kkt_inverse @ np.concatenate([[0.0], self.M @ g])
        r = g - c[1:] @ self.M
        length = float(np.linalg.norm(r))
        if length == 0.0:
            return False
        self._direction = r * (tolerances.CERTIFICATE_STEP * max(1.0, abs(self.objective)) / length)
        self._face_score = float(self.linear_scores(self.M, self.N).max())
        self._sign, self._shrinks = 1, 0
        return True

    def _certify(self, m, n, code) -> None:
        """Take the MAP structure at the perturbed scores: in the hull, the certificate
        holds on this side; a structure of the face outside it enters (the next
        certificate follows at once unless a structure left); one further off than
        ``tolerances.FACE_GAP`` shrinks the perturbation."""
        self.map_calls += 1
        if self._in_hull(m, code):
            self._sign = -1 if self._sign > 0 else 0
            self.done = self.converged = self._sign == 0
            return
        face_gap = float(self.linear_scores(m[None], n[None])[0]) - self._face_score
        if face_gap < -tolerances.FACE_GAP * max(1.0, abs(self.objective)):
            self._shrinks += 1
            self._direction = 0.1 * self._direction
            if self._shrinks > tolerances.CERTIFICATE_SHRINKS:
                self._sign, self.done = 0, True  # (not converged)
            return
        self._sign = 0
        size = self.y.size + 1
        self._enter(m, n, code)
        self._solve_relaxed()
        if self.y.size == size:
            self.done = self.converged = not self._start_certificate()
        else:
            self._refined = False

    def _border(self, m):
        """``w = K^{-1} [1; M_I m]`` and the Schur complement of ``m``, measured directly
        (with refined ``w``) near the affine hull, as in ``kkt_inverse.hull_distance``:
        below ``tolerances.AFFINE_TOL``, and once within ``tol`` (exact) below ``tolerances.VERIFY_TOL``."""
        border = np.concatenate([[1.0], self.M @ m])
        w = self.kkt_inverse @ border
        schur = float(m @ m - border @ w)
        verify = tolerances.VERIFY_TOL if self.exact and self._near else tolerances.AFFINE_TOL
        if schur > verify * max(1.0, m @ m):
            return w, schur
        for _ in range(tolerances.REFINEMENTS):
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
        self._entered = self.keys[-1]
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

    def _refactor(self) -> np.ndarray:
        """Rebuild the KKT inverse; returns the KKT matrix."""
        # The active rows are affinely independent, so the KKT matrix is invertible:
        # LU is exact on small integer systems, the pseudo-inverse only a fallback.
        kkt = self.kkt_matrix()
        try:
            self.kkt_inverse = np.linalg.inv(kkt)
        except np.linalg.LinAlgError:
            self.kkt_inverse = np.linalg.pinv(kkt)
        return kkt

    def _kkt_residual(self, solution: np.ndarray) -> np.ndarray:
        """``[1; theta] - K [tau; y]``, with ``K`` applied through the active rows."""
        tau, y = solution[0], solution[1:]
        return np.concatenate([[1.0 - y.sum()], self.theta - tau - self.M @ (y @ self.M)])

    def _solve_relaxed(self, rebuild: bool = False) -> None:
        """Solve the KKT system on the active set; drop structures until it is feasible.
        Near the optimum (exact), the solution is refined first and weights down to
        ``-tolerances.WEIGHT_SLACK`` count as zero, as in the compiled kernel: the weights of the
        face's structures are rounding error there. With ``rebuild`` (and whenever the
        incremental inverse drifted), the inverse is rebuilt and the system solved by LU,
        as ``kkt_inverse.refactor`` explains."""
        slack = tolerances.WEIGHT_SLACK if self.exact and self._near else 0.0
        kkt = self._refactor() if rebuild else None  # (the rebuilt matrix)
        while True:
            rhs = np.concatenate([[1.0], self.theta])
            solution = self.kkt_inverse @ rhs
            if kkt is not None:
                try:
                    solution = np.linalg.solve(kkt, rhs)
                except np.linalg.LinAlgError:  # singular: the pseudo-inverse's solution
                    pass
            for _ in range(tolerances.REFINEMENTS if slack else 0):
                solution = solution + self.kkt_inverse @ self._kkt_residual(solution)
            residual = self._kkt_residual(solution)
            drifted = abs(residual[0]) > tolerances.SUM_TOL or np.abs(
                residual[1:]
            ).max() > tolerances.RESIDUAL_TOL * max(1.0, np.abs(self.theta).max())
            if drifted and kkt is None:
                # The incremental inverse no longer solves the KKT system: rebuild it once.
                kkt = self._refactor()
                continue
            y_hat = solution[1:]
            negative = np.flatnonzero(y_hat < -slack)
            if negative.size == 0:
                self.y = np.maximum(y_hat, 0.0)
                break
            ratios = self.y[negative] / (self.y[negative] - y_hat[negative])
            leave = negative[np.argmin(ratios)]
            self.y = np.maximum(self.y + float(np.min(ratios)) * (y_hat - self.y), 0.0)
            self._drop(leave)
            kkt = None
        self.update_point()
