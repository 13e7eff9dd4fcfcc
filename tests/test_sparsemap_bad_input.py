"""SparseMAP ops, layers and losses on inputs an audit found mishandled: errors raised
through Keras layers, empty batches, and the convergence warning."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import (
    BudgetStructure,
    DependencyTreeStructure,
    SequenceStructure,
    SparseMAPConvergenceWarning,
    solve,
)


@pytest.mark.parametrize(
    "scores, call_kwargs, message",
    [
        (np.full((2, 4, 4), np.nan), {}, "NaN or \\+inf"),
        (np.full((2, 4, 4), np.inf), {}, "NaN or \\+inf"),
        (np.zeros((2, 4, 4)), {"lengths": tf.constant([3, 9])}, "lengths"),
        (np.zeros((2, 4, 4)), {"mask": tf.zeros([2, 4], bool)}, "lengths"),
    ],
    ids=["nan", "inf", "lengths", "all-false-mask"],
)
def test_layer_errors_reach_the_user_through_keras(scores, call_kwargs, message):
    layer = ks.SparseMAPDependencyTree()
    with pytest.raises(tf.errors.InvalidArgumentError, match=message) as raised:
        layer(tf.constant(scores), **call_kwargs)
    assert "SparseMAPDependencyTree" in str(raised.value)  # Keras's context survives


EMPTY_CASES = {
    "tree": (DependencyTreeStructure(), (5, 5), None),
    "sequence": (SequenceStructure(), (4, 3), (3, 3, 3)),
    "budget": (BudgetStructure(2), (6,), None),
}


@pytest.mark.parametrize("name", sorted(EMPTY_CASES))
def test_empty_batches_give_empty_results_with_gradients(name):
    structure, u_shape, v_shape = EMPTY_CASES[name]
    eta_u = np.zeros((0,) + u_shape)
    eta_v = None if v_shape is None else np.zeros((0,) + v_shape)
    solution = solve(structure, eta_u, eta_v)
    assert solution.u.shape == eta_u.shape and solution.converged.shape == (0,)
    assert solution.jacobian_product(eta_u)[0].shape == eta_u.shape

    scores_u = tf.constant(eta_u)
    scores_v = None if eta_v is None else tf.constant(eta_v)
    with tf.GradientTape() as tape:
        tape.watch(scores_u)
        u, v, info = ks.sparsemap(structure, scores_u, scores_v, return_info=True)
        total = tf.reduce_sum(u)
    assert u.shape == eta_u.shape and info["weights"].shape[0] == 0
    assert tape.gradient(total, scores_u).shape == eta_u.shape
    codes, m, _ = ks.map_decode(structure, scores_u, scores_v)
    assert codes.shape[0] == 0 and m.shape == eta_u.shape


@pytest.mark.parametrize(
    "loss", [ks.SparseMAPLoss, ks.StructuredHingeLoss, ks.StructuredPerceptronLoss], ids=lambda c: c.__name__
)
def test_structured_losses_on_an_empty_batch(loss):
    scores = tf.zeros([0, 5, 5])
    with tf.GradientTape() as tape:
        tape.watch(scores)
        value = loss(DependencyTreeStructure())(tf.zeros([0, 5]), scores)
        total = tf.reduce_sum(value)
    assert value.shape.num_elements() in (0, 1) and float(total) == 0.0  # Keras: empty in, empty out
    assert tape.gradient(total, scores).shape == (0, 5, 5)


def test_the_default_max_iter_suits_a_tagger_at_initialisation():
    """Near-zero scores (a freshly initialised tagger, K=5, n=8) took over 100 MAP calls,
    the old default, on some of 512 examples; the default now covers them."""
    rng = np.random.default_rng(0)
    unary = tf.constant(rng.normal(size=(512, 8, 5)) * 0.01, tf.float32)
    transitions = tf.constant(rng.normal(size=(5, 5)) * 0.01, tf.float32)
    with pytest.warns(SparseMAPConvergenceWarning):
        ks.sparsemap_sequence(unary, transitions, max_iter=100, exact_jacobian=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparseMAPConvergenceWarning)
        _, _, info = ks.sparsemap_sequence(unary, transitions, return_info=True)
    assert info["converged"].numpy().all()


def test_the_convergence_warning_says_what_to_change_and_points_at_the_caller():
    unary = tf.constant(np.random.default_rng(1).normal(size=(2, 8, 5)))
    with pytest.warns(SparseMAPConvergenceWarning, match="Raise max_iter") as record:
        ks.sparsemap_sequence(unary, tf.zeros([5, 5], tf.float64), max_iter=2)
    assert record[0].filename == __file__
