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

from typing import NamedTuple

import numba
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


def dense_rows(indices: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """The dense ``(k, size)`` matrix of zero-padded index/value lists (:func:`sparse_rows`'s inverse)."""
    rows = np.zeros((indices.shape[0], size))
    np.add.at(rows, (np.arange(indices.shape[0])[:, None], indices), values)
    return rows


@numba.njit(cache=True, nogil=True)
def _product(m_indices, m_values, n_indices, n_values, weight_jacobian, x_u, x_v, j_u, j_v):
    scores = np.empty(weight_jacobian.shape[1])
    for b in range(weight_jacobian.shape[0]):
        for i in range(scores.shape[0]):  # scores = A_I x
            total = 0.0
            for j in range(m_indices.shape[2]):
                total += m_values[b, i, j] * x_u[b, m_indices[b, i, j]]
            for j in range(n_indices.shape[2]):
                total += n_values[b, i, j] * x_v[b, n_indices[b, i, j]]
            scores[i] = total
        for i in range(scores.shape[0]):  # J x = A_I^T (B scores)
            weight = 0.0
            for j in range(scores.shape[0]):
                weight += weight_jacobian[b, i, j] * scores[j]
            for j in range(m_indices.shape[2]):
                j_u[b, m_indices[b, i, j]] += weight * m_values[b, i, j]
            for j in range(n_indices.shape[2]):
                j_v[b, n_indices[b, i, j]] += weight * n_values[b, i, j]


def jacobian_product(support: Support, x_u: np.ndarray, x_v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Multiply the SparseMAP Jacobian by ``(x_u, x_v)``, in compiled code.

    Computes ``A_I^T B A_I x`` for every example, in O(k * nnz + k^2) per
    example, where ``k`` is the support size and ``nnz`` the nonzeros of an
    indicator vector. The Jacobian is symmetric, so this is also the
    vector-Jacobian product. It runs in float64 whatever the dtype of ``x``: ``B``
    can have a condition number of 1e12 (trees of 50 words), and products in
    float32 lose every digit.

    Args:
        support: the batched active sets.
        x_u: ``(batch, du)`` vector on the unary part.
        x_v: ``(batch, dv)`` vector on the higher-order part.

    Returns:
        ``(J_u, J_v)``, float64, shapes ``(batch, du)`` and ``(batch, dv)``.

    Example:
        >>> support = Support(  # one example, one structure: a zero Jacobian
        ...     np.array([[[0]]]), np.array([[[1.0]]]), np.zeros((1, 1, 0), np.int64),
        ...     np.zeros((1, 1, 0)), np.zeros((1, 1, 1)))
        >>> jacobian_product(support, np.array([[2.0, 3.0]]), np.zeros((1, 0)))[0]
        array([[0., 0.]])
    """
    x_u, x_v = (np.ascontiguousarray(x, dtype=np.float64) for x in (x_u, x_v))
    j_u, j_v = np.zeros_like(x_u), np.zeros_like(x_v)
    _product(*support, x_u, x_v, j_u, j_v)
    return j_u, j_v


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
