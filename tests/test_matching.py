"""Matchings: the assignment oracle and SparseMAP against enumeration and an independent QP.

Also holds the generic checks that tests/test_budget.py and tests/test_custom_structure.py share.
"""

import itertools

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from keras_structured.engine import solve, structure_from_config, structure_to_config
from keras_structured.engine.matching import MatchingStructure
from tests.brute_force import solve_qp


def assert_map_is_optimal(structure, scores, vertices, objective=None):
    """The oracle's structures are vertices and score as well as the best vertex.

    ``objective`` (default ``scores``) are the scores the oracle should maximise.
    """
    batch = scores.shape[0]
    objective = (scores if objective is None else objective).reshape(batch, -1)
    codes = structure.map(scores, np.zeros((batch, 0)))
    m, _ = structure.indicators(codes, scores.shape[1:], (0,))
    flat_m, flat_vertices = m.reshape(batch, -1), vertices.reshape(len(vertices), -1)
    assert (flat_m[:, None, :] == flat_vertices[None, :, :]).all(axis=2).any(axis=1).all()
    best = (objective @ flat_vertices.T).max(axis=1)
    np.testing.assert_allclose((flat_m * objective).sum(1), best, atol=1e-12)
    return codes


def assert_sparsemap_matches_qp(structure, eta_u, vertices):
    """SparseMAP agrees with the QP over the enumerated vertices; the support reproduces ``u``."""
    solution = solve(structure, eta_u, tol=1e-12)
    assert solution.converged.all()
    flat_vertices = vertices.reshape(len(vertices), -1)
    for b in range(eta_u.shape[0]):
        u_ref, objective_ref = solve_qp(
            flat_vertices, np.zeros((len(vertices), 0)), eta_u[b].ravel(), np.zeros(0)
        )
        np.testing.assert_allclose(solution.u[b].ravel(), u_ref, atol=1e-6)
        assert abs(solution.objective[b] - objective_ref) <= 1e-8
        weights = solution.weights[b]
        assert np.all(weights >= 0) and abs(weights.sum() - 1) < 1e-12
        m, _ = structure.indicators(solution.structures[b], eta_u.shape[1:], (0,))
        np.testing.assert_allclose(np.tensordot(weights, m, 1), solution.u[b], atol=1e-12)
    return solution


def assert_jacobian_matches_finite_differences(structure, eta_u, rng, lengths=None):
    solution = solve(structure, eta_u, lengths=lengths, tol=1e-14)
    direction = rng.normal(size=eta_u.shape)
    step = 1e-6
    plus = solve(structure, eta_u + step * direction, lengths=lengths, tol=1e-14)
    minus = solve(structure, eta_u - step * direction, lengths=lengths, tol=1e-14)
    j_u, _ = solution.jacobian_product(direction)
    np.testing.assert_allclose(j_u, (plus.u - minus.u) / (2 * step), atol=1e-6)
    return j_u


def matchings(rows, cols, maximal):
    """Indicator matrices ``(D, rows, cols)`` of every matching (or only those of size min(rows, cols))."""
    found = []
    for codes in itertools.product(range(-1, cols), repeat=rows):
        used = [j for j in codes if j >= 0]
        if len(used) != len(set(used)) or (maximal and len(used) != min(rows, cols)):
            continue
        m = np.zeros((rows, cols))
        for i, j in enumerate(codes):
            if j >= 0:
                m[i, j] = 1.0
        found.append(m)
    return np.array(found)


SHAPES = [(1, 1), (1, 4), (4, 1), (2, 2), (2, 3), (3, 2), (3, 3), (4, 4), (4, 5), (5, 4)]


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("unmatched_score", [None, 0.0, 0.5, -0.7])
def test_assignment_matches_enumeration(rows, cols, unmatched_score):
    rng = np.random.default_rng(rows * 10 + cols)
    structure = MatchingStructure(unmatched_score)
    vertices = matchings(rows, cols, maximal=unmatched_score is None)
    shift = unmatched_score or 0.0
    for tied in (False, True):
        scores = rng.normal(size=(8, rows, cols))
        if tied:
            scores = np.round(scores) + shift
        # MAP with unmatched_score t maximises <s - t, m> over all matchings.
        codes = assert_map_is_optimal(structure, scores, vertices, scores - shift)
        assert codes.dtype == np.int64 and codes.shape == (8, rows)
        if unmatched_score is not None:
            np.testing.assert_array_equal(codes, MatchingStructure(0.0).map(scores - shift, None))
            m, _ = structure.indicators(codes, (rows, cols), (0,))
            assert np.all(scores[m == 1] > shift)


def test_assignment_breaks_ties_deterministically():
    scores = np.zeros((2, 3, 3))
    first, second = MatchingStructure().map(scores, None), MatchingStructure().map(scores, None)
    np.testing.assert_array_equal(first, second)
    assert MatchingStructure(0.0).map(scores, None).tolist() == [[-1, -1, -1]] * 2


@pytest.mark.parametrize("scale", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("rows,cols", [(1, 3), (2, 3), (3, 2), (3, 3)])
@pytest.mark.parametrize("unmatched_score", [None, 0.0])
def test_sparsemap_matches_independent_qp(rows, cols, unmatched_score, scale):
    rng = np.random.default_rng(int(scale * 10) + 5 * rows + cols)
    eta_u = rng.normal(size=(2, rows, cols)) * scale
    if unmatched_score is not None:
        eta_u += 0.3 * scale  # some pairs beat the threshold, some do not
    vertices = matchings(rows, cols, maximal=unmatched_score is None)
    solution = assert_sparsemap_matches_qp(MatchingStructure(unmatched_score), eta_u, vertices)
    if scale <= 0.1 and rows * cols > 3:
        assert max(len(w) for w in solution.weights) > 1


def test_square_solution_is_doubly_stochastic():
    rng = np.random.default_rng(1)
    solution = solve(MatchingStructure(), rng.normal(size=(4, 5, 5)) * 0.3, tol=1e-12)
    np.testing.assert_allclose(solution.u.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(solution.u.sum(2), 1.0, atol=1e-12)
    assert np.all(solution.u >= 0) and (solution.u == 0).any()


def test_rectangular_solution_matches_the_smaller_side():
    rng = np.random.default_rng(2)
    solution = solve(MatchingStructure(), rng.normal(size=(3, 3, 5)) * 0.3, tol=1e-12)
    np.testing.assert_allclose(solution.u.sum(2), 1.0, atol=1e-12)
    assert np.all(solution.u.sum(1) <= 1 + 1e-12)


@pytest.mark.parametrize("unmatched_score", [None, 0.0])
def test_jacobian_matches_finite_differences(unmatched_score):
    rng = np.random.default_rng(3)
    eta_u = rng.normal(size=(3, 3, 4)) * 0.5 + (0.0 if unmatched_score is None else 0.3)
    assert_jacobian_matches_finite_differences(MatchingStructure(unmatched_score), eta_u, rng)


@pytest.mark.parametrize("unmatched_score", [None, 0.0])
def test_padded_batch_equals_unpadded_examples(unmatched_score):
    rng = np.random.default_rng(4)
    structure = MatchingStructure(unmatched_score)
    lengths = np.array([[4, 5], [2, 5], [4, 3], [0, 2], [3, 0], [1, 1]])
    eta_u = rng.normal(size=(len(lengths), 4, 5)) * 0.4 + (0.0 if unmatched_score is None else 0.2)
    padded = solve(structure, eta_u, lengths=lengths, tol=1e-12)
    codes = structure.map(eta_u, None, lengths)
    for b, (rows, cols) in enumerate(lengths):
        single = solve(structure, eta_u[b : b + 1, :rows, :cols], tol=1e-12)
        np.testing.assert_allclose(padded.u[b, :rows, :cols], single.u[0], atol=1e-9)
        assert np.all(padded.u[b, rows:] == 0) and np.all(padded.u[b, :, cols:] == 0)
        assert np.all(codes[b, rows:] == -1) and np.all(codes[b] < cols)
    j_u = assert_jacobian_matches_finite_differences(structure, eta_u, rng, lengths)
    for b, (rows, cols) in enumerate(lengths):
        assert np.all(j_u[b, rows:] == 0) and np.all(j_u[b, :, cols:] == 0)


@pytest.mark.parametrize("shape", [(2, 0, 3), (2, 3, 0), (2, 0, 0)])
@pytest.mark.parametrize("unmatched_score", [None, 0.0])
def test_empty_matching(shape, unmatched_score):
    solution = solve(MatchingStructure(unmatched_score), np.zeros(shape))
    assert solution.u.shape == shape and solution.converged.all()
    assert MatchingStructure(unmatched_score).map(np.zeros(shape), None).tolist() == [[-1] * shape[1]] * 2


@pytest.mark.parametrize("unmatched_score", [None, 0.0])
def test_forbidden_pairs_never_appear(unmatched_score):
    rng = np.random.default_rng(5)
    eta_u = rng.normal(size=(6, 3, 4)) * 0.3 + (0.0 if unmatched_score is None else 0.2)
    forbidden = rng.random(size=eta_u.shape) < 0.25
    forbidden[:, 0, :3] = True
    forbidden[:, [0, 1, 2], [3, 0, 1]] = False  # a matching avoiding them exists
    eta_u[forbidden] = -np.inf
    solution = solve(MatchingStructure(unmatched_score), eta_u, tol=1e-12)
    assert solution.converged.all() and np.all(solution.u[forbidden] == 0)
    for b, codes in enumerate(solution.structures):
        which, rows = np.nonzero(codes >= 0)
        assert not forbidden[b, rows, codes[which, rows]].any()
    # Same answer as the QP over the allowed matchings only.
    vertices = matchings(3, 4, maximal=unmatched_score is None)
    allowed = vertices[(vertices * forbidden[0]).sum(axis=(1, 2)) == 0]
    u_ref, _ = solve_qp(
        allowed.reshape(len(allowed), -1),
        np.zeros((len(allowed), 0)),
        np.where(forbidden[0], 0.0, eta_u[0]).ravel(),
        np.zeros(0),
    )
    np.testing.assert_allclose(solution.u[0].ravel(), u_ref, atol=1e-6)


def test_matching_that_needs_a_forbidden_pair_raises():
    eta_u = np.zeros((2, 2, 3))
    eta_u[1, 0, :] = -np.inf  # every matching of size 2 uses row 0
    with pytest.raises(ValueError, match="forbidden"):
        solve(MatchingStructure(), eta_u)
    solution = solve(MatchingStructure(unmatched_score=0.0), eta_u)
    assert np.all(solution.u[1, 0] == 0)


def test_nan_scores_raise():
    eta_u = np.zeros((2, 3, 3))
    eta_u[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="Received: eta_u"):
        solve(MatchingStructure(), eta_u)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="Received: eta_u per-example shape=\\(3,\\)"):
        solve(MatchingStructure(), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="Received: eta_v per-example shape"):
        solve(MatchingStructure(), np.zeros((1, 2, 2)), np.zeros((1, 1)))
    with pytest.raises(ValueError, match="Received: lengths="):
        solve(MatchingStructure(), np.zeros((2, 2, 3)), lengths=np.array([[2, 4], [1, 1]]))
    with pytest.raises(ValueError, match="Received: lengths="):
        solve(MatchingStructure(), np.zeros((2, 2, 3)), lengths=np.array([2, 1]))
    with pytest.raises(ValueError, match="Received: unmatched_score=0.5"):
        solve(MatchingStructure(unmatched_score=0.5), np.zeros((1, 2, 2)))
    with pytest.raises(ValueError, match="Received: inf"):
        MatchingStructure(unmatched_score=np.inf)


@pytest.mark.parametrize("unmatched_score", [None, 0.0, 1.5])
def test_config_round_trip(unmatched_score):
    rebuilt = structure_from_config(structure_to_config(MatchingStructure(unmatched_score)))
    assert isinstance(rebuilt, MatchingStructure) and rebuilt.unmatched_score == unmatched_score


@pytest.mark.parametrize("unmatched_score", [None, 0.0])
@pytest.mark.parametrize("shape", [(4, 4), (3, 6), (6, 3), (1, 5)])
def test_compiled_oracle_matches_scipy(unmatched_score, shape):
    rng = np.random.default_rng(sum(shape))
    scores = rng.normal(size=(12,) + shape)
    lengths = np.stack([rng.integers(0, shape[0] + 1, 12), rng.integers(0, shape[1] + 1, 12)], axis=1)
    structure = MatchingStructure(unmatched_score)
    for sizes in (None, lengths):
        fast = solve(structure, scores, lengths=sizes, tol=1e-12)
        slow = solve(structure, scores, lengths=sizes, tol=1e-12, compiled=False)
        np.testing.assert_allclose(fast.u, slow.u, atol=1e-9)
        assert fast.converged.all()


def assert_assignments_match_scipy(structure, scores, objective, lengths=None, exact=False):
    """The codes of ``structure.map(scores)`` form valid matchings whose total ``objective``
    is scipy's ``linear_sum_assignment`` optimum on every example (``-inf`` when every
    matching of maximal size uses a ``-inf`` pair); ``exact`` for integer scores."""
    codes = structure.map(scores, None, lengths)
    structure.validate_codes(codes, scores.shape[1:], lengths)
    for b, code in enumerate(codes):
        rows, cols = scores.shape[1:] if lengths is None else lengths[b]
        block = objective[b, :rows, :cols]
        try:
            best_rows, best_cols = linear_sum_assignment(block, maximize=True)
            best = block[best_rows, best_cols].sum()
        except ValueError:  # scipy: every assignment uses a -inf pair
            best = -np.inf
        matched = np.flatnonzero(code >= 0)
        ours = objective[b, matched, code[matched]].sum()
        if exact or not np.isfinite(best):
            assert ours == best, (b, ours, best)
        else:
            scale = np.abs(block[np.isfinite(block)]).max(initial=1.0) * min(rows, cols)
            assert abs(ours - best) <= 1e-12 * scale, (b, ours, best)
    return codes


ORACLE_SHAPES = [(1, 1), (1, 6), (6, 1), (5, 5), (20, 20), (15, 25), (25, 15), (2, 40), (40, 2)]


@pytest.mark.parametrize("rows,cols", ORACLE_SHAPES)
@pytest.mark.parametrize("kind", ["normal", "ties", "large", "forbidden", "forbidden ties"])
def test_assignment_matches_scipy(rows, cols, kind):
    rng = np.random.default_rng(rows * 100 + cols)
    shape = (150, rows, cols)
    scores = rng.integers(-2, 3, shape).astype(float) if "ties" in kind else rng.normal(size=shape)
    if kind == "large":
        scores = scores * 1e12 + 1e14
    if "forbidden" in kind:
        scores[rng.random(shape) < 0.4] = -np.inf
    assert_assignments_match_scipy(MatchingStructure(), scores, scores, exact="ties" in kind)


@pytest.mark.parametrize("unmatched_score", [0.0, 0.7])
@pytest.mark.parametrize("rows,cols", [(20, 20), (15, 25), (25, 15)])
def test_assignment_with_threshold_and_lengths_matches_scipy(rows, cols, unmatched_score):
    rng = np.random.default_rng(rows + cols)
    scores = rng.normal(size=(100, rows, cols))
    scores[:50] = np.round(scores[:50])  # ties, with the threshold too
    scores[rng.random(scores.shape) < 0.2] = -np.inf
    lengths = np.stack([rng.integers(0, rows + 1, 100), rng.integers(0, cols + 1, 100)], axis=1)
    gains = np.maximum(scores - unmatched_score, 0.0)
    for sizes in (None, lengths):
        structure = MatchingStructure(unmatched_score)
        codes = assert_assignments_match_scipy(structure, scores, gains, sizes)
        m, _ = structure.indicators(codes, (rows, cols), (0,))
        assert np.all(scores[m == 1] > unmatched_score)


@pytest.mark.parametrize("shape", [(20, 20), (15, 25), (25, 15)])
def test_assignment_on_the_solvers_iterates_matches_scipy(shape):
    # At the solution, every matching of the support scores best on eta - u: many ties.
    eta_u = np.random.default_rng(6).normal(size=(16,) + shape)
    iterates = eta_u - solve(MatchingStructure(), eta_u, tol=1e-12).u
    assert_assignments_match_scipy(MatchingStructure(), iterates, iterates)
