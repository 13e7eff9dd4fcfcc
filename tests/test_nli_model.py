"""ESIM and its alignments: transition bins, the three attentions (masks and gradients), the
layers, one epoch per variant with ``.keras`` save and load, and the sequential alignment's
18 transition parameters."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.applications.nli.alignments import ATTENTIONS, align
from keras_structured.applications.nli.batching import encode_pairs, make_dataset
from keras_structured.applications.nli.layers import Alignment, MaskedPooling
from keras_structured.applications.nli.model import build_esim
from keras_structured.applications.nli.sick_reader import DEFAULT_SICK, read_sick
from keras_structured.applications.nli.transition_bins import BIN_NAMES, binned_transition_scores
from keras_structured.applications.nli.vocabulary import PAD_ID, Vocabulary
from tests.layer_checks import check_layer

SMALL = {"embedding_dim": 12, "units": 8}
# An untrained model's near-uniform scores make SparseMAP stop at max_iter: expected here.
pytestmark = pytest.mark.filterwarnings("ignore::keras_structured.engine.SparseMAPConvergenceWarning")


def _bin_score(weights, tags, n):
    """The binned score of a tag sequence (tags from 1), straight from the paper's definition."""
    jumps = [min(max(b - a, -2), 2) for a, b in itertools.pairwise(tags)]
    score = sum(weights[j + 2] for j in jumps)
    score += weights[5] if tags[0] == 1 else weights[6]
    score += weights[8] if tags[-1] - (n + 1) == -1 else weights[7]
    return score


def test_transition_bins_follow_the_definition():
    weights = np.random.default_rng(0).normal(size=9)
    transitions, start, end = (t.numpy() for t in binned_transition_scores(weights, 5, [5, 3]))
    assert len(BIN_NAMES) == 9 and transitions.shape == (5, 5) and end.shape == (2, 5)
    for n, row in ((5, 0), (3, 1)):
        for tags in itertools.product(range(1, n + 1), repeat=3):
            index = [t - 1 for t in tags]
            chain = start[index[0]] + transitions[index[0], index[1]] + transitions[index[1], index[2]]
            np.testing.assert_allclose(chain + end[row, index[-1]], _bin_score(weights, tags, n))
    with pytest.raises(ValueError, match=r"weights.shape=\(8,\)"):
        binned_transition_scores(np.zeros(8), 3, [3])


def test_the_sequential_alignment_map_is_the_best_binned_tag_sequence():
    """With scores scaled up, SparseMAP returns the MAP: it must be the brute-force best
    sequence under G plus the binned transition, start and end scores (padding included)."""
    rng = np.random.default_rng(1)
    m, n = 3, 4
    scores = rng.normal(size=(1, m + 1, n + 2)).astype("float32")  # one padded premise word, two hypothesis
    weights = rng.normal(size=(2, 9)).astype("float32") * 2
    scale = 50.0
    p2h, h2p = align("sequence", scale * scores, [m], [n], scale * weights)
    for attention, size, tags_count, unary, w in (
        (p2h, m, n, scores[0, :m, :n], weights[0]),
        (h2p, n, m, scores[0, :m, :n].T, weights[1]),
    ):
        best = max(
            itertools.product(range(1, tags_count + 1), repeat=size),
            key=lambda tags: (
                sum(unary[i, t - 1] for i, t in enumerate(tags)) + _bin_score(w, tags, tags_count)
            ),
        )
        expected = np.zeros(attention.shape[1:])
        expected[np.arange(size), np.array(best) - 1] = 1.0
        np.testing.assert_allclose(attention.numpy()[0], expected, atol=1e-5)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_padded_words_get_exactly_zero_attention_and_gradient(attention):
    rng = np.random.default_rng(2)
    premise = tf.constant(rng.normal(size=(3, 5, 4)), tf.float32)
    hypothesis = tf.constant(rng.normal(size=(3, 4, 4)), tf.float32)
    lengths_p, lengths_h = np.array([5, 3, 2]), np.array([4, 4, 1])
    masks = [tf.sequence_mask(lengths_p, 5), tf.sequence_mask(lengths_h, 4)]
    layer = Alignment(attention, transitions_initializer="random_normal")
    with tf.GradientTape() as tape:
        tape.watch([premise, hypothesis])
        weights = layer.attention_weights([premise, hypothesis], mask=masks, return_info=True)
        aligned = layer([premise, hypothesis], mask=masks)
        target = rng.normal(size=(3, 5, 4)).astype("float32")
        loss = tf.reduce_sum(aligned[0] * target) + tf.reduce_sum(aligned[1] ** 2)
    gradients = [g.numpy() for g in tape.gradient(loss, [premise, hypothesis])]
    p2h, h2p = weights["p2h"].numpy(), weights["h2p"].numpy()
    for b, (m, n) in enumerate(zip(lengths_p, lengths_h, strict=True)):
        assert not p2h[b, m:].any() and not p2h[b, :, n:].any()
        assert not h2p[b, n:].any() and not h2p[b, :, m:].any()
        assert not gradients[0][b, m:].any() and not gradients[1][b, n:].any()
        assert np.abs(gradients[0][b, :m]).sum() > 0
        rows = p2h[b, :m, :n].sum(axis=1)
        if attention == "matching":  # a matching of size min(m, n)
            np.testing.assert_allclose(p2h[b, :m, :n].sum(), min(m, n), rtol=1e-5)
            assert np.all(rows <= 1 + 1e-5)
        else:
            np.testing.assert_allclose(rows, 1.0, rtol=1e-5)
    assert weights["structures"].shape == (3, {"softmax": 0, "sequence": 2, "matching": 1}[attention])


def test_unequal_lengths_leave_words_unaligned_in_a_matching():
    scores = tf.constant([[[5.0, 0.0, 0.0], [0.0, 5.0, 0.0]]])
    p2h, h2p = align("matching", scores, [2], [3])
    np.testing.assert_allclose(p2h.numpy()[0], [[1, 0, 0], [0, 1, 0]], atol=1e-6)
    assert not h2p.numpy()[0, 2].any()  # the third hypothesis word stays unaligned


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_alignment_layer(attention, tmp_path):
    rng = np.random.default_rng(3)
    inputs = [rng.normal(size=(2, 4, 3)).astype("float32"), rng.normal(size=(2, 3, 3)).astype("float32")]
    check_layer(Alignment, {"attention": attention}, inputs, tmp_path=tmp_path)


def test_masked_pooling_layer(tmp_path):
    check_layer(
        MaskedPooling,
        {},
        np.random.default_rng(4).normal(size=(2, 3, 4)).astype("float32"),
        tmp_path=tmp_path,
    )
    x = tf.constant([[[1.0, -1.0], [3.0, 5.0], [9.0, 9.0]]])
    pooled = MaskedPooling()(x, mask=tf.constant([[True, True, False]]))
    np.testing.assert_allclose(pooled.numpy(), [[2.0, 2.0, 3.0, 5.0]])


def test_near_uniform_scores_finish_with_the_default_solver_limit():
    """Near-uniform word-pair scores (an untrained or collapsed model) need about 150-260 MAP
    calls per sequence problem: the ESIM model's default limit lets them all finish, where
    the old limit of 100 stopped every one of them short of the exact Jacobian."""
    rng = np.random.default_rng(0)
    premise, hypothesis = (tf.constant(rng.normal(size=(16, 15, 4)) * 0.15) for _ in range(2))
    layer = build_esim(50, attention="sequence", **SMALL).get_layer("alignment")
    info = layer.attention_weights([premise, hypothesis], return_info=True)
    assert np.all(info["converged"]), np.mean(info["converged"])
    assert np.max(info["structures"]) > 1
    limited = Alignment("sequence", max_iter=100)
    limited.build([premise.shape, hypothesis.shape])
    assert not np.any(limited.attention_weights([premise, hypothesis], return_info=True)["converged"])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="Received: attention='dense'"):
        Alignment("dense")
    with pytest.raises(ValueError, match="Received: attention='dense'"):
        build_esim(10, "dense")
    with pytest.raises(ValueError, match="Received: dropout=1.0"):
        build_esim(10, dropout=1.0)
    with pytest.raises(ValueError, match="Received: max_iter=0"):
        Alignment("sequence", max_iter=0)


def _sick_pairs(count: int):
    if not DEFAULT_SICK.is_file():
        pytest.skip(f"SICK is not distributed with the repository; expected at {DEFAULT_SICK}")
    return read_sick(DEFAULT_SICK, ("train",))["train"][:count]


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_each_variant_trains_an_epoch_and_reloads_with_identical_predictions(attention, tmp_path):
    pairs = _sick_pairs(50)
    vocabulary = Vocabulary.from_pairs(pairs, min_count=1)
    keras.utils.set_random_seed(0)
    model = build_esim(vocabulary.num_words, attention, **SMALL)
    model.compile(
        keras.optimizers.SGD(0.1, global_clipnorm=5.0),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
        run_eagerly=True,  # one step: tracing would cost more (graph-mode fit: tests/test_nli_training.py)
    )
    before = [w.numpy().copy() for w in model.trainable_weights]
    history = model.fit(make_dataset(pairs, vocabulary, 50, shuffle=True, seed=0), verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"][0])
    assert all(not np.array_equal(w.numpy(), b) for w, b in zip(model.trainable_weights, before, strict=True))
    assert len(model.trainable_weights) == len(before)
    if attention == "sequence":
        assert model.get_layer("alignment").transitions.shape == (2, 9)  # the 18 extra scalars
    path = tmp_path / f"{attention}.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    batch = encode_pairs(pairs, vocabulary)
    features = {"premise": batch["premise"], "hypothesis": batch["hypothesis"]}
    np.testing.assert_array_equal(restored(features, training=False), model(features, training=False))
    assert restored.get_layer("alignment").get_config() == model.get_layer("alignment").get_config()


def test_the_transition_parameters_get_nonzero_gradients():
    pairs = _sick_pairs(16)
    vocabulary = Vocabulary.from_pairs(pairs, min_count=1)
    keras.utils.set_random_seed(0)
    model = build_esim(vocabulary.num_words, "sequence", **SMALL)
    batch = encode_pairs(pairs, vocabulary)
    transitions = model.get_layer("alignment").transitions
    with tf.GradientTape() as tape:
        logits = model({"premise": batch["premise"], "hypothesis": batch["hypothesis"]}, training=False)
        loss = tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(batch["label"], logits, from_logits=True)
        )
    gradient = tape.gradient(loss, transitions).numpy()
    assert gradient.shape == (2, 9) and np.all(np.isfinite(gradient))
    assert np.count_nonzero(gradient[0]) == 9 and np.count_nonzero(gradient[1]) == 9, gradient


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_padding_neither_changes_predictions_nor_gets_gradient(attention):
    pairs = _sick_pairs(8)
    vocabulary = Vocabulary.from_pairs(pairs, min_count=1)
    keras.utils.set_random_seed(0)
    model = build_esim(vocabulary.num_words, attention, **SMALL)
    batch = encode_pairs(pairs, vocabulary)
    features = {"premise": batch["premise"], "hypothesis": batch["hypothesis"]}
    padded = {side: np.pad(ids, [(0, 0), (0, 3)], constant_values=PAD_ID) for side, ids in features.items()}
    embedding = model.get_layer("embedding").embeddings
    with tf.GradientTape() as tape:
        logits = model(padded, training=False)
        loss = tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(batch["label"], logits, from_logits=True)
        )
    gradient = tf.convert_to_tensor(tape.gradient(loss, embedding)).numpy()
    assert not gradient[PAD_ID].any() and np.abs(gradient[2:]).sum() > 0
    np.testing.assert_allclose(logits.numpy(), model(features, training=False).numpy(), rtol=1e-5, atol=1e-6)


def test_library_matching_layer_agrees_with_the_matching_alignment():
    scores = tf.constant(np.random.default_rng(5).normal(size=(2, 3, 4)), tf.float32)
    lengths = tf.constant([[3, 4], [2, 3]])
    expected = ks.SparseMAPMatching()(scores, lengths=lengths).numpy()
    np.testing.assert_allclose(align("matching", scores, [3, 2], [4, 3])[0].numpy(), expected, atol=1e-6)
