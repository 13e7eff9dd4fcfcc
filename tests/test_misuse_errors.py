"""Misuse gets a clear answer: XLA compilation, names as identifiers, mask shapes, masks passed on."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import SequenceStructure, SimplexStructure
from keras_structured.projections import InterpolationProjection, L2Ball

X = np.random.default_rng(0).normal(size=(8, 5)).astype("float32")
Y = np.arange(8) % 5


def dense_model(head=None):
    inputs = keras.Input((5,))
    scores = keras.layers.Dense(5)(inputs)
    return keras.Model(inputs, scores if head is None else head(scores))


# --- jit_compile=True -------------------------------------------------------------------


def test_jit_compile_with_a_sparsemap_layer_falls_back_with_one_warning():
    model = dense_model(ks.SparseMAP(SimplexStructure()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile("adam", "mse", jit_compile=True)
    jit_warnings = [w for w in caught if "jit_compile" in str(w.message)]
    assert len(jit_warnings) == 1, [str(w.message) for w in caught]
    assert "Proceeding with `jit_compile=False`" in str(jit_warnings[0].message)
    assert model.jit_compile is False
    history = model.fit(X, np.eye(5)[Y], epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize(
    "loss",
    [
        ks.SparseMAPLoss(SimplexStructure()),
        ks.MarginSparseMAPLoss(SimplexStructure()),
        ks.StructuredHingeLoss(SimplexStructure()),
        ks.StructuredPerceptronLoss(SimplexStructure()),
    ],
    ids=lambda loss: type(loss).__name__,
)
def test_jit_compile_with_a_sparsemap_loss_fails_at_the_first_step_naming_loss_and_fix(loss):
    model = dense_model()
    model.compile("adam", loss, jit_compile=True)  # Keras cannot ask a loss: accepted
    with pytest.raises(ValueError, match=f"{type(loss).__name__} cannot be XLA-compiled") as error:
        model.fit(X, Y, epochs=1, verbose=0)
    assert "jit_compile=False" in str(error.value)
    model.compile("adam", loss, jit_compile=False)  # the fix
    assert np.isfinite(model.fit(X, Y, epochs=1, verbose=0).history["loss"]).all()


def test_the_crf_losses_and_sequence_scores_compile_with_xla():
    tokens = keras.Input((4,), dtype="int32")
    hidden = keras.layers.Embedding(6, 4, mask_zero=True)(tokens)
    model = keras.Model(tokens, ks.SequenceScores()(keras.layers.Dense(3)(hidden)))
    model.compile("adam", ks.LinearChainCRFLoss(), jit_compile=True)
    assert model.jit_compile is True
    words = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    assert np.isfinite(model.fit(words, np.where(words > 0, words % 3, -1), verbose=0).history["loss"]).all()


def test_a_sparsemap_layer_inside_an_xla_function_names_itself():
    layer = ks.SparseMAPSequence()

    @tf.function(jit_compile=True)
    def compiled(x):
        return layer(x)

    with pytest.raises(ValueError, match="SparseMAPSequence cannot be XLA-compiled.*supports_jit=False"):
        compiled(tf.zeros([2, 3, 2]))
    with pytest.raises(ValueError, match="keras_structured.sparsemap cannot be XLA-compiled"):
        tf.function(lambda x: ks.sparsemap(SimplexStructure(), x), jit_compile=True)(tf.zeros([2, 3]))
    with pytest.raises(ValueError, match="keras_structured.map_decode cannot be XLA-compiled"):
        tf.function(lambda x: ks.map_decode(SimplexStructure(), x), jit_compile=True)(tf.zeros([2, 3]))


# --- string identifiers -----------------------------------------------------------------

LOSSES_WITHOUT_ARGUMENTS = ["SparsemaxLoss", "LinearChainCRFLoss", "TreeCRFLoss"]
LOSSES_WITH_A_STRUCTURE = [
    "SparseMAPLoss",
    "MarginSparseMAPLoss",
    "StructuredHingeLoss",
    "StructuredPerceptronLoss",
]


@pytest.mark.parametrize("name", LOSSES_WITHOUT_ARGUMENTS)
def test_losses_by_name(name):
    assert type(keras.losses.get(name)) is getattr(ks, name)


@pytest.mark.parametrize("name", LOSSES_WITH_A_STRUCTURE)
def test_structured_losses_by_name_need_a_structure_and_say_how(name):
    with pytest.raises(ValueError, match=f"{name}: structure must be a Structure.*keras.losses.get"):
        keras.losses.get(name)
    loss = keras.losses.get({"class_name": name, "config": {"structure": "SequenceStructure"}})
    assert type(loss) is getattr(ks, name) and isinstance(loss.structure, SequenceStructure)
    assert type(getattr(ks, name)("SimplexStructure").structure) is SimplexStructure


def test_compile_with_a_loss_name():
    model = dense_model()
    model.compile("adam", loss="SparsemaxLoss")
    assert np.isfinite(model.fit(X, Y, epochs=1, verbose=0).history["loss"]).all()


LAYER_CONFIGS = {
    "Sparsemax": {},
    "SparseMAP": {"structure": {"class_name": "SimplexStructure", "config": {}}},
    "SparseMAPSequence": {"use_boundary": True},
    "SparseMAPDependencyTree": {"projective": True},
    "SparseMAPMatching": {},
    "SparseMAPBudget": {"k": 2},
    "SequenceScores": {"use_boundary": True},
    "PolynomialNetwork": {"units": 2, "rank": 3},
    "FactorizationMachine": {"units": 2, "rank": 3},
    "InterpolationProjection": {"constraint": keras.saving.serialize_keras_object(L2Ball(1.0))},
    "GaussianProjection": {"min_entropy": 1.0},
}


@pytest.mark.parametrize("name", sorted(LAYER_CONFIGS))
def test_layers_by_name(name):
    layer = keras.layers.deserialize({"class_name": name, "config": LAYER_CONFIGS[name]})
    assert type(layer).__name__ == name
    assert keras.saving.get_registered_object(name) is type(layer)
    # Saved models keep the package-qualified name.
    assert keras.saving.get_registered_name(type(layer)) == f"keras_structured>{name}"


# --- masks ------------------------------------------------------------------------------


def test_sparsemax_mask_shape_error_reads_like_keras_softmax():
    with pytest.raises(
        ValueError, match=r"mask must be broadcastable.*logits.shape=\(2, 3\), mask.shape=\(2, 4\)"
    ):
        ks.Sparsemax()(tf.ones((2, 3)), mask=tf.ones((2, 4), bool))
    with pytest.raises(ValueError, match="must not have more dimensions"):
        ks.sparsemax(tf.ones((2, 3)), mask=tf.ones((1, 2, 3), bool))
    # Broadcastable masks are fine.
    out = ks.Sparsemax()(tf.ones((2, 3)), mask=tf.constant([[True, True, False]]))
    np.testing.assert_allclose(out.numpy(), [[0.5, 0.5, 0.0]] * 2)


@pytest.mark.parametrize(
    "layer, shape",
    [
        (ks.SparseMAPSequence(), (2, 4, 3)),
        (ks.SparseMAPDependencyTree(), (2, 4, 4)),
        (ks.SparseMAPBudget(k=1), (2, 4)),
        (ks.SequenceScores(), (2, 4, 3)),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, keras.layers.Layer) else "",
)
def test_sequence_mask_shape_errors_name_the_layer(layer, shape):
    name = type(layer).__name__
    with pytest.raises(
        ValueError, match=rf"mask of {name} must have shape \(batch, n\).*mask.shape=\(2, 5\)"
    ):
        layer(tf.zeros(shape), mask=tf.ones((2, 5), bool))


@pytest.mark.parametrize(
    "make_layer",
    [
        lambda: InterpolationProjection(L2Ball(1.0)),
        lambda: ks.PolynomialNetwork(units=2, rank=2),
        lambda: ks.FactorizationMachine(units=2, rank=2),
        lambda: ks.SequenceScores(),
        lambda: ks.SparseMAPSequence(),
    ],
    ids=[
        "InterpolationProjection",
        "PolynomialNetwork",
        "FactorizationMachine",
        "SequenceScores",
        "SparseMAPSequence",
    ],
)
def test_layers_pass_masks_on(make_layer):
    """(Sparsemax, as keras.layers.Softmax, takes masks broadcastable to its inputs, not (batch, n) ones.)"""
    tokens = keras.Input((4,), dtype="int32")
    hidden = keras.layers.Embedding(6, 3, mask_zero=True)(tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras warns when a layer destroys a mask
        layer = make_layer()
        outputs = layer(hidden)
    assert layer.supports_masking
    model = keras.Model(tokens, outputs)
    words = np.array([[1, 2, 0, 0], [3, 4, 5, 0]])
    mask = model(words)._keras_mask
    np.testing.assert_array_equal(mask.numpy(), words > 0)


def test_sparsemax_loss_refuses_masked_probabilities():
    """A masked sparsemax output has no scores to recover: the loss says so (it used the unmasked ones)."""
    probabilities = ks.sparsemax(tf.constant([[1.0, 2.0, 3.0]]), mask=tf.constant([[True, True, False]]))
    assert not hasattr(probabilities, "_keras_logits")
    with pytest.raises(ValueError, match="without a mask"):
        ks.SparsemaxLoss(from_logits=False)([1], probabilities)
