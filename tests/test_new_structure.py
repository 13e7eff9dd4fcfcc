"""A new structure with a compiled oracle, written in one file with no edits elsewhere.

This is the worked example of the README's "Adding a structure": one choice per row of
an ``(r, K)`` score matrix. The polytope is a product of simplices, so SparseMAP over it
is row-wise sparsemax, which the tests check, along with the Jacobian, the batched MAP,
a Keras layer built on it and its serialization.
"""

import numba as nb
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import Structure, solve, structure_from_config, structure_to_config
from keras_structured.engine import structure as structure_module
from keras_structured.engine.compiled_oracle import CompiledOracle


@nb.njit(cache=True, nogil=True)
def _row_choice_parts(code, params, m_indices, m_values, n_indices, n_values):
    """The parts of a code: unary part ``(i, code[i])`` of every row; returns their counts."""
    cols = params[1]
    for i in range(code.shape[0]):
        m_indices[i], m_values[i] = i * cols + code[i], 1.0
    return np.int64(code.shape[0]), np.int64(0)


@nb.njit(cache=True, nogil=True)
def _row_choice_oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
    """The best column of every row: writes the code, then its parts."""
    rows, cols = params[0], params[1]
    for i in range(rows):
        code[i] = np.argmax(scores_u[i * cols : (i + 1) * cols])
    return _row_choice_parts(code, params, m_indices, m_values, n_indices, n_values)


class RowChoiceStructure(Structure):
    """One column per row: ``m_s`` is an ``(r, K)`` 0/1 matrix with a single one in every row."""

    def compiled_oracle(self, u_shape, v_shape):
        params = np.array(u_shape, dtype=np.int64)
        return CompiledOracle(_row_choice_oracle, params, (u_shape[0],), u_shape[0], parts=_row_choice_parts)


def _rowwise_sparsemax(scores: np.ndarray) -> np.ndarray:
    return ks.sparsemax(tf.constant(scores), axis=-1).numpy()


def test_sparsemap_over_a_product_of_simplices_is_rowwise_sparsemax():
    scores = np.random.default_rng(0).normal(size=(5, 4, 6))
    solution = solve(RowChoiceStructure(), scores)
    assert solution.converged.all()
    np.testing.assert_allclose(solution.u, _rowwise_sparsemax(scores), atol=1e-10)


def test_batched_map_and_indicators_use_the_oracle_and_parts():
    scores = np.random.default_rng(1).normal(size=(3, 4, 6))
    codes = RowChoiceStructure().map(scores, None)
    np.testing.assert_array_equal(codes, scores.argmax(axis=-1))
    m, n = RowChoiceStructure().indicators(codes, (4, 6), (0,))
    np.testing.assert_array_equal(m, np.eye(6)[codes])
    assert n.shape == (3, 0)


def test_jacobian_matches_finite_differences():
    rng = np.random.default_rng(2)
    scores, direction = rng.normal(size=(4, 3, 5)), rng.normal(size=(4, 3, 5))
    structure, step = RowChoiceStructure(), 1e-6
    jacobian = solve(structure, scores).jacobian_product(direction)[0]
    plus = solve(structure, scores + step * direction, tol=1e-14).u
    minus = solve(structure, scores - step * direction, tol=1e-14).u
    np.testing.assert_allclose(jacobian, (plus - minus) / (2 * step), atol=1e-6)


def test_layer_and_serialization():
    layer = ks.SparseMAP(RowChoiceStructure())
    scores = np.random.default_rng(3).normal(size=(2, 3, 4)).astype("float32")
    np.testing.assert_allclose(layer(scores).numpy(), _rowwise_sparsemax(scores), atol=1e-6)
    rebuilt = structure_from_config(structure_to_config(RowChoiceStructure()))
    assert isinstance(rebuilt, RowChoiceStructure)


def test_a_structure_name_taken_by_another_module_warns_and_the_newest_class_wins():
    namespace = {"__name__": "another_module", "Structure": Structure}
    with pytest.warns(UserWarning, match=r"'RowChoiceStructure' of module 'another_module' replaces"):
        exec("class RowChoiceStructure(Structure):\n    pass\n", namespace)
    try:
        config = structure_to_config(RowChoiceStructure())
        assert type(structure_from_config(config)) is namespace["RowChoiceStructure"]
    finally:  # this module's class back in the registry, for the other tests
        structure_module._REGISTRY["RowChoiceStructure"] = RowChoiceStructure
