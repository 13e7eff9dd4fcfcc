"""Dependency-tree structure: oracles against enumeration, SparseMAP against an independent QP."""

import functools
import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from keras_structured.engine import solve
from keras_structured.engine.arborescence import max_arborescence, max_arborescence_by_dependent
from keras_structured.engine.dependency_tree import DependencyTreeStructure, best_trees
from keras_structured.engine.eisner import max_projective_tree
from keras_structured.engine.structure import structure_from_config, structure_to_config
from tests.brute_force import solve_qp

VARIANTS = list(itertools.product([False, True], [False, True]))  # (single_root, projective)
VARIANT_IDS = ["any", "single_root", "projective", "projective_single_root"]


def _ancestors(heads: np.ndarray) -> np.ndarray:
    """``(k, n + 1, n + 1)``: ``[i, a, x]`` iff ``a`` is a proper ancestor of ``x`` in head vector ``i``."""
    count, size = heads.shape
    parents = np.where(np.arange(size) == 0, 0, heads)
    ancestors = np.zeros((count, size, size), dtype=bool)
    current = np.tile(np.arange(size), (count, 1))
    for _ in range(size - 1):
        current = np.take_along_axis(parents, current, axis=1)
        ancestors[np.arange(count)[:, None], current, np.arange(size)[None, :]] = True
    ancestors[:, 0, 0] = False
    return ancestors


def _is_projective(heads: np.ndarray, ancestors: np.ndarray) -> np.ndarray:
    size = heads.shape[1]
    projective = np.ones(len(heads), dtype=bool)
    for d in range(1, size):
        h = heads[:, d]
        for k in range(1, size):
            between = (np.minimum(h, d) < k) & (k < np.maximum(h, d))
            projective &= ~between | ancestors[np.arange(len(heads)), h, k]
    return projective


@functools.cache
def enumerate_trees(n: int, single_root: bool = False, projective: bool = False):
    """All dependency trees over ``n`` words as ``(codes (k, n + 1), M (k, (n + 1)^2))``."""
    assignments = np.array(list(itertools.product(range(n + 1), repeat=n)), dtype=np.int64).reshape(-1, n)
    heads = np.hstack([np.full((len(assignments), 1), -1), assignments])
    heads = heads[np.all(heads[:, 1:] != np.arange(1, n + 1), axis=1)]
    ancestors = _ancestors(heads)
    keep = ancestors[:, 0, 1:].all(axis=1)
    if single_root:
        keep &= (heads[:, 1:] == 0).sum(axis=1) == 1
    if projective:
        keep &= _is_projective(heads, ancestors)
    codes = heads[keep]
    m, _ = DependencyTreeStructure().indicators(codes, (n + 1, n + 1), (0,))
    return codes, m.reshape(len(codes), -1)


def random_scores(rng, n, scale=1.0, batch=1):
    return rng.normal(size=(batch, n + 1, n + 1)) * scale


def tree_scores(codes, scores):
    m, _ = DependencyTreeStructure().indicators(codes, scores.shape[1:], (0,))
    return (m * scores).sum(axis=(1, 2))


def test_enumeration_counts():
    # Cayley: (n + 1)^(n - 1) trees, n^(n - 1) single-root ones; projective: binomial formulas.
    for n in range(1, 6):
        assert len(enumerate_trees(n)[0]) == (n + 1) ** (n - 1)
        assert len(enumerate_trees(n, single_root=True)[0]) == n ** (n - 1)
    assert [len(enumerate_trees(n, projective=True)[0]) for n in range(1, 6)] == [1, 3, 12, 55, 273]
    assert [len(enumerate_trees(n, True, True)[0]) for n in range(1, 6)] == [1, 2, 7, 30, 143]


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("n", range(1, 7))
@pytest.mark.parametrize("ties", ["none", "rounded", "all_equal"])
def test_oracle_matches_enumeration(n, single_root, projective, ties):
    rng = np.random.default_rng(100 * n + 10 * single_root + projective)
    scores = random_scores(rng, n, batch=16)
    if ties == "rounded":
        scores = np.round(scores)
    elif ties == "all_equal":
        scores = np.zeros_like(scores)
    codes, M = enumerate_trees(n, single_root, projective)
    best = best_trees(scores, single_root=single_root, projective=projective)
    valid = {c.tobytes() for c in codes}
    assert all(row.tobytes() in valid for row in best)
    np.testing.assert_allclose(
        tree_scores(best, scores), (scores.reshape(16, -1) @ M.T).max(axis=1), atol=1e-12
    )


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
def test_oracle_is_per_example_and_accepts_float32(single_root, projective):
    rng = np.random.default_rng(1)
    scores = np.round(random_scores(rng, 6, batch=8))
    first = best_trees(scores, single_root=single_root, projective=projective)
    again = best_trees(scores[::-1].copy(), single_root=single_root, projective=projective)
    assert np.array_equal(first, again[::-1])
    structure = DependencyTreeStructure(single_root, projective)
    assert np.array_equal(structure.map(scores.astype(np.float32), np.zeros((8, 0))), first)


def test_all_equal_scores_break_ties_deterministically():
    # Chu-Liu-Edmonds prefers the smallest head; Eisner the leftmost split (a chain).
    assert best_trees(np.zeros((1, 4, 4))).tolist() == [[-1, 0, 0, 0]]
    assert best_trees(np.zeros((1, 4, 4)), projective=True).tolist() == [[-1, 0, 1, 2]]
    for projective in (False, True):
        heads = best_trees(np.zeros((1, 4, 4)), single_root=True, projective=projective)
        assert (heads[0, 1:] == 0).sum() == 1


def test_projective_trees_are_no_better_and_single_root_no_better():
    rng = np.random.default_rng(2)
    scores = random_scores(rng, 12, batch=20)
    value = {
        variant: tree_scores(best_trees(scores, single_root=variant[0], projective=variant[1]), scores)
        for variant in VARIANTS
    }
    assert np.all(value[(False, False)] >= value[(False, True)] - 1e-12)
    assert np.all(value[(False, False)] >= value[(True, False)] - 1e-12)
    assert np.all(value[(True, False)] >= value[(True, True)] - 1e-12)
    assert np.all(value[(False, True)] >= value[(True, True)] - 1e-12)
    assert np.all((best_trees(scores, single_root=True)[:, 1:] == 0).sum(axis=1) == 1)


@pytest.mark.parametrize("single_root", [False, True])
def test_arborescence_matches_networkx_on_long_sentences(single_root):
    import networkx as nx
    rng = np.random.default_rng(3)
    n = 15
    scores = random_scores(rng, n, batch=6)
    heads = best_trees(scores, single_root=single_root)
    for b in range(6):
        best = -np.inf
        for child in range(1, n + 1) if single_root else [None]:
            graph = nx.DiGraph()
            for h, d in itertools.product(range(n + 1), range(1, n + 1)):
                if h != d and (child is None or h != 0 or d == child):
                    graph.add_edge(h, d, weight=scores[b, h, d])
            tree = nx.maximum_spanning_arborescence(graph)
            best = max(best, sum(scores[b, h, d] for h, d in tree.edges))
        assert tree_scores(heads[b : b + 1], scores[b : b + 1])[0] == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
def test_forbidden_arcs_are_never_chosen_by_the_oracle(single_root, projective):
    rng = np.random.default_rng(4)
    n = 5
    codes, M = enumerate_trees(n, single_root, projective)
    for scale in (1.0, 1e6):
        scores = random_scores(rng, n, scale, batch=16)
        # Forbid half the arcs but keep a random tree of the right kind allowed.
        forbidden = rng.random(scores.shape) < 0.5
        keep, _ = DependencyTreeStructure().indicators(
            codes[rng.integers(len(codes), size=16)], (n + 1,) * 2, (0,)
        )
        scores[forbidden & (keep == 0)] = -np.inf
        best = best_trees(scores, single_root=single_root, projective=projective)
        m, _ = DependencyTreeStructure().indicators(best, scores.shape[1:], (0,))
        assert not np.any(m[np.isneginf(scores)])
        allowed = np.where(np.isneginf(scores), -1e300, scores).reshape(16, -1) @ M.T
        found = tree_scores(best, np.where(np.isneginf(scores), 0.0, scores))
        np.testing.assert_allclose(found, allowed.max(axis=1), rtol=1e-12)


# SLSQP over the 125 trees of 4 words takes seconds: that case runs at one scale here and
# at all scales against the (small) arborescence-polytope QP below.
QP_CASES = [
    (n, scale, *variant)
    for n, scale, variant in itertools.product([2, 3, 4], [0.1, 0.3, 1.0, 3.0], VARIANTS)
    if not (n == 4 and variant == (False, False) and scale != 3.0)
]


@pytest.mark.parametrize("n,scale,single_root,projective", QP_CASES)
def test_sparsemap_matches_independent_qp(n, scale, single_root, projective):
    rng = np.random.default_rng(int(scale * 100) + 7 * n + 2 * single_root + projective)
    _, M = enumerate_trees(n, single_root, projective)
    scores = random_scores(rng, n, scale, batch=2)
    solution = solve(DependencyTreeStructure(single_root, projective), scores, tol=1e-12)
    assert solution.converged.all()
    for b in range(2):
        u_ref, objective_ref = solve_qp(M, np.zeros((len(M), 0)), scores[b].ravel(), np.zeros(0))
        np.testing.assert_allclose(solution.u[b].ravel(), u_ref, atol=1e-6)
        assert abs(solution.objective[b] - objective_ref) <= 1e-8
    if scale <= 0.3:
        assert max(len(w) for w in solution.weights) > 1


def arborescence_polytope_qp(eta: np.ndarray, single_root: bool):
    """``max <eta, u> - ||u||^2 / 2`` over Edmonds' description of the arborescence polytope.

    ``u >= 0`` on the arcs, in-degree one for every word and at least one arc into
    every set of words (the last one replaced by ``out-degree(root) = 1`` for
    single-root trees, which makes it a face). Returns ``(u, objective)``.
    """
    size = eta.shape[0]
    heads, dependents = np.array([(h, d) for h in range(size) for d in range(1, size) if h != d]).T
    theta = eta[heads, dependents]
    equalities = [dependents == d for d in range(1, size)] + ([heads == 0] if single_root else [])
    largest = size - 2 if single_root else size - 1
    cuts = [
        np.isin(dependents, subset) & ~np.isin(heads, subset)
        for k in range(2, largest + 1)
        for subset in itertools.combinations(range(1, size), k)
    ]
    equalities, cuts = np.array(equalities, dtype=float), np.array(cuts, dtype=float).reshape(-1, len(theta))
    result = minimize(
        lambda x: 0.5 * x @ x - theta @ x,
        np.full(len(theta), 1.0 / (size - 1)),
        jac=lambda x: x - theta,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * len(theta),
        constraints=[
            {"type": "eq", "fun": lambda x: equalities @ x - 1, "jac": lambda x: equalities},
            {"type": "ineq", "fun": lambda x: cuts @ x - 1, "jac": lambda x: cuts},
        ],
        options={"ftol": 1e-16, "maxiter": 1000},
    )
    u = np.zeros_like(eta)
    u[heads, dependents] = result.x
    return u, -result.fun


@pytest.mark.parametrize("single_root", [False, True])
@pytest.mark.parametrize("n", [4, 5, 6])
def test_non_projective_sparsemap_matches_arborescence_polytope_qp(n, single_root):
    rng = np.random.default_rng(10 * n + single_root)
    scales = np.array([0.1, 0.3, 1.0, 3.0])
    scores = random_scores(rng, n, batch=4) * scales[:, None, None]
    solution = solve(DependencyTreeStructure(single_root), scores, tol=1e-12)
    assert solution.converged.all()
    for b in range(4):
        u_ref, objective_ref = arborescence_polytope_qp(scores[b], single_root)
        np.testing.assert_allclose(solution.u[b], u_ref, atol=1e-6)
        assert abs(solution.objective[b] - objective_ref) <= 1e-8


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("scale", [0.1, 1.0])
def test_compiled_kernel_matches_python_reference(scale, single_root, projective):
    rng = np.random.default_rng(int(10 * scale) + 2 * single_root + projective)
    structure = DependencyTreeStructure(single_root, projective)
    scores = random_scores(rng, 7, scale, batch=6)
    lengths = np.array([7, 0, 1, 2, 5, 6])
    fast = solve(structure, scores, lengths=lengths, tol=1e-12)
    slow = solve(structure, scores, lengths=lengths, tol=1e-12, compiled=False)
    assert fast.converged.all() and slow.converged.all()
    np.testing.assert_allclose(fast.u, slow.u, atol=1e-9)
    np.testing.assert_allclose(fast.objective, slow.objective, atol=1e-10)
    direction = rng.normal(size=scores.shape)
    np.testing.assert_allclose(
        fast.jacobian_product(direction)[0], slow.jacobian_product(direction)[0], atol=1e-8
    )


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
def test_jacobian_matches_finite_differences(single_root, projective):
    rng = np.random.default_rng(5)
    structure = DependencyTreeStructure(single_root, projective)
    scores = random_scores(rng, 5, 0.3, batch=3)
    solution = solve(structure, scores, tol=1e-14)
    assert max(len(w) for w in solution.weights) > 2
    direction, step = rng.normal(size=scores.shape), 1e-6
    plus = solve(structure, scores + step * direction, tol=1e-14)
    minus = solve(structure, scores - step * direction, tol=1e-14)
    j_u, j_v = solution.jacobian_product(direction)
    np.testing.assert_allclose(j_u, (plus.u - minus.u) / (2 * step), atol=1e-6)
    assert j_v.shape == (3, 0)


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
def test_solution_is_a_convex_combination_of_valid_trees(single_root, projective):
    rng = np.random.default_rng(6)
    n = 6
    structure = DependencyTreeStructure(single_root, projective)
    scores = random_scores(rng, n, 0.2, batch=4)
    solution = solve(structure, scores, tol=1e-12)
    valid = {c.tobytes() for c in enumerate_trees(n, single_root, projective)[0]}
    for b in range(4):
        weights, codes = solution.weights[b], solution.structures[b]
        assert np.all(weights >= 0) and abs(weights.sum() - 1) < 1e-12
        assert all(c.tobytes() in valid for c in codes) and len({c.tobytes() for c in codes}) == len(codes)
        m, _ = structure.indicators(codes, (n + 1, n + 1), (0,))
        np.testing.assert_allclose(np.tensordot(weights, m, 1), solution.u[b], atol=1e-12)
    np.testing.assert_allclose(solution.u[:, :, 1:].sum(axis=1), 1.0)
    assert np.all(solution.u[:, :, 0] == 0) and np.all(solution.u[:, np.arange(n + 1), np.arange(n + 1)] == 0)


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("compiled", [True, False])
def test_padded_batch_equals_unpadded_examples(single_root, projective, compiled):
    rng = np.random.default_rng(7)
    structure = DependencyTreeStructure(single_root, projective)
    lengths = np.array([5, 0, 1, 3, 2])
    scores = random_scores(rng, 5, 0.4, batch=5)
    padded = solve(structure, scores, lengths=lengths, tol=1e-12, compiled=compiled)
    heads = best_trees(scores, lengths, single_root, projective)
    direction = rng.normal(size=scores.shape)
    j_u, _ = padded.jacobian_product(direction)
    for b, length in enumerate(lengths):
        alone = scores[b : b + 1, : length + 1, : length + 1]
        single = solve(structure, alone, tol=1e-12)
        np.testing.assert_allclose(padded.u[b, : length + 1, : length + 1], single.u[0], atol=1e-9)
        outside = np.ones((6, 6), dtype=bool)
        outside[: length + 1, : length + 1] = False
        assert np.all(padded.u[b][outside] == 0) and np.all(j_u[b][outside] == 0)
        expected = best_trees(alone, single_root=single_root, projective=projective)[0]
        assert heads[b].tolist() == expected.tolist() + [-1] * (5 - length)


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
def test_zero_and_one_word(single_root, projective):
    structure = DependencyTreeStructure(single_root, projective)
    empty = solve(structure, np.zeros((2, 1, 1)))
    assert empty.u.shape == (2, 1, 1) and np.all(empty.u == 0) and empty.converged.all()
    assert (
        best_trees(np.zeros((2, 1, 1)), single_root=single_root, projective=projective).tolist() == [[-1]] * 2
    )
    one = solve(structure, np.array([[[0.0, -3.0], [5.0, 1.0]]]))
    assert one.u.tolist() == [[[0.0, 1.0], [0.0, 0.0]]]
    assert solve(structure, np.zeros((1, 3, 3)), lengths=np.array([1])).u[0, 0, 1] == 1.0


@pytest.mark.parametrize("single_root", [False, True])
def test_all_equal_scores_give_uniform_arc_marginals(single_root):
    # The (single-root) arborescence polytope is symmetric under permutations of the
    # words and contains the uniform point 1/n (average of the n "star" trees).
    n = 4
    solution = solve(DependencyTreeStructure(single_root), np.full((1, n + 1, n + 1), 0.7), tol=1e-12)
    expected = np.full((n + 1, n + 1), 1.0 / n)
    expected[:, 0] = 0
    expected[np.arange(n + 1), np.arange(n + 1)] = 0
    np.testing.assert_allclose(solution.u[0], expected, atol=1e-9)


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
def test_forbidden_arcs_never_appear_in_sparsemap(single_root, projective):
    rng = np.random.default_rng(8)
    n = 4
    codes, M = enumerate_trees(n, single_root, projective)
    scores = random_scores(rng, n, 0.2, batch=3)
    scores[:, 2, 3] = scores[:, 0, 1] = scores[:, 4, 2] = -np.inf
    solution = solve(DependencyTreeStructure(single_root, projective), scores, tol=1e-12)
    assert solution.converged.all()
    assert np.all(solution.u[np.isneginf(scores)] == 0)
    for b in range(3):
        allowed = M @ np.isneginf(scores[b]).ravel() == 0
        u_ref, _ = solve_qp(
            M[allowed], np.zeros((allowed.sum(), 0)), np.nan_to_num(scores[b]).ravel(), np.zeros(0)
        )
        np.testing.assert_allclose(solution.u[b].ravel(), u_ref, atol=1e-6)


@pytest.mark.parametrize("single_root,projective", VARIANTS, ids=VARIANT_IDS)
def test_all_trees_forbidden_raises(single_root, projective):
    scores = np.zeros((2, 4, 4))
    scores[1, :, 2] = -np.inf
    with pytest.raises(ValueError, match="forbidden"):
        solve(DependencyTreeStructure(single_root, projective), scores)


def test_single_root_with_forbidden_root_arcs():
    scores = np.zeros((1, 4, 4))
    scores[0, 0, 1:] = -np.inf
    with pytest.raises(ValueError, match="forbidden"):
        solve(DependencyTreeStructure(single_root=True), scores)
    scores[0, 0, 3] = -5.0
    solution = solve(DependencyTreeStructure(single_root=True), scores)
    assert np.all(solution.u[0, 0] == [0, 0, 0, 1])


def test_nan_and_bad_shapes_raise():
    structure = DependencyTreeStructure()
    scores = np.zeros((2, 3, 3))
    scores[1, 0, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        solve(structure, scores)
    with pytest.raises(ValueError, match="NaN"):
        best_trees(scores)
    with pytest.raises(ValueError, match="Received: eta_u per-example shape"):
        solve(structure, np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="Received: eta_u per-example shape"):
        solve(structure, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="Received: eta_v per-example shape"):
        solve(structure, np.zeros((2, 3, 3)), np.zeros((2, 1)))
    with pytest.raises(ValueError, match="Received: lengths="):
        solve(structure, np.zeros((2, 3, 3)), lengths=np.array([1, 3]))
    with pytest.raises(ValueError, match="Received: lengths="):
        solve(structure, np.zeros((2, 3, 3)), lengths=np.array([[1], [2]]))
    with pytest.raises(ValueError, match="Received: lengths="):
        solve(structure, np.zeros((2, 3, 3)), lengths=np.array([-1, 2]))


def test_config_round_trip_and_shapes():
    structure = DependencyTreeStructure(single_root=True, projective=True)
    rebuilt = structure_from_config(structure_to_config(structure))
    assert isinstance(rebuilt, DependencyTreeStructure) and rebuilt.get_config() == structure.get_config()
    assert structure.v_shape((5, 5)) == (0,)
    structure.validate_shapes((None, None), (0,))


def test_compiled_oracles_check_their_buffers():
    for oracle in (max_arborescence, max_arborescence_by_dependent, max_projective_tree):
        with pytest.raises(ValueError, match="covering nodes"):
            oracle(np.zeros((4, 4)), 3, False, np.full(3, -1))
        with pytest.raises(ValueError, match="covering nodes"):
            oracle(np.zeros((3, 3)), 3, False, np.full(4, -1))


@pytest.mark.parametrize("single_root", [False, True])
def test_search_by_dependent_in_place_equals_the_head_major_search(single_root):
    rng = np.random.default_rng(7)
    for words in range(0, 9):
        scores = rng.normal(size=(9, 9))
        expected = np.full(9, -1)
        max_arborescence(scores, words, single_root, expected)
        scratch = scores.T.copy()  # [dependent, head], larger than the sentence unless words == 8
        heads = np.full(9, -1)
        max_arborescence_by_dependent(scratch, words, single_root, heads)
        np.testing.assert_array_equal(heads, expected)
        untouched = np.ones((9, 9), dtype=bool)
        untouched[: words + 1, : words + 1] = False
        np.testing.assert_array_equal(scratch[untouched], scores.T[untouched])  # only the sentence is used
