"""User-defined structures: CustomStructure against built-in structures and an independent QP."""

import functools

import keras
import numpy as np
import pytest

from keras_structured.engine import solve, structure_from_config, structure_to_config
from keras_structured.engine.budget import BudgetStructure
from keras_structured.engine.custom import CustomStructure
from tests.test_matching import (
    assert_jacobian_matches_finite_differences,
    assert_map_is_optimal,
    assert_sparsemap_matches_qp,
)

SPAN = 3


@keras.saving.register_keras_serializable(package="test_custom_structure")
def best_span(scores):
    """The contiguous span of ``SPAN`` items with the highest total score."""
    totals = np.convolve(scores, np.ones(SPAN), mode="valid")
    best = np.zeros_like(scores)
    start = np.argmax(totals)
    best[start : start + SPAN] = 1.0
    return best


def spans(d):
    return np.array([np.convolve(np.eye(d - SPAN + 1)[i], np.ones(SPAN)) for i in range(d - SPAN + 1)])


def best_two(scores):
    best = np.zeros_like(scores)
    best[np.argsort(-scores, kind="stable")[:2]] = 1.0
    return best


def batched_argmax(scores):
    return np.eye(scores.shape[1])[np.argmax(scores, axis=1)]


def test_span_oracle_against_enumeration():
    rng = np.random.default_rng(0)
    assert_map_is_optimal(CustomStructure(best_span), rng.normal(size=(10, 7)), spans(7))


@pytest.mark.parametrize("scale", [0.1, 0.5, 2.0])
def test_span_sparsemap_matches_independent_qp(scale):
    rng = np.random.default_rng(int(scale * 10))
    eta_u = rng.normal(size=(3, 7)) * scale
    assert_sparsemap_matches_qp(CustomStructure(best_span), eta_u, spans(7))
    assert_jacobian_matches_finite_differences(CustomStructure(best_span), eta_u, rng)


@pytest.mark.parametrize("scale", [0.1, 1.0])
def test_same_solution_as_the_builtin_budget(scale):
    rng = np.random.default_rng(1)
    eta_u = rng.normal(size=(5, 6)) * scale
    custom = solve(CustomStructure(best_two), eta_u, tol=1e-12)
    builtin = solve(BudgetStructure(2), eta_u, tol=1e-12)
    np.testing.assert_allclose(custom.u, builtin.u, atol=1e-10)
    np.testing.assert_allclose(custom.objective, builtin.objective, atol=1e-12)
    for codes in custom.structures:
        assert codes.dtype == np.float64 and len({c.tobytes() for c in codes}) == len(codes)
    direction = rng.normal(size=eta_u.shape)
    np.testing.assert_allclose(
        custom.jacobian_product(direction)[0], builtin.jacobian_product(direction)[0], atol=1e-10
    )


def test_batched_oracle_gives_sparsemax():
    # The simplex is the budget k=1 (tests/test_budget.py checks it against closed-form sparsemax).
    rng = np.random.default_rng(2)
    eta_u = rng.normal(size=(8, 5))
    eta_u[:, 4] = -np.inf  # forbidden items stay unused
    custom = solve(CustomStructure(batched_argmax, batched=True), eta_u, tol=1e-12)
    np.testing.assert_allclose(custom.u, solve(BudgetStructure(1), eta_u, tol=1e-12).u, atol=1e-12)
    assert np.all(custom.u[:, 4] == 0)


def test_real_valued_vertices():
    # A regular pentagon around (1, 2): SparseMAP projects eta onto it.
    angles = 2 * np.pi * np.arange(5) / 5
    vertices = np.stack([1 + np.cos(angles), 2 + np.sin(angles)], axis=1)
    structure = CustomStructure(lambda scores: vertices[np.argmax(vertices @ scores)])
    rng = np.random.default_rng(3)
    assert_sparsemap_matches_qp(structure, rng.normal(size=(6, 2)) * 3, vertices)


def test_oracle_gets_a_copy_of_the_scores():
    def clobbering(scores):
        best = best_two(scores)
        scores[:] = 0.0
        return best

    rng = np.random.default_rng(4)
    eta_u = rng.normal(size=(3, 5))
    reference = solve(CustomStructure(best_two), eta_u, tol=1e-12)
    np.testing.assert_allclose(solve(CustomStructure(clobbering), eta_u, tol=1e-12).u, reference.u)


@pytest.mark.parametrize("batched", [False, True])
def test_bad_oracle_outputs_raise(batched):
    def wrong_shape(scores):
        return np.zeros(scores.shape[-1] + 1)

    def not_finite(scores):
        return np.full(scores.shape, np.nan)

    with pytest.raises(ValueError, match="Received: an output of shape"):
        solve(CustomStructure(wrong_shape, batched), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="finite values. Received:"):
        solve(CustomStructure(not_finite, batched), np.zeros((2, 3)))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="Received: oracle=3"):
        CustomStructure(3)
    with pytest.raises(ValueError, match="does not take lengths"):
        solve(CustomStructure(best_two), np.zeros((2, 3)), lengths=np.array([3, 2]))
    with pytest.raises(ValueError, match="Received: eta_v per-example shape"):
        solve(CustomStructure(best_two), np.zeros((2, 3)), np.zeros((2, 1)))
    with pytest.raises(ValueError, match="Received: eta_u"):
        solve(CustomStructure(best_two), np.array([[0.0, np.nan, 1.0]]))


def test_registered_oracle_round_trips():
    config = structure_to_config(CustomStructure(best_span, batched=False))
    rebuilt = structure_from_config(config)
    assert isinstance(rebuilt, CustomStructure) and rebuilt.oracle is best_span and not rebuilt.batched
    eta_u = np.random.default_rng(5).normal(size=(2, 6))
    np.testing.assert_array_equal(solve(rebuilt, eta_u).u, solve(CustomStructure(best_span), eta_u).u)


@pytest.mark.parametrize("oracle", [best_two, lambda scores: scores, functools.partial(best_two)])
def test_unregistered_oracle_cannot_be_serialized(oracle):
    with pytest.raises(ValueError, match="register_keras_serializable"):
        CustomStructure(oracle).get_config()
