"""Structured losses and MAP decoding: values, gradients, Keras training and serialization."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_structured.engine import SequenceStructure, SimplexStructure, solve, viterbi
from keras_structured.engine.budget import BudgetStructure
from keras_structured.engine.dependency_tree import DependencyTreeStructure, best_trees
from keras_structured.engine.matching import MatchingStructure
from keras_structured.losses import (
    LinearChainCRFLoss,
    MarginSparseMAPLoss,
    SparseMAPLoss,
    StructuredHingeLoss,
    StructuredPerceptronLoss,
    TreeCRFLoss,
)
from keras_structured.losses.fenchel_young import SparsemaxLoss
from keras_structured.ops.decode import map_decode
from keras_structured.ops.sequence_scores import pack_sequence_scores, unpack_sequence_scores
from tests.test_crf import brute_force_chain_crf, brute_force_tree_crf, dependency_trees

STRUCTURED_LOSSES = [SparseMAPLoss, MarginSparseMAPLoss, StructuredPerceptronLoss, StructuredHingeLoss]
SPARSEMAP_LOSSES = (SparseMAPLoss, MarginSparseMAPLoss)


def make_loss(loss_class, structure, **kwargs):
    """A float64 per-example loss; SparseMAP losses solve to a tight tolerance."""
    if loss_class in SPARSEMAP_LOSSES:
        kwargs.setdefault("tol", 1e-12)
    if loss_class is MarginSparseMAPLoss or loss_class is StructuredHingeLoss:
        kwargs.setdefault("cost_weight", 0.7)
    return loss_class(structure, reduction="none", dtype="float64", **kwargs)


def value_and_gradient(loss, y_true, y_pred):
    y_pred = tf.constant(y_pred, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(y_pred)
        values = loss(tf.constant(y_true, tf.float64), y_pred)
    return values.numpy(), tape.gradient(values, y_pred).numpy()


def random_sequence_problem(seed, batch=4, n=4, num_labels=3, scale=1.0):
    rng = np.random.default_rng(seed)
    unary = rng.normal(size=(batch, n, num_labels)) * scale
    pairwise = rng.normal(size=(batch, n - 1, num_labels, num_labels)) * scale
    lengths = np.array([n, n - 1, 1, 0])[:batch]
    tags = rng.integers(0, num_labels, size=(batch, n))
    tags[np.arange(n)[None, :] >= lengths[:, None]] = -1
    return unary, pairwise, lengths, tags


def sequence_score(unary, pairwise, tags):
    length = int((tags >= 0).sum())
    return sum(unary[i, tags[i]] for i in range(length)) + sum(
        pairwise[i, tags[i], tags[i + 1]] for i in range(length - 1)
    )


def expected_sequence_loss(loss, unary, pairwise, lengths, tags):
    """Loss values and ``(predicted - gold)`` packed gradients from the engine and enumeration."""
    structure = SequenceStructure()
    gold_m, gold_n = structure.indicators(tags, unary.shape[1:], pairwise.shape[1:], lengths)
    weight = getattr(loss, "cost_weight", 0.0)
    cost_unary = unary + weight * (1 - 2 * gold_m)
    values = np.zeros(len(tags))
    if isinstance(loss, SPARSEMAP_LOSSES):
        solution = solve(structure, cost_unary, pairwise, lengths=lengths, tol=1e-12)
        u, v = solution.u, solution.v
        gold = np.einsum("bik,bik->b", unary, gold_m) + np.einsum("bikl,bikl->b", pairwise, gold_n)
        values = solution.objective + weight * gold_m.sum((1, 2)) - gold + 0.5 * gold_m.sum((1, 2))
    else:
        u, v = structure.indicators(
            viterbi(cost_unary, pairwise, lengths), unary.shape[1:], pairwise.shape[1:]
        )
        for b, length in enumerate(lengths):
            best = max(
                sequence_score(unary[b], pairwise[b], np.array(y))
                + 2 * weight * sum(y[i] != tags[b, i] for i in range(length))  # 2 parts per wrong tag
                for y in itertools.product(range(unary.shape[-1]), repeat=length)
            )
            values[b] = best - sequence_score(unary[b], pairwise[b], tags[b])
    return values, pack_sequence_scores(u - gold_m, v - gold_n).numpy()


@pytest.mark.parametrize("loss_class", STRUCTURED_LOSSES)
def test_sequence_loss_values_and_gradients(loss_class):
    loss = make_loss(loss_class, SequenceStructure())
    for seed in range(3):
        unary, pairwise, lengths, tags = random_sequence_problem(seed)
        values, gradient = value_and_gradient(loss, tags, pack_sequence_scores(unary, pairwise))
        expected_values, expected_gradient = expected_sequence_loss(loss, unary, pairwise, lengths, tags)
        assert np.all(values >= 0) and values[-1] == 0  # the empty sequence costs nothing
        np.testing.assert_allclose(values, expected_values, atol=1e-8)
        np.testing.assert_allclose(gradient, expected_gradient, atol=1e-6)


@pytest.mark.parametrize("loss_class", STRUCTURED_LOSSES)
def test_losses_are_nonnegative_and_zero_on_gold_with_a_margin(loss_class):
    loss = make_loss(loss_class, SequenceStructure())
    for seed in range(10):
        unary, pairwise, lengths, tags = random_sequence_problem(seed, scale=3.0)
        values, _ = value_and_gradient(loss, tags, pack_sequence_scores(unary, pairwise))
        assert np.all(values >= 0)
        gold_m, gold_n = SequenceStructure().indicators(tags, unary.shape[1:], pairwise.shape[1:])
        values, gradient = value_and_gradient(loss, tags, pack_sequence_scores(5 * gold_m, 5 * gold_n))
        assert np.all(values == 0) and np.all(gradient == 0)


@pytest.mark.parametrize(
    "loss_class", STRUCTURED_LOSSES + [lambda structure, **kwargs: LinearChainCRFLoss(**kwargs)]
)
def test_forbidden_transitions_and_half_precision(loss_class):
    rng = np.random.default_rng(17)
    transitions = rng.normal(size=(3, 3))
    transitions[0, 1] = -np.inf
    scores = pack_sequence_scores(rng.normal(size=(2, 4, 3)), transitions)
    tags = np.array([[0, 0, 2, 1], [2, 2, -1, -1]])
    values, gradient = value_and_gradient(
        loss_class(SequenceStructure(), reduction="none", dtype="float64"), tags, scores
    )
    assert np.all(np.isfinite(values)) and np.all(np.isfinite(gradient)) and np.all(values > 0)
    half = loss_class(SequenceStructure(), reduction="none", dtype="float16")(
        tags, tf.cast(scores, tf.float16)
    )
    np.testing.assert_allclose(half.numpy(), values, rtol=1e-2)


def test_sparsemap_loss_over_the_simplex_is_the_sparsemax_loss():
    rng = np.random.default_rng(11)
    scores, labels = rng.normal(size=(6, 5)), rng.integers(0, 5, size=6)
    values, gradient = value_and_gradient(make_loss(SparseMAPLoss, SimplexStructure()), labels, scores)
    reference = SparsemaxLoss(sparse_labels=True, reduction="none", dtype="float64")
    expected_values, expected_gradient = value_and_gradient(reference, labels, scores)
    np.testing.assert_allclose(values, expected_values, atol=1e-12)
    np.testing.assert_allclose(gradient, expected_gradient, atol=1e-12)


def random_gold(structure, rng, batch, size):
    """Random gold codes (and the unary score shape) for the structures without packing."""
    if isinstance(structure, DependencyTreeStructure):
        lengths = np.array([size, size - 1, 1, 0])[:batch]
        heads = np.full((batch, size + 1), -1)
        for b, length in enumerate(lengths):
            trees = dependency_trees(length)
            heads[b, : length + 1] = trees[rng.integers(len(trees))]
        return heads, (batch, size + 1, size + 1), lengths
    if isinstance(structure, MatchingStructure):
        return np.stack([rng.permutation(size) for _ in range(batch)]), (batch, size, size), None
    chosen = np.argsort(rng.random((batch, size)), axis=1)[:, : structure.k]
    codes = np.zeros((batch, size), dtype=np.int64)
    np.put_along_axis(codes, chosen, 1, axis=1)
    return codes, (batch, size), None


@pytest.mark.parametrize("loss_class", STRUCTURED_LOSSES)
@pytest.mark.parametrize(
    "structure",
    [DependencyTreeStructure(), MatchingStructure(), BudgetStructure(2)],
    ids=lambda structure: type(structure).__name__,
)
def test_losses_over_other_structures(loss_class, structure):
    rng = np.random.default_rng(12)
    codes, shape, lengths = random_gold(structure, rng, batch=4, size=3)
    scores = rng.normal(size=shape)
    loss = make_loss(loss_class, structure)
    values, gradient = value_and_gradient(loss, codes, scores)
    gold_m, _ = structure.indicators(codes, shape[1:], (0,), lengths)
    cost_scores = scores + getattr(loss, "cost_weight", 0.0) * (1 - 2 * gold_m)
    if isinstance(loss, SPARSEMAP_LOSSES):
        predicted = solve(structure, cost_scores, lengths=lengths, tol=1e-12).u
    else:
        predicted = structure.indicators(structure.map(cost_scores, None, lengths), shape[1:], (0,), lengths)[
            0
        ]
    assert np.all(values >= 0)
    np.testing.assert_allclose(gradient, predicted - gold_m, atol=1e-6)
    values, _ = value_and_gradient(loss, codes, 5 * gold_m)
    assert np.all(values == 0)


def test_crf_loss_values_and_gradients_match_enumeration():
    unary, pairwise, lengths, tags = random_sequence_problem(13)
    values, gradient = value_and_gradient(
        LinearChainCRFLoss(reduction="none", dtype="float64"), tags, pack_sequence_scores(unary, pairwise)
    )
    gold_m, gold_n = SequenceStructure().indicators(tags, unary.shape[1:], pairwise.shape[1:])
    zeros = np.zeros(unary.shape[-1])
    for b, length in enumerate(lengths):
        log_z, u, v = brute_force_chain_crf(unary[b], pairwise[b], zeros, zeros, length)
        np.testing.assert_allclose(
            values[b], log_z - sequence_score(unary[b], pairwise[b], tags[b]), atol=1e-12
        )
        expected = pack_sequence_scores((u - gold_m[b])[None], (v - gold_n[b])[None]).numpy()[0]
        np.testing.assert_allclose(gradient[b], expected, atol=1e-12)


@pytest.mark.parametrize("single_root", [False, True])
def test_tree_crf_loss_values_and_gradients_match_enumeration(single_root):
    rng = np.random.default_rng(14)
    scores = rng.normal(size=(4, 5, 5))
    heads = np.full((4, 5), -1)
    for b, length in enumerate([4, 3, 1, 0]):
        trees = dependency_trees(length, single_root)
        heads[b, : length + 1] = trees[rng.integers(len(trees))]
    loss = TreeCRFLoss(single_root=single_root, reduction="none", dtype="float64")
    values, gradient = value_and_gradient(loss, heads, scores)
    gold_m, _ = DependencyTreeStructure().indicators(heads, (5, 5), (0,))
    for b, length in enumerate([4, 3, 1, 0]):
        log_z, marginals = brute_force_tree_crf(scores[b], length, single_root)
        np.testing.assert_allclose(values[b], log_z - np.sum(scores[b] * gold_m[b]), atol=1e-12)
        np.testing.assert_allclose(gradient[b], marginals - gold_m[b], atol=1e-10)
    values, _ = value_and_gradient(loss, heads, 50 * gold_m)
    np.testing.assert_allclose(values, 0.0, atol=1e-15)


def test_map_decode_matches_the_oracles_with_static_shapes():
    unary, pairwise, lengths, _ = random_sequence_problem(15)
    unary, pairwise = unary.astype(np.float16), pairwise.astype(np.float16)
    codes, m, n = map_decode(SequenceStructure(), unary, pairwise, lengths)
    np.testing.assert_array_equal(codes.numpy(), viterbi(unary, pairwise, lengths))
    assert m.dtype == tf.float16 and n.shape == pairwise.shape

    @tf.function(input_signature=[tf.TensorSpec([None, 5, 5], tf.float32), tf.TensorSpec([None], tf.int32)])
    def parse(scores, lengths):
        return map_decode(DependencyTreeStructure(single_root=True), scores, lengths=lengths)

    scores = np.random.default_rng(16).normal(size=(3, 5, 5)).astype(np.float32)
    codes, m, n = parse(scores, tf.constant([4, 2, 0]))
    expected = best_trees(scores, np.array([4, 2, 0]), single_root=True)
    np.testing.assert_array_equal(codes.numpy(), expected)
    concrete = parse.get_concrete_function()
    assert [t.shape.as_list() for t in concrete.structured_outputs] == [[None, 5], [None, 5, 5], [None, 0]]


def test_map_decode_forbidden_and_invalid_scores():
    unary = np.zeros((1, 3, 2))
    transitions = np.zeros((1, 2, 2, 2))
    transitions[:, :, 0, 0] = -np.inf
    unary[0, :, 0] = 1.0  # all-0 labels would win but uses forbidden transitions
    codes, _, n = map_decode(SequenceStructure(), unary, transitions)
    assert codes.numpy()[0].tolist() == [0, 1, 0] and np.all(n.numpy()[..., 0, 0] == 0)
    with pytest.raises(ValueError, match="forbidden"):
        map_decode(SimplexStructure(), [[-np.inf, -np.inf]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="forbidden"):
        tf.function(lambda scores: map_decode(SimplexStructure(), scores))(tf.fill([1, 2], -np.inf))
    with pytest.raises(tf.errors.InvalidArgumentError, match="eta_u"):
        map_decode(SimplexStructure(), [[np.nan, 0.0]])
    with pytest.raises(ValueError, match="Received: eta_u per-example shape"):
        map_decode(SimplexStructure(), tf.zeros([2, 3, 3]))


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="Received: cost_weight"):
        MarginSparseMAPLoss(SimplexStructure(), cost_weight=-1.0)
    with pytest.raises(ValueError, match="Received: method"):
        SparseMAPLoss(SimplexStructure(), method="exact")
    with pytest.raises(ValueError, match="Received: structure"):
        StructuredHingeLoss("sequence")
    with pytest.raises(ValueError, match="Received: y_true.shape"):
        SparseMAPLoss(SequenceStructure())(tf.zeros([2, 3]), tf.zeros([2, 4, 3, 4]))
    with pytest.raises(ValueError, match="Received: y_true.shape"):
        TreeCRFLoss()(tf.zeros([2, 3]), tf.zeros([2, 4, 4]))
    with pytest.raises(ValueError, match="Received: shape"):
        LinearChainCRFLoss()(tf.zeros([2, 4]), tf.zeros([2, 4, 3, 3]))


@keras.saving.register_keras_serializable(package="tests")
class PackedSequenceScores(keras.layers.Layer):
    """Test-only layer: packs unary scores with a learned transition matrix."""

    def build(self, input_shape):
        num_labels = input_shape[-1]
        self.transitions = self.add_weight(shape=(num_labels, num_labels), initializer="zeros")

    def call(self, unary):
        return pack_sequence_scores(unary, self.transitions)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (input_shape[-1] + 1,)


@keras.saving.register_keras_serializable(package="tests")
class BilinearArcScores(keras.layers.Layer):
    """Test-only layer: arc scores ``[head, modifier] = e_h^T W e_m`` of word embeddings."""

    def build(self, input_shape):
        dim = input_shape[-1]
        self.kernel = self.add_weight(shape=(dim, dim), initializer="glorot_uniform")

    def call(self, embeddings):
        return tf.einsum("bhd,de,bme->bhm", embeddings, self.kernel, embeddings)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], input_shape[1])


def tagger(n, vocab, num_labels):
    return keras.Sequential(
        [
            keras.Input((n,), dtype="int32"),
            keras.layers.Embedding(vocab, 8),
            keras.layers.Dense(num_labels),
            PackedSequenceScores(),
        ]
    )


def parser(n, vocab):
    return keras.Sequential(
        [keras.Input((n + 1,), dtype="int32"), keras.layers.Embedding(vocab, 12), BilinearArcScores()]
    )


def tagging_data(rng, count=20, n=6):
    """Tokens 1-3 have tags 0-2; token 4 ends sentences and repeats the previous tag."""
    tokens = np.zeros((count, n), dtype=np.int32)
    tags = np.full((count, n), -1)
    for b in range(count):
        length = rng.integers(2, n + 1)
        tokens[b, : length - 1] = rng.integers(1, 4, size=length - 1)
        tokens[b, length - 1] = 4 if rng.random() < 0.5 else rng.integers(1, 4)
        tags[b, :length] = tokens[b, :length] - 1
        if tokens[b, length - 1] == 4:
            tags[b, length - 1] = tags[b, length - 2]
    return tokens, tags


def parsing_data(rng, count=20, n=5, vocab=9):
    """Distinct words 1-7 (root 0, padding 8); heads: the next larger word, the root for the largest."""
    tokens = np.full((count, n + 1), vocab - 1, dtype=np.int32)
    heads = np.full((count, n + 1), -1)
    for b in range(count):
        length = rng.integers(2, n + 1)
        words = rng.choice(np.arange(1, vocab - 1), size=length, replace=False)
        tokens[b, 0], tokens[b, 1 : length + 1] = 0, words
        for m, word in enumerate(words, start=1):
            larger = np.flatnonzero(words > word)
            heads[b, m] = 0 if larger.size == 0 else 1 + larger[np.argmin(words[larger])]
    return tokens, heads


def sequence_accuracy(model, tokens, tags):
    unary, pairwise = unpack_sequence_scores(model.predict(tokens, verbose=0))
    codes, _, _ = map_decode(SequenceStructure(), unary, pairwise, lengths=(tags >= 0).sum(1))
    return np.mean(codes.numpy()[tags >= 0] == tags[tags >= 0])


def tree_accuracy(model, tokens, heads):
    scores = model.predict(tokens, verbose=0)
    codes, _, _ = map_decode(DependencyTreeStructure(), scores, lengths=(heads >= 0).sum(1))
    return np.mean(codes.numpy()[heads >= 0] == heads[heads >= 0])


def test_tagger_trained_with_the_sparsemap_loss_fits_its_training_set():
    keras.utils.set_random_seed(0)
    tokens, tags = tagging_data(np.random.default_rng(0))
    model = tagger(tokens.shape[1], 5, 3)
    model.compile(keras.optimizers.Adam(0.1), SparseMAPLoss(SequenceStructure()), jit_compile=False)
    # 20 epochs: it fits after 10 (60 ran before, for the same result).
    history = model.fit(tokens, tags, epochs=20, batch_size=20, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert sequence_accuracy(model, tokens, tags) == 1.0


def test_parser_trained_with_the_sparsemap_loss_fits_its_training_set():
    keras.utils.set_random_seed(0)
    tokens, heads = parsing_data(np.random.default_rng(0))
    model = parser(tokens.shape[1] - 1, 9)
    model.compile(keras.optimizers.Adam(0.05), SparseMAPLoss(DependencyTreeStructure()), jit_compile=False)
    # 20 epochs: it fits after 10 (80 ran before, for the same result).
    history = model.fit(tokens, heads, epochs=20, batch_size=20, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert tree_accuracy(model, tokens, heads) == 1.0


@pytest.mark.parametrize(
    "loss",
    [
        SparseMAPLoss(SequenceStructure(), tol=1e-5),
        MarginSparseMAPLoss(SequenceStructure(), cost_weight=0.5, max_iter=50),
        StructuredPerceptronLoss(SequenceStructure()),
        StructuredHingeLoss(SequenceStructure(), cost_weight=2.0),
        LinearChainCRFLoss(),
        TreeCRFLoss(single_root=True),
        SparseMAPLoss(DependencyTreeStructure(single_root=True, projective=True)),
    ],
    ids=lambda loss: loss.name,
)
def test_compile_fit_and_keras_save_load_round_trip(loss, tmp_path):
    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    if isinstance(loss, TreeCRFLoss) or isinstance(getattr(loss, "structure", None), DependencyTreeStructure):
        (x, y), model = parsing_data(rng, count=8), parser(5, 9)
    else:
        (x, y), model = tagging_data(rng, count=8), tagger(6, 5, 3)
    model.compile(keras.optimizers.Adam(0.05), loss, jit_compile=False)
    history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.loss) is type(loss) and loaded.loss.get_config() == loss.get_config()
    np.testing.assert_allclose(loaded.evaluate(x, y, verbose=0), model.evaluate(x, y, verbose=0), rtol=1e-5)
