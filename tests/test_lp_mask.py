"""LP-SparseMAP with absent variables (masks): a padded example solves as the graph without them.

A graph built for the longest example serves shorter ones when a mask marks the variables they
lack: those are held at zero (with zero gradients), structure factors over them run at the
length that leaves them out, and logic factors see them as off. The reference is always the
graph built for the shorter example itself.
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import DependencyTreeStructure, SequenceStructure
from keras_structured.engine.lp import (
    Budget,
    FactorGraph,
    LPSparseMAPConvergenceWarning,
    Pair,
    StructureFactor,
    Xor,
    lp_sparsemap,
    lp_sparsemap_batch,
)
from tests.test_lp_sparsemap_engine import _directional_difference

LABELS = 3


def tagger(n: int) -> FactorGraph:
    """A tagger of ``n`` words: at most one word of label 1, label-2 indicators chained by pairs."""
    tags = np.arange(n * LABELS).reshape(n, LABELS)
    pairs = [Pair(tags[i, 2], tags[i + 1, 2]) for i in range(n - 1)]
    return FactorGraph(tags.size, [StructureFactor(SequenceStructure(), tags), Budget(tags[:, 1], 1), *pairs])


def tagger_mask(n: int, lengths) -> np.ndarray:
    lengths = np.asarray(lengths)
    words = np.arange(n)[None, :, None] < lengths[:, None, None]
    return np.broadcast_to(words, (len(lengths), n, LABELS)).reshape(len(lengths), -1)


def tagger_scores_of(graph: FactorGraph, eta_v: np.ndarray, length: int) -> list:
    """The additional scores of the tagger of ``length`` words, cut from the padded graph's."""
    sequence, budget, *pairs = graph.split_additional(eta_v)
    return [sequence[: max(length - 1, 0)], budget, *pairs[: max(length - 1, 0)]]


def tree_with_budget(words: int) -> FactorGraph:
    arcs = np.arange((words + 1) ** 2).reshape(words + 1, words + 1)
    return FactorGraph(arcs.size, [StructureFactor(DependencyTreeStructure(), arcs), Budget(arcs[0, 1:], 2)])


def test_a_masked_tagger_equals_the_tagger_of_each_length():
    n, lengths = 12, [12, 7, 3, 1, 0]
    graph = tagger(n)
    rng = np.random.default_rng(0)
    eta_u = rng.normal(size=(len(lengths), graph.num_variables))
    eta_v = rng.normal(size=(len(lengths), graph.v_size))
    mask = tagger_mask(n, lengths)
    solutions = lp_sparsemap_batch(graph, eta_u, eta_v, mask=mask)
    assert solutions[-1].converged and not solutions[-1].u.any()  # no word: no graph to compare with
    for b, length in enumerate(lengths[:-1]):
        solution, present = solutions[b], length * LABELS
        scores_v = tagger_scores_of(graph, eta_v[b], length)
        reference = lp_sparsemap(tagger(length), eta_u[b, :present], scores_v)
        assert solution.converged and solution.polished and reference.polished
        np.testing.assert_allclose(solution.u[:present], reference.u, rtol=0, atol=1e-9)
        assert not solution.u[present:].any()
        pairs = solution.v[2:]
        for pair, expected in zip(pairs, reference.v[2:], strict=False):
            np.testing.assert_allclose(pair, expected, rtol=0, atol=1e-9)
        assert not np.concatenate(pairs[max(length - 1, 0) :] + [np.zeros(0)]).any()
        # The gradients: those of the shorter tagger, exactly zero on the absent variables.
        g_u = rng.normal(size=graph.num_variables)
        grad_u, _ = solution.vjp(g_u)
        np.testing.assert_allclose(grad_u[:present], reference.vjp(g_u[:present])[0], rtol=0, atol=1e-9)
        assert not grad_u[present:].any()


def test_a_masked_tree_with_a_budget_equals_the_smaller_tree():
    words, lengths = 9, [9, 5, 2]
    graph = tree_with_budget(words)
    rng = np.random.default_rng(1)
    eta = rng.normal(size=(len(lengths), words + 1, words + 1))
    present = DependencyTreeStructure().present_parts(np.array(lengths), (words + 1, words + 1))
    batch = len(lengths)
    solutions = lp_sparsemap_batch(graph, eta.reshape(batch, -1), mask=present.reshape(batch, -1))
    for b, length in enumerate(lengths):
        reference = lp_sparsemap(tree_with_budget(length), eta[b, : length + 1, : length + 1].ravel())
        u = solutions[b].u.reshape(words + 1, words + 1)
        assert solutions[b].polished
        np.testing.assert_allclose(u[: length + 1, : length + 1].ravel(), reference.u, rtol=0, atol=1e-9)
        assert not u[length + 1 :].any() and not u[:, length + 1 :].any()


def test_absent_variables_of_logic_factors_are_off():
    rng = np.random.default_rng(2)
    eta_u = rng.normal(size=4)
    masked = lp_sparsemap(FactorGraph(4, [Xor([0, 1, 2, 3]), Pair(2, 3)]), eta_u, mask=[1, 1, 1, 0])
    reference = lp_sparsemap(FactorGraph(3, [Xor([0, 1, 2])]), eta_u[:3])
    np.testing.assert_allclose(masked.u, np.append(reference.u, 0.0), rtol=0, atol=1e-9)
    assert masked.v[1].item() == 0.0


def test_the_masked_gradient_matches_finite_differences():
    n = 6
    graph = tagger(n)
    rng = np.random.default_rng(3)
    mask = tagger_mask(n, [4])[0]
    eta_u, eta_v = rng.normal(size=graph.num_variables), graph.split_additional(rng.normal(size=graph.v_size))
    g_u, d_u = rng.normal(size=(2, graph.num_variables))
    g_v = [rng.normal(size=part.shape) for part in eta_v]
    d_v = [rng.normal(size=part.shape) for part in eta_v]
    grad_u, grad_v = lp_sparsemap(graph, eta_u, eta_v, mask=mask).vjp(g_u, g_v)

    def masked(graph_, eta_u_, eta_v_):
        return lp_sparsemap(graph_, eta_u_, eta_v_, mask=mask)

    expected = _directional_difference(graph, eta_u, eta_v, g_u, g_v, d_u, d_v, solve=masked)
    product = grad_u @ d_u + sum(np.sum(g * d) for g, d in zip(grad_v, d_v, strict=True))
    assert product == pytest.approx(expected, abs=1e-6)


def test_the_op_the_layer_and_the_loss_take_the_mask():
    n, lengths = 6, [6, 4]
    graph = tagger(n)
    rng = np.random.default_rng(4)
    eta_u = rng.normal(size=(2, graph.num_variables)).astype("float32")
    mask = tagger_mask(n, lengths)
    u, _ = ks.lp_sparsemap(graph, eta_u, mask=mask)
    expected = [s.u for s in lp_sparsemap_batch(graph, eta_u, mask=mask)]
    np.testing.assert_allclose(u.numpy(), expected, atol=1e-6)
    layer = ks.LPSparseMAP(graph)
    np.testing.assert_allclose(layer(eta_u, mask=mask).numpy(), u.numpy(), atol=0)
    traced = tf.function(lambda x, m: layer(x, mask=m))(tf.constant(eta_u), tf.constant(mask))
    np.testing.assert_allclose(traced.numpy(), u.numpy(), atol=0)
    # The loss: gold -1 on the absent variables; the second example's loss is that of the
    # tagger of 4 words.
    gold = np.zeros((2, n, LABELS), "float32")
    gold[:, :, 0] = 1.0
    gold[1, 4:] = -1.0
    gold = gold.reshape(2, -1)
    losses = ks.lp_sparsemap_loss(gold, eta_u, graph).numpy()
    short = ks.lp_sparsemap_loss(gold[1:, : 4 * LABELS], eta_u[1:, : 4 * LABELS], tagger(4)).numpy()
    np.testing.assert_allclose(losses[1], short[0], rtol=1e-6)
    scores = tf.Variable(eta_u)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(ks.lp_sparsemap_loss(gold, scores, graph))
    assert not tape.gradient(total, scores).numpy()[1, 4 * LABELS :].any()


def test_a_padded_batch_trains_with_the_loss_and_predicts_with_the_mask():
    n, lengths = 5, np.array([5, 3, 2, 4] * 8)
    graph = tagger(n)
    rng = np.random.default_rng(5)
    features = rng.normal(size=(len(lengths), 8)).astype("float32")
    mask = tagger_mask(n, lengths)
    gold = np.zeros((len(lengths), n, LABELS), "float32")
    gold[..., 0] = 1.0
    gold = np.where(mask, gold.reshape(len(lengths), -1), -1.0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(graph.num_variables)])
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss=ks.LPSparseMAPLoss(graph))
    history = model.fit(features, gold, epochs=10, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < 0.2 * history.history["loss"][0]
    predicted = ks.LPSparseMAP(graph)(model(features), mask=mask).numpy()
    assert not predicted[~mask].any()
    np.testing.assert_array_equal(predicted[mask].reshape(-1) > 0.5, gold[mask] == 1.0)


def test_bad_masks_raise_clear_errors():
    graph = tagger(4)
    eta_u = np.zeros((2, graph.num_variables))
    with pytest.raises(ValueError, match=r"mask must hold booleans .* Received: mask.shape=\(2, 5\)"):
        lp_sparsemap_batch(graph, eta_u, mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match="mask must hold booleans"):
        lp_sparsemap_batch(graph, eta_u, mask=np.full((2, graph.num_variables), 0.5))
    with pytest.raises(ValueError, match=r"mask must have shape \(batch, 12\)"):
        ks.lp_sparsemap(graph, eta_u, mask=np.ones((2, 3), bool))
    hole = tagger_mask(4, [4, 4])
    hole[1, LABELS : 2 * LABELS] = False  # the second word absent, the third present
    with pytest.raises(ValueError, match="example 1 are not those of a SequenceStructure of any length"):
        lp_sparsemap_batch(graph, eta_u, mask=hole)


def test_masks_and_gold_labels_of_another_batch_or_other_values_raise_naming_them():
    """They failed with numpy's reshape message (as an error blaming the scores), or, for mask
    values other than 0 and 1, were cast to booleans silently."""
    graph = tagger(2)
    eta_u = np.zeros((3, graph.num_variables), "float32")
    with pytest.raises(
        ValueError, match=r"mask must have the same batch size as the scores \(3\).*mask.shape=\(2, 6\)"
    ):
        ks.lp_sparsemap(graph, eta_u, mask=np.ones((2, graph.num_variables), bool))
    with pytest.raises(ValueError, match=r"mask must have the same batch size.*mask.shape=\(2, 6\)"):
        ks.LPSparseMAP(graph)(eta_u, mask=np.ones((2, graph.num_variables), bool))
    gold = np.zeros((2, graph.num_variables), "float32")
    gold[:, 0] = gold[:, LABELS] = 1.0
    with pytest.raises(ValueError, match=r"y_true must have the same batch size.*y_true.shape=\(2, 6\)"):
        ks.LPSparseMAPLoss(graph)(gold, eta_u)
    for values in (2, 0.5, -1):
        with pytest.raises(ValueError, match=rf"mask must hold booleans \(or 0/1\).*mask values=\[{values}"):
            ks.lp_sparsemap(graph, eta_u, mask=np.full(eta_u.shape, values, "float32"))
    ones = ks.lp_sparsemap(graph, eta_u, mask=np.ones(eta_u.shape, "int32"))[0]
    np.testing.assert_array_equal(ones, ks.lp_sparsemap(graph, eta_u)[0])
    # Batch sizes known only at run time: the host names the mask (TensorFlow's run-time error).
    solve = tf.function(
        lambda u, m: ks.lp_sparsemap(graph, u, mask=m)[0],
        input_signature=[tf.TensorSpec((None, 6), tf.float32), tf.TensorSpec((None, 6), tf.bool)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"mask must have the shape of .* \(3, 6\)"):
        solve(eta_u, np.ones((2, 6), bool))


def test_a_logic_factor_left_without_variables_is_infeasible_and_flagged():
    graph = FactorGraph(3, [Xor([0, 1]), Budget([0, 1, 2], 2)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (solution,) = lp_sparsemap_batch(graph, np.zeros((1, 3)), mask=[[0, 0, 1]])
    assert not solution.converged
    assert [w.category for w in caught] == [LPSparseMAPConvergenceWarning]


def test_float32_taggers_of_20_to_50_words_padded_to_50_equal_their_own_graphs():
    """The sizes users train at, in float32 through the op: values and gradients equal the
    float64 solves of each example's own graph to float32 rounding."""
    n, labels = 50, LABELS
    graph = tagger(n)
    rng = np.random.default_rng(6)
    lengths = rng.integers(20, n + 1, size=8)
    mask = tagger_mask(n, lengths)
    eta_u = rng.normal(size=(8, graph.num_variables)).astype("float32")
    eta_v = rng.normal(size=(8, graph.v_size)).astype("float32")
    weights = rng.normal(size=(8, graph.num_variables)).astype("float32")
    scores = tf.Variable(eta_u)
    with tf.GradientTape() as tape:
        u, _, info = ks.lp_sparsemap(graph, scores, eta_v, mask=mask, return_info=True)
        total = tf.reduce_sum(u * weights)
    grad = tape.gradient(total, scores).numpy()
    assert info["converged"].numpy().all()
    for b, length in enumerate(lengths):
        present = length * labels
        scores_v = tagger_scores_of(graph, eta_v[b].astype(np.float64), length)
        reference = lp_sparsemap(tagger(length), eta_u[b, :present].astype(np.float64), scores_v)
        np.testing.assert_allclose(u.numpy()[b, :present], reference.u, rtol=0, atol=1e-6)
        expected = reference.vjp(weights[b, :present].astype(np.float64))[0]
        np.testing.assert_allclose(grad[b, :present], expected, rtol=0, atol=1e-5)
        assert not u.numpy()[b, present:].any() and not grad[b, present:].any()
