"""Vector-Jacobian products of LP-SparseMAP by implicit differentiation at the solution.

With every factor's face fixed, the solution solves the equality-constrained QP of
:mod:`~keras_structured.engine.lp.kkt`, an affine function of the scores; its Jacobian is
the derivative of LP-SparseMAP wherever the faces do not change (almost everywhere), and
an element of the generalised Jacobian where they do. The Jacobian ``C^T S C`` is
symmetric, so a vector-Jacobian product is one solve of the KKT system: the primal
right-hand side ``C g`` (``g_u`` on ``u``, ``N_f g_v[f]`` on a structure factor's weights,
``g_v[f]`` on a logic factor's additional parts), zero on the constraints. Everything runs
in float64 whatever the dtype of ``g``.
"""

from __future__ import annotations

import numpy as np

from keras_structured.engine.blas_threads import single_threaded_blas

__all__ = ["vjp"]


def vjp(solution, g_u, g_v=None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Gradients of ``<g_u, u> + sum_f <g_v[f], v[f]>`` w.r.t. ``eta_u`` and every ``eta_v[f]``.

    Args:
        solution: an :class:`~keras_structured.engine.lp.admm.LPSparseMAPSolution`.
        g_u: ``(num_variables,)`` cotangent of ``u``.
        g_v: None (zeros), or one entry per factor: the cotangent of ``v[f]`` (its shape),
            or None.

    Returns:
        ``(grad_eta_u (num_variables,), [grad_eta_v[f] of shape v_shape_f])``, float64.

    Example:
        >>> from keras_structured.engine.lp import FactorGraph, Xor, lp_sparsemap
        >>> solution = lp_sparsemap(FactorGraph(3, [Xor([0, 1, 2])]), np.array([1.0, 0.5, -1.0]))
        >>> solution.vjp(np.array([1.0, 0.0, 0.0]))[0].round(6) + 0.0
        array([ 0.5, -0.5,  0. ])
    """
    system = solution.system
    g_u = np.asarray(g_u, dtype=np.float64)
    if g_u.shape != (system.num_variables,):
        raise ValueError(
            f"g_u must have shape ({system.num_variables},), like u. Received: g_u.shape={g_u.shape}"
        )
    shapes = [np.shape(v) for v in solution.v]
    if g_v is None:
        g_v = [None] * len(shapes)
    if len(g_v) != len(shapes):
        raise ValueError(f"g_v must hold one entry per factor ({len(shapes)}). Received: len(g_v)={len(g_v)}")
    flat = []
    for i, (g, shape) in enumerate(zip(g_v, shapes, strict=True)):
        g = np.zeros(shape) if g is None else np.asarray(g, dtype=np.float64)
        if g.shape != shape:
            raise ValueError(
                f"g_v[{i}] must have the shape {shape} of v[{i}]. Received: g_v[{i}].shape={g.shape}"
            )
        flat.append(g.ravel())
    with single_threaded_blas():
        primal = system.solve(system.lift(g_u, flat), np.zeros(system.num_dual))
    grad_u, grad_v = system.outputs(primal)
    grad_u[system.absent] = 0.0  # rounding error of the solve otherwise (u is held there)
    return grad_u, [g.reshape(shape) for g, shape in zip(grad_v, shapes, strict=True)]
