"""Compiled (numba) active-set SparseMAP solver for structures with a compiled MAP oracle.

The same algorithm as :mod:`keras_structured.engine.active_set` (which stays the
readable reference and serves structures whose oracle is plain Python), written
over preallocated buffers so that the whole solve of one example, MAP calls
included, runs without returning to Python. The tests check that both agree.

A structure opts in by implementing ``compiled_oracle()`` that returns a
:class:`CompiledOracle`: a numba function
``oracle(scores_u, scores_v, length, params, m_out, n_out, code_out)`` that writes
the MAP structure's flat indicator vectors and integer code in place, plus its
integer ``params`` and the code size.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os

import numba as nb
import numpy as np

# Same meaning as in active_set.py: squared distance (relative to ||m||^2) below
# which a unary vector counts as lying in the affine hull of the active ones.
_AFFINE_TOL = 1e-10
RUNNING, CONVERGED, STALLED = 0, 1, 2
_THREADS = min(8, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class CompiledOracle:
    """A numba MAP oracle with its structure-specific parameters.

    Attributes:
        function: ``oracle(scores_u, scores_v, length, params, m_out, n_out, code_out)``.
        params: int64 array of structure parameters (sizes, options).
        code_shape: shape of the integer code of one structure, as :meth:`Structure.map`
            returns it per example (the oracle writes it flattened).
    """

    function: object
    params: np.ndarray
    code_shape: tuple


@nb.njit(cache=True, nogil=True)
def _dot(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    return total


# Active structure i lives in buffer row slots[i]; rows slots[k:] are free, so
# dropping a structure only shifts the small ``slots`` array, never buffer rows.


@nb.njit(cache=True, nogil=True)
def _border(Mb, slots, kinv, k, m):
    """``w = K^{-1} [1; M_I m]`` and the Schur complement ``m.m - [1; M_I m].w``."""
    border = np.empty(k + 1)
    border[0] = 1.0
    for i in range(k):
        border[i + 1] = _dot(Mb[slots[i]], m)
    w = np.zeros(k + 1)
    for i in range(k + 1):
        for j in range(k + 1):
            w[i] += kinv[i, j] * border[j]
    return w, _dot(m, m) - _dot(border, w)


@nb.njit(cache=True, nogil=True)
def _refactor(Mb, slots, kinv, k):
    """Rebuild ``K^{-1}`` of the bordered KKT matrix from scratch (pseudo-inverse)."""
    kkt = np.zeros((k + 1, k + 1))
    for i in range(k):
        kkt[0, i + 1] = kkt[i + 1, 0] = 1.0
        for j in range(i, k):
            kkt[i + 1, j + 1] = kkt[j + 1, i + 1] = _dot(Mb[slots[i]], Mb[slots[j]])
    kinv[: k + 1, : k + 1] = np.linalg.pinv(kkt)


@nb.njit(cache=True, nogil=True)
def _drop(Mb, slots, y, theta, kinv, k, i):
    """Remove active structure ``i`` (downdating ``K^{-1}``); returns the new size."""
    j = i + 1
    pivot = kinv[j, j]
    if abs(pivot) >= 1e-12:
        for a in range(k + 1):
            for b in range(k + 1):
                if a != j and b != j:
                    kinv[a, b] -= kinv[a, j] * kinv[j, b] / pivot
    for a in range(j, k):
        kinv[a, : k + 1] = kinv[a + 1, : k + 1]
    for b in range(j, k):
        kinv[:k, b] = kinv[:k, b + 1]
    freed = slots[i]
    for a in range(i, k - 1):
        slots[a] = slots[a + 1]
        y[a] = y[a + 1]
        theta[a] = theta[a + 1]
    slots[k - 1] = freed
    if abs(pivot) < 1e-12:
        _refactor(Mb, slots, kinv, k - 1)
    return k - 1


@nb.njit(cache=True, nogil=True)
def _enter(Mb, Nb, Cb, slots, y, theta, kinv, k, m, n, code, score):
    """Add a structure of score ``theta_s = score`` (pivoting out affinely dependent ones)."""
    weight = 0.0
    w, schur = _border(Mb, slots, kinv, k, m)
    while schur <= _AFFINE_TOL * max(1.0, _dot(m, m)):
        leave, gamma = -1, np.inf
        for i in range(k):
            if w[i + 1] > 1e-12 and y[i] / w[i + 1] < gamma:
                leave, gamma = i, y[i] / w[i + 1]
        if leave < 0:
            break
        for i in range(k):
            y[i] = max(y[i] - gamma * w[i + 1], 0.0)
        weight += gamma
        k = _drop(Mb, slots, y, theta, kinv, k, leave)
        w, schur = _border(Mb, slots, kinv, k, m)
    for a in range(k + 1):
        for b in range(k + 1):
            kinv[a, b] += w[a] * w[b] / schur
        kinv[a, k + 1] = kinv[k + 1, a] = -w[a] / schur
    kinv[k + 1, k + 1] = 1.0 / schur
    row = slots[k]
    Mb[row], Nb[row], Cb[row] = m, n, code
    y[k], theta[k] = weight, score
    return k + 1


@nb.njit(cache=True, nogil=True)
def _solve_relaxed(Mb, slots, y, theta, kinv, k):
    """Solve the KKT system on the active set, dropping structures until feasible."""
    refactored = False
    while True:
        y_hat = np.zeros(k)
        total = 0.0
        for i in range(k):
            y_hat[i] = kinv[i + 1, 0]
            for j in range(k):
                y_hat[i] += kinv[i + 1, j + 1] * theta[j]
            total += y_hat[i]
        if abs(total - 1.0) > 1e-8 and not refactored:
            _refactor(Mb, slots, kinv, k)
            refactored = True
            continue
        leave, gamma = -1, np.inf
        for i in range(k):
            if y_hat[i] < 0.0 and y[i] / (y[i] - y_hat[i]) < gamma:
                leave, gamma = i, y[i] / (y[i] - y_hat[i])
        if leave < 0:
            y[:k] = y_hat
            return k
        for i in range(k):
            y[i] = max(y[i] + gamma * (y_hat[i] - y[i]), 0.0)
        k = _drop(Mb, slots, y, theta, kinv, k, leave)
        refactored = False


@nb.njit(cache=True, nogil=True)
def _find(Cb, slots, k, code):
    for i in range(k):
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
def _grow(Mb, Nb, Cb, slots, y, theta, kinv):
    old, cap = Mb.shape[0], 2 * Mb.shape[0]
    new_M, new_N = np.zeros((cap, Mb.shape[1])), np.zeros((cap, Nb.shape[1]))
    new_C = np.zeros((cap, Cb.shape[1]), Cb.dtype)
    new_slots = np.arange(cap)
    new_y, new_theta, new_kinv = np.zeros(cap), np.zeros(cap), np.zeros((cap + 1, cap + 1))
    new_M[:old], new_N[:old], new_C[:old], new_slots[:old] = Mb, Nb, Cb, slots
    new_y[:old], new_theta[:old] = y, theta
    new_kinv[: old + 1, : old + 1] = kinv
    return new_M, new_N, new_C, new_slots, new_y, new_theta, new_kinv


@nb.njit(cache=True, nogil=True)
def _sparse_rows(buffer, slots, k):
    """Index/value lists of the active rows (see :func:`keras_structured.engine.jacobian.sparse_rows`)."""
    width = 0
    for i in range(k):
        width = max(width, np.count_nonzero(buffer[slots[i]]))
    indices, values = np.zeros((k, width), np.int64), np.zeros((k, width))
    for i in range(k):
        row, count = buffer[slots[i]], 0
        for j in range(row.shape[0]):
            if row[j] != 0.0:
                indices[i, count], values[i, count] = j, row[j]
                count += 1
    return indices, values


@nb.njit(nogil=True)  # not cached: numba cannot cache functions taking a function argument
def _solve_one(oracle, eta_u, eta_v, length, params, code_size, tol, max_iter):
    """Active-set SparseMAP of one example, MAP calls to ``oracle`` included."""
    du, dv, cap = eta_u.shape[0], eta_v.shape[0], 8
    Mb, Nb = np.zeros((cap, du)), np.zeros((cap, dv))
    Cb, slots = np.zeros((cap, code_size), np.int64), np.arange(cap)
    y, theta, kinv = np.zeros(cap), np.zeros(cap), np.zeros((cap + 1, cap + 1))
    m, n, code = np.zeros(du), np.zeros(dv), np.zeros(code_size, np.int64)
    oracle(eta_u, eta_v, length, params, m, n, code)
    score = _dot(eta_u, m) + _dot(eta_v, n)
    Mb[0], Nb[0], Cb[0] = m, n, code
    y[0], theta[0] = 1.0, score
    kinv[0, 0], kinv[0, 1], kinv[1, 0] = -_dot(m, m), 1.0, 1.0
    k, u = 1, m.copy()
    calls, gap, status, stalls = 1, np.inf, RUNNING, 0
    for _ in range(max_iter):
        oracle(eta_u - u, eta_v, length, params, m, n, code)
        calls += 1
        # <eta_u, u> + <eta_v, v> = sum_i y_i theta_i: v itself is only needed at the end.
        linear = _dot(y[:k], theta[:k])
        objective = linear - 0.5 * _dot(u, u)
        score = _dot(eta_u, m) + _dot(eta_v, n)
        gap = max(score - _dot(m, u) - linear + _dot(u, u), 0.0)
        if gap <= tol * max(1.0, abs(objective)):
            status = CONVERGED
            break
        if _find(Cb, slots, k, code) >= 0:
            stalls += 1
            if stalls > 1:
                status = STALLED
                break
            _refactor(Mb, slots, kinv, k)
        else:
            if k + 1 >= Mb.shape[0]:
                Mb, Nb, Cb, slots, y, theta, kinv = _grow(Mb, Nb, Cb, slots, y, theta, kinv)
            k = _enter(Mb, Nb, Cb, slots, y, theta, kinv, k, m, n, code, score)
        k = _solve_relaxed(Mb, slots, y, theta, kinv, k)
        u = np.zeros(du)
        for i in range(k):
            u += y[i] * Mb[slots[i]]
    v = np.zeros(dv)
    codes = np.zeros((k, code_size), np.int64)
    for i in range(k):
        v += y[i] * Nb[slots[i]]
        codes[i] = Cb[slots[i]]
    m_indices, m_values = _sparse_rows(Mb, slots, k)
    n_indices, n_values = _sparse_rows(Nb, slots, k)
    weights = kinv[1 : k + 1, 1 : k + 1].copy()
    return (u, v, m_indices, m_values, n_indices, n_values, codes, y[:k].copy(), weights, gap, calls, status)


def solve_compiled(compiled: CompiledOracle, flat_u, flat_v, lengths, tol: float, max_iter: int):
    """Solve every example with the compiled kernel.

    Returns a list of per-example tuples in the field order of
    :class:`~keras_structured.engine.support.ExampleSolution`, with the solver
    status (``CONVERGED``, ``STALLED`` or ``RUNNING``) last.
    """
    batch = flat_u.shape[0]
    if lengths is None:
        sizes = np.full((batch, 1), -1, np.int64)  # -1: the full size
    else:
        sizes = lengths.reshape(batch, -1).astype(np.int64)
    oracle, params, code_size = compiled.function, compiled.params, int(np.prod(compiled.code_shape))

    def solve_example(b):
        result = _solve_one(oracle, flat_u[b], flat_v[b], sizes[b], params, code_size, tol, max_iter)
        codes = result[6].reshape((result[7].size,) + tuple(compiled.code_shape))
        return result[:6] + (codes,) + result[7:]

    if batch < 2 * _THREADS:
        return [solve_example(b) for b in range(batch)]
    with concurrent.futures.ThreadPoolExecutor(_THREADS) as pool:  # the kernel releases the GIL
        return list(pool.map(solve_example, range(batch)))
