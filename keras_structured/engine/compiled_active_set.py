"""Compiled (numba) active-set SparseMAP solver for structures with a compiled MAP oracle.

The same algorithm as :mod:`keras_structured.engine.active_set` (which stays the
readable reference and serves structures whose oracle is plain Python), written
over preallocated buffers so that the whole solve of one example, MAP calls
included, runs without returning to Python. The tests check that both agree.

A structure opts in with a :class:`~keras_structured.engine.compiled_oracle.CompiledOracle`
(the contract, in :mod:`~keras_structured.engine.compiled_oracle`).
The kernel is one function for every structure, cached on disk: it receives the
oracle as the address of its machine code (:mod:`~keras_structured.engine.oracle_address`),
so a structure's first solve compiles only its oracle.
Everything the kernel does per iteration then costs O(nonzeros) or O(|I|^2),
except handing the oracle its dense scores.
"""

from __future__ import annotations

import collections
import math

import numba as nb
import numpy as np

from keras_structured.engine.blas_threads import single_threaded_blas
from keras_structured.engine.compiled_oracle import CompiledOracle, sizes_of
from keras_structured.engine.oracle_address import (
    ORACLE,
    address,
    announce_compilation,
    oracle_at,
)
from keras_structured.engine.parallel import THREADS, run_on_all_threads
from keras_structured.engine.tolerances import (
    AFFINE_TOL,
    CERTIFICATE_SHRINKS,
    CERTIFICATE_STEP,
    FACE_GAP,
    NEAR_GAP,
    REFINEMENTS,
    RESIDUAL_TOL,
    ROUNDING_GAP,
    VERIFY_TOL,
    WEIGHT_SLACK,
)

# KKT residual (relative to the scores) of a point whose gaps are exact to rounding.
_ROUNDING_RESIDUAL = 1e-13
# Iterations between two KKT residual checks (one also comes before convergence).
_CHECK_EVERY = 8
# Drift of the incrementally updated K^{-1} (relative residual of K K^{-1} b = b) above
# which the Jacobian's inverse is rebuilt at the end (exact only).
_DRIFT_TOL = 1e-10
# Drift above which K^{-1} is rebuilt before a structure is measured against the hull
# (:func:`_hull_distance` refines with it, and does not converge from further off).
_REFINE_DRIFT = 1e-8
# Odd multiplier of the code hash.
_HASH_MULTIPLIER = 0x5851F42D4C957F2D
# Solver status: stopped by max_iter before tol; terminated; stuck on an active
# structure before tol; stopped by max_iter within tol but before exact termination.
RUNNING, CONVERGED, STALLED, TOL_REACHED = 0, 1, 2, 3
# The rows of the kernel's scratch matrix ``work`` (each of size k + 1, one role each):
# the border [1; M_I m] of a candidate structure, w = K^{-1} border, the solution
# (tau, y_hat) = K^{-1} [1; theta] kept up to date with K^{-1}, products M_I x, the
# column and pivot row of a downdate, a KKT residual and its correction K^{-1} residual.
_BORDER, _W, _SOLUTION, _PRODUCTS, _COLUMN, _PIVOT_ROW, _RESIDUAL, _DELTA = range(8)
_WORK_ROWS = 8


# What the kernel returns for one example: the fields of ExampleSolution (support.py),
# with the solver status in place of ``converged``. A collections.namedtuple, which
# numba builds in compiled code and hands back to Python as this class.
KernelResult = collections.namedtuple(
    "KernelResult",
    "u v m_indices m_values n_indices n_values codes weights weight_jacobian objective gap map_calls status",
)


@nb.njit(cache=True, nogil=True)
def _dot(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    return total


# The inverse ``K^{-1}`` of the bordered KKT matrix is stored transposed,
# ``kinv[b, a] = K^{-1}[a, b]`` (it is symmetric only up to rounding): products
# ``K^{-1} x`` then add up whole contiguous rows of ``kinv`` (vectorized) while
# every entry still sums its terms in the plain order j = 0, 1, ..., so the
# iterates do not depend on how the loops are vectorized.


@nb.njit(cache=True, nogil=True)
def _accumulate(kinv, size, first, x, out):
    """``out[:size] += K^{-1}[:size, first:size] @ x[:size - first]``, every entry adding
    its terms in the order j = first, first + 1, ..."""
    for j in range(first, size):
        scale = x[j - first]
        for i in range(size):
            out[i] += kinv[j, i] * scale


# Active structure i lives in buffer row slots[i]; rows slots[k:] are free, so
# dropping a structure only shifts the small ``slots`` array, never buffer rows.
# Rows are sparse (indices, values, width): indicator vectors have few nonzeros.


@nb.njit(cache=True, nogil=True)
def _row_dot(indices, values, widths, row, dense):
    total = 0.0
    for j in range(widths[row]):
        total += values[row, j] * dense[indices[row, j]]
    return total


@nb.njit(cache=True, nogil=True)
def _row_dots(indices, values, widths, slots, k, dense, out):
    """``out[i] = <row slots[i], dense>`` for the k active rows, two rows at a time
    (two independent sums, each in the order of :func:`_row_dot`)."""
    for i in range(0, k - 1, 2):
        first, second = slots[i], slots[i + 1]
        common = min(widths[first], widths[second])
        total_first = total_second = 0.0
        for j in range(common):
            total_first += values[first, j] * dense[indices[first, j]]
            total_second += values[second, j] * dense[indices[second, j]]
        for j in range(common, widths[first]):
            total_first += values[first, j] * dense[indices[first, j]]
        for j in range(common, widths[second]):
            total_second += values[second, j] * dense[indices[second, j]]
        out[i], out[i + 1] = total_first, total_second
    if k % 2:
        out[k - 1] = _row_dot(indices, values, widths, slots[k - 1], dense)


@nb.njit(cache=True, nogil=True)
def _store_row(indices, values, widths, row, new_indices, new_values, count):
    """Store a sparse vector in ``row``, widening the buffers if needed."""
    if count > indices.shape[1]:
        wider_indices = np.zeros((indices.shape[0], 2 * count), np.int64)
        wider_values = np.zeros((indices.shape[0], 2 * count))
        _copy_into(indices, wider_indices)
        _copy_into(values, wider_values)
        indices, values = wider_indices, wider_values
    for j in range(count):
        indices[row, j] = new_indices[j]
        values[row, j] = new_values[j]
    widths[row] = count
    return indices, values


@nb.njit(cache=True, nogil=True)
def _sparse_dot(indices, values, count, dense):
    total = 0.0
    for j in range(count):
        total += values[j] * dense[indices[j]]
    return total


@nb.njit(cache=True, nogil=True)
def _shared_parts(codes, slots, k, code, out):
    """``out[i] = <m_i, m>`` for the k active rows, from the codes alone: structures with
    ``one_hot_codes`` share a part wherever their codes hold the same nonnegative entry."""
    for i in range(k):
        row = codes[slots[i]]
        total = 0
        for j in range(code.shape[0]):
            total += (row[j] == code[j]) & (code[j] >= 0)
        out[i] = total


@nb.njit(cache=True, nogil=True)
def _schur(kinv, k, m_squared, border, w):
    """Write ``w = K^{-1} border`` for ``border = [1; M_I m]``; return the Schur complement
    ``m.m - border.w``."""
    for i in range(k + 1):
        w[i] = 0.0
    _accumulate(kinv, k + 1, np.int64(0), border, w)
    return m_squared - _dot(border[: k + 1], w[: k + 1])


@nb.njit(cache=True, nogil=True)
def _hull_distance(Mi, Mv, Mw, slots, kinv, k, m_indices, m_values, count_u, w, dense, work):
    """The Schur complement of the sparse unary vector ``m`` measured directly, for when
    :func:`_schur` falls below the affine-hull threshold: ``||m - M_I^T c||^2`` with the
    affine coefficients ``c = w[1:]`` after ``REFINEMENTS`` steps of iterative refinement
    of ``w = K^{-1} [1; M_I m]``. The normal equations lose a small distance to rounding
    (their error grows with the condition number of ``K``, 1e12 on some trees of 50
    words), while the residual's error is second order in that of ``c``. ``dense`` (size
    of the unary part, zero) is scratch and is zero again on return."""
    residual, delta = work[_RESIDUAL], work[_DELTA]
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
        _row_dots(Mi, Mv, Mw, slots, k, dense, residual[1:])
        residual[0] = 1.0 - np.sum(w[1 : k + 1])
        for i in range(k):
            residual[i + 1] -= w[0]
        for i in range(k + 1):
            delta[i] = 0.0
        _accumulate(kinv, k + 1, np.int64(0), residual, delta)
        for i in range(k + 1):
            w[i] += delta[i]
        _clear(Mi, Mw, slots, k, m_indices, count_u, dense)
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
def _clear(Mi, Mw, slots, k, m_indices, count_u, dense):
    """Zero the entries of ``dense`` that ``m`` or an active row touches."""
    for j in range(count_u):
        dense[m_indices[j]] = 0.0
    for i in range(k):
        row = slots[i]
        for j in range(Mw[row]):
            dense[Mi[row, j]] = 0.0


@nb.njit(cache=True, nogil=True)
def _solution(kinv, k, theta, solution):
    """``solution = K^{-1} [1; theta] = (tau, y_hat)`` from scratch."""
    for i in range(k + 1):
        solution[i] = kinv[0, i]
    _accumulate(kinv, k + 1, np.int64(1), theta, solution)


@nb.njit(cache=True, nogil=True)
def _kkt_matrix(Mi, Mv, Mw, slots, k, scratch):
    """The bordered KKT matrix ``K = [[0, 1^T], [1, M_I M_I^T]]`` of the active set."""
    kkt = np.zeros((k + 1, k + 1))
    for i in range(k):
        kkt[0, i + 1] = kkt[i + 1, 0] = 1.0
        row = slots[i]
        for j in range(Mw[row]):
            scratch[Mi[row, j]] = Mv[row, j]
        for j in range(i, k):
            kkt[i + 1, j + 1] = kkt[j + 1, i + 1] = _row_dot(Mi, Mv, Mw, slots[j], scratch)
        for j in range(Mw[row]):
            scratch[Mi[row, j]] = 0.0
    return kkt


@nb.njit(cache=True, nogil=True)
def _store_inverse(inverse, kinv, k):
    """``kinv`` (transposed) from ``inverse``, the ``(k + 1, k + 1)`` inverse of ``K``."""
    for b in range(k + 1):
        for a in range(k + 1):
            kinv[b, a] = inverse[a, b]


@nb.njit(cache=True, nogil=True)
def _rebuild_inverse(Mi, Mv, Mw, slots, kinv, k, scratch):
    """Rebuild ``K^{-1}`` by LU (the pseudo-inverse if ``K`` is singular)."""
    kkt = _kkt_matrix(Mi, Mv, Mw, slots, k, scratch)
    try:
        inverse = np.linalg.inv(kkt)
    except Exception:  # numba raises LinAlgError as a plain exception
        inverse = np.linalg.pinv(kkt)
    _store_inverse(inverse, kinv, k)


@nb.njit(cache=True, nogil=True)
def _refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, solution):
    """Rebuild ``K^{-1}`` of the bordered KKT matrix from scratch (:func:`_rebuild_inverse`),
    and the ``solution`` it gives."""
    _rebuild_inverse(Mi, Mv, Mw, slots, kinv, k, scratch)
    _solution(kinv, k, theta, solution)


@nb.njit(cache=True, nogil=True)
def _drop(Mi, Mv, Mw, slots, y, theta, kinv, k, i, scratch, work):
    """Remove active structure ``i`` (downdating ``K^{-1}`` in one pass that also closes
    the gap left by its row and column, and the solution row of ``work`` with it); returns
    the new size."""
    column, pivot_row, solution = work[_COLUMN], work[_PIVOT_ROW], work[_SOLUTION]
    j = i + 1
    pivot = kinv[j, j]
    freed = slots[i]
    for a in range(i, k - 1):
        slots[a] = slots[a + 1]
        y[a] = y[a + 1]
        theta[a] = theta[a + 1]
    slots[k - 1] = freed
    if abs(pivot) < 1e-12:
        _refactor(Mi, Mv, Mw, slots, theta, kinv, k - 1, scratch, solution)
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
def _enter(Mi, Mv, Mw, slots, y, theta, kinv, k, m_indices, m_values, count_u, schur, score, scratch, work):
    """Add structure ``m`` of score ``theta_s = score`` at row ``slots[k]``, whose sparse
    parts the caller stores, given its border row ``[1; M_I m]`` and its :func:`_schur`
    complement ``schur`` (:func:`_hull_distance` near the hull; with the row ``w``); affinely
    dependent active structures are pivoted out."""
    border, w, column, solution = work[_BORDER], work[_W], work[_COLUMN], work[_SOLUTION]
    weight, m_squared = 0.0, _dot(m_values[:count_u], m_values[:count_u])
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
        k = _drop(Mi, Mv, Mw, slots, y, theta, kinv, k, leave, scratch, work)
        for a in range(leave + 1, k + 1):
            border[a] = border[a + 1]
        schur = _schur(kinv, k, m_squared, border, w)
        if schur <= AFFINE_TOL * max(1.0, m_squared):
            schur = _hull_distance(Mi, Mv, Mw, slots, kinv, k, m_indices, m_values, count_u, w, scratch, work)
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
    excess = score - _dot(border[: k + 1], solution[: k + 1])
    for a in range(k + 1):
        solution[a] -= column[a] * excess
    solution[k + 1] = excess / schur
    y[k], theta[k] = weight, score
    return k + 1


@nb.njit(cache=True, nogil=True)
def _kkt_residual(Mi, Mv, Mw, slots, u, tau, theta, k, products):
    """How far ``(tau, y_hat)`` is from solving ``M_I M_I^T y + tau = theta`` beyond
    ``RESIDUAL_TOL`` (relative to the scores), given ``u = M_I^T y_hat``; 0 when within it.
    ``products`` (size k) is scratch."""
    worst, scale = 0.0, 1.0
    _row_dots(Mi, Mv, Mw, slots, k, u, products)
    for i in range(k):
        worst = max(worst, abs(products[i] + tau - theta[i]))
        scale = max(scale, abs(theta[i]))
    return max(worst - RESIDUAL_TOL * scale, 0.0)


@nb.njit(cache=True, nogil=True)
def _refine(Mi, Mv, Mw, slots, theta, kinv, k, u, work):
    """One step of iterative refinement of the solution ``(tau, y_hat) = K^{-1} [1; theta]``:
    add ``K^{-1}`` times the KKT residual, computed from the sparse rows. A few steps
    bring the residual down to rounding error even after the incremental inverse drifted,
    so that the gaps computed next are exact to rounding. ``u`` is scratch. Returns the
    largest residual before the step, relative to the scores."""
    products, residual, delta = work[_PRODUCTS], work[_RESIDUAL], work[_DELTA]
    solution = work[_SOLUTION]
    _combine(Mi, Mv, Mw, slots, solution[1:], k, u)
    _row_dots(Mi, Mv, Mw, slots, k, u, products)
    residual[0] = 1.0 - np.sum(solution[1 : k + 1])
    worst, scale = abs(residual[0]), 1.0
    for i in range(k):
        residual[i + 1] = theta[i] - solution[0] - products[i]
        worst, scale = max(worst, abs(residual[i + 1])), max(scale, abs(theta[i]))
    for i in range(k + 1):
        delta[i] = 0.0
    _accumulate(kinv, k + 1, np.int64(0), residual, delta)
    for i in range(k + 1):
        solution[i] += delta[i]
    return worst / scale


@nb.njit(cache=True, nogil=True)
def _refine_exactly(Mi, Mv, Mw, slots, theta, kinv, k, u, scratch, work):
    """``REFINEMENTS`` steps of :func:`_refine`; when they diverge, ``K^{-1}`` drifted too
    far to refine with and is rebuilt (with the solution). Returns the first step's
    residual and whether ``K^{-1}`` was rebuilt."""
    residual = _refine(Mi, Mv, Mw, slots, theta, kinv, k, u, work)
    for _ in range(REFINEMENTS - 1):
        if _refine(Mi, Mv, Mw, slots, theta, kinv, k, u, work) > max(residual, _ROUNDING_RESIDUAL):
            _refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[_SOLUTION])
            return residual, True
    return residual, False


@nb.njit(cache=True, nogil=True)
def _solve_relaxed(Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, check, slack):
    """Solve the KKT system on the active set, dropping structures until feasible (weights
    down to ``-slack`` count as zero), and write ``u = M_I^T y``. With ``check``, the
    solution's KKT residual is verified. With a ``slack`` (near the solution), every
    solution is refined first: the weights of the face's structures are rounding error
    of the incremental inverse's (1e-9 and more on trees of 150 words), which would drop
    them, change the weights' sum and so every gap by as much, and the solver would
    cycle without reaching the exact solution. Returns the new size (``tau`` stays in
    the solution row of ``work``)."""
    products, solution = work[_PRODUCTS], work[_SOLUTION]
    y_hat = solution[1:]
    refactored = False
    while True:
        if not refactored and abs(np.sum(y_hat[:k]) - 1.0) > 1e-8:
            # The incremental inverse no longer solves the KKT system: rebuild it once.
            _refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, solution)
            refactored = True
            continue
        if slack > 0.0 and _refine_exactly(Mi, Mv, Mw, slots, theta, kinv, k, u, scratch, work)[1]:
            refactored = True
        leave, gamma = np.int64(-1), np.inf
        for i in range(k):
            if y_hat[i] < -slack and y[i] / (y[i] - y_hat[i]) < gamma:
                leave, gamma = i, y[i] / (y[i] - y_hat[i])
        if leave < 0:
            _combine(Mi, Mv, Mw, slots, y_hat, k, u)
            if (
                check
                and not refactored
                and _kkt_residual(Mi, Mv, Mw, slots, u, solution[0], theta, k, products) > 0.0
            ):
                _refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, solution)
                refactored = True
                continue
            for i in range(k):  # (u, and the gaps, come from y_hat itself)
                y[i] = max(y_hat[i], 0.0)
            return k
        for i in range(k):
            y[i] = max(y[i] + gamma * (y_hat[i] - y[i]), 0.0)
        k = _drop(Mi, Mv, Mw, slots, y, theta, kinv, k, leave, scratch, work)
        refactored = False


@nb.njit(cache=True, nogil=True)
def _uniform_fill(out, seed):
    """Fill ``out`` with pseudo-random numbers uniform on ``[-1, 1)`` (SplitMix64 from
    ``seed``), much cheaper than ``np.random``'s normals, which took a fifth of the whole
    solve's time on trees of 80 words."""
    state = np.uint64(seed)
    for j in range(out.shape[0]):
        state += np.uint64(0x9E3779B97F4A7C15)
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        out[j] = (z >> np.uint64(11)) * (2.0 / 9007199254740992.0) - 1.0


@nb.njit(cache=True, nogil=True)
def _certificate_direction(Mi, Mv, Mw, slots, kinv, k, seed, norm, r, work):
    """Write into ``r`` a random direction (seeded by ``seed``) orthogonal to the affine hull
    of the active structures, of norm ``norm``: ``r = g - M_I^T c`` with ``(lambda, c) =
    K^{-1} [0; M_I g]``, the affine projection of a uniform ``g`` on ``[-1, 1)^d``. Every
    structure in the hull then has the same ``<r, m>``; one off the hull differs almost
    surely. Returns False when the hull fills the whole space (``r`` is zero: nothing to
    certify)."""
    _uniform_fill(r, seed)
    products, coefficients = work[_PRODUCTS], work[_COLUMN]
    _row_dots(Mi, Mv, Mw, slots, k, r, products)
    for i in range(k + 1):
        coefficients[i] = 0.0
    _accumulate(kinv, k + 1, np.int64(1), products, coefficients)
    for i in range(k):
        row = slots[i]
        for j in range(Mw[row]):
            r[Mi[row, j]] -= coefficients[i + 1] * Mv[row, j]
    length = np.sqrt(_dot(r, r))
    for j in range(r.shape[0]):
        r[j] *= norm / length if length > 0.0 else 0.0
    return length > 0.0


@nb.njit(cache=True, nogil=True)
def _start_certificate(Mi, Mv, Mw, slots, kinv, theta, k, u, seed, scale, r, work):
    """Draw the face certificate's direction ``r`` (:func:`_certificate_direction`, of norm
    ``CERTIFICATE_STEP * scale``); return the support's largest score at ``u`` (the
    face's), or NaN when the hull fills the whole space (nothing to certify)."""
    if not _certificate_direction(Mi, Mv, Mw, slots, kinv, k, seed, CERTIFICATE_STEP * scale, r, work):
        return np.nan
    return _largest_score(Mi, Mv, Mw, slots, theta, k, u, work[_PRODUCTS])


@nb.njit(cache=True, nogil=True)
def _inverse_drift(Mi, Mv, Mw, slots, kinv, k, scratch, work):
    """How far ``K^{-1}`` is from inverting ``K``: ``||K K^{-1} b - b|| / ||b||`` for a
    fixed pseudo-random ``b``, with ``K`` applied through the sparse rows (O(k^2 + k nnz)).
    ``scratch`` (size of the unary part, zero) is zero again on return."""
    b, x, product = work[_RESIDUAL], work[_DELTA], work[_COLUMN]
    np.random.seed(k)
    for i in range(k + 1):
        b[i] = np.random.standard_normal()
        x[i] = 0.0
    _accumulate(kinv, k + 1, np.int64(0), b, x)
    # K x = [sum(x_1..k); M_I (M_I^T x_1..k) + x_0]
    _combine(Mi, Mv, Mw, slots, x[1:], k, scratch)
    _row_dots(Mi, Mv, Mw, slots, k, scratch, product[1:])
    product[0] = np.sum(x[1 : k + 1])
    for i in range(k):
        product[i + 1] += x[0]
    scratch[:] = 0.0
    error = 0.0
    for i in range(k + 1):
        error += (product[i] - b[i]) ** 2
    return np.sqrt(error / _dot(b[: k + 1], b[: k + 1]))


@nb.njit(cache=True, nogil=True)
def _largest_score(Mi, Mv, Mw, slots, theta, k, u, products):
    """The largest score ``theta_i - <m_i, u>`` of an active structure at the point ``u``
    (all are equal at an exact solution); ``products`` (size k) is scratch."""
    _row_dots(Mi, Mv, Mw, slots, k, u, products)
    largest = -np.inf
    for i in range(k):
        largest = max(largest, theta[i] - products[i])
    return largest


@nb.njit(cache=True, nogil=True)
def _code_hash(code):
    """A hash of an integer code: active codes are compared in full only on equal hashes."""
    total = 0
    for j in range(code.shape[0]):
        total = total * _HASH_MULTIPLIER + code[j]  # wraps around: fine for a hash
    return total


@nb.njit(cache=True, nogil=True)
def _find(Cb, Ch, slots, k, code, code_hash):
    for i in range(k):
        if Ch[slots[i]] != code_hash:
            continue
        row = Cb[slots[i]]
        same = True
        for j in range(code.shape[0]):
            if row[j] != code[j]:
                same = False
                break
        if same:
            return i
    return -1


@nb.njit(cache=True, nogil=True)
def _grow_2d(buffer, rows):
    grown = np.zeros((rows, buffer.shape[1]), buffer.dtype)
    _copy_into(buffer, grown)
    return grown


@nb.njit(cache=True, nogil=True)
def _grow_1d(buffer, rows):
    grown = np.zeros(rows, buffer.dtype)
    for i in range(buffer.shape[0]):
        grown[i] = buffer[i]
    return grown


# Explicit loops instead of slice assignments, here and in the kernel: numba compiles a
# broadcasting assignment with its error-message formatting, seconds per signature. For the
# same reason the kernel passes np.bool_/np.int64 values, not literals: a literal argument
# type compiles the callee once more.
@nb.njit(cache=True, nogil=True)
def _copy_into(source, target):
    """``target[:rows, :columns] = source`` for a 2-d ``source`` no larger than ``target``."""
    for i in range(source.shape[0]):
        for j in range(source.shape[1]):
            target[i, j] = source[i, j]


@nb.njit(cache=True, nogil=True)
def _combine(indices, values, widths, slots, y, k, out):
    """Write ``sum_i y_i row_i`` into the dense vector ``out``."""
    out[:] = 0.0
    for i in range(k):
        row = slots[i]
        for j in range(widths[row]):
            out[indices[row, j]] += y[i] * values[row, j]


# ||u||^2 only enters the gap: its sum may be reordered (vectorized), unlike those
# that lead to u, which keep the order of the plain loops.
@nb.njit(cache=True, nogil=True, fastmath={"reassoc", "nsz"})
def _linearize(eta_u, u, iterate):
    """Write the MAP scores ``iterate = eta_u - u``; return ``||u||^2``."""
    total = 0.0
    for j in range(u.shape[0]):
        iterate[j] = eta_u[j] - u[j]
        total += u[j] * u[j]
    return total


@nb.njit(cache=True, nogil=True)
def _active_rows(indices, values, widths, slots, k):
    """Index/value lists of the active rows, as :func:`keras_structured.engine.jacobian.sparse_rows`."""
    width = 0
    for i in range(k):
        width = max(width, widths[slots[i]])
    out_indices, out_values = np.zeros((k, width), np.int64), np.zeros((k, width))
    for i in range(k):
        row = slots[i]
        for j in range(widths[row]):
            out_indices[i, j], out_values[i, j] = indices[row, j], values[row, j]
    return out_indices, out_values


@nb.njit(cache=True, nogil=True)
def _solve_one(
    oracle, eta_u, eta_v, length, params, code_size, nonzeros, order, one_hot_codes, tol, max_iter, exact
):
    """Active-set SparseMAP of one example, MAP calls to the oracle at address ``oracle``
    included, in the oracle's ``order`` of the unary part (empty: the flat order) until the end.

    It stops once the gap is within ``tol``. With ``exact``, it goes on until the support
    spans the face of the solution, which the Jacobian projects on: the MAP structure
    adds nothing, being active or in the affine hull of the active structures (then its
    gap is zero in exact arithmetic), or its gap is rounding error (``ROUNDING_GAP``);
    and the face certificate holds (``CERTIFICATE_STEP``): the MAP structures at the
    scores moved by +-r, r random and orthogonal to the hull, are in the hull too.
    Structures of the face have equal scores, so the oracle's tie-breaking alone can
    return the same few of them over and over while others, needed to span the face,
    are never returned; the perturbation reaches them. A problem stopped by ``max_iter``
    between ``tol`` and termination gets ``TOL_REACHED``."""
    map_oracle = oracle_at(oracle)
    if order.shape[0] > 0:
        eta_u = eta_u[order]
    du, dv, cap = eta_u.shape[0], eta_v.shape[0], 8
    Mi, Mv, Mw = np.zeros((cap, 1), np.int64), np.zeros((cap, 1)), np.zeros(cap, np.int64)
    Ni, Nv, Nw = np.zeros((cap, 1), np.int64), np.zeros((cap, 1)), np.zeros(cap, np.int64)
    Cb, Ch, slots = np.zeros((cap, code_size), np.int64), np.zeros(cap, np.int64), np.arange(cap)
    y, theta, kinv = np.zeros(cap), np.zeros(cap), np.zeros((cap + 1, cap + 1))
    work = np.zeros((_WORK_ROWS, cap + 1))  # named rows: _BORDER, _W, _SOLUTION, ...
    m_indices, m_values = np.zeros(nonzeros[0], np.int64), np.zeros(nonzeros[0])
    n_indices, n_values = np.zeros(nonzeros[1], np.int64), np.zeros(nonzeros[1])
    code, m, scratch = np.zeros(code_size, np.int64), np.zeros(du), np.zeros(du)
    u, iterate = np.zeros(du), eta_u.copy()
    count_u, count_v = map_oracle(
        iterate, eta_v, length, params, m_indices, m_values, n_indices, n_values, code
    )
    k = np.int64(1)
    Mi, Mv = _store_row(Mi, Mv, Mw, slots[0], m_indices, m_values, count_u)
    Ni, Nv = _store_row(Ni, Nv, Nw, slots[0], n_indices, n_values, count_v)
    _copy_into(code.reshape((1, -1)), Cb)  # Cb[0] = code
    Ch[0] = _code_hash(code)
    y[0] = 1.0
    theta[0] = _sparse_dot(m_indices, m_values, count_u, eta_u) + _sparse_dot(
        n_indices, n_values, count_v, eta_v
    )
    kinv[0, 0], kinv[0, 1], kinv[1, 0] = -_dot(m_values[:count_u], m_values[:count_u]), 1.0, 1.0
    _solution(kinv, k, theta, work[_SOLUTION])
    _combine(Mi, Mv, Mw, slots, y, k, u)
    calls, gap, status, stalls = 1, np.inf, RUNNING, 0
    finish_tol = min(tol, ROUNDING_GAP) if exact else tol
    # Whether (tau, y) has passed the KKT residual check, made every _CHECK_EVERY
    # iterations and always before convergence is declared.
    checked = True
    # Whether the gap came within NEAR_GAP (or tol) once: the solver then works to rounding.
    near = False
    # Whether the point was refined since the active set last changed (exact only).
    refined = False
    # The face certificate: the sign of the perturbation r of the scores (0: none), and
    # how many times r was shrunk.
    sign, shrinks, r, reference = 0, 0, np.zeros(du), 0.0
    # The hash of the structure that entered last.
    entered = np.int64(0)
    # The support's size after a structure the certificate found entered (0: none): the
    # point stays the solution, and the next certificate follows at once.
    face_entry = 0
    for iteration in range(max_iter):
        u_squared = _linearize(eta_u, u, iterate)
        if sign != 0:
            for j in range(du):
                iterate[j] += sign * r[j]
        count_u, count_v = map_oracle(
            iterate, eta_v, length, params, m_indices, m_values, n_indices, n_values, code
        )
        calls += 1
        # <eta_u, u> + <eta_v, v> = sum_i y_i theta_i: v itself is only needed at the end.
        linear = _dot(y[:k], theta[:k])
        score = _sparse_dot(m_indices, m_values, count_u, eta_u)
        score += _sparse_dot(n_indices, n_values, count_v, eta_v)
        gap = max(score - _sparse_dot(m_indices, m_values, count_u, u) - linear + u_squared, 0.0)
        scale = max(1.0, abs(linear - 0.5 * u_squared))
        if gap <= tol * scale:
            status = TOL_REACHED
        near = near or gap <= max(tol, NEAR_GAP) * scale
        slack = WEIGHT_SLACK if exact and near else 0.0
        code_hash = _code_hash(code)
        active = _find(Cb, Ch, slots, k, code, code_hash) >= 0
        tied = False
        if not active:
            if k + 1 >= slots.shape[0]:
                cap = 2 * slots.shape[0]
                Mi, Mv, Mw = _grow_2d(Mi, cap), _grow_2d(Mv, cap), _grow_1d(Mw, cap)
                Ni, Nv, Nw = _grow_2d(Ni, cap), _grow_2d(Nv, cap), _grow_1d(Nw, cap)
                Cb, Ch = _grow_2d(Cb, cap), _grow_1d(Ch, cap)
                y, theta = _grow_1d(y, cap), _grow_1d(theta, cap)
                slots = np.concatenate((slots, np.arange(slots.shape[0], cap)))
                grown = np.zeros((cap + 1, cap + 1))
                _copy_into(kinv, grown)
                kinv, solution, work = grown, work[_SOLUTION], np.zeros((_WORK_ROWS, cap + 1))
                for a in range(solution.shape[0]):
                    work[_SOLUTION, a] = solution[a]
            m_squared, border = _dot(m_values[:count_u], m_values[:count_u]), work[_BORDER]
            border[0] = 1.0
            if one_hot_codes:
                _shared_parts(Cb, slots, k, code, border[1:])
            else:
                for j in range(count_u):
                    m[m_indices[j]] = m_values[j]
                _row_dots(Mi, Mv, Mw, slots, k, m, border[1:])
                for j in range(count_u):
                    m[m_indices[j]] = 0.0
            schur = _schur(kinv, k, m_squared, border, work[_W])
            if schur <= (VERIFY_TOL if slack > 0.0 else AFFINE_TOL) * max(1.0, m_squared):
                if slack > 0.0 and _inverse_drift(Mi, Mv, Mw, slots, kinv, k, scratch, work) > _REFINE_DRIFT:
                    # The measurement refines with K^{-1}: rebuild it first if it drifted.
                    _rebuild_inverse(Mi, Mv, Mw, slots, kinv, k, scratch)
                    _solution(kinv, k, theta, work[_SOLUTION])
                    schur = _schur(kinv, k, m_squared, border, work[_W])
                schur = _hull_distance(
                    Mi, Mv, Mw, slots, kinv, k, m_indices, m_values, count_u, work[_W], m, work
                )
            # In the active set's affine hull: it adds nothing to the Jacobian.
            tied = exact and status == TOL_REACHED and schur <= AFFINE_TOL * max(1.0, m_squared)
            # Entered last time and left at once: numerically in the hull (the KKT solve
            # cannot tell its weight from zero), and entering it again would cycle.
            tied = tied or (exact and status == TOL_REACHED and code_hash == entered)
        if sign != 0:  # a MAP call of the face certificate
            if active or tied:
                if sign > 0:
                    sign = -1
                    continue
                status = CONVERGED
                break
            face_gap = score - _sparse_dot(m_indices, m_values, count_u, u) - reference
            if face_gap < -FACE_GAP * scale:  # off the face: r was too long
                shrinks += 1
                if shrinks > CERTIFICATE_SHRINKS:
                    break
                for j in range(du):
                    r[j] *= 0.1
                continue
            sign = 0  # a structure of the face outside the hull: it enters below
            face_entry = k + 1
        # Terminated: within the tolerance, or (exact) no structure outside the support's
        # affine hull improves.
        elif gap <= finish_tol * scale or (status == TOL_REACHED and (active or tied)):
            if exact:
                # Decide on gaps that are exact to rounding: refine the point and, unless it
                # was already exact to rounding (or refined before), ask the oracle again;
                # then the face certificate.
                size = k
                residual = _refine_exactly(Mi, Mv, Mw, slots, theta, kinv, k, u, scratch, work)[0]
                accurate = residual <= _ROUNDING_RESIDUAL
                k = _solve_relaxed(
                    Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, np.bool_(False), slack
                )
                if (accurate or refined) and k == size:
                    reference = _start_certificate(
                        Mi, Mv, Mw, slots, kinv, theta, k, u, calls, scale, r, work
                    )
                    if np.isnan(reference):
                        status = CONVERGED
                        break
                    sign, shrinks = 1, 0
                refined = True
                continue
            if (
                checked
                or _kkt_residual(Mi, Mv, Mw, slots, u, work[_SOLUTION, 0], theta, k, work[_PRODUCTS]) == 0.0
            ):
                status = CONVERGED
                break
            # The unchecked point is off: rebuild the inverse and solve again.
            _refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[_SOLUTION])
            k = _solve_relaxed(Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, np.bool_(True), slack)
            checked = True
            continue
        if active:
            stalls += 1
            if stalls > 1:
                status = STALLED
                break
            _refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[_SOLUTION])
        else:
            k = _enter(
                Mi,
                Mv,
                Mw,
                slots,
                y,
                theta,
                kinv,
                k,
                m_indices,
                m_values,
                count_u,
                schur,
                score,
                scratch,
                work,
            )
            row = slots[k - 1]
            Mi, Mv = _store_row(Mi, Mv, Mw, row, m_indices, m_values, count_u)
            Ni, Nv = _store_row(Ni, Nv, Nw, row, n_indices, n_values, count_v)
            _copy_into(code.reshape((1, -1)), Cb[row:])  # Cb[row] = code
            Ch[row] = code_hash
            entered = code_hash
        checked = iteration % _CHECK_EVERY == _CHECK_EVERY - 1
        refined = False
        k = _solve_relaxed(Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, checked, slack)
        if face_entry == k:  # nothing left: certify again at the same point
            reference = _start_certificate(Mi, Mv, Mw, slots, kinv, theta, k, u, calls, scale, r, work)
            if np.isnan(reference):
                status = CONVERGED
                break
            sign, shrinks, refined = 1, 0, True
        face_entry = 0
    if (
        exact
        and status == CONVERGED
        and _inverse_drift(Mi, Mv, Mw, slots, kinv, k, scratch, work) > _DRIFT_TOL
    ):
        # The Jacobian's K^{-1} from scratch: the rank-one updates drift (up to 1e-4
        # relative on trees of 50 words), while an LU inverse of the affinely independent
        # support errs by cond(K) times rounding.
        _rebuild_inverse(Mi, Mv, Mw, slots, kinv, k, scratch)
    v = np.zeros(dv)
    _combine(Ni, Nv, Nw, slots, y, k, v)
    objective = _dot(eta_u, u) + _dot(eta_v, v) - 0.5 * _dot(u, u)
    codes = np.zeros((k, code_size), np.int64)
    for i in range(k):
        _copy_into(Cb[slots[i] : slots[i] + 1], codes[i:])  # codes[i] = Cb[slots[i]]
    m_rows, m_row_values = _active_rows(Mi, Mv, Mw, slots, k)
    n_rows, n_row_values = _active_rows(Ni, Nv, Nw, slots, k)
    if order.shape[0] > 0:  # back to the flat order
        flat_u = np.empty(du)
        for j in range(du):  # flat_u[order] = u, without numba's shape-mismatch message
            flat_u[order[j]] = u[j]
        u = flat_u
        for i in range(k):
            for j in range(m_rows.shape[1]):
                m_rows[i, j] = order[m_rows[i, j]]
    weights = np.ascontiguousarray(kinv[1 : k + 1, 1 : k + 1].T)
    return KernelResult(
        u,
        v,
        m_rows,
        m_row_values,
        n_rows,
        n_row_values,
        codes,
        y[:k].copy(),
        weights,
        objective,
        gap,
        calls,
        status,
    )


def solve_compiled(
    compiled: CompiledOracle, flat_u, flat_v, lengths, tol: float, max_iter: int, exact: bool = True
):
    """Solve every example with the compiled kernel (``exact``: to termination, see
    :func:`_solve_one`).

    Returns a list of per-example :data:`KernelResult`: the fields of
    :class:`~keras_structured.engine.support.ExampleSolution`, with the solver
    ``status`` (``CONVERGED``, ``STALLED``, ``TOL_REACHED`` or ``RUNNING``) last.
    """
    with single_threaded_blas():
        return _solve_all(compiled, flat_u, flat_v, lengths, tol, max_iter, exact)


def _solve_all(compiled: CompiledOracle, flat_u, flat_v, lengths, tol: float, max_iter: int, exact: bool):
    batch = flat_u.shape[0]
    # The oracle's signature: C-contiguous and writable rows.
    flat_u, flat_v = (np.require(flat, np.float64, ("C", "W")) for flat in (flat_u, flat_v))
    sizes, params, code_size = sizes_of(lengths, batch), compiled.params, math.prod(compiled.code_shape)
    nonzeros, order = compiled.nonzero_bounds, compiled.kernel_order
    oracle = address(compiled.function, ORACLE)

    def solve_example(b):
        result = _solve_one(
            oracle,
            flat_u[b],
            flat_v[b],
            sizes[b],
            params,
            code_size,
            nonzeros,
            order,
            compiled.one_hot_codes,
            tol,
            max_iter,
            exact,
        )
        return result._replace(
            codes=result.codes.reshape((result.weights.size,) + tuple(compiled.code_shape))
        )

    results, first = [None] * batch, 0
    if batch and not _solve_one.signatures:  # this process's first call compiles or loads it
        announce_compilation(_solve_one, "the SparseMAP solver")
        results[0], first = solve_example(0), 1
    if batch - first < 2 * THREADS:
        return results[:first] + [solve_example(b) for b in range(first, batch)]

    pending = iter(range(first, batch))

    def work():  # each thread takes the next unsolved example
        for b in pending:
            results[b] = solve_example(b)

    run_on_all_threads(work)
    return results
