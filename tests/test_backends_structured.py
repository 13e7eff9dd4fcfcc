"""Polynomial/FM layers and the structured losses on JAX and PyTorch, against TensorFlow.

Each backend runs in its own process (``tests/backend_harness.py``), started once for this
module; the functions below without a ``test_`` prefix are what it runs, and the tests compare
what they return with the same functions run here, under TensorFlow: forward values to 1e-6,
gradients to 1e-5 (float32), both to 1e-12 in float64. The structured losses (SparseMAP, margin,
perceptron, hinge) are compared on sequences and dependency trees, eagerly and (JAX) under
``jax.jit`` and (PyTorch) ``torch.compile``; ``model.fit`` trains with ``SparseMAPLoss``; sparse
inputs (``tf.SparseTensor``, JAX ``BCOO``) give the dense outputs; ``.keras`` files with the polynomial
layers, or a structured loss compiled in, load and predict the same across backends. The
backends whose package is not installed are skipped. The layer checks are marked ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

import keras_structured as ks
from keras_structured.engine import DependencyTreeStructure, SequenceStructure
from keras_structured.polynomial import FactorizationMachine, PolynomialNetwork
from tests.backend_harness import (
    FLOAT64_TOL,
    FORWARD_TOL,
    GRADIENT_TOL,
    OTHER_BACKENDS,
    assert_all_close,
    backend_params,
    backend_runs_fixture,
    jax_x64,
    random_upstream,
    saved_directory_fixture,
    to_numpy,
    value_and_vjp,
)
from tests.layer_checks import check_layer

MODULE = __name__
D = 5


# --- what each backend runs ---------------------------------------------------------------


#: name -> (layer class, constructor arguments): the polynomial layers compared.
POLYNOMIAL_LAYERS = {
    "pn": (PolynomialNetwork, {"units": 3, "rank": 4}),
    "pn_augment": (PolynomialNetwork, {"units": 3, "rank": 4, "augment": True}),
    "fm": (FactorizationMachine, {"units": 3, "rank": 4}),
    "fm_no_bias": (FactorizationMachine, {"units": 3, "rank": 4, "use_bias": False}),
}


def _built_layer(name: str, dtype: str = "float32") -> keras.layers.Layer:
    """The layer ``name``, built for ``(batch, D)`` inputs, with seeded random weights."""
    layer_class, kwargs = POLYNOMIAL_LAYERS[name]
    layer = layer_class(**kwargs, dtype=dtype)
    layer.build((None, D))
    rng = np.random.default_rng(sorted(POLYNOMIAL_LAYERS).index(name))
    layer.set_weights([rng.normal(size=w.shape).astype(dtype) for w in layer.weights])
    return layer


def _polynomial_inputs(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(10)
    return (rng.normal(size=(6, D)) * (rng.random((6, D)) < 0.6)).astype(dtype)


def polynomial_values(dtype: str = "float32", compiled: bool = False) -> dict:
    """Outputs of every polynomial layer and their gradients with respect to the inputs and
    each weight (through ``stateless_call``)."""
    results = {}
    x = _polynomial_inputs(dtype)
    with jax_x64(dtype == "float64"):
        for name in POLYNOMIAL_LAYERS:
            layer = _built_layer(name, dtype)
            weights = [to_numpy(w) for w in layer.trainable_weights]

            def outputs(inputs, *values, layer=layer):
                return layer.stateless_call(list(values), [], inputs)[0]

            upstream = random_upstream((6, 3), dtype, seed=11)
            out, gradients = value_and_vjp(outputs, [x, *weights], upstream, compiled=compiled)
            assert out.dtype == dtype and all(g.dtype == dtype for g in gradients)
            results[f"{name}/out"] = out
            results[f"{name}/higher_rank"] = to_numpy(layer(x.reshape(2, 3, D)))
            for index, gradient in enumerate(gradients):
                results[f"{name}/grad{index}"] = gradient
    return results


def _sparse_inputs():
    """:func:`_polynomial_inputs` as the backend's sparse tensor (None on PyTorch)."""
    x = _polynomial_inputs("float32")
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.sparse.from_dense(x)
    if backend == "jax":
        from jax.experimental.sparse import BCOO

        return BCOO.fromdense(x)
    return None


def sparse_polynomial_values() -> dict:
    """Outputs of the layers on sparse inputs (``tf.SparseTensor``, JAX ``BCOO``), eagerly and
    compiled (``tf.function``, ``jax.jit``); nothing on PyTorch, which takes dense inputs only."""
    sparse = _sparse_inputs()
    if sparse is None:
        return {}
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        compile_function = tf.function
    else:
        import jax

        compile_function = jax.jit
    results = {}
    for name in POLYNOMIAL_LAYERS:
        layer = _built_layer(name)
        results[name] = to_numpy(layer(sparse))
        compiled = to_numpy(compile_function(layer)(sparse))
        np.testing.assert_allclose(compiled, results[name], rtol=FORWARD_TOL, atol=FORWARD_TOL)
    return results


def fit_on_sparse_inputs() -> dict:
    """``model.fit`` of a factorization machine on sparse inputs (jitted steps on JAX)."""
    sparse = _sparse_inputs()
    if sparse is None:
        return {}
    keras.utils.set_random_seed(0)
    inputs = keras.Input((D,), sparse=True)
    model = keras.Model(inputs, FactorizationMachine(3, 4)(inputs))
    model.compile(keras.optimizers.Adam(0.05), "mse")
    losses = model.fit(sparse, np.ones((6, 3)), epochs=3, batch_size=6, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    return {}


def _polynomial_model() -> keras.Model:
    """PolynomialNetwork (augmented) then FactorizationMachine, with seeded weights."""
    inputs = keras.Input((D,))
    hidden = PolynomialNetwork(4, 3, augment=True)(inputs)
    model = keras.Model(inputs, FactorizationMachine(2, 3)(hidden))
    rng = np.random.default_rng(12)
    model.set_weights([rng.normal(size=w.shape).astype("float32") * 0.5 for w in model.weights])
    return model


def save_polynomial_model(path: str) -> dict:
    """The polynomial model saved to ``path``; its predictions."""
    model = _polynomial_model()
    model.save(path)
    return {"predictions": to_numpy(model.predict(_polynomial_inputs("float32"), verbose=0))}


def load_polynomial_model(path: str) -> dict:
    """The predictions of the polynomial model saved at ``path`` (by any backend)."""
    model = keras.saving.load_model(path)
    assert [type(layer) for layer in model.layers[1:]] == [PolynomialNetwork, FactorizationMachine]
    return {"predictions": to_numpy(model.predict(_polynomial_inputs("float32"), verbose=0))}


SEQUENCE, TREE = SequenceStructure(), DependencyTreeStructure()
LOSSES = {
    "sparsemap": lambda y, s, structure: ks.losses.sparsemap_loss(y, s, structure),
    "margin": lambda y, s, structure: ks.losses.margin_sparsemap_loss(y, s, structure, cost_weight=0.5),
    "perceptron": lambda y, s, structure: ks.losses.structured_perceptron_loss(y, s, structure),
    "hinge": lambda y, s, structure: ks.losses.structured_hinge_loss(y, s, structure),
}


def _structure_cases(dtype: str) -> dict:
    """name -> (structure, labels, scores): sequences (packed scores, ``-1`` padding) and
    dependency trees (heads, ``-1`` at the root and the padding)."""
    rng = np.random.default_rng(20)
    tags = rng.integers(0, 3, size=(4, 6))
    tags[1, 4:], tags[2, 2:] = -1, -1
    heads = np.array([[-1, 0, 1, 1, 2, 0], [-1, 0, 1, 2, -1, -1], [-1, 2, 0, -1, -1, -1]])
    return {
        "sequence": (SEQUENCE, tags.astype("float32"), rng.normal(size=(4, 6, 3, 4)).astype(dtype)),
        "tree": (TREE, heads.astype("float32"), rng.normal(size=(3, 6, 6)).astype(dtype)),
    }


def loss_values(dtype: str = "float32", compiled: bool = False) -> dict:
    """Every structured loss on sequences and trees, and its gradient with respect to the scores."""
    results = {}
    with jax_x64(dtype == "float64"):
        for structure_name, (structure, labels, scores) in _structure_cases(dtype).items():
            upstream = np.random.default_rng(21).uniform(0.5, 1.5, size=len(scores)).astype(dtype)
            for name, loss in LOSSES.items():
                values, [gradient] = value_and_vjp(
                    lambda s, loss=loss, labels=labels, structure=structure: loss(labels, s, structure),
                    [scores],
                    upstream,
                    compiled=compiled,
                )
                assert values.dtype == dtype and gradient.dtype == dtype
                results[f"{name}/{structure_name}/out"] = values
                results[f"{name}/{structure_name}/grad"] = gradient
        loss_class = ks.MarginSparseMAPLoss(SEQUENCE, cost_weight=2.0, reduction="sum")
        labels, scores = _structure_cases(dtype)["sequence"][1:]
        results["class/out"] = to_numpy(loss_class(labels, scores))
    if keras.backend.backend() != "tensorflow":  # the solver's scores carry no gradient
        from keras_structured.ops.host_call import SUPPORTS

        assert len(SUPPORTS) == 0, len(SUPPORTS)
    return results


def torch_compiled_losses() -> dict:
    """The losses under ``torch.compile(fullgraph=True)`` (AOT autograd; no graph break: the host
    calls are custom ops with fake kernels), values and gradients equal to eager ones."""
    import torch

    results = {}
    for structure_name, (structure, labels, scores) in _structure_cases("float32").items():
        labels = torch.tensor(labels)  # made before tracing
        for name in ("sparsemap", "hinge"):
            torch._dynamo.reset()

            def loss(s, name=name, labels=labels, structure=structure):
                return LOSSES[name](labels, s, structure)

            compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
            for mode, function in (("eager", loss), ("compiled", compiled)):
                tensor = torch.tensor(scores, requires_grad=True)
                values = function(tensor)
                values.sum().backward()
                results[f"{name}/{structure_name}/{mode}/out"] = to_numpy(values.detach())
                results[f"{name}/{structure_name}/{mode}/grad"] = to_numpy(tensor.grad)
    return results


def invalid_labels() -> dict:
    """Labels out of range raise, naming ``y_true``: eagerly a ``ValueError`` with the library's
    message on every backend, and under ``jax.jit`` JAX's ``JaxRuntimeError``, which holds it."""
    scores = np.zeros((2, 3, 3), "float32")
    bad = np.array([[-1, 0, 7], [-1, 0, 1]], "float32")
    with pytest.raises(ValueError, match=r"^y_true must hold"):
        to_numpy(ks.losses.sparsemap_loss(bad, scores, TREE))
    if keras.backend.backend() == "jax":
        import jax

        with pytest.raises(jax.errors.JaxRuntimeError, match=r"y_true must hold"):
            to_numpy(jax.jit(lambda s: ks.losses.structured_hinge_loss(bad, s, TREE))(scores))
    return {}


def _tagger_data():
    rng = np.random.default_rng(30)
    features = rng.normal(size=(48, 5, 4)).astype("float32")
    tags = (features[..., 0] > 0).astype("int64") + (features[..., 1] > 1)
    lengths = rng.integers(2, 6, size=48)
    tags[np.arange(5) >= lengths[:, None]] = -1
    return features, tags.astype("float32")


def fit_tagger(save_path: str) -> dict:
    """``model.fit`` of a tagger (Dense to packed sequence scores) with ``SparseMAPLoss``
    (jitted steps on JAX): the loss goes down; the model, loss compiled in, is saved."""
    keras.utils.set_random_seed(0)
    features, tags = _tagger_data()
    model = keras.Sequential(
        [keras.Input((5, 4)), keras.layers.Dense(3 * 4), keras.layers.Reshape((5, 3, 4))]
    )
    model.compile(keras.optimizers.Adam(0.05), ks.SparseMAPLoss(SEQUENCE))
    if keras.backend.backend() == "jax":
        assert model.jit_compile, "the JAX trainer should jit the train step"
    history = model.fit(features, tags, epochs=4, batch_size=16, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0], history
    model.save(save_path)
    return {"losses": np.array(history), "evaluated": np.array(model.evaluate(features, tags, verbose=0))}


def evaluate_tagger(path: str) -> dict:
    """The loss of the tagger saved at ``path`` (by any backend), its loss deserialized."""
    model = keras.saving.load_model(path)
    assert isinstance(model.loss, ks.SparseMAPLoss), model.loss
    if keras.backend.backend() == "tensorflow":
        # A file saved under JAX records jit_compile=True, which XLA on TensorFlow refuses.
        model.jit_compile = False
    return {"evaluated": np.array(model.evaluate(*_tagger_data(), verbose=0))}


def layer_checks(tmp_dir: str) -> dict:
    """``tests/layer_checks.py`` on the polynomial layers (config, eager and symbolic calls,
    ``jax.jit``, ``model.fit``, ``.keras`` save/load, ``mixed_float16``)."""
    x = np.random.default_rng(9).normal(size=(4, D)).astype("float32")
    for name, (layer_class, kwargs) in POLYNOMIAL_LAYERS.items():
        path = Path(tmp_dir) / f"layer_checks_{keras.backend.backend()}_{name}"
        path.mkdir(parents=True, exist_ok=True)
        check_layer(layer_class, {**kwargs, "basis_regularizer": "l2"}, x, tmp_path=path)
    return {}


# --- the tests, under TensorFlow --------------------------------------------------------

# The calls each test reads, so that a backend process runs those of the selected tests only.
NEEDED_CALLS = {
    "test_polynomial_layers_equal_tensorflow": ["polynomial", "polynomial64"],
    "test_sparse_inputs_equal_tensorflow": ["sparse"],
    "test_polynomial_keras_file_moves_between_backends": ["load_tensorflow_model", "save_model"],
    "test_structured_losses_equal_tensorflow": ["losses", "losses64"],
    "test_jax_jit_equals_tensorflow": ["jit_polynomial", "jit_losses"],
    "test_invalid_labels_raise": ["invalid"],
    "test_torch_compile_equals_eager": ["torch_compiled"],
    "test_model_fit_with_a_structured_loss": ["fit", "evaluate_tensorflow_tagger"],
    "test_polynomial_layers_pass_the_layer_checks": ["layer_checks", "sparse_fit"],
}


def _calls(backend: str, directory: Path) -> dict:
    calls = {
        "polynomial": f"{MODULE}:polynomial_values",
        "polynomial64": (f"{MODULE}:polynomial_values", {"dtype": "float64"}),
        "sparse": f"{MODULE}:sparse_polynomial_values",
        "sparse_fit": f"{MODULE}:fit_on_sparse_inputs",
        "load_tensorflow_model": (
            f"{MODULE}:load_polynomial_model",
            {"path": str(directory / "tensorflow_polynomial.keras")},
        ),
        "save_model": (
            f"{MODULE}:save_polynomial_model",
            {"path": str(directory / f"{backend}_polynomial.keras")},
        ),
        "losses": f"{MODULE}:loss_values",
        "losses64": (f"{MODULE}:loss_values", {"dtype": "float64"}),
        "invalid": f"{MODULE}:invalid_labels",
        "fit": (f"{MODULE}:fit_tagger", {"save_path": str(directory / f"{backend}_tagger.keras")}),
        "evaluate_tensorflow_tagger": (
            f"{MODULE}:evaluate_tagger",
            {"path": str(directory / "tensorflow_tagger.keras")},
        ),
        "layer_checks": (f"{MODULE}:layer_checks", {"tmp_dir": str(directory)}),
    }
    if backend == "jax":
        calls["jit_polynomial"] = (f"{MODULE}:polynomial_values", {"compiled": True})
        calls["jit_losses"] = (f"{MODULE}:loss_values", {"compiled": True})
    if backend == "torch":
        calls["torch_compiled"] = f"{MODULE}:torch_compiled_losses"
    return calls


def _save_models(directory: Path) -> None:
    """The polynomial model and the tagger, saved under TensorFlow."""
    save_polynomial_model(str(directory / "tensorflow_polynomial.keras"))
    fit_tagger(str(directory / "tensorflow_tagger.keras"))


saved_directory = saved_directory_fixture("backends_structured", _save_models)
backend_runs = backend_runs_fixture(_calls, NEEDED_CALLS)


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_polynomial_layers_equal_tensorflow(backend, backend_runs):
    results = backend_runs[backend].wait()
    assert_all_close(results["polynomial"], polynomial_values(), FORWARD_TOL, GRADIENT_TOL)
    assert_all_close(results["polynomial64"], polynomial_values("float64"), FLOAT64_TOL, FLOAT64_TOL)


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_sparse_inputs_equal_tensorflow(backend, backend_runs):
    assert_all_close(
        backend_runs[backend].wait()["sparse"], sparse_polynomial_values(), FORWARD_TOL, FORWARD_TOL
    )


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_polynomial_keras_file_moves_between_backends(backend, backend_runs, saved_directory):
    results = backend_runs[backend].wait()
    tensorflow = load_polynomial_model(str(saved_directory / "tensorflow_polynomial.keras"))["predictions"]
    tol = {"rtol": FORWARD_TOL, "atol": FORWARD_TOL}
    # Saved under TensorFlow, loaded under the backend.
    np.testing.assert_allclose(results["load_tensorflow_model"]["predictions"], tensorflow, **tol)
    # Saved under the backend, loaded under TensorFlow.
    saved = results["save_model"]["predictions"]
    loaded = load_polynomial_model(str(saved_directory / f"{backend}_polynomial.keras"))["predictions"]
    np.testing.assert_allclose(loaded, saved, **tol)
    np.testing.assert_allclose(saved, tensorflow, **tol)


@pytest.fixture(scope="module")
def tensorflow_losses() -> dict:
    return {dtype: loss_values(dtype) for dtype in ("float32", "float64")}


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_structured_losses_equal_tensorflow(backend, backend_runs, tensorflow_losses):
    results = backend_runs[backend].wait()
    assert_all_close(results["losses"], tensorflow_losses["float32"], FORWARD_TOL, GRADIENT_TOL)
    assert_all_close(results["losses64"], tensorflow_losses["float64"], FLOAT64_TOL, FLOAT64_TOL)


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_jax_jit_equals_tensorflow(backend, backend_runs, tensorflow_losses):
    results = backend_runs[backend].wait()
    assert_all_close(results["jit_polynomial"], polynomial_values(), FORWARD_TOL, GRADIENT_TOL)
    assert_all_close(results["jit_losses"], tensorflow_losses["float32"], FORWARD_TOL, GRADIENT_TOL)


@pytest.mark.parametrize("backend", backend_params("torch"))
def test_torch_compile_equals_eager(backend, backend_runs):
    results = backend_runs[backend].wait()["torch_compiled"]
    for key, compiled in results.items():
        if "/compiled/" in key:
            np.testing.assert_allclose(compiled, results[key.replace("/compiled/", "/eager/")], atol=1e-6)


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_invalid_labels_raise(backend, backend_runs):
    backend_runs[backend].wait()["invalid"]


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_model_fit_with_a_structured_loss(backend, backend_runs, saved_directory):
    results = backend_runs[backend].wait()
    tensorflow = evaluate_tagger(str(saved_directory / "tensorflow_tagger.keras"))["evaluated"]
    # The tagger trained under TensorFlow, evaluated under the backend (its loss deserialized there).
    np.testing.assert_allclose(results["evaluate_tensorflow_tagger"]["evaluated"], tensorflow, rtol=1e-5)
    # Trained and saved under the backend, evaluated under TensorFlow.
    saved = results["fit"]["evaluated"]
    loaded = evaluate_tagger(str(saved_directory / f"{backend}_tagger.keras"))["evaluated"]
    np.testing.assert_allclose(loaded, saved, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_polynomial_layers_pass_the_layer_checks(backend, backend_runs):
    results = backend_runs[backend].wait()
    results["layer_checks"], results["sparse_fit"]
