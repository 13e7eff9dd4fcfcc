"""Per-factor solvers of the ADMM subproblem and the faces they end on.

Every ADMM iteration asks each factor ``f`` for

    argmax_{(x, z) in M_f}  <a, x> + <s, z> - ||x||^2 / 2,

a SparseMAP problem with scores ``(a, s)``. A :class:`StructureBlock` solves it with the
engine's active-set solver, warm-started from the previous iteration's active set (the
scores move little between iterations, so a few MAP calls suffice); a :class:`LogicBlock`
with the factor's closed form.

At the solution, each block reports its *face* for the implicit differentiation
(:mod:`~keras_structured.engine.lp.kkt`): a structure factor its active structures
(:class:`VertexFace`, the rows ``[m_s, n_s]`` whose affine hull holds the point), a logic
factor the inequalities tight at its point (:class:`ConstraintFace`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_structured.engine.active_set import ActiveSetSolver
from keras_structured.engine.lp.graph import StructureFactor
from keras_structured.engine.lp.logic import LogicFactor

# A logic inequality counts as tight at a point when it holds within this (absolute) slack;
# the closed forms put their points exactly on the faces they reach, up to rounding.
TIGHT_TOL = 1e-9


class VertexFace(NamedTuple):
    """A face as the affine hull of active vertices: ``(x, z) = [M; N]^T p``, ``sum(p) = 1``.

    Attributes:
        m: ``(k, d)`` unary parts of the active structures.
        n: ``(k, e)`` their additional parts.
        weights: ``(k,)`` their weights at the solution.
    """

    m: np.ndarray
    n: np.ndarray
    weights: np.ndarray


class ConstraintFace(NamedTuple):
    """A face as the tight rows of the factor's inequalities: ``A_x x + A_z z = b``."""

    a_x: np.ndarray
    a_z: np.ndarray
    b: np.ndarray


class WarmActiveSet(ActiveSetSolver):
    """The engine's active-set solver (:class:`~keras_structured.engine.active_set.ActiveSetSolver`),
    restarted on new scores from the active set of an earlier solve."""

    @classmethod
    def resume(cls, previous: ActiveSetSolver, eta_u, eta_v, tol: float, exact: bool) -> WarmActiveSet:
        """A solver for scores ``(eta_u, eta_v)`` whose active set and weights are ``previous``'s.

        The weights stay feasible (nonnegative, summing to one), so the first relaxed solve
        starts from them as the engine's solver does after adding a structure; the KKT
        inverse depends on the active set only and carries over too (the solver rebuilds it
        when its residual drifts).
        """
        solver = cls(eta_u, eta_v, previous.M[0], previous.N[0], previous.codes[0], tol, exact=exact)
        solver.M, solver.N = previous.M, previous.N
        solver.codes, solver.keys = list(previous.codes), list(previous.keys)
        solver.y = previous.y.copy()
        solver.theta = previous.M @ eta_u + previous.N @ eta_v
        solver.kkt_inverse = previous.kkt_inverse
        solver._solve_relaxed()
        return solver


class StructureBlock:
    """The ADMM subproblem of a :class:`StructureFactor`, by the warm-started active set.

    Args:
        factor: the structure factor.
    """

    def __init__(self, factor: StructureFactor):
        self.factor = factor
        self.u_shape = factor.variables.shape
        self.v_shape = factor.v_shape()
        self.solver: ActiveSetSolver | None = None
        self.map_calls = 0

    def _map(self, scores_u: np.ndarray, scores_v: np.ndarray):
        structure = self.factor.structure
        codes = structure.map(scores_u.reshape((1,) + self.u_shape), scores_v.reshape((1,) + self.v_shape))
        m, n = structure.indicators(codes, self.u_shape, self.v_shape)
        self.map_calls += 1
        return m.reshape(-1), n.reshape(-1), codes[0]

    def solve(self, a: np.ndarray, s: np.ndarray, tol: float, max_calls: int, exact: bool = False):
        """Solve the subproblem; returns ``(x, z, converged)``.

        Args:
            a, s: the scores.
            tol: the engine's relative Wolfe-gap tolerance.
            max_calls: most MAP calls.
            exact: go on to the engine's exact termination (the support then spans the
                solution's face; see :func:`keras_structured.engine.solve`).
        """
        if self.solver is None:
            self.solver = ActiveSetSolver(a, s, *self._map(a, s), tol, exact=exact)
        else:
            self.solver = WarmActiveSet.resume(self.solver, a, s, tol, exact)
        for _ in range(max_calls):
            if self.solver.done:
                break
            self.solver.step(*self._map(self.solver.map_scores(), s))
        return self.solver.u, self.solver.v, bool(self.solver.converged)

    def additional(self) -> np.ndarray:
        """The additional marginals ``z`` of the last solution."""
        return self.solver.v

    def face(self) -> VertexFace:
        return VertexFace(self.solver.M, self.solver.N, self.solver.y)


class LogicBlock:
    """The ADMM subproblem of a logic factor, in closed form."""

    map_calls = 0

    def __init__(self, factor: LogicFactor):
        self.factor = factor
        self.x = self.z = None

    def solve(self, a: np.ndarray, s: np.ndarray, tol: float, max_calls: int, exact: bool = False):
        self.x, self.z = self.factor.project(a, s)
        return self.x, self.z, True

    def additional(self) -> np.ndarray:
        """The additional marginals ``z`` of the last solution."""
        return self.z

    def face(self) -> ConstraintFace:
        a_x, a_z, b, equality = self.factor.inequalities()
        tight = equality | (a_x @ self.x + a_z @ self.z >= b - TIGHT_TOL)
        return ConstraintFace(a_x[tight], a_z[tight], b[tight])


def make_block(factor):
    """The block that solves ``factor``'s subproblem."""
    return StructureBlock(factor) if isinstance(factor, StructureFactor) else LogicBlock(factor)
