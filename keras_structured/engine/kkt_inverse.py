"""The bordered KKT system of the compiled active set, ``K = [[0, 1^T], [1, M_I M_I^T]]``:
its incrementally updated inverse (bordered update when a structure enters, rank-one
downdate when one leaves, an LU rebuild when it drifts), the relaxed solve on the active set
with its iterative refinement, and the measurements against the active structures' affine
hull. Every function is a ``numba.njit`` helper of
:mod:`~keras_structured.engine.compiled_active_set`.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from keras_structured.engine.sparse_rows import (
    clear,
    combine,
    dot,
    row_dot,
    row_dots,
)
from keras_structured.engine.tolerances import (
    AFFINE_TOL,
    REFINEMENTS,
    RESIDUAL_TOL,
    SUM_TOL,
)

# KKT residual (relative to the scores) of a point whose gaps are exact to rounding.
ROUNDING_RESIDUAL = 1e-13
# The rows of the kernel's scratch matrix ``work`` (each of size k + 1, one role each):
# the border [1; M_I m] of a candidate structure, w = K^{-1} border, the solution
# (tau, y_hat) = K^{-1} [1; theta] kept up to date with K^{-1}, products M_I x, the
# column and pivot row of a downdate, a KKT residual and its correction K^{-1} residual.
BORDER, W, SOLUTION, PRODUCTS, COLUMN, PIVOT_ROW, RESIDUAL, DELTA = range(8)
WORK_ROWS = 8


# The inverse ``K^{-1}`` of the bordered KKT matrix is stored transposed,
# ``kinv[b, a] = K^{-1}[a, b]`` (it is symmetric only up to rounding): products
# ``K^{-1} x`` then add up whole contiguous rows of ``kinv`` (vectorized) while
# every entry still sums its terms in the plain order j = 0, 1, ..., so the
# iterates do not depend on how the loops are vectorized.


@nb.njit(cache=True, nogil=True)
def accumulate(kinv, size, first, x, out):
    """``out[:size] += K^{-1}[:size, first:size] @ x[:size - first]``, every entry adding
    its terms in the order j = first, first + 1, ..."""
    for j in range(first, size):
        scale = x[j - first]
        for i in range(size):
            out[i] += kinv[j, i] * scale


@nb.njit(cache=True, nogil=True)
def schur_complement(kinv, k, m_squared, border, w):
    """Write ``w = K^{-1} border`` for ``border = [1; M_I m]``; return the Schur complement
    ``m.m - border.w``."""
    for i in range(k + 1):
        w[i] = 0.0
    accumulate(kinv, k + 1, np.int64(0), border, w)
    return m_squared - dot(border[: k + 1], w[: k + 1])


@nb.njit(cache=True, nogil=True)
def hull_distance(Mi, Mv, Mw, slots, kinv, k, m_indices, m_values, count_u, w, dense, work):
    """The Schur complement of the sparse unary vector ``m`` measured directly, for when
    :func:`schur_complement` falls below the affine-hull threshold: ``||m - M_I^T c||^2`` with the
    affine coefficients ``c = w[1:]`` after ``REFINEMENTS`` steps of iterative refinement
    of ``w = K^{-1} [1; M_I m]``. The normal equations lose a small distance to rounding
    (their error grows with the condition number of ``K``, 1e12 on some trees of 50
    words), while the residual's error is second order in that of ``c``. ``dense`` (size
    of the unary part, zero) is scratch and is zero again on return."""
    residual, delta = work[RESIDUAL], work[DELTA]
    for step in range(REFINEMENTS + 1):
        # dense = m - M_I^T c
        for j in range(count_u):
            dense[m_indices[j]] += m_values[j]
        for i in range(k):
            row = slots[i]
            for j in range(Mw[row]):
                dense[Mi[row, j]] -= w[i + 1] * Mv[row, j]
        if step == REFINEMENTS:
            break
        # KKT residual [1 - sum(c); M_I (m - M_I^T c) - tau], and w += K^{-1} residual.
        row_dots(Mi, Mv, Mw, slots, k, dense, residual[1:])
        residual[0] = 1.0 - np.sum(w[1 : k + 1])
        for i in range(k):
            residual[i + 1] -= w[0]
        for i in range(k + 1):
            delta[i] = 0.0
        accumulate(kinv, k + 1, np.int64(0), residual, delta)
        for i in range(k + 1):
            w[i] += delta[i]
        clear(Mi, Mw, slots, k, m_indices, count_u, dense)
    schur = 0.0
    for j in range(count_u):
        schur += dense[m_indices[j]] ** 2
        dense[m_indices[j]] = 0.0
    for i in range(k):
        row = slots[i]
        for j in range(Mw[row]):
            schur += dense[Mi[row, j]] ** 2
            dense[Mi[row, j]] = 0.0
    return schur


@nb.njit(cache=True, nogil=True)
def kkt_solution(kinv, k, theta, solution):
    """``solution = K^{-1} [1; theta] = (tau, y_hat)`` from scratch."""
    for i in range(k + 1):
        solution[i] = kinv[0, i]
    accumulate(kinv, k + 1, np.int64(1), theta, solution)


@nb.njit(cache=True, nogil=True)
def kkt_matrix(Mi, Mv, Mw, slots, k, scratch):
    """The bordered KKT matrix ``K = [[0, 1^T], [1, M_I M_I^T]]`` of the active set."""
    kkt = np.zeros((k + 1, k + 1))
    for i in range(k):
        kkt[0, i + 1] = kkt[i + 1, 0] = 1.0
        row = slots[i]
        for j in range(Mw[row]):
            scratch[Mi[row, j]] = Mv[row, j]
        for j in range(i, k):
            kkt[i + 1, j + 1] = kkt[j + 1, i + 1] = row_dot(Mi, Mv, Mw, slots[j], scratch)
        for j in range(Mw[row]):
            scratch[Mi[row, j]] = 0.0
    return kkt


@nb.njit(cache=True, nogil=True)
def store_inverse(inverse, kinv, k):
    """``kinv`` (transposed) from ``inverse``, the ``(k + 1, k + 1)`` inverse of ``K``."""
    for b in range(k + 1):
        for a in range(k + 1):
            kinv[b, a] = inverse[a, b]


@nb.njit(cache=True, nogil=True)
def rebuild_inverse(Mi, Mv, Mw, slots, kinv, k, scratch):
    """Rebuild ``K^{-1}`` by LU (the pseudo-inverse if ``K`` is singular); returns ``K``."""
    kkt = kkt_matrix(Mi, Mv, Mw, slots, k, scratch)
    try:
        inverse = np.linalg.inv(kkt)
    except Exception:  # numba raises LinAlgError as a plain exception
        inverse = np.linalg.pinv(kkt)
    store_inverse(inverse, kinv, k)
    return kkt


@nb.njit(cache=True, nogil=True)
def refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, solution):
    """Rebuild ``K^{-1}`` of the bordered KKT matrix from scratch (:func:`rebuild_inverse`),
    and solve ``K [tau; y_hat] = [1; theta]`` into ``solution`` by LU.

    Not as ``K^{-1} [1; theta]``: a product with an explicit inverse errs by cond(K) times
    rounding, and supports of trees of 50 words reach cond(K) = 1e15 (their rows affinely
    independent, exactly, but with a singular value of ``[M_I, 1]`` of 1e-6); there the
    product's weights summed to 0.83 instead of 1, and the refined ones, which the solver
    returned as converged, to 1 - 1.1e-6, with an exact gap of 2.7e-4 (issue 56). LU with
    partial pivoting is backward stable: the same system solves to a residual of 3e-14,
    weights summing to one to rounding."""
    kkt = rebuild_inverse(Mi, Mv, Mw, slots, kinv, k, scratch)
    rhs = np.empty(k + 1)
    rhs[0] = 1.0
    rhs[1:] = theta[:k]
    try:
        solution[: k + 1] = np.linalg.solve(kkt, rhs)
    except Exception:  # singular: the pseudo-inverse's solution
        kkt_solution(kinv, k, theta, solution)


@nb.njit(cache=True, nogil=True)
def drop(Mi, Mv, Mw, slots, y, theta, kinv, k, i, scratch, work):
    """Remove active structure ``i`` (downdating ``K^{-1}`` in one pass that also closes
    the gap left by its row and column, and the solution row of ``work`` with it); returns
    the new size."""
    column, pivot_row, solution = work[COLUMN], work[PIVOT_ROW], work[SOLUTION]
    j = i + 1
    pivot = kinv[j, j]
    freed = slots[i]
    for a in range(i, k - 1):
        slots[a] = slots[a + 1]
        y[a] = y[a + 1]
        theta[a] = theta[a + 1]
    slots[k - 1] = freed
    if abs(pivot) < 1e-12:
        refactor(Mi, Mv, Mw, slots, theta, kinv, k - 1, scratch, solution)
        return k - 1
    for a in range(k + 1):
        column[a] = kinv[j, a] / pivot  # K^{-1}[a, j] / pivot
        pivot_row[a] = kinv[a, j]  # K^{-1}[j, a]
    # solution[a] -= K^{-1}[a, j] solution[j] / pivot, without entry j
    scale = solution[j]
    for a in range(j):
        solution[a] -= column[a] * scale
    for a in range(j, k):
        solution[a] = solution[a + 1] - column[a + 1] * scale
    # K^{-1}[a, b] -= column[a] K^{-1}[j, b] without row and column j: row b (column a)
    # of the result comes from row b + (b >= j) (column a + (a >= j)); sources never
    # precede their targets, so the update runs in place.
    for b in range(k):
        source = b + (b >= j)
        scale = pivot_row[source]
        for a in range(j):
            kinv[b, a] = kinv[source, a] - column[a] * scale
        for a in range(j, k):
            kinv[b, a] = kinv[source, a + 1] - column[a + 1] * scale
    return k - 1


@nb.njit(cache=True, nogil=True)
def enter(Mi, Mv, Mw, slots, y, theta, kinv, k, m_indices, m_values, count_u, schur, score, scratch, work):
    """Add structure ``m`` of score ``theta_s = score`` at row ``slots[k]``, whose sparse
    parts the caller stores, given its border row ``[1; M_I m]`` and its :func:`schur_complement`
    complement ``schur`` (:func:`hull_distance` near the hull; with the row ``w``); affinely
    dependent active structures are pivoted out."""
    border, w, column, solution = work[BORDER], work[W], work[COLUMN], work[SOLUTION]
    weight, m_squared = 0.0, dot(m_values[:count_u], m_values[:count_u])
    while schur <= AFFINE_TOL * max(1.0, m_squared):
        leave, gamma = np.int64(-1), np.inf
        for i in range(k):
            if w[i + 1] > 1e-12 and y[i] / w[i + 1] < gamma:
                leave, gamma = i, y[i] / w[i + 1]
        if leave < 0:
            break
        for i in range(k):
            y[i] = max(y[i] - gamma * w[i + 1], 0.0)
        weight += gamma
        k = drop(Mi, Mv, Mw, slots, y, theta, kinv, k, leave, scratch, work)
        for a in range(leave + 1, k + 1):
            border[a] = border[a + 1]
        schur = schur_complement(kinv, k, m_squared, border, w)
        if schur <= AFFINE_TOL * max(1.0, m_squared):
            schur = hull_distance(Mi, Mv, Mw, slots, kinv, k, m_indices, m_values, count_u, w, scratch, work)
    for a in range(k + 1):
        column[a] = w[a] / schur
    for b in range(k + 1):
        scale = w[b]
        for a in range(k + 1):
            kinv[b, a] += column[a] * scale
    for b in range(k + 1):
        kinv[b, k + 1] = kinv[k + 1, b] = -column[b]
    kinv[k + 1, k + 1] = 1.0 / schur
    # The bordered solution: with c = border . solution = w . [1; theta],
    # solution -= w (score - c) / schur, and the new entry is (score - c) / schur.
    excess = score - dot(border[: k + 1], solution[: k + 1])
    for a in range(k + 1):
        solution[a] -= column[a] * excess
    solution[k + 1] = excess / schur
    y[k], theta[k] = weight, score
    return k + 1


@nb.njit(cache=True, nogil=True)
def kkt_residual(Mi, Mv, Mw, slots, u, solution, theta, k, products):
    """How far ``solution = (tau, y_hat)`` is from solving ``M_I M_I^T y + tau = theta``
    beyond ``RESIDUAL_TOL`` (relative to the scores), or ``1^T y_hat = 1`` beyond
    ``SUM_TOL``, given ``u = M_I^T y_hat``; 0 when within both. ``products`` (size k) is
    scratch."""
    worst, scale = 0.0, 1.0
    row_dots(Mi, Mv, Mw, slots, k, u, products)
    for i in range(k):
        worst = max(worst, abs(products[i] + solution[0] - theta[i]))
        scale = max(scale, abs(theta[i]))
    return max(worst - RESIDUAL_TOL * scale, abs(np.sum(solution[1 : k + 1]) - 1.0) - SUM_TOL, 0.0)


@nb.njit(cache=True, nogil=True)
def refine(Mi, Mv, Mw, slots, theta, kinv, k, u, work):
    """One step of iterative refinement of the solution ``(tau, y_hat) = K^{-1} [1; theta]``:
    add ``K^{-1}`` times the KKT residual, computed from the sparse rows. A few steps
    bring the residual down to rounding error even after the incremental inverse drifted,
    so that the gaps computed next are exact to rounding. ``u`` is scratch. Returns the
    largest residual before the step: of the scores' rows relative to the scores, of the
    weights' sum as it is (a sum off by d moves every gap by d times the objective)."""
    products, residual, delta = work[PRODUCTS], work[RESIDUAL], work[DELTA]
    solution = work[SOLUTION]
    combine(Mi, Mv, Mw, slots, solution[1:], k, u)
    row_dots(Mi, Mv, Mw, slots, k, u, products)
    residual[0] = 1.0 - np.sum(solution[1 : k + 1])
    worst, scale = 0.0, 1.0
    for i in range(k):
        residual[i + 1] = theta[i] - solution[0] - products[i]
        worst, scale = max(worst, abs(residual[i + 1])), max(scale, abs(theta[i]))
    for i in range(k + 1):
        delta[i] = 0.0
    accumulate(kinv, k + 1, np.int64(0), residual, delta)
    for i in range(k + 1):
        solution[i] += delta[i]
    return max(worst / scale, abs(residual[0]))


@nb.njit(cache=True, nogil=True)
def refine_exactly(Mi, Mv, Mw, slots, theta, kinv, k, u, scratch, work):
    """``REFINEMENTS`` steps of :func:`refine`; when they diverge, or leave a residual above
    ``ROUNDING_RESIDUAL`` before the last step, ``K^{-1}`` drifted too far to refine with,
    and it is rebuilt, with the solution solved by LU (:func:`refactor`): refined with the
    drifted inverse of a support of cond(K) = 1e15, a tree of 50 words at tol=1e-11 was
    certified at a point whose own gap was 7.7e-9, 8 times tol. Returns the first step's
    residual and whether ``K^{-1}`` was rebuilt."""
    residual = refine(Mi, Mv, Mw, slots, theta, kinv, k, u, work)
    latest = residual
    for _ in range(REFINEMENTS - 1):
        latest = refine(Mi, Mv, Mw, slots, theta, kinv, k, u, work)
        if latest > max(residual, ROUNDING_RESIDUAL):
            break
    if latest > ROUNDING_RESIDUAL:
        refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[SOLUTION])
        return residual, True
    return residual, False


@nb.njit(cache=True, nogil=True)
def solve_relaxed(Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, check, slack):
    """Solve the KKT system on the active set, dropping structures until feasible (weights
    down to ``-slack`` count as zero), and write ``u = M_I^T y``. With ``check``, the
    solution's KKT residual is verified. With a ``slack`` (near the solution), every
    solution is refined first: the weights of the face's structures are rounding error
    of the incremental inverse's (1e-9 and more on trees of 150 words), which would drop
    them, change the weights' sum and so every gap by as much, and the solver would
    cycle without reaching the exact solution. Returns the new size (``tau`` stays in
    the solution row of ``work``)."""
    products, solution = work[PRODUCTS], work[SOLUTION]
    y_hat = solution[1:]
    refactored = False
    while True:
        if not refactored and abs(np.sum(y_hat[:k]) - 1.0) > 1e-8:
            # The incremental inverse no longer solves the KKT system: rebuild it once.
            refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, solution)
            refactored = True
            continue
        if slack > 0.0 and refine_exactly(Mi, Mv, Mw, slots, theta, kinv, k, u, scratch, work)[1]:
            refactored = True
        leave, gamma = np.int64(-1), np.inf
        for i in range(k):
            if y_hat[i] < -slack and y[i] / (y[i] - y_hat[i]) < gamma:
                leave, gamma = i, y[i] / (y[i] - y_hat[i])
        if leave < 0:
            combine(Mi, Mv, Mw, slots, y_hat, k, u)
            if (
                check
                and not refactored
                and kkt_residual(Mi, Mv, Mw, slots, u, solution, theta, k, products) > 0.0
            ):
                refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, solution)
                refactored = True
                continue
            for i in range(k):  # (u, and the gaps, come from y_hat itself)
                y[i] = max(y_hat[i], 0.0)
            return k
        for i in range(k):
            y[i] = max(y[i] + gamma * (y_hat[i] - y[i]), 0.0)
        k = drop(Mi, Mv, Mw, slots, y, theta, kinv, k, leave, scratch, work)
        refactored = False


@nb.njit(cache=True, nogil=True)
def inverse_drift(Mi, Mv, Mw, slots, kinv, k, scratch, work):
    """How far ``K^{-1}`` is from inverting ``K``: ``||K K^{-1} b - b|| / ||b||`` for a
    fixed pseudo-random ``b``, with ``K`` applied through the sparse rows (O(k^2 + k nnz)).
    ``scratch`` (size of the unary part, zero) is zero again on return."""
    b, x, product = work[RESIDUAL], work[DELTA], work[COLUMN]
    np.random.seed(k)
    for i in range(k + 1):
        b[i] = np.random.standard_normal()
        x[i] = 0.0
    accumulate(kinv, k + 1, np.int64(0), b, x)
    # K x = [sum(x_1..k); M_I (M_I^T x_1..k) + x_0]
    combine(Mi, Mv, Mw, slots, x[1:], k, scratch)
    row_dots(Mi, Mv, Mw, slots, k, scratch, product[1:])
    product[0] = np.sum(x[1 : k + 1])
    for i in range(k):
        product[i + 1] += x[0]
    scratch[:] = 0.0
    error = 0.0
    for i in range(k + 1):
        error += (product[i] - b[i]) ** 2
    return np.sqrt(error / dot(b[: k + 1], b[: k + 1]))


@nb.njit(cache=True, nogil=True)
def largest_score(Mi, Mv, Mw, slots, theta, k, u, products):
    """The largest score ``theta_i - <m_i, u>`` of an active structure at the point ``u``
    (all are equal at an exact solution); ``products`` (size k) is scratch."""
    row_dots(Mi, Mv, Mw, slots, k, u, products)
    largest = -np.inf
    for i in range(k):
        largest = max(largest, theta[i] - products[i])
    return largest
