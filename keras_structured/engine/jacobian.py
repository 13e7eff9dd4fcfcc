"""Closed-form SparseMAP Jacobian products (Niculae et al. 2018, Appendix B).

With support ``I``, ``A_I = [M_I, N_I]`` and ``B = d y_I / d theta_I`` (the lower-right
block of the inverse KKT matrix of the active set), the Jacobian of
``(u, v) = A_I^T y_I`` with respect to ``(eta_u, eta_v)`` is ``A_I^T B A_I``. It is
symmetric, so the same product serves as Jacobian-vector and vector-Jacobian
product. Batches are zero-padded to a common support size, which leaves the
products unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def jacobian_product(M, N, B, x_u, x_v, einsum: Callable = np.einsum):
    """Multiply the SparseMAP Jacobian by ``(x_u, x_v)``.

    Args:
        M: ``(batch, k, du)`` unary indicator vectors of the active structures.
        N: ``(batch, k, dv)`` higher-order indicator vectors.
        B: ``(batch, k, k)`` weight Jacobians ``d y_I / d theta_I``.
        x_u: ``(batch, du)`` vector on the unary part.
        x_v: ``(batch, dv)`` vector on the higher-order part.
        einsum: ``np.einsum`` or ``tf.einsum``; the same code serves both.

    Returns:
        ``(J_u, J_v)``, shapes ``(batch, du)`` and ``(batch, dv)``.
    """
    weights = einsum("bkd,bd->bk", M, x_u) + einsum("bkd,bd->bk", N, x_v)
    weights = einsum("bkl,bl->bk", B, weights)
    return einsum("bkd,bk->bd", M, weights), einsum("bkd,bk->bd", N, weights)


def pad_supports(solvers) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack the active sets of a batch of solvers, zero-padded to a common size."""
    batch = len(solvers)
    k = max(s.y.size for s in solvers)
    du, dv = solvers[0].M.shape[1], solvers[0].N.shape[1]
    M, N, B = np.zeros((batch, k, du)), np.zeros((batch, k, dv)), np.zeros((batch, k, k))
    for b, s in enumerate(solvers):
        size = s.y.size
        M[b, :size], N[b, :size] = s.M, s.N
        B[b, :size, :size] = s.weight_jacobian()
    return M, N, B
