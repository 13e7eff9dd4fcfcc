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
from keras_structured.engine.kkt_inverse import (
    BORDER,
    COLUMN,
    PRODUCTS,
    ROUNDING_RESIDUAL,
    SOLUTION,
    WORK_ROWS,
    W,
    accumulate,
    enter,
    hull_distance,
    inverse_drift,
    kkt_residual,
    kkt_solution,
    largest_score,
    rebuild_inverse,
    refactor,
    refine_exactly,
    schur_complement,
    solve_relaxed,
)
from keras_structured.engine.oracle_address import (
    ORACLE,
    address,
    announce_compilation,
    oracle_at,
)
from keras_structured.engine.parallel import THREADS, run_on_all_threads
from keras_structured.engine.sparse_rows import (
    active_rows,
    combine,
    copy_into,
    dot,
    find,
    grow_1d,
    grow_2d,
    hash_code,
    row_dots,
    shared_parts,
    sparse_dot,
    store_row,
)
from keras_structured.engine.tolerances import (
    AFFINE_TOL,
    CERTIFICATE_SHRINKS,
    CERTIFICATE_STEP,
    FACE_GAP,
    NEAR_GAP,
    ROUNDING_GAP,
    VERIFY_TOL,
    WEIGHT_SLACK,
)

# Iterations between two KKT residual checks (one also comes before convergence).
_CHECK_EVERY = 8
# Drift of the incrementally updated K^{-1} (relative residual of K K^{-1} b = b) above
# which the Jacobian's inverse is rebuilt at the end (exact only).
_DRIFT_TOL = 1e-10
# Drift above which K^{-1} is rebuilt before a structure is measured against the hull
# (:func:`hull_distance` refines with it, and does not converge from further off).
_REFINE_DRIFT = 1e-8
# Solver status: stopped by max_iter before tol; terminated; stuck before tol (on an
# active structure, or one that leaves at once whenever it enters); stopped by max_iter
# at a point within tol but before exact termination.
RUNNING, CONVERGED, STALLED, TOL_REACHED = 0, 1, 2, 3


# What the kernel returns for one example: the fields of ExampleSolution (support.py),
# with the solver status in place of ``converged``. A collections.namedtuple, which
# numba builds in compiled code and hands back to Python as this class.
KernelResult = collections.namedtuple(
    "KernelResult",
    "u v m_indices m_values n_indices n_values codes weights weight_jacobian objective gap map_calls status",
)


def start_of(result: KernelResult) -> tuple:
    """The start tuple of a warm start from ``result``'s support and weights:
    ``(m_indices, m_values, n_indices, n_values, codes (k, code_size), weights)``, the
    fields of :data:`KernelResult` (rows padded with zero values)."""
    codes = result.codes.reshape((result.weights.size, -1))
    return (result.m_indices, result.m_values, result.n_indices, result.n_values, codes, result.weights)


def _no_start(code_size: int) -> tuple:
    """The start tuple (:func:`start_of`) with no structures: the solve starts from the MAP structure."""
    return (
        np.zeros((0, 1), np.int64),
        np.zeros((0, 1)),
        np.zeros((0, 1), np.int64),
        np.zeros((0, 1)),
        np.zeros((0, code_size), np.int64),
        np.zeros(0),
    )


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
    products, coefficients = work[PRODUCTS], work[COLUMN]
    row_dots(Mi, Mv, Mw, slots, k, r, products)
    for i in range(k + 1):
        coefficients[i] = 0.0
    accumulate(kinv, k + 1, np.int64(1), products, coefficients)
    for i in range(k):
        row = slots[i]
        for j in range(Mw[row]):
            r[Mi[row, j]] -= coefficients[i + 1] * Mv[row, j]
    length = np.sqrt(dot(r, r))
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
    return largest_score(Mi, Mv, Mw, slots, theta, k, u, work[PRODUCTS])


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
def _store_start(Mi, Mv, Mw, Ni, Nv, Nw, Cb, Ch, y, theta, start, order, eta_u, eta_v):
    """Store a start tuple's (:func:`start_of`) structures in the first rows (unary indices taken to the
    kernel's ``order``; the rows' zero padding left out), their weights in ``y`` and their
    scores in ``theta``; returns the buffers, widened if needed."""
    start_mi, start_mv, start_ni, start_nv, start_codes, start_y = start
    position = np.arange(eta_u.shape[0])
    if order.shape[0] > 0:
        for j in range(order.shape[0]):
            position[order[j]] = j
    m_indices, m_values = np.zeros(start_mi.shape[1], np.int64), np.zeros(start_mi.shape[1])
    n_indices, n_values = np.zeros(start_ni.shape[1], np.int64), np.zeros(start_ni.shape[1])
    for i in range(start_y.shape[0]):
        count_u = np.int64(0)  # not a literal 0: store_row and sparse_dot keep the kernel's signatures
        for j in range(start_mi.shape[1]):
            if start_mv[i, j] != 0.0:
                m_indices[count_u], m_values[count_u] = position[start_mi[i, j]], start_mv[i, j]
                count_u += 1
        count_v = np.int64(0)
        for j in range(start_ni.shape[1]):
            if start_nv[i, j] != 0.0:
                n_indices[count_v], n_values[count_v] = start_ni[i, j], start_nv[i, j]
                count_v += 1
        Mi, Mv = store_row(Mi, Mv, Mw, i, m_indices, m_values, count_u)
        Ni, Nv = store_row(Ni, Nv, Nw, i, n_indices, n_values, count_v)
        copy_into(start_codes[i : i + 1], Cb[i:])  # Cb[i] = start_codes[i]
        Ch[i] = hash_code(start_codes[i])
        y[i] = start_y[i]
        theta[i] = sparse_dot(m_indices, m_values, count_u, eta_u) + sparse_dot(
            n_indices, n_values, count_v, eta_v
        )
    return Mi, Mv, Ni, Nv


@nb.njit(cache=True, nogil=True)
def _solve_one(
    oracle,
    eta_u,
    eta_v,
    length,
    params,
    code_size,
    nonzeros,
    order,
    one_hot_codes,
    tol,
    max_iter,
    exact,
    start,
):
    """Active-set SparseMAP of one example, MAP calls to the oracle at address ``oracle``
    included, in the oracle's ``order`` of the unary part (empty: the flat order) until the end.

    ``start`` is a start tuple (:func:`start_of`): with no rows, the solve starts from the MAP structure;
    otherwise from those structures and weights (a warm start, as
    :meth:`~keras_structured.engine.active_set.ActiveSetSolver.restart`), whose relaxed QP
    at the new scores is solved first.

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
    start_mi, start_mv, start_ni, start_nv, start_codes, start_y = start
    while cap <= start_y.shape[0]:
        cap *= 2
    Mi, Mv, Mw = np.zeros((cap, 1), np.int64), np.zeros((cap, 1)), np.zeros(cap, np.int64)
    Ni, Nv, Nw = np.zeros((cap, 1), np.int64), np.zeros((cap, 1)), np.zeros(cap, np.int64)
    Cb, Ch, slots = np.zeros((cap, code_size), np.int64), np.zeros(cap, np.int64), np.arange(cap)
    y, theta, kinv = np.zeros(cap), np.zeros(cap), np.zeros((cap + 1, cap + 1))
    work = np.zeros((WORK_ROWS, cap + 1))  # named rows: BORDER, W, SOLUTION, ...
    m_indices, m_values = np.zeros(nonzeros[0], np.int64), np.zeros(nonzeros[0])
    n_indices, n_values = np.zeros(nonzeros[1], np.int64), np.zeros(nonzeros[1])
    code, m, scratch = np.zeros(code_size, np.int64), np.zeros(du), np.zeros(du)
    u, iterate = np.zeros(du), eta_u.copy()
    k, calls = np.int64(start_y.shape[0]), 0
    if k == 0:
        count_u, count_v = map_oracle(
            iterate, eta_v, length, params, m_indices, m_values, n_indices, n_values, code
        )
        k, calls = np.int64(1), 1
        Mi, Mv = store_row(Mi, Mv, Mw, slots[0], m_indices, m_values, count_u)
        Ni, Nv = store_row(Ni, Nv, Nw, slots[0], n_indices, n_values, count_v)
        copy_into(code.reshape((1, -1)), Cb)  # Cb[0] = code
        Ch[0] = hash_code(code)
        y[0] = 1.0
        theta[0] = sparse_dot(m_indices, m_values, count_u, eta_u) + sparse_dot(
            n_indices, n_values, count_v, eta_v
        )
        kinv[0, 0], kinv[0, 1], kinv[1, 0] = -dot(m_values[:count_u], m_values[:count_u]), 1.0, 1.0
        kkt_solution(kinv, k, theta, work[SOLUTION])
        combine(Mi, Mv, Mw, slots, y, k, u)
    else:
        Mi, Mv, Ni, Nv = _store_start(Mi, Mv, Mw, Ni, Nv, Nw, Cb, Ch, y, theta, start, order, eta_u, eta_v)
        refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[SOLUTION])
        k = solve_relaxed(Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, np.bool_(True), 0.0)
    gap, scale, status, stalls = np.inf, 1.0, RUNNING, 0
    finish_tol = min(tol, ROUNDING_GAP) if exact else tol
    # Whether (tau, y) has passed the KKT residual check, made every _CHECK_EVERY
    # iterations and always before convergence is declared.
    checked = True
    # Whether the gap came within NEAR_GAP (or tol) once: the solver then works to rounding.
    near = False
    # Whether the gap at the point, from the last unperturbed MAP call, is within tol.
    within = False
    # The face certificate: the sign of the perturbation r of the scores (0: none), and
    # how many times r was shrunk.
    sign, shrinks, r, reference = 0, 0, np.zeros(du), 0.0
    # The hash of the structure that entered last (if one has), and how many times in a
    # row it entered again after leaving at once.
    entered, has_entered, reentries = np.int64(0), False, 0
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
        linear = dot(y[:k], theta[:k])
        score = sparse_dot(m_indices, m_values, count_u, eta_u)
        score += sparse_dot(n_indices, n_values, count_v, eta_v)
        if sign == 0:
            # The Wolfe gap of the point: only from the MAP structure at the point's own
            # scores (one at the certificate's perturbed scores bounds it from below), and
            # for this point only. Taken as reached for good once within tol (as it was), a
            # later point off the polytope (weights summing to 1 - 1.1e-6) with a gap of
            # 2.7e-4, 28 times tol, stopped as converged when its MAP structure was active.
            gap = max(score - sparse_dot(m_indices, m_values, count_u, u) - linear + u_squared, 0.0)
            scale = max(1.0, abs(linear - 0.5 * u_squared))
            # (Below ROUNDING_GAP, the gaps of active structures are rounding error.)
            within = gap <= max(tol, ROUNDING_GAP) * scale
            status = TOL_REACHED if within else RUNNING
            near = near or gap <= max(tol, NEAR_GAP) * scale
        slack = WEIGHT_SLACK if exact and near else 0.0
        code_hash = hash_code(code)
        active = find(Cb, Ch, slots, k, code, code_hash) >= 0
        # The structure that entered last, which left at once.
        returned = not active and has_entered and code_hash == entered
        tied = False
        if not active:
            if k + 1 >= slots.shape[0]:
                cap = 2 * slots.shape[0]
                Mi, Mv, Mw = grow_2d(Mi, cap), grow_2d(Mv, cap), grow_1d(Mw, cap)
                Ni, Nv, Nw = grow_2d(Ni, cap), grow_2d(Nv, cap), grow_1d(Nw, cap)
                Cb, Ch = grow_2d(Cb, cap), grow_1d(Ch, cap)
                y, theta = grow_1d(y, cap), grow_1d(theta, cap)
                slots = np.concatenate((slots, np.arange(slots.shape[0], cap)))
                grown = np.zeros((cap + 1, cap + 1))
                copy_into(kinv, grown)
                kinv, solution, work = grown, work[SOLUTION], np.zeros((WORK_ROWS, cap + 1))
                for a in range(solution.shape[0]):
                    work[SOLUTION, a] = solution[a]
            if returned and not within:
                # It left at once in spite of a gap above tol: the bordered solution of a
                # drifted K^{-1} gave it a negative weight. It enters again, measured with
                # a rebuilt one (unrebuilt, a sequence of 20 positions with tiny scores
                # took it in and out until max_iter).
                refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[SOLUTION])
            m_squared, border = dot(m_values[:count_u], m_values[:count_u]), work[BORDER]
            border[0] = 1.0
            if one_hot_codes:
                shared_parts(Cb, slots, k, code, border[1:])
            else:
                for j in range(count_u):
                    m[m_indices[j]] = m_values[j]
                row_dots(Mi, Mv, Mw, slots, k, m, border[1:])
                for j in range(count_u):
                    m[m_indices[j]] = 0.0
            schur = schur_complement(kinv, k, m_squared, border, work[W])
            if schur <= (VERIFY_TOL if slack > 0.0 else AFFINE_TOL) * max(1.0, m_squared):
                if slack > 0.0 and inverse_drift(Mi, Mv, Mw, slots, kinv, k, scratch, work) > _REFINE_DRIFT:
                    # The measurement refines with K^{-1}: rebuild it first if it drifted.
                    refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[SOLUTION])
                    schur = schur_complement(kinv, k, m_squared, border, work[W])
                schur = hull_distance(
                    Mi, Mv, Mw, slots, kinv, k, m_indices, m_values, count_u, work[W], m, work
                )
            # In the active set's affine hull: it adds nothing to the Jacobian.
            tied = exact and within and schur <= AFFINE_TOL * max(1.0, m_squared)
            # Entered last time and left at once: numerically in the hull (the KKT solve
            # cannot tell its weight from zero), and entering it again would cycle.
            tied = tied or (exact and within and returned)
        if sign != 0:  # a MAP call of the face certificate
            if active or tied:
                if sign > 0:
                    sign = -1
                    continue
                status = CONVERGED
                break
            face_gap = score - sparse_dot(m_indices, m_values, count_u, u) - reference
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
        elif gap <= finish_tol * scale or (within and (active or tied)):
            if exact:
                # Decide on gaps that are exact to rounding: refine the point and, unless it
                # was exact to rounding already, ask the oracle again at the refined point;
                # then the face certificate. Only from a point exact to rounding: started
                # from any refined one (as it was), it certified points whose weights,
                # refined with a K^{-1} of cond(K) = 1e15, still summed to 1 + 1.3e-7.
                size = k
                residual = refine_exactly(Mi, Mv, Mw, slots, theta, kinv, k, u, scratch, work)[0]
                # solve_relaxed refines twice more before it may drop a structure: needed
                # (without those steps, one of 32 trees of 80 words cycled until max_iter).
                k = solve_relaxed(
                    Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, np.bool_(False), slack
                )
                if residual <= ROUNDING_RESIDUAL and k == size:
                    reference = _start_certificate(
                        Mi, Mv, Mw, slots, kinv, theta, k, u, calls, scale, r, work
                    )
                    if np.isnan(reference):
                        status = CONVERGED
                        break
                    sign, shrinks = 1, 0
                continue
            if checked or kkt_residual(Mi, Mv, Mw, slots, u, work[SOLUTION], theta, k, work[PRODUCTS]) == 0.0:
                status = CONVERGED
                break
            # The unchecked point is off: rebuild the inverse and solve again.
            refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[SOLUTION])
            k = solve_relaxed(Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, np.bool_(True), slack)
            checked = True
            continue
        # Active, or back again after it left at once with a rebuilt K^{-1}: the point cannot
        # be improved to tol. Rebuilt once more, then given up on (STALLED): on supports of
        # cond(K) = 1e15, where the weights are determined to 1e-8 only, two trees of 50
        # words of 512 at tol=1e-11 took the same structure in and out until max_iter (a
        # gap of 2.7e-9, 2.9 times tol).
        if active or (returned and reentries > 0):
            stalls += 1
            if stalls > 1:
                status = STALLED
                break
            refactor(Mi, Mv, Mw, slots, theta, kinv, k, scratch, work[SOLUTION])
        else:
            k = enter(
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
            Mi, Mv = store_row(Mi, Mv, Mw, row, m_indices, m_values, count_u)
            Ni, Nv = store_row(Ni, Nv, Nw, row, n_indices, n_values, count_v)
            copy_into(code.reshape((1, -1)), Cb[row:])  # Cb[row] = code
            Ch[row] = code_hash
            reentries = reentries + 1 if returned else 0
            entered, has_entered = code_hash, True
        checked = iteration % _CHECK_EVERY == _CHECK_EVERY - 1
        k = solve_relaxed(Mi, Mv, Mw, slots, y, theta, kinv, k, scratch, work, u, checked, slack)
        if face_entry == k:  # nothing left: certify again at the same point
            reference = _start_certificate(Mi, Mv, Mw, slots, kinv, theta, k, u, calls, scale, r, work)
            if np.isnan(reference):
                status = CONVERGED
                break
            sign, shrinks = 1, 0
        face_entry = 0
    if (
        exact
        and status == CONVERGED
        and inverse_drift(Mi, Mv, Mw, slots, kinv, k, scratch, work) > _DRIFT_TOL
    ):
        # The Jacobian's K^{-1} from scratch: the rank-one updates drift (up to 1e-4
        # relative on trees of 50 words), while an LU inverse of the affinely independent
        # support errs by cond(K) times rounding.
        rebuild_inverse(Mi, Mv, Mw, slots, kinv, k, scratch)
    v = np.zeros(dv)
    combine(Ni, Nv, Nw, slots, y, k, v)
    objective = dot(eta_u, u) + dot(eta_v, v) - 0.5 * dot(u, u)
    codes = np.zeros((k, code_size), np.int64)
    for i in range(k):
        copy_into(Cb[slots[i] : slots[i] + 1], codes[i:])  # codes[i] = Cb[slots[i]]
    m_rows, m_row_values = active_rows(Mi, Mv, Mw, slots, k)
    n_rows, n_row_values = active_rows(Ni, Nv, Nw, slots, k)
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
    compiled: CompiledOracle,
    flat_u,
    flat_v,
    lengths,
    tol: float,
    max_iter: int,
    exact: bool = True,
    starts: list | None = None,
):
    """Solve every example with the compiled kernel (``exact``: to termination, see
    :func:`_solve_one`).

    ``starts``: None, or per example None or a :data:`KernelResult` of the same structure
    and shapes to warm-start from (its support and weights; see :func:`_solve_one`).

    Returns a list of per-example :data:`KernelResult`: the fields of
    :class:`~keras_structured.engine.support.ExampleSolution`, with the solver
    ``status`` (``CONVERGED``, ``STALLED``, ``TOL_REACHED`` or ``RUNNING``) last.
    """
    with single_threaded_blas():
        return _solve_all(compiled, flat_u, flat_v, lengths, tol, max_iter, exact, starts)


def _solve_all(
    compiled: CompiledOracle, flat_u, flat_v, lengths, tol: float, max_iter: int, exact: bool, starts
):
    batch = flat_u.shape[0]
    # The oracle's signature: C-contiguous and writable rows.
    flat_u, flat_v = (np.require(flat, np.float64, ("C", "W")) for flat in (flat_u, flat_v))
    sizes, params, code_size = sizes_of(lengths, batch), compiled.params, math.prod(compiled.code_shape)
    nonzeros, order = compiled.nonzero_bounds, compiled.kernel_order
    oracle = address(compiled.function, ORACLE)
    no_start = _no_start(code_size)
    starts = [no_start if start is None else start_of(start) for start in starts or [None] * batch]

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
            starts[b],
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
