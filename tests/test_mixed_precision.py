"""Every layer and loss in ``model.fit`` under the ``mixed_float16`` policy.

Under the policy Keras computes in float16, keeps the weights in float32 and wraps the
optimizer in a ``LossScaleOptimizer``; the layers solve in float32 and return float16,
the losses return float32. Each case builds a small model under the policy, trains it a
few steps, and checks that the loss is finite, the outputs are float16 and every
trainable weight is float32 and has moved (a step whose scaled gradient overflows is
skipped, so a layer whose gradient were always non-finite would leave its weights
unchanged).
"""

import keras
import numpy as np
import pytest

import keras_structured as ks
from keras_structured.engine import DependencyTreeStructure, SequenceStructure, SimplexStructure
from keras_structured.projections import GaussianProjection, InterpolationProjection, L2Ball

BATCH, LENGTH, TAGS = 16, 5, 3
RNG = np.random.default_rng(0)
WORDS = RNG.integers(1, 9, size=(BATCH, LENGTH))
WORDS[::2, 3:] = 0  # every other sequence is padded to length 3
TAGS_OF_WORDS = np.where(WORDS > 0, WORDS % TAGS, -1)
FEATURES = RNG.normal(size=(BATCH, 6)).astype("float32")
CLASSES = np.arange(BATCH) % 4
HEADS = np.tile([-1, 0, 1, 1], (BATCH, 1))  # word 1 under the root, words 2 and 3 under word 1


@pytest.fixture
def mixed_precision():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    yield
    keras.config.set_dtype_policy(previous)


def words_input():
    tokens = keras.Input((LENGTH,), dtype="int32")
    return tokens, keras.layers.Embedding(9, 8, mask_zero=True)(tokens)


def features_input(dim=6):
    inputs = keras.Input((dim,))
    return inputs, inputs


def one_hot_tags():
    return np.eye(TAGS)[np.maximum(TAGS_OF_WORDS, 0)] * (TAGS_OF_WORDS >= 0)[..., None]


def sparsemax_from_probabilities():
    inputs, x = features_input()
    outputs = ks.Sparsemax()(keras.layers.Dense(4)(x))
    return keras.Model(inputs, outputs), ks.SparsemaxLoss(from_logits=False), FEATURES, CLASSES


def sparsemax_loss_from_logits():
    inputs, x = features_input()
    return keras.Model(inputs, keras.layers.Dense(4)(x)), "SparsemaxLoss", FEATURES, CLASSES


def sparsemap_simplex():
    inputs, x = features_input()
    outputs = ks.SparseMAP(SimplexStructure())(keras.layers.Dense(4)(x))
    return keras.Model(inputs, outputs), "mse", FEATURES, np.eye(4)[CLASSES]


def sparsemap_sequence_with_mask():
    tokens, hidden = words_input()
    outputs = ks.SparseMAPSequence(use_boundary=True)(keras.layers.Dense(TAGS)(hidden))
    return keras.Model(tokens, outputs), "mse", WORDS, one_hot_tags()


def sequence_scores(loss):
    def case():
        tokens, hidden = words_input()
        scores = ks.SequenceScores(use_boundary=True)(keras.layers.Dense(TAGS)(hidden))
        return keras.Model(tokens, scores), loss, WORDS, TAGS_OF_WORDS

    return case


def sequence_scores_and_sparsemap_sequence():
    tokens, hidden = words_input()
    scores = ks.SequenceScores(use_boundary=True)(keras.layers.Dense(TAGS)(hidden))
    marginals = ks.SparseMAPSequence()(scores)
    model = keras.Model(tokens, [scores, marginals])
    return model, [ks.SparseMAPLoss(SequenceStructure()), "mse"], WORDS, [TAGS_OF_WORDS, one_hot_tags()]


def tree_scores():
    inputs = keras.Input((4, 4))
    return inputs, keras.layers.Dense(4)(inputs)


def sparsemap_dependency_tree():
    inputs, scores = tree_scores()
    outputs = ks.SparseMAPDependencyTree()(scores)
    target = np.zeros((BATCH, 4, 4))
    target[:, 0, 1] = target[:, 1, 2] = target[:, 1, 3] = 1.0
    return keras.Model(inputs, outputs), "mse", RNG.normal(size=(BATCH, 4, 4)), target


def tree_loss(loss):
    def case():
        inputs, scores = tree_scores()
        return keras.Model(inputs, scores), loss, RNG.normal(size=(BATCH, 4, 4)), HEADS

    return case


def sparsemap_matching():
    inputs = keras.Input((3, 3))
    outputs = ks.SparseMAPMatching()(keras.layers.Dense(3)(inputs))
    return (
        keras.Model(inputs, outputs),
        "mse",
        RNG.normal(size=(BATCH, 3, 3)),
        np.tile(np.eye(3), (BATCH, 1, 1)),
    )


def sparsemap_budget():
    inputs, x = features_input()
    outputs = ks.SparseMAPBudget(k=2)(keras.layers.Dense(5)(x))
    return keras.Model(inputs, outputs), "mse", FEATURES, np.tile([1.0, 1.0, 0, 0, 0], (BATCH, 1))


def interpolation_projection():
    tokens, hidden = words_input()  # the mask goes through the projection to the loss
    outputs = InterpolationProjection(L2Ball(1.0))(keras.layers.Dense(2)(hidden))
    return keras.Model(tokens, outputs), "mse", WORDS, RNG.normal(size=(BATCH, LENGTH, 2))


def gaussian_projection():
    inputs, x = features_input()
    mean = keras.layers.Dense(2)(x)
    scale = keras.layers.Dense(2, activation="softplus")(x)
    outputs = GaussianProjection(min_entropy=3.0, diagonal=True)([mean, scale])
    return keras.Model(inputs, outputs), ["mse", "mse"], FEATURES, [RNG.normal(size=(BATCH, 2))] * 2


def polynomial(layer_class):
    def case():
        tokens, hidden = words_input()  # the mask goes through the layer to the loss
        outputs = layer_class(units=2, rank=3)(hidden)
        return keras.Model(tokens, outputs), "mse", WORDS, RNG.normal(size=(BATCH, LENGTH, 2))

    return case


CASES = {
    "Sparsemax+SparsemaxLoss(from_logits=False)": sparsemax_from_probabilities,
    "SparsemaxLoss": sparsemax_loss_from_logits,
    "SparseMAP": sparsemap_simplex,
    "SparseMAPSequence": sparsemap_sequence_with_mask,
    "SequenceScores+SparseMAPSequence": sequence_scores_and_sparsemap_sequence,
    "SequenceScores+MarginSparseMAPLoss": sequence_scores(ks.MarginSparseMAPLoss(SequenceStructure())),
    "SequenceScores+StructuredHingeLoss": sequence_scores(ks.StructuredHingeLoss(SequenceStructure())),
    "SequenceScores+StructuredPerceptronLoss": sequence_scores(
        ks.StructuredPerceptronLoss(SequenceStructure())
    ),
    "SequenceScores+LinearChainCRFLoss": sequence_scores(ks.LinearChainCRFLoss()),
    "SparseMAPDependencyTree": sparsemap_dependency_tree,
    "SparseMAPLoss(DependencyTreeStructure)": tree_loss(ks.SparseMAPLoss(DependencyTreeStructure())),
    "TreeCRFLoss": tree_loss(ks.TreeCRFLoss()),
    "SparseMAPMatching": sparsemap_matching,
    "SparseMAPBudget": sparsemap_budget,
    "InterpolationProjection": interpolation_projection,
    "GaussianProjection": gaussian_projection,
    "PolynomialNetwork": polynomial(ks.PolynomialNetwork),
    "FactorizationMachine": polynomial(ks.FactorizationMachine),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fit_under_mixed_float16(name, mixed_precision):
    keras.utils.set_random_seed(0)
    model, loss, x, y = CASES[name]()
    model.compile(keras.optimizers.Adam(0.01), loss)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    for output in model.outputs:
        assert output.dtype == "float16", f"{name}: output {output.name} is {output.dtype}"
    before = [w.numpy().copy() for w in model.trainable_weights]
    history = model.fit(x, y, epochs=4, batch_size=8, verbose=0)
    assert np.isfinite(history.history["loss"]).all(), history.history
    for weight, old in zip(model.trainable_weights, before, strict=True):
        assert weight.dtype == "float32", f"{name}: {weight.path} is {weight.dtype}"
        assert not np.array_equal(weight.numpy(), old), f"{name}: fit left {weight.path} unchanged"
    # An eager call (model.fit ran the graph): tracing a predict function would cost more.
    for prediction in keras.tree.flatten(model(keras.ops.convert_to_tensor(x), training=False)):
        prediction = keras.ops.convert_to_numpy(prediction)
        assert prediction.dtype == np.float16 and np.isfinite(prediction).all()


def test_sparsemax_loss_on_a_cast_sparsemax_output_equals_it_on_the_scores():
    scores = RNG.normal(size=(4, 5)).astype("float16")
    probabilities = ks.sparsemax(scores)
    on_probabilities = ks.SparsemaxLoss(from_logits=False, sparse_labels=True)([0, 1, 2, 3], probabilities)
    on_scores = ks.SparsemaxLoss(sparse_labels=True)([0, 1, 2, 3], scores)
    assert on_probabilities.dtype == "float32"
    np.testing.assert_allclose(float(on_probabilities), float(on_scores), rtol=1e-6)


def test_sparsemax_loss_says_what_to_do_with_other_probabilities():
    probabilities = keras.ops.cast(ks.sparsemax(RNG.normal(size=(2, 3))), "float16") * 1.0
    with pytest.raises(ValueError, match=r"use SparsemaxLoss\(from_logits=True\)"):
        ks.SparsemaxLoss(from_logits=False)([0, 1], probabilities)
    masked = ks.sparsemax(RNG.normal(size=(2, 3)), mask=[[True, True, False]] * 2)
    with pytest.raises(ValueError, match="without a mask"):
        ks.SparsemaxLoss(from_logits=False)([0, 1], masked)
