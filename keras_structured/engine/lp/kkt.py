"""The equality-constrained QP of LP-SparseMAP on fixed faces, and its KKT system.

With each factor's face fixed (:mod:`~keras_structured.engine.lp.blocks`), the solution
solves the equality-constrained QP in ``y = (u, p_f or z_f for every factor f)``:

    max  <eta_u, u> - ||u||^2 / 2 + sum_{f: vertices} <N_f eta_v[f], p_f>
                                  + sum_{f: constraints} <eta_v[f], z_f>
    s.t. u[links_f] = M_f^T p_f,  sum(p_f) = 1          (a structure factor's active vertices)
         A_x,f u[links_f] + A_z,f z_f = b_f             (a logic factor's tight inequalities)
         u[absent] = 0                                  (the variables masked out, if any)

whose KKT system is ``K [y; lambda] = [c; e]`` with ``K = [[H, E^T], [E, 0]]``, ``H =
diag(I, 0)``, ``E`` the constraint rows, ``c`` the linear scores and ``e`` the right-hand
sides. The same matrix gives the solution on the faces (the *polish* of the ADMM iterate)
and the Jacobian: ``dy/dc`` is the primal block ``S`` of ``K^{-1}``, symmetric, so the
Jacobian of ``(u, v)`` with respect to ``(eta_u, eta_v)``, ``C^T S C`` with ``C =
diag(I, N_f, I)``, is symmetric and one solve gives a vector-Jacobian product.

``K`` is singular in general: faces that overlap (a variable held at 0 by two factors, a
degenerate vertex) make rows of ``E`` dependent, so the multipliers ``lambda`` are not
unique. The primal part ``y`` is (``H`` is positive definite on the null space of ``E``:
``u`` fixes each ``p_f``, the active vertices being affinely independent, and each ``z_f``).
The system is therefore solved through the regularised ``K_delta = [[H, E^T], [E, -delta
I]]``, nonsingular for ``delta > 0``, by iterative refinement against ``K``: the errors left
by ``K_delta`` in the primal part shrink geometrically, those in the multipliers' null space
do not matter.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from keras_structured.engine.lp.blocks import VertexFace

# Regularisation of the multiplier block, relative to the largest entry of E.
REGULARIZATION = 1e-8
# Iterative refinement: stop when the residual is below this (relative to the right-hand
# side), or after this many steps.
REFINE_TOL = 1e-13
MAX_REFINEMENTS = 30


class FaceSystem:
    """The KKT system of the QP on fixed faces.

    Args:
        links: per factor, its flat variable indices.
        faces: per factor, its :class:`VertexFace` or :class:`ConstraintFace`.
        num_variables: the number of variables.
        absent: indices of the variables held at zero (masked out), or None.

    Attributes:
        sizes: per factor, the number of its unknowns (``p_f`` or ``z_f``).
        regularized: ``K_delta`` (sparse, CSC); ``delta``: its regularisation.
        residual: the relative residual of the last :meth:`solve`.
    """

    def __init__(self, links, faces, num_variables: int, absent: np.ndarray | None = None):
        self.links, self.faces, self.num_variables = links, faces, num_variables
        self.absent = np.zeros(0, np.int64) if absent is None else absent
        self.sizes = [
            face.m.shape[0] if isinstance(face, VertexFace) else face.a_z.shape[1] for face in faces
        ]
        self.offsets = num_variables + np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
        self.num_primal = int(self.offsets[-1])
        rows, cols, values, self.dual_rhs = [], [], [], []
        row = 0
        for link, face, start in zip(links, faces, self.offsets[:-1], strict=True):
            if isinstance(face, VertexFace):
                k, d = face.m.shape
                # u[link] - M^T p = 0
                rows.append(row + np.arange(d))
                cols.append(link)
                values.append(np.ones(d))
                vertex, part = np.nonzero(face.m)
                rows.append(row + part)
                cols.append(start + vertex)
                values.append(-face.m[vertex, part])
                # sum(p) = 1
                rows.append(np.full(k, row + d))
                cols.append(start + np.arange(k))
                values.append(np.ones(k))
                self.dual_rhs.append(np.append(np.zeros(d), 1.0))
                row += d + 1
            else:
                r = face.b.size
                for block, offset in ((face.a_x, link), (face.a_z, start + np.arange(face.a_z.shape[1]))):
                    i, j = np.nonzero(block)
                    rows.append(row + i)
                    cols.append(offset[j])
                    values.append(block[i, j])
                self.dual_rhs.append(face.b)
                row += r
        if absent is not None and absent.size:  # u[absent] = 0
            rows.append(row + np.arange(absent.size))
            cols.append(absent)
            values.append(np.ones(absent.size))
            self.dual_rhs.append(np.zeros(absent.size))
            row += absent.size
        self.num_dual = row
        self.dual_rhs = np.concatenate(self.dual_rhs)
        constraints = sp.csr_matrix(
            (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
            shape=(self.num_dual, self.num_primal),
        )
        hessian = sp.diags(
            np.concatenate([np.ones(num_variables), np.zeros(self.num_primal - num_variables)])
        )
        matrix = sp.bmat([[hessian, constraints.T], [constraints, None]], format="csc")
        # No constraint at all (logic factors none of whose inequalities is tight, e.g. an
        # AtMostOne at (0.3, 0.2)): K is the identity on u, and delta is moot.
        self.delta = REGULARIZATION * max(1.0, np.abs(constraints.data).max(initial=0.0))
        regularizer = sp.diags(
            np.concatenate([np.zeros(self.num_primal), np.full(self.num_dual, self.delta)])
        )
        # K_delta alone is kept: K x = K_delta x + delta [0; x_lambda].
        self.regularized = (matrix - regularizer).tocsc()
        self.residual = 0.0

    def solve(self, primal_rhs: np.ndarray, dual_rhs: np.ndarray) -> np.ndarray:
        """Solve ``K [y; lambda] = [primal_rhs; dual_rhs]`` for the primal part ``y``.

        ``K_delta`` is factorised by each call, and its factors are freed before it returns:
        a solution is kept from a forward host call to its backward one, which may run in
        another thread, and SciPy's SuperLU objects freed in a thread other than the one
        that made them are never released (scipy#15921; 0.75 MiB per batch of 32 examples
        of 4 variables when they were kept in the solutions). See docs/lp_sparsemap.md for
        what the factorisation costs.

        Returns:
            ``y``, ``(num_primal,)``: ``u`` then each factor's ``p_f`` or ``z_f``.
        """
        factors = splu(self.regularized)
        rhs = np.concatenate([primal_rhs, dual_rhs])
        scale = max(1.0, float(np.abs(rhs).max()))
        solution = np.zeros_like(rhs)
        residual = rhs
        for _ in range(MAX_REFINEMENTS):
            solution = solution + factors.solve(residual)
            product = self.regularized @ solution
            product[self.num_primal :] += self.delta * solution[self.num_primal :]
            residual = rhs - product
            if np.abs(residual).max() <= REFINE_TOL * scale:
                break
        self.residual = float(np.abs(residual).max()) / scale
        return solution[: self.num_primal]

    def split(self, primal: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """``(u, [p_f or z_f per factor])`` from a primal vector."""
        return primal[: self.num_variables], [
            primal[start:end] for start, end in zip(self.offsets[:-1], self.offsets[1:], strict=True)
        ]

    def lift(self, x_u: np.ndarray, x_v: list[np.ndarray]) -> np.ndarray:
        """``C x``: the linear scores in ``y``-space of scores ``(x_u, x_v)`` on ``(u, v)``."""
        parts = [x_u]
        for face, scores in zip(self.faces, x_v, strict=True):
            parts.append(face.n @ scores if isinstance(face, VertexFace) else scores)
        return np.concatenate(parts)

    def outputs(self, primal: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """``C^T y``: ``(u, v)`` of a primal vector (``v_f = N_f^T p_f`` or ``z_f``)."""
        u, local = self.split(primal)
        return u, [
            face.n.T @ q if isinstance(face, VertexFace) else q
            for face, q in zip(self.faces, local, strict=True)
        ]
