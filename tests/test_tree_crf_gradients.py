"""The tree CRF's compiled backward pass against finite differences, enumeration, the
pure-TensorFlow elimination and itself in float64."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf

from keras_structured.engine import matrix_tree
from keras_structured.ops.crf import (
    _eliminated_log_partition,
    _eliminated_marginals,
    _tree_inputs,
    tree_crf_log_partition,
    tree_crf_marginals,
)
from tests.jacobians import row_jacobians
from tests.test_crf import brute_force_tree_crf


def confident_scores(rng: np.random.Generator, batch: int, words: int) -> np.ndarray:
    """Every word has a favourite head among the words (cycles are likely) and root arcs 20 lower."""
    scores = rng.normal(size=(batch, words + 1, words + 1)) * 3
    for m in range(1, words + 1):
        scores[np.arange(batch), rng.integers(1, words + 1, size=batch), m] += 15.0
    scores[:, 0, 1:] -= 20.0
    return scores


def gradient(scores, lengths, single_root, weights=None):
    """``(log Z, d <weights, log Z> / d scores)`` by :func:`tree_crf_log_partition`, as losses take it."""
    scores = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(scores)
        log_z = tree_crf_log_partition(scores, lengths, single_root=single_root)
        total = tf.reduce_sum(log_z if weights is None else log_z * weights)
    return log_z.numpy(), tape.gradient(total, scores).numpy()


def eliminated_gradient(scores, lengths, single_root):
    """``(log Z, marginals)`` by automatic differentiation of the pure-TensorFlow elimination."""
    scores, lengths = _tree_inputs(tf.constant(scores), lengths)
    log_z = _eliminated_log_partition(scores, lengths, single_root)
    return log_z.numpy(), _eliminated_marginals(scores, lengths, single_root).numpy()


@pytest.mark.parametrize("single_root", [False, True])
def test_gradient_matches_finite_differences(single_root):
    scores = np.random.default_rng(10 + single_root).normal(size=(3, 6, 6))
    lengths = tf.constant([5, 3, 0])
    theoretical, numerical = tf.test.compute_gradient(
        lambda s: tree_crf_log_partition(s, lengths, single_root=single_root), [tf.constant(scores)]
    )
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-8)
    assert np.abs(theoretical[0]).max() > 0.1


def test_gradient_scales_each_example_by_its_upstream_gradient():
    scores = np.random.default_rng(12).normal(size=(3, 5, 5))
    weights = tf.constant([2.0, -0.5, 0.0], tf.float64)
    lengths = tf.constant([4, 2, 3])
    _, weighted = gradient(scores, lengths, False, weights)
    for b, length in enumerate([4, 2, 3]):
        _, expected = brute_force_tree_crf(scores[b], length, False)
        np.testing.assert_allclose(weighted[b], weights.numpy()[b] * expected, atol=1e-12)


@pytest.mark.parametrize("single_root", [False, True])
def test_marginals_are_differentiable(single_root):
    # Second derivatives of log Z (through the pure-TensorFlow elimination), in a graph.
    scores = np.random.default_rng(13).normal(size=(2, 4, 4))
    marginals = functools.partial(tree_crf_marginals, single_root=single_root)
    theoretical, numerical = row_jacobians(marginals, scores, np.array([3, 2]))
    np.testing.assert_allclose(theoretical, numerical, atol=1e-8)
    assert np.abs(theoretical).max() > 0.05


@pytest.mark.parametrize("single_root", [False, True])
def test_compiled_gradient_matches_the_eliminations_autodiff(single_root):
    # float64 confident scores with padding: the hand-written backward pass and TensorFlow's
    # reverse mode of the same elimination agree to roundoff.
    scores = confident_scores(np.random.default_rng(14 + single_root), 4, 30)
    lengths = tf.constant([30, 23, 1, 0])
    log_z, marginals = gradient(scores, lengths, single_root)
    expected_log_z, expected_marginals = eliminated_gradient(scores, lengths, single_root)
    np.testing.assert_allclose(log_z, expected_log_z, rtol=1e-13)
    np.testing.assert_allclose(marginals, expected_marginals, atol=1e-10)
    np.testing.assert_allclose(marginals.sum(1)[:, 1:], np.arange(30) < lengths.numpy()[:, None], atol=1e-12)
    assert not marginals[3].any()


@pytest.mark.parametrize("words", [50, 100])
@pytest.mark.parametrize("single_root", [False, True])
def test_float32_gradients_match_float64(words, single_root):
    # Computed in float64 inside: float32 inputs lose only the rounding of the results
    # (a relative 6e-8); a float32 elimination loses about 4e-6 at n=100.
    scores = confident_scores(np.random.default_rng(words + single_root), 4, words).astype(np.float32)
    lengths = tf.constant([words, words - 7, 1, 0])
    log_z32, marginals32 = gradient(scores, lengths, single_root)
    log_z64, marginals64 = gradient(scores.astype(np.float64), lengths, single_root)
    assert log_z32.dtype == marginals32.dtype == np.float32
    np.testing.assert_allclose(log_z32, log_z64, rtol=1e-7)
    np.testing.assert_allclose(marginals32, marginals64, rtol=0, atol=2e-7)


def test_half_precision_inputs_get_float32_results():
    scores = tf.constant(np.random.default_rng(15).normal(size=(2, 5, 5)), tf.float16)
    lengths = tf.constant([4, 2])
    log_z = tree_crf_log_partition(scores, lengths)
    marginals = tree_crf_marginals(scores, lengths)
    assert log_z.dtype == marginals.dtype == tf.float32
    expected_log_z, expected_marginals = eliminated_gradient(tf.cast(scores, tf.float64), lengths, False)
    np.testing.assert_allclose(log_z.numpy(), expected_log_z, rtol=1e-7)
    np.testing.assert_allclose(marginals.numpy(), expected_marginals, atol=2e-7)


@pytest.mark.slow  # 10 s: memory of long sentences
def test_kernel_keeps_factors_of_quadratic_size():
    # Forward stores the eliminated Laplacian, not every step: O(n^2) per sentence.
    scores = np.zeros((1, 301, 301))
    outputs = matrix_tree.factorize(scores, np.array([300]), False)
    assert sum(array.size for array in outputs) <= 4 * 301 * 301  # weights, factors, gains, vectors
    mu = matrix_tree.marginals(*outputs, np.array([300]))
    np.testing.assert_allclose(mu.sum(1)[0, 1:], 1.0, atol=1e-12)


def test_a_batch_split_across_threads_gives_each_sentence_its_own_results():
    # 8 sentences of 60 words are split into shares run in parallel; one sentence is not.
    scores = confident_scores(np.random.default_rng(16), 8, 60)
    lengths = np.array([60, 59, 31, 0, 60, 12, 1, 45])
    for single_root in (False, True):
        outputs = matrix_tree.factorize(scores, lengths, single_root)
        mu = matrix_tree.marginals(*outputs, lengths)
        for b in range(8):
            alone = matrix_tree.factorize(scores[b : b + 1], lengths[b : b + 1], single_root)
            np.testing.assert_array_equal(outputs[0][b], alone[0][0])
            np.testing.assert_array_equal(mu[b], matrix_tree.marginals(*alone, lengths[b : b + 1])[0])
