"""Budget structures: the top-k oracle and SparseMAP against enumeration and an independent QP."""

import itertools

import numpy as np
import pytest

from keras_structured.engine import solve, structure_from_config, structure_to_config
from keras_structured.engine.budget import BudgetStructure
from tests.brute_force import solve_qp
from tests.test_matching import (
    assert_jacobian_matches_finite_differences,
    assert_map_is_optimal,
    assert_sparsemap_matches_qp,
)


def subsets(d, k, exact):
    """Indicator vectors ``(D, d)`` of every subset of size k (or at most k)."""
    sizes = [k] if exact else range(k + 1)
    found = []
    for size in sizes:
        for chosen in itertools.combinations(range(d), size):
            m = np.zeros(d)
            m[list(chosen)] = 1.0
            found.append(m)
    return np.array(found)


@pytest.mark.parametrize("d", range(1, 7))
@pytest.mark.parametrize("exact", [True, False])
def test_top_k_matches_enumeration(d, exact):
    rng = np.random.default_rng(d)
    for k in range(1, d + 1):
        vertices = subsets(d, k, exact)
        for tied in (False, True):
            scores = rng.normal(size=(16, d))
            if tied:
                scores = np.round(scores)
            codes = assert_map_is_optimal(BudgetStructure(k, exact), scores, vertices)
            assert codes.dtype == np.int8 and codes.shape == (16, d)
            if not exact:
                assert np.all(scores[codes == 1] > 0)


def test_ties_go_to_the_lower_index():
    scores = np.array([[1.0, 2.0, 1.0, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    assert BudgetStructure(3).map(scores, None).tolist() == [[1, 1, 0, 1, 0], [1, 1, 1, 0, 0]]
    assert BudgetStructure(3, exact=False).map(scores, None).tolist() == [[1, 1, 0, 1, 0], [0, 0, 0, 0, 0]]


@pytest.mark.parametrize("scale", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("d,k", [(3, 1), (4, 2), (5, 2), (5, 3), (6, 4)])
@pytest.mark.parametrize("exact", [True, False])
def test_sparsemap_matches_independent_qp(d, k, exact, scale):
    rng = np.random.default_rng(int(scale * 10) + 7 * d + k)
    eta_u = rng.normal(size=(2, d)) * scale + (0.0 if exact else 0.2 * scale)
    solution = assert_sparsemap_matches_qp(BudgetStructure(k, exact), eta_u, subsets(d, k, exact))
    if exact:
        np.testing.assert_allclose(solution.u.sum(1), k, atol=1e-12)
    else:
        assert np.all(solution.u.sum(1) <= k + 1e-12)
    assert np.all((solution.u >= 0) & (solution.u <= 1 + 1e-12))


def test_top_1_is_sparsemax():
    rng = np.random.default_rng(1)
    eta_u = rng.normal(size=(5, 6))
    budget = solve(BudgetStructure(1), eta_u, tol=1e-12)
    ordered = -np.sort(-eta_u, axis=1)
    cumulative = np.cumsum(ordered, axis=1)
    size = (1 + np.arange(1, 7) * ordered > cumulative).sum(axis=1)
    tau = (cumulative[np.arange(5), size - 1] - 1) / size
    np.testing.assert_allclose(budget.u, np.maximum(eta_u - tau[:, None], 0), atol=1e-12)


@pytest.mark.parametrize("exact", [True, False])
def test_jacobian_matches_finite_differences(exact):
    rng = np.random.default_rng(2)
    eta_u = rng.normal(size=(4, 6)) * 0.5
    assert_jacobian_matches_finite_differences(BudgetStructure(3, exact), eta_u, rng)


@pytest.mark.parametrize("exact", [True, False])
def test_padded_batch_equals_unpadded_examples(exact):
    rng = np.random.default_rng(3)
    structure = BudgetStructure(2, exact)
    lengths = np.array([6, 4, 2, 1, 0])
    eta_u = rng.normal(size=(len(lengths), 6)) * 0.4
    padded = solve(structure, eta_u, lengths=lengths, tol=1e-12)
    codes = structure.map(eta_u, None, lengths)
    for b, length in enumerate(lengths[:-1]):
        single = solve(BudgetStructure(min(2, length), exact), eta_u[b : b + 1, :length], tol=1e-12)
        np.testing.assert_allclose(padded.u[b, :length], single.u[0], atol=1e-9)
    for b, length in enumerate(lengths):
        assert np.all(padded.u[b, length:] == 0) and np.all(codes[b, length:] == 0)
    if exact:  # fewer than k items: all of them are selected
        assert codes[3].tolist() == [1, 0, 0, 0, 0, 0] and padded.u[3].tolist() == [1, 0, 0, 0, 0, 0]
    j_u = assert_jacobian_matches_finite_differences(structure, eta_u, rng, lengths)
    for b, length in enumerate(lengths):
        assert np.all(j_u[b, length:] == 0)


@pytest.mark.parametrize("exact", [True, False])
def test_forbidden_items_never_appear(exact):
    rng = np.random.default_rng(4)
    eta_u = rng.normal(size=(6, 5)) * 0.3 + 0.2
    eta_u[:, 1] = eta_u[:3, 3] = -np.inf
    solution = solve(BudgetStructure(2, exact), eta_u, tol=1e-12)
    assert solution.converged.all() and np.all(solution.u[np.isneginf(eta_u)] == 0)
    vertices = subsets(5, 2, exact)
    allowed = vertices[vertices[:, [1, 3]].sum(1) == 0]
    u_ref, _ = solve_qp(
        allowed, np.zeros((len(allowed), 0)), np.where(np.isinf(eta_u[0]), 0, eta_u[0]), np.zeros(0)
    )
    np.testing.assert_allclose(solution.u[0], u_ref, atol=1e-6)


def test_too_many_forbidden_items_raise_only_for_exact_budgets():
    eta_u = np.zeros((2, 4))
    eta_u[1, :3] = -np.inf
    with pytest.raises(ValueError, match="forbidden"):
        solve(BudgetStructure(2), eta_u)
    assert np.all(solve(BudgetStructure(2, exact=False), eta_u).u[1, :3] == 0)


def test_nan_scores_raise():
    eta_u = np.zeros((2, 4))
    eta_u[0, 2] = np.nan
    with pytest.raises(ValueError, match="Received: eta_u"):
        solve(BudgetStructure(2), eta_u)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "2"])
def test_bad_budgets_raise(k):
    with pytest.raises(ValueError, match="Received: k="):
        BudgetStructure(k)


def test_bad_shapes_and_lengths_raise():
    with pytest.raises(ValueError, match="Received: eta_u per-example shape=\\(3,\\)"):
        solve(BudgetStructure(4), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="Received: eta_u per-example shape=\\(2, 3\\)"):
        solve(BudgetStructure(1), np.zeros((1, 2, 3)))
    with pytest.raises(ValueError, match="Received: lengths="):
        solve(BudgetStructure(1), np.zeros((2, 3)), lengths=np.array([4, 1]))
    with pytest.raises(ValueError, match="Received: lengths="):
        solve(BudgetStructure(1), np.zeros((2, 3)), lengths=np.array([[3], [1]]))


@pytest.mark.parametrize("exact", [True, False])
def test_config_round_trip(exact):
    rebuilt = structure_from_config(structure_to_config(BudgetStructure(np.int64(3), exact)))
    assert isinstance(rebuilt, BudgetStructure) and (rebuilt.k, rebuilt.exact) == (3, exact)
    assert rebuilt.get_config() == {"k": 3, "exact": exact}
