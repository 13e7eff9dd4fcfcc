"""Closed-form SparseMAP Jacobian products (Niculae et al. 2018, Appendix B).

With support ``I``, ``A_I = [M_I, N_I]`` and ``B = d y_I / d theta_I`` (the lower-right
block of the inverse KKT matrix of the active set), the Jacobian of
``(u, v) = A_I^T y_I`` with respect to ``(eta_u, eta_v)`` is ``A_I^T B A_I``. It is
symmetric, so the same product serves as Jacobian-vector and vector-Jacobian
product.

Indicator vectors are sparse (a tree has n arcs out of n^2), so the active
structures are kept as padded index/value lists: row ``i`` of ``M_I`` is
``sum_j values[i, j] * e_{indices[i, j]}``. Padding (value 0) leaves every
product unchanged, so batches are padded to a common support and row size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class Support(NamedTuple):
    """Batched active sets: sparse rows of ``M_I`` and ``N_I`` and ``B = d y_I / d theta_I``.

    Shapes: ``m_indices``/``m_values`` ``(batch, k, nnz_u)``, ``n_indices``/``n_values``
    ``(batch, k, nnz_v)``, ``weight_jacobian`` ``(batch, k, k)``.
    """

    m_indices: np.ndarray
    m_values: np.ndarray
    n_indices: np.ndarray
    n_values: np.ndarray
    weight_jacobian: np.ndarray


def sparse_rows(dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index/value lists ``(k, nnz)`` of the rows of a dense ``(k, d)`` matrix, zero-padded."""
    counts = np.count_nonzero(dense, axis=1)
    width = int(counts.max(initial=0))
    indices = np.zeros((dense.shape[0], width), dtype=np.int64)
    values = np.zeros((dense.shape[0], width))
    for i, row in enumerate(dense):
        nonzero = np.flatnonzero(row)
        indices[i, : nonzero.size], values[i, : nonzero.size] = nonzero, row[nonzero]
    return indices, values


def _gather_numpy(x, indices):
    return np.take_along_axis(x[:, None, :], indices, axis=2)


def _scatter_add_numpy(values, indices, like):
    out = np.zeros(like.shape)
    np.add.at(out, (np.arange(values.shape[0])[:, None, None], indices), values)
    return out


def jacobian_product(
    support: Support,
    x_u,
    x_v,
    gather: Callable = _gather_numpy,
    scatter_add: Callable = _scatter_add_numpy,
    einsum: Callable = np.einsum,
):
    """Multiply the SparseMAP Jacobian by ``(x_u, x_v)``.

    Args:
        support: the batched active sets.
        x_u: ``(batch, du)`` vector on the unary part.
        x_v: ``(batch, dv)`` vector on the higher-order part.
        gather: ``gather(x (batch, d), indices (batch, k, nnz)) -> (batch, k, nnz)``.
        scatter_add: ``scatter_add(values, indices, like) -> (batch, d)``, with ``like``
            the ``(batch, d)`` tensor whose shape the result takes.
        einsum: the einsum of the same framework. The defaults are numpy's; the
            TensorFlow op passes TensorFlow's, so one formula serves both.

    Returns:
        ``(J_u, J_v)``, shapes ``(batch, du)`` and ``(batch, dv)``.
    """
    m_indices, m_values, n_indices, n_values, weight_jacobian = support
    scores = einsum("bkj,bkj->bk", gather(x_u, m_indices), m_values)
    scores += einsum("bkj,bkj->bk", gather(x_v, n_indices), n_values)
    weights = einsum("bkl,bl->bk", weight_jacobian, scores)[..., None]
    return (
        scatter_add(weights * m_values, m_indices, x_u),
        scatter_add(weights * n_values, n_indices, x_v),
    )


def pad_supports(examples) -> Support:
    """Stack the active sets of a batch of :class:`ExampleSolution`, zero-padded to common sizes."""
    batch = len(examples)
    k = max(e.weights.size for e in examples)
    width_u = max(e.m_indices.shape[1] for e in examples)
    width_v = max(e.n_indices.shape[1] for e in examples)
    support = Support(
        np.zeros((batch, k, width_u), np.int64),
        np.zeros((batch, k, width_u)),
        np.zeros((batch, k, width_v), np.int64),
        np.zeros((batch, k, width_v)),
        np.zeros((batch, k, k)),
    )
    for b, e in enumerate(examples):
        size, pu, pv = e.weights.size, e.m_indices.shape[1], e.n_indices.shape[1]
        support.m_indices[b, :size, :pu], support.m_values[b, :size, :pu] = e.m_indices, e.m_values
        support.n_indices[b, :size, :pv], support.n_values[b, :size, :pv] = e.n_indices, e.n_values
        support.weight_jacobian[b, :size, :size] = e.weight_jacobian
    return support
