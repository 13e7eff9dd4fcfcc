"""The numpy SparseMAP engine against brute-force enumeration and an independent QP solver."""

import dataclasses
import itertools
import os
import time
import warnings

import numpy as np
import pytest

from keras_structured.engine import (
    METHODS,
    DependencyTreeStructure,
    MatchingStructure,
    SequenceStructure,
    SimplexStructure,
    SparseMAPConvergenceWarning,
    solve,
    viterbi,
)
from keras_structured.engine.compiled_active_set import CONVERGED, solve_compiled
from tests.brute_force import EnumeratedStructure, sequence_vertices, solve_qp

SIZES = [(n, k) for n in range(1, 5) for k in range(1, 4)]


def random_sequence(rng, n, num_labels, scale=1.0, batch=1):
    return (
        rng.normal(size=(batch, n, num_labels)) * scale,
        rng.normal(size=(batch, max(n - 1, 0), num_labels, num_labels)) * scale,
    )


@pytest.mark.parametrize("n,num_labels", SIZES)
def test_viterbi_matches_enumeration(n, num_labels):
    rng = np.random.default_rng(n * 10 + num_labels)
    codes, M, N = sequence_vertices(n, num_labels)
    for tied in (False, True):
        unary, pairwise = random_sequence(rng, n, num_labels, batch=8)
        if tied:
            unary, pairwise = np.round(unary), np.round(pairwise)
        best = viterbi(unary, pairwise)
        scores = unary.reshape(8, -1) @ M.T + pairwise.reshape(8, -1) @ N.T
        m, pair = SequenceStructure().indicators(best, (n, num_labels), pairwise.shape[1:])
        found = (m.reshape(8, -1) * unary.reshape(8, -1)).sum(1) + (pair * pairwise).reshape(8, -1).sum(1)
        np.testing.assert_allclose(found, scores.max(axis=1), atol=1e-12)


def test_viterbi_breaks_ties_deterministically():
    assert viterbi(np.zeros((1, 3, 2)), np.zeros((1, 2, 2, 2))).tolist() == [[0, 0, 0]]


@pytest.mark.parametrize("scale", [0.1, 0.3, 1.0, 3.0])
@pytest.mark.parametrize("n,num_labels", [(2, 2), (3, 2), (2, 3), (3, 3), (4, 2), (4, 3)])
def test_active_set_matches_independent_qp(n, num_labels, scale):
    rng = np.random.default_rng(int(scale * 100) + 7 * n + num_labels)
    _, M, N = sequence_vertices(n, num_labels)
    unary, pairwise = random_sequence(rng, n, num_labels, scale, batch=3)
    solution = solve(SequenceStructure(), unary, pairwise, tol=1e-12)
    assert solution.converged.all()
    for b in range(3):
        u_ref, objective_ref = solve_qp(M, N, unary[b].ravel(), pairwise[b].ravel())
        np.testing.assert_allclose(solution.u[b].ravel(), u_ref, atol=1e-6)
        assert abs(solution.objective[b] - objective_ref) <= 1e-8
    if scale <= 0.3:
        assert max(len(w) for w in solution.weights) > 1


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_reaches_the_same_point(method):
    rng = np.random.default_rng(3)
    unary, pairwise = random_sequence(rng, 3, 3, 0.5, batch=4)
    reference = solve(SequenceStructure(), unary, pairwise, tol=1e-12)
    tight = method in ("active_set", "away_frank_wolfe", "pairwise_frank_wolfe")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseMAPConvergenceWarning)
        solution = solve(SequenceStructure(), unary, pairwise, method=method, tol=1e-10, max_iter=20000)
    if tight:
        assert solution.converged.all()
    # Vanilla Frank-Wolfe converges sublinearly: it gets close, not exact.
    np.testing.assert_allclose(solution.objective, reference.objective, atol=1e-9 if tight else 1e-5)
    np.testing.assert_allclose(solution.u, reference.u, atol=1e-4 if tight else 3e-2)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_solution_is_a_convex_combination_of_its_structures(method):
    rng = np.random.default_rng(4)
    unary, pairwise = random_sequence(rng, 5, 3, 0.3, batch=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseMAPConvergenceWarning)
        solution = solve(SequenceStructure(), unary, pairwise, method=method, max_iter=300)
    for b in range(4):
        weights, codes = solution.weights[b], solution.structures[b]
        assert np.all(weights >= 0) and abs(weights.sum() - 1) < 1e-12
        assert len({c.tobytes() for c in codes}) == len(codes)
        m, pair = SequenceStructure().indicators(codes, (5, 3), (4, 3, 3))
        np.testing.assert_allclose(np.tensordot(weights, m, 1), solution.u[b], atol=1e-12)
        np.testing.assert_allclose(np.tensordot(weights, pair, 1), solution.v[b], atol=1e-12)


@pytest.mark.parametrize("num_labels", [1, 2, 5, 20])
def test_simplex_structure_is_sparsemax(num_labels):
    rng = np.random.default_rng(num_labels)
    scores = rng.normal(size=(16, num_labels)) * rng.choice([0.01, 1.0, 100.0], size=(16, 1))
    ordered = -np.sort(-scores, axis=1)
    cumulative = np.cumsum(ordered, axis=1)
    ranks = np.arange(1, num_labels + 1)
    size = (1 + ranks * ordered > cumulative).sum(axis=1)
    tau = (cumulative[np.arange(16), size - 1] - 1) / size
    expected = np.maximum(scores - tau[:, None], 0)
    solution = solve(SimplexStructure(), scores, tol=1e-14)
    np.testing.assert_allclose(solution.u, expected, atol=1e-12)


def test_unary_shift_invariance():
    rng = np.random.default_rng(5)
    unary, pairwise = random_sequence(rng, 6, 4, 0.5, batch=3)
    shifted = unary + rng.normal(size=(3, 6, 1)) * 10
    base = solve(SequenceStructure(), unary, pairwise, tol=1e-12)
    moved = solve(SequenceStructure(), shifted, pairwise, tol=1e-12)
    np.testing.assert_allclose(moved.u, base.u, atol=1e-9)


def test_dominant_label_is_in_every_active_structure():
    rng = np.random.default_rng(6)
    unary, pairwise = random_sequence(rng, 6, 4, 0.3, batch=3)
    unary[:, 2, 1] += 100.0
    solution = solve(SequenceStructure(), unary, pairwise)
    for codes in solution.structures:
        assert np.all(codes[:, 2] == 1)
    np.testing.assert_allclose(solution.u[:, 2, 1], 1.0)


def test_affinely_dependent_structures_are_handled():
    # Vertices 2 and 3 lie in the affine hull of 0 and 1 in u-space, with different v.
    vertices_m = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.5, 0.5], [0.25, 0.75]])
    vertices_n = np.array([[0.0], [0.0], [1.0], [0.0], [0.5]])
    structure = EnumeratedStructure(vertices_m, vertices_n)
    rng = np.random.default_rng(7)
    eta_u, eta_v = rng.normal(size=(20, 2)), rng.normal(size=(20, 1))
    solution = solve(structure, eta_u, eta_v, tol=1e-12)
    assert solution.converged.all()
    for b in range(20):
        u_ref, objective_ref = solve_qp(vertices_m, vertices_n, eta_u[b], eta_v[b])
        np.testing.assert_allclose(solution.u[b], u_ref, atol=1e-6)
        assert abs(solution.objective[b] - objective_ref) <= 1e-8


def test_singular_kkt_systems_in_sequences():
    # Tiny scores make many affinely dependent label sequences optimal together.
    rng = np.random.default_rng(8)
    _, M, N = sequence_vertices(3, 3)
    unary, pairwise = random_sequence(rng, 3, 3, 0.01, batch=10)
    solution = solve(SequenceStructure(), unary, pairwise, tol=1e-12, max_iter=500)
    assert solution.converged.all()
    for b in range(10):
        u_ref, objective_ref = solve_qp(M, N, unary[b].ravel(), pairwise[b].ravel())
        np.testing.assert_allclose(solution.u[b].ravel(), u_ref, atol=1e-6)
        assert abs(solution.objective[b] - objective_ref) <= 1e-8


def test_max_iter_returns_flagged_feasible_point_and_warns():
    rng = np.random.default_rng(9)
    unary, pairwise = random_sequence(rng, 8, 5, 0.1, batch=2)
    with pytest.warns(SparseMAPConvergenceWarning, match="max_iter=2"):
        solution = solve(SequenceStructure(), unary, pairwise, max_iter=2)
    assert not solution.converged.any()
    assert np.all(solution.gap > 0)
    for b in range(2):
        assert np.all(solution.weights[b] >= 0) and abs(solution.weights[b].sum() - 1) < 1e-12
    np.testing.assert_allclose(solution.u.sum(-1), 1.0)


@pytest.mark.parametrize("name", ["eta_u", "eta_v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])  # -inf marks forbidden parts
def test_non_finite_scores_raise(name, bad):
    unary, pairwise = np.zeros((2, 3, 2)), np.zeros((2, 2, 2, 2))
    (unary if name == "eta_u" else pairwise)[1, 0, 0] = bad
    with pytest.raises(ValueError, match=f"Received: {name}"):
        solve(SequenceStructure(), unary, pairwise)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="Received: method='newton'"):
        solve(SimplexStructure(), np.zeros((1, 3)), method="newton")
    with pytest.raises(ValueError, match="Received: eta_v per-example shape"):
        solve(SequenceStructure(), np.zeros((1, 3, 2)), np.zeros((1, 3, 2, 2)))
    with pytest.raises(ValueError, match="same batch size"):
        solve(SequenceStructure(), np.zeros((1, 3, 2)), np.zeros((2, 2, 2, 2)))


def test_empty_sequence():
    solution = solve(SequenceStructure(), np.zeros((2, 0, 3)), np.zeros((2, 0, 3, 3)))
    assert solution.u.shape == (2, 0, 3) and solution.converged.all()


def test_jacobian_matches_finite_differences():
    rng = np.random.default_rng(10)
    unary, pairwise = random_sequence(rng, 4, 3, 0.5, batch=2)
    solution = solve(SequenceStructure(), unary, pairwise, tol=1e-14)
    direction_u, direction_v = rng.normal(size=unary.shape), rng.normal(size=pairwise.shape)
    step = 1e-6
    plus = solve(SequenceStructure(), unary + step * direction_u, pairwise + step * direction_v, tol=1e-14)
    minus = solve(SequenceStructure(), unary - step * direction_u, pairwise - step * direction_v, tol=1e-14)
    j_u, j_v = solution.jacobian_product(direction_u, direction_v)
    np.testing.assert_allclose(j_u, (plus.u - minus.u) / (2 * step), atol=1e-6)
    np.testing.assert_allclose(j_v, (plus.v - minus.v) / (2 * step), atol=1e-6)


def test_jacobian_is_symmetric():
    rng = np.random.default_rng(11)
    unary, pairwise = random_sequence(rng, 3, 3, 0.3, batch=1)
    solution = solve(SequenceStructure(), unary, pairwise, tol=1e-14)
    du, dv = unary.size, pairwise.size
    columns = []
    for i in range(du + dv):
        e = np.zeros(du + dv)
        e[i] = 1.0
        j_u, j_v = solution.jacobian_product(e[:du].reshape(unary.shape), e[du:].reshape(pairwise.shape))
        columns.append(np.concatenate([j_u[0].ravel(), j_v[0].ravel()]))
    jacobian = np.array(columns)
    np.testing.assert_allclose(jacobian, jacobian.T, atol=1e-12)


def test_structures_match_the_polytope_vertices():
    for n, num_labels in itertools.product(range(1, 4), range(1, 4)):
        codes, M, N = sequence_vertices(n, num_labels)
        assert len({row.tobytes() for row in np.hstack([M, N])}) == num_labels**n
        np.testing.assert_allclose(M.reshape(len(codes), n, num_labels).sum(-1), 1.0)


@pytest.mark.parametrize("method", ["active_set", "pairwise_frank_wolfe"])
def test_padded_batch_equals_unpadded_examples(method):
    rng = np.random.default_rng(12)
    lengths = np.array([5, 0, 1, 3, 2])
    unary, pairwise = random_sequence(rng, 5, 3, 0.4, batch=5)
    padded = solve(
        SequenceStructure(), unary, pairwise, lengths=lengths, method=method, tol=1e-12, max_iter=5000
    )
    for b, length in enumerate(lengths):
        single = solve(
            SequenceStructure(),
            unary[b : b + 1, :length],
            pairwise[b : b + 1, : max(length - 1, 0)],
            method=method,
            tol=1e-12,
            max_iter=5000,
        )
        np.testing.assert_allclose(padded.u[b, :length], single.u[0], atol=1e-9)
        np.testing.assert_allclose(padded.v[b, : max(length - 1, 0)], single.v[0], atol=1e-9)
        assert np.all(padded.u[b, length:] == 0) and np.all(padded.v[b, max(length - 1, 0) :] == 0)
    direction = rng.normal(size=unary.shape)
    j_u, j_v = padded.jacobian_product(direction, np.zeros_like(pairwise))
    for b, length in enumerate(lengths):
        assert np.all(j_u[b, length:] == 0)


def test_viterbi_with_lengths_matches_truncated_viterbi():
    rng = np.random.default_rng(13)
    unary, pairwise = random_sequence(rng, 6, 4, batch=7)
    lengths = np.array([6, 5, 4, 3, 2, 1, 0])
    labels = viterbi(unary, pairwise, lengths)
    for b, length in enumerate(lengths):
        expected = viterbi(unary[b : b + 1, :length], pairwise[b : b + 1, : max(length - 1, 0)])
        assert labels[b, :length].tolist() == expected[0].tolist()
        assert np.all(labels[b, length:] == -1)


def test_bad_lengths_raise():
    with pytest.raises(ValueError, match="Received: lengths="):
        solve(SequenceStructure(), np.zeros((2, 3, 2)), np.zeros((2, 2, 2, 2)), lengths=np.array([4, 1]))
    with pytest.raises(ValueError, match="Received: lengths.shape"):
        solve(SequenceStructure(), np.zeros((2, 3, 2)), np.zeros((2, 2, 2, 2)), lengths=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="does not take lengths"):
        solve(SimplexStructure(), np.zeros((2, 3)), lengths=np.array([1, 2]))


def test_forbidden_parts_never_appear():
    rng = np.random.default_rng(14)
    unary, pairwise = random_sequence(rng, 5, 3, 0.2, batch=6)
    unary[:, 1, 0] = -np.inf
    pairwise[:, :, 2, 1] = -np.inf
    solution = solve(SequenceStructure(), unary, pairwise, tol=1e-12)
    assert solution.converged.all()
    assert np.all(solution.u[:, 1, 0] == 0) and np.all(solution.v[:, :, 2, 1] == 0)
    for codes in solution.structures:
        assert np.all(codes[:, 1] != 0)
        assert not np.any((codes[:, :-1] == 2) & (codes[:, 1:] == 1))
    # Same answer as the QP over the allowed structures only.
    _, M, N = sequence_vertices(5, 3)
    allowed = (M @ np.isneginf(unary[0]).ravel() == 0) & (N @ np.isneginf(pairwise[0]).ravel() == 0)
    scores_u = np.where(np.isneginf(unary[0]), 0.0, unary[0]).ravel()
    scores_v = np.where(np.isneginf(pairwise[0]), 0.0, pairwise[0]).ravel()
    u_ref, _ = solve_qp(M[allowed], N[allowed], scores_u, scores_v)
    np.testing.assert_allclose(solution.u[0].ravel(), u_ref, atol=1e-6)


def test_all_structures_forbidden_raises():
    unary = np.zeros((1, 3, 2))
    unary[0, 1, :] = -np.inf
    with pytest.raises(ValueError, match="forbidden"):
        solve(SequenceStructure(), unary, np.zeros((1, 2, 2, 2)))


@pytest.mark.parametrize("scale", [0.01, 0.3, 3.0])
def test_compiled_kernel_matches_python_reference(scale):
    rng = np.random.default_rng(15)
    unary, pairwise = random_sequence(rng, 7, 4, scale, batch=6)
    unary[0, 2, 1] = -np.inf
    lengths = np.array([7, 6, 3, 1, 0, 7])
    fast = solve(SequenceStructure(), unary, pairwise, lengths=lengths, tol=1e-12)
    slow = solve(SequenceStructure(), unary, pairwise, lengths=lengths, tol=1e-12, compiled=False)
    np.testing.assert_allclose(fast.u, slow.u, atol=1e-9)
    np.testing.assert_allclose(fast.v, slow.v, atol=1e-9)
    np.testing.assert_allclose(fast.objective, slow.objective, atol=1e-10)
    assert fast.converged.all() and slow.converged.all()
    direction = rng.normal(size=unary.shape)
    np.testing.assert_allclose(
        fast.jacobian_product(direction)[0], slow.jacobian_product(direction)[0], atol=1e-8
    )
    scores = rng.normal(size=(5, 9)) * scale
    np.testing.assert_allclose(
        solve(SimplexStructure(), scores).u, solve(SimplexStructure(), scores, compiled=False).u, atol=1e-12
    )


@pytest.mark.parametrize("compiled", [False, True])
def test_large_degenerate_supports_converge_monotonically(compiled):
    # Tiny scores: over a hundred nearly affinely dependent active structures. The
    # incremental KKT inverse must be rebuilt when it drifts, or the solver stalls.
    rng = np.random.default_rng(0)
    unary = 0.01 * rng.standard_normal((20, 20, 10))[2:3]
    pairwise = 0.01 * rng.standard_normal((20, 19, 10, 10))[2:3]
    solution = solve(SequenceStructure(), unary, pairwise, tol=1e-6, max_iter=2000, compiled=compiled)
    assert solution.converged.all()
    np.testing.assert_allclose(solution.objective, -0.734026862, atol=1e-8)
    if not compiled:
        history = solve(SequenceStructure(), unary, pairwise, max_iter=2000, record_history=True).history[0]
        assert np.diff(history[:, 0]).min() > -1e-9


def test_compiled_solver_works_in_a_forked_child():
    # The worker threads are per process: a child forked after the parent used them
    # must start its own instead of waiting on threads it did not inherit.
    scores = np.random.default_rng(0).normal(size=(8, 6, 6))
    expected = solve(DependencyTreeStructure(), scores).u
    pid = os.fork()
    if pid == 0:
        again = solve(DependencyTreeStructure(), scores).u
        os._exit(0 if np.allclose(again, expected, atol=1e-12) else 1)
    deadline = time.monotonic() + 60
    while (finished := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if finished[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung in solve()")
    assert os.waitstatus_to_exitcode(finished[1]) == 0


@pytest.mark.parametrize(
    "structure, u_shape, v_shape, lengths",
    [
        (DependencyTreeStructure(), (6, 6), (0,), [5, 3, 0, 4]),
        (DependencyTreeStructure(single_root=True, projective=True), (6, 6), (0,), None),
        (SequenceStructure(), (5, 3), (4, 3, 3), [5, 2, 0, 3]),
        (MatchingStructure(), (4, 5), (0,), None),
        (MatchingStructure(unmatched_score=0.0), (4, 5), (0,), [[4, 5], [2, 3], [0, 5], [3, 1]]),
        (SimplexStructure(), (6,), (0,), None),
    ],
)
def test_one_hot_codes_count_the_parts_two_structures_share(structure, u_shape, v_shape, lengths):
    """Structures that declare ``one_hot_codes`` let the compiled kernel compute <m_a, m_b>
    from their codes: it must equal the product of their indicator vectors."""
    assert structure.compiled_oracle(u_shape, v_shape).one_hot_codes
    rng = np.random.default_rng(0)
    lengths = None if lengths is None else np.array(lengths)
    codes = np.concatenate(
        [
            structure.map(rng.normal(size=(4,) + u_shape), rng.normal(size=(4,) + v_shape), lengths)
            for _ in range(6)
        ]
    )
    all_lengths = None if lengths is None else np.concatenate([lengths] * 6)
    m, _ = structure.indicators(codes, u_shape, v_shape, all_lengths)
    m, codes = m.reshape(len(codes), -1), codes.reshape(len(codes), -1)
    for a, b in itertools.product(range(len(codes)), repeat=2):
        if a % 4 != b % 4:  # different lengths: different problems
            continue
        shared = np.sum((codes[a] == codes[b]) & (codes[a] >= 0))
        assert m[a] @ m[b] == shared


@pytest.mark.parametrize(
    "structure, shape", [(DependencyTreeStructure(), (7, 7)), (MatchingStructure(), (5, 6))]
)
def test_compiled_kernel_without_one_hot_codes_takes_the_same_path(structure, shape):
    """The kernel's general path (shared parts from the sparse rows, for compiled oracles
    whose codes are not one-hot) must give what the one-hot shortcut gives."""
    rng = np.random.default_rng(3)
    eta_u = rng.normal(size=(6,) + shape)
    flat_u, flat_v = eta_u.reshape(6, -1), np.zeros((6, 0))
    one_hot = structure.compiled_oracle(shape, (0,))
    general = dataclasses.replace(one_hot, one_hot_codes=False)
    for fast, slow in zip(
        solve_compiled(one_hot, flat_u, flat_v, None, 1e-8, 100),
        solve_compiled(general, flat_u, flat_v, None, 1e-8, 100),
        strict=True,
    ):
        np.testing.assert_allclose(fast[0], slow[0], atol=1e-12)  # u
        np.testing.assert_array_equal(fast[6], slow[6])  # the active structures
        assert fast[-1] == slow[-1] == CONVERGED
