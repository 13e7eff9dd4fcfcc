"""PolynomialNetwork / FactorizationMachine: explicit formulas, sparse inputs, gradients, fit, save/load."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_structured.polynomial import FactorizationMachine, PolynomialNetwork
from tests.layer_checks import check_layer

D, RANK, UNITS = 5, 3, 2
LAYERS = {"pn": PolynomialNetwork, "fm": FactorizationMachine}


def interaction_matrices(basis, output_weights):
    """``W_c = H^T diag(v_c) H`` for each output ``c``: shape ``(units, d, d)``."""
    return np.einsum("rc,ri,rj->cij", output_weights, basis, basis)


def explicit_pn(x, basis, output_weights, augment):
    if augment:
        x = np.concatenate([np.ones((len(x), 1)), x], axis=1)
    matrices = interaction_matrices(basis, output_weights)
    return np.array([[row @ matrix @ row for matrix in matrices] for row in x])


def explicit_fm(x, basis, output_weights, kernel, bias):
    matrices = interaction_matrices(basis, output_weights)
    out = np.zeros((len(x), len(matrices)))
    for n, row in enumerate(x):
        for c, matrix in enumerate(matrices):
            for i in range(len(row)):
                for j in range(i + 1, len(row)):
                    out[n, c] += matrix[i, j] * row[i] * row[j]
    return out + x @ kernel + bias


def make_layer(kind, **kwargs):
    """A built layer with random weights (linear and bias terms included for the FM)."""
    layer = LAYERS[kind](UNITS, RANK, **kwargs)
    layer.build((None, D))
    rng = np.random.default_rng(0)
    layer.set_weights([rng.normal(size=w.shape) for w in layer.weights])
    return layer


def sparse_batch(rng, n=6, d=D):
    x = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.5)
    return x, tf.sparse.from_dense(x)


@pytest.mark.parametrize("augment", [False, True])
def test_pn_is_the_quadratic_form(augment):
    layer = make_layer("pn", augment=augment, dtype="float64")
    x = np.random.default_rng(1).normal(size=(4, D))
    basis, output_weights = layer.get_weights()
    assert basis.shape == (RANK, D + augment) and output_weights.shape == (RANK, UNITS)
    np.testing.assert_allclose(layer(x).numpy(), explicit_pn(x, basis, output_weights, augment), rtol=1e-10)


def test_augment_prepends_a_constant_for_the_linear_and_bias_terms():
    layer = make_layer("pn", augment=True, dtype="float64")
    matrices = interaction_matrices(*layer.get_weights())
    x = np.random.default_rng(2).normal(size=(3, D))
    np.testing.assert_allclose(layer(np.zeros((1, D))).numpy()[0], matrices[:, 0, 0], rtol=1e-10)
    odd_part = (layer(x) - layer(-x)).numpy() / 4.0
    np.testing.assert_allclose(odd_part, x @ matrices[:, 0, 1:].T, rtol=1e-10)


@pytest.mark.parametrize("use_linear, use_bias", [(True, True), (False, False), (True, False)])
def test_fm_is_the_anova_double_loop(use_linear, use_bias):
    layer = make_layer("fm", use_linear=use_linear, use_bias=use_bias, dtype="float64")
    weights = layer.get_weights()
    assert len(weights) == 2 + use_linear + use_bias
    basis, output_weights = weights[:2]
    kernel = weights[2] if use_linear else np.zeros((D, UNITS))
    bias = weights[-1] if use_bias else np.zeros(UNITS)
    x = np.random.default_rng(3).normal(size=(4, D))
    want = explicit_fm(x, basis, output_weights, kernel, bias)
    np.testing.assert_allclose(layer(x).numpy(), want, rtol=1e-10)


def test_fm_has_no_squared_features():
    layer = make_layer("fm", use_linear=False, use_bias=False)
    np.testing.assert_allclose(layer(3.0 * np.eye(D)).numpy(), 0.0, atol=1e-5)


@pytest.mark.parametrize("kind, kwargs", [("pn", {}), ("pn", {"augment": True}), ("fm", {})])
def test_sparse_and_higher_rank_inputs_match_dense(kind, kwargs):
    layer = make_layer(kind, **kwargs)
    x, sparse = sparse_batch(np.random.default_rng(4))
    dense = layer(x).numpy()
    np.testing.assert_allclose(layer(sparse).numpy(), dense, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer(x.reshape(2, 3, D)).numpy(), dense.reshape(2, 3, UNITS), rtol=1e-6)
    assert layer.compute_output_shape((2, 3, D)) == (2, 3, UNITS)


@pytest.mark.parametrize("kind, kwargs", [("pn", {"augment": True}), ("fm", {})])
def test_gradients_match_finite_differences(kind, kwargs):
    layer = make_layer(kind, dtype="float64", **kwargs)
    x = tf.constant(np.random.default_rng(5).normal(size=(3, D)))

    def outputs(inputs, *weights):
        return layer.stateless_call(list(weights), [], inputs)[0]

    theoretical, numerical = tf.test.compute_gradient(outputs, [x, *layer.trainable_variables])
    for got, want in zip(theoretical, numerical, strict=True):
        assert np.abs(want).max() > 1e-2
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["pn", "fm"])
def test_eager_equals_tf_function(kind):
    layer = make_layer(kind)
    x, sparse = sparse_batch(np.random.default_rng(6))
    graph = tf.function(layer)
    np.testing.assert_allclose(graph(tf.constant(x, tf.float32)).numpy(), layer(x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(graph(sparse).numpy(), layer(sparse).numpy(), rtol=1e-6)


@pytest.mark.parametrize("kind", ["pn", "fm"])
def test_mixed_float16(kind):
    layer = make_layer(kind, dtype="mixed_float16")
    x, sparse = sparse_batch(np.random.default_rng(7))
    reference = make_layer(kind)(x).numpy()
    for inputs in (x, sparse):
        out = layer(inputs)
        assert out.dtype == tf.float16 and layer.basis.dtype == "float32"
        np.testing.assert_allclose(out.numpy(), reference, rtol=2e-2, atol=2e-2)


def planted_pn_data(n=128, d=D):
    rng = np.random.default_rng(8)
    teacher = make_layer("pn", augment=True)
    x = rng.normal(size=(n, d)).astype("float32")
    return x, teacher(x).numpy()


@pytest.mark.parametrize(
    "kind, sparse, loss",
    [("pn", False, "mse"), ("fm", True, "mse"), ("pn", True, "sparse_categorical_crossentropy")],
)
def test_fit_decreases_the_loss(kind, sparse, loss):
    keras.utils.set_random_seed(0)
    x, y = planted_pn_data()
    if loss == "sparse_categorical_crossentropy":
        y = y.argmax(axis=1)
    layer = LAYERS[kind](UNITS, RANK, **({"augment": True} if kind == "pn" else {}))
    inputs = keras.Input((D,), sparse=sparse)
    outputs = layer(inputs)
    if loss == "sparse_categorical_crossentropy":
        outputs = keras.layers.Softmax()(outputs)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(0.02), loss)
    history = model.fit(tf.sparse.from_dense(x) if sparse else x, y, batch_size=16, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[1] < losses[0]


def test_sparse_inputs_turn_off_xla():
    x, y = planted_pn_data(n=32)
    inputs = keras.Input((D,), sparse=True)
    model = keras.Model(inputs, FactorizationMachine(UNITS, RANK)(inputs))
    assert not model.layers[-1].supports_jit
    with pytest.warns(UserWarning, match="jit_compile"):
        model.compile("adam", "mse", jit_compile=True)
    model.fit(tf.sparse.from_dense(x), y, epochs=1, verbose=0)
    assert make_layer("pn").supports_jit


@pytest.mark.parametrize(
    "kind, kwargs",
    [
        ("pn", {"augment": True, "basis_regularizer": "l2", "output_initializer": "ones"}),
        ("pn", {}),
        ("fm", {"use_bias": False, "basis_regularizer": "l2", "output_initializer": "ones"}),
        ("fm", {"kernel_initializer": "random_normal"}),
    ],
)
def test_layer_checks(kind, kwargs, tmp_path):
    x = np.random.default_rng(9).normal(size=(4, D)).astype("float32")
    layer = check_layer(LAYERS[kind], {"units": UNITS, "rank": RANK, **kwargs}, x, tmp_path=tmp_path)
    if "basis_regularizer" in kwargs:
        clone = LAYERS[kind].from_config(layer.get_config())
        assert isinstance(clone.basis_regularizer, keras.regularizers.L2)


@pytest.mark.parametrize("layer_class", LAYERS.values())
def test_bad_arguments_raise(layer_class):
    with pytest.raises(ValueError, match="Received: units=0"):
        layer_class(0, 2)
    with pytest.raises(ValueError, match="Received: rank=-1"):
        layer_class(2, -1)
    with pytest.raises(ValueError, match="Received: units=1.5"):
        layer_class(1.5, 2)
    with pytest.raises(ValueError, match="Received: rank=True"):
        layer_class(2, True)
    with pytest.raises(ValueError, match="last dimension"):
        layer_class(2, 2).build((None, None))
    layer = layer_class(2, 2)
    layer(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="incompatible"):
        layer(np.zeros((1, 4)))
    with pytest.raises(ValueError, match="sparse inputs of shape"):
        layer_class(2, 2)(tf.sparse.from_dense(np.ones((1, 2, 3))))
