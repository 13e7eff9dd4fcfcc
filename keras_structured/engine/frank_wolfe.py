"""Conditional-gradient (Frank-Wolfe) solvers for SparseMAP, for comparison.

Vanilla, away-step and pairwise Frank-Wolfe (Lacoste-Julien & Jaggi, 2015) as
adapted to SparseMAP in Niculae et al. (2018), Appendix A.1. Each iteration calls
the MAP oracle on the linearised scores ``(eta_u - u, eta_v)`` and moves along
the chosen direction ``d`` with the exact line-search step

    gamma = clip(<grad, d> / ||d_u||^2, 0, gamma_max),

which maximises the concave quadratic objective along ``d``.

Their Jacobian is approximate: it is built, as the active set's, from the final
support, but Frank-Wolfe supports keep structures of vanishing weight and may miss
ones of small weight (and may be affinely dependent: the pseudo-inverse then gives
the minimum-norm generalized Jacobian). Use the active set for exact gradients.
"""

from __future__ import annotations

import numpy as np

from keras_structured.engine.support import SupportState

VARIANTS = ("vanilla", "away", "pairwise")


class FrankWolfeSolver(SupportState):
    """One SparseMAP problem solved by a Frank-Wolfe variant (approximate Jacobian, see
    the module docstring).

    Args:
        variant: ``"vanilla"``, ``"away"`` (away steps) or ``"pairwise"``.
        Other arguments: see :class:`SupportState`.
    """

    def __init__(self, eta_u, eta_v, m, n, code, tol, record_history=False, variant="vanilla"):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}. Received: variant={variant!r}")
        super().__init__(eta_u, eta_v, m, n, code, tol, record_history)
        self.variant = variant

    def step(self, m: np.ndarray, n: np.ndarray, code: np.ndarray) -> None:
        """Take the MAP structure at the current point and move towards it."""
        if self.check_gap(m, n):
            return
        towards = self.index_of(code)
        if towards is None:
            self.append(m, n, code, 0.0)
            towards = self.y.size - 1
        away = None
        if self.variant != "vanilla":
            scores = self.linear_scores(self.M, self.N)
            support = np.flatnonzero(self.y > 0)
            away = support[np.argmin(scores[support])]
        direction_u, direction_v, gamma_max, mode = self._direction(towards, away)
        slope = (self.eta_u - self.u) @ direction_u + self.eta_v @ direction_v
        curvature = direction_u @ direction_u
        gamma = gamma_max if curvature <= 0 else min(gamma_max, slope / curvature)
        gamma = max(gamma, 0.0)
        if mode == "towards":
            self.y *= 1.0 - gamma
            self.y[towards] += gamma
        elif mode == "away":
            self.y *= 1.0 + gamma
            self.y[away] -= gamma
        else:
            self.y[away] -= gamma
            self.y[towards] += gamma
        self.y = np.maximum(self.y, 0.0)
        for i in np.flatnonzero(self.y <= 1e-15)[::-1]:
            self.remove(i)
        self.y /= self.y.sum()
        self.update_point()

    def _direction(self, towards: int, away: int | None):
        to_u, to_v = self.M[towards] - self.u, self.N[towards] - self.v
        if self.variant == "vanilla":
            return to_u, to_v, 1.0, "towards"
        if self.variant == "pairwise":
            return (
                self.M[towards] - self.M[away],
                self.N[towards] - self.N[away],
                float(self.y[away]),
                "pairwise",
            )
        from_u, from_v = self.u - self.M[away], self.v - self.N[away]
        grad_u = self.eta_u - self.u
        if grad_u @ to_u + self.eta_v @ to_v >= grad_u @ from_u + self.eta_v @ from_v:
            return to_u, to_v, 1.0, "towards"
        weight = float(self.y[away])
        gamma_max = weight / (1.0 - weight) if weight < 1.0 else np.inf
        return from_u, from_v, gamma_max, "away"
