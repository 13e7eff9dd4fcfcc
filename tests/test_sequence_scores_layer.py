"""SequenceScores: packed linear-chain scores for the structured losses, shared with SparseMAPSequence."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import SequenceStructure
from keras_structured.ops import pack_sequence_scores, unpack_sequence_scores
from tests.layer_checks import check_layer

LENGTHS = [6, 3, 1, 4]


def unary_scores(seed=0, shape=(4, 6, 3)):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding_mask(sizes=LENGTHS, width=6):
    return np.arange(width)[None, :] < np.asarray(sizes)[:, None]


def built_layer(use_boundary=True, seed=1, num_labels=3):
    layer = ks.SequenceScores(use_boundary=use_boundary)
    layer.build((None, None, num_labels))
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.weights])
    return layer


@pytest.mark.parametrize("use_boundary", [False, True])
def test_layer_checks(use_boundary, tmp_path):
    kwargs = {"use_boundary": use_boundary, "transitions_initializer": "random_normal"}
    check_layer(
        ks.SequenceScores, kwargs, unary_scores(), call_kwargs={"mask": padding_mask()}, tmp_path=tmp_path
    )


def test_packs_transitions_and_boundary_scores_at_the_ends():
    layer = built_layer()
    transitions, start, end = (w.numpy() for w in layer.weights)
    unary = unary_scores()
    packed = layer(unary, mask=padding_mask()).numpy()
    expected = unary.copy()
    expected[:, 0] += start
    for b, length in enumerate(LENGTHS):
        expected[b, length - 1] += end
    np.testing.assert_allclose(packed, pack_sequence_scores(expected, transitions).numpy(), rtol=1e-6)
    # Without a mask or lengths the end scores go to the last position.
    unmasked = layer(unary).numpy()[..., 0]
    np.testing.assert_allclose(unmasked[:, -1], unary[:, -1] + end, rtol=1e-6)
    np.testing.assert_allclose(layer(unary, lengths=np.array(LENGTHS)).numpy(), packed, rtol=1e-6)


def test_sparsemap_sequence_on_packed_scores_equals_it_with_the_same_weights():
    scores_layer = built_layer()
    unary, mask = unary_scores(2), padding_mask()
    on_packed = ks.SparseMAPSequence()(scores_layer(unary, mask=mask), mask=mask)
    owner = ks.SparseMAPSequence(use_boundary=True)
    owner.build(unary.shape)
    owner.set_weights(scores_layer.get_weights())  # same names, shapes and order
    assert [w.name for w in owner.weights] == [w.name for w in scores_layer.weights]
    np.testing.assert_allclose(on_packed.numpy(), owner(unary, mask=mask).numpy(), atol=1e-6)
    reader = ks.SparseMAPSequence()
    reader(scores_layer(unary))
    assert not reader.weights  # packed scores bring their own transitions


def test_mask_propagates_to_sparsemap_sequence():
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    scores = ks.SequenceScores(use_boundary=True)(keras.layers.Dense(3)(hidden))
    marginals = ks.SparseMAPSequence()(scores)
    model = keras.Model(tokens, [scores, marginals])
    x = np.array([[3, 4, 5, 0, 0], [1, 2, 0, 0, 0]])
    packed, u = (y.numpy() for y in model(x))
    assert packed.shape == (2, 5, 3, 4)
    assert np.all(u[0, 3:] == 0) and np.all(u[1, 2:] == 0)
    np.testing.assert_allclose(u[0, :3].sum(-1), 1.0, atol=1e-6)
    assert model.outputs[0]._keras_mask is not None


def tagging_data(seed=0, size=48, length=7, vocabulary=12, num_tags=3):
    """Tags that a word alone does not determine: tag = word % 3, except after tag 2 it is always 0."""
    rng = np.random.default_rng(seed)
    words = rng.integers(1, vocabulary, size=(size, length))
    lengths = rng.integers(3, length + 1, size=size)
    tags = words % num_tags
    for i in range(1, length):
        tags[:, i] = np.where(tags[:, i - 1] == 2, 0, tags[:, i])
    padding = np.arange(length)[None, :] >= lengths[:, None]
    words[padding], tags[padding] = 0, -1
    return words, tags


def tagger(num_tags=3):
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(12, 16, mask_zero=True)(tokens)
    # The word alone does not give the tag after a 2: the transitions must learn that.
    scores = ks.SequenceScores(use_boundary=True)(keras.layers.Dense(num_tags)(hidden))
    return keras.Model(tokens, scores), keras.Model(tokens, ks.SparseMAPSequence()(scores))


@pytest.mark.parametrize(
    "loss", [ks.SparseMAPLoss(SequenceStructure()), ks.LinearChainCRFLoss()], ids=["sparsemap", "crf"]
)
def test_a_tagger_trains_with_the_structured_loss_and_predicts_with_sparsemap(loss):
    keras.utils.set_random_seed(0)
    words, tags = tagging_data()
    train, predict = tagger()
    train.compile(keras.optimizers.Adam(0.05), loss)
    history = train.fit(words, tags, epochs=30, batch_size=16, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.2 * losses[0], losses
    # Eager calls (fit ran the graph): tracing two predict functions would cost more.
    u = keras.ops.convert_to_numpy(predict(tf.constant(words)))
    labelled = tags >= 0
    assert np.all(u[~labelled] == 0)
    assert (u.argmax(-1) == tags)[labelled].mean() > 0.95
    codes, _, _ = ks.map_decode(
        SequenceStructure(), *unpack_sequence_scores(train(tf.constant(words))), lengths=labelled.sum(1)
    )
    assert (codes.numpy() == tags)[labelled].mean() > 0.95


def test_errors():
    with pytest.raises(ValueError, match=r"SequenceScores expects .*Received: input_shape=\(2, 3\)"):
        ks.SequenceScores()(tf.zeros([2, 3]))
    with pytest.raises(ValueError, match=r"mask of SequenceScores must have shape \(batch, n\)"):
        ks.SequenceScores()(tf.zeros([2, 4, 3]), mask=tf.ones([2, 3], bool))
    packed = ks.SequenceScores()(tf.zeros([2, 4, 3]))
    with pytest.raises(ValueError, match="packed scores hold them already"):
        ks.SparseMAPSequence(use_boundary=True)(packed)
    with pytest.raises(ValueError, match=r"\(batch, n, K, K \+ 1\).*Received: input_shape=\(2, 4, 3, 3\)"):
        ks.SparseMAPSequence()(tf.zeros([2, 4, 3, 3]))
