"""sparsemax, Sparsemax and SparsemaxLoss on JAX and PyTorch, against TensorFlow.

Each backend runs in its own process (``tests/backend_harness.py``), started once for this
module; the functions below without a ``test_`` prefix are what it runs, and the tests compare
what they return with the same functions run here, under TensorFlow: forward values to 1e-6,
gradients to 1e-5 (float32). The backends whose package is not installed are skipped. The
layer checks (``tests/layer_checks.py``, 15-30 s of JAX compilation) are marked ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

import keras_structured as ks
from tests.backend_harness import (
    FLOAT64_TOL,
    FORWARD_TOL,
    GRADIENT_TOL,
    OTHER_BACKENDS,
    assert_all_close,
    assert_keras_files_move,
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


# --- what each backend runs ---------------------------------------------------------------


def _cases() -> dict:
    """name -> (logits, mask or None, axis): the same inputs on every backend."""
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(32, 9)) * 2).astype("float32")
    logits[:4] = np.round(logits[:4])  # ties
    logits[-3:] = 0.0  # float32 scores of 1e8, where TF Addons' sparsemax gave NaN
    logits[-3:, :3] = [[1e8, 0.5, 0.0], [-1e8, 1e8, 1e8 - 16], [1e8, 1e8, 1e8]]
    mask = rng.random((32, 9)) > 0.3
    mask[0] = False  # a fully masked row
    cube = rng.normal(size=(3, 4, 5)).astype("float32")
    return {
        "plain": (logits, None, -1),
        "mask": (logits, mask, -1),
        "axis1": (cube, None, 1),
        "axis0_broadcast_mask": (cube, rng.random((1, 4, 5)) > 0.3, 0),
    }


def sparsemax_values(compiled: bool = False) -> dict:
    """sparsemax and sparsemax_loss outputs and gradients on every case (float32)."""
    results = {}
    for name, (logits, mask, axis) in _cases().items():
        probs, [grad] = value_and_vjp(
            lambda z, mask=mask, axis=axis: ks.sparsemax(z, axis=axis, mask=mask),
            [logits],
            random_upstream(logits.shape),
            compiled=compiled,
        )
        results[f"{name}/probs"], results[f"{name}/grad"] = probs, grad
    logits, _, _ = _cases()["plain"]
    rows, classes = np.arange(len(logits)), np.arange(len(logits)) % logits.shape[1]
    labels = np.zeros(logits.shape, "float32")  # half on one class, half on the next
    labels[rows, classes] += 0.5
    labels[rows, (classes + 1) % logits.shape[1]] += 0.5
    for axis in (-1, 0):
        loss, [grad] = value_and_vjp(
            lambda z, axis=axis: ks.sparsemax_loss(labels, z, axis=axis),
            [logits],
            random_upstream(np.delete(logits.shape, axis % 2)),
            compiled=compiled,
        )
        results[f"loss_axis{axis}/value"], results[f"loss_axis{axis}/grad"] = loss, grad
    loss_class = ks.SparsemaxLoss(sparse_labels=True, reduction="none")
    loss, [grad] = value_and_vjp(
        lambda z: loss_class(classes, z), [logits], random_upstream(classes.shape), compiled=compiled
    )
    results["sparse_labels/value"], results["sparse_labels/grad"] = loss, grad
    return results


def dtype_values() -> dict:
    """float16 and float64 outputs and float64 gradients (JAX with 64-bit types on)."""
    logits, mask, _ = _cases()["mask"]
    logits = logits.clip(-1e4, 1e4)  # within float16's range
    results = {"float16/probs": to_numpy(ks.sparsemax(logits.astype("float16"), mask=mask))}
    with jax_x64():
        logits64 = logits.astype("float64") / 3
        probs, [grad] = value_and_vjp(
            lambda z: ks.sparsemax(z, mask=mask), [logits64], random_upstream(logits.shape).astype("float64")
        )
    assert probs.dtype == "float64" and grad.dtype == "float64", (probs.dtype, grad.dtype)
    results["float64/probs"], results["float64/grad"] = probs, grad
    return results


def invalid_inputs() -> dict:
    """Eagerly, the errors of the TensorFlow tests (as ValueError); under jax.jit, NaN slices."""
    bad = {
        "nan": [[0.0, 1.0], [np.nan, 1.0]],
        "inf": [[0.0, 1.0], [np.inf, 1.0]],
        "all_minus_inf": [[0.0, 1.0], [-np.inf, -np.inf]],
    }
    backend = keras.backend.backend()
    results = {}
    for name, logits in bad.items():
        logits = np.array(logits, "float32")
        for function in (
            ks.sparsemax,
            lambda z: ks.sparsemax_loss(np.eye(2, dtype="float32"), z),
            lambda z: ks.SparsemaxLoss(sparse_labels=True)(np.array([0, 1]), z),
        ):
            with pytest.raises(ValueError, match="logits"):
                to_numpy(function(logits))
        if backend == "jax":
            import jax

            probs = np.asarray(jax.jit(ks.sparsemax)(logits))
            assert np.isnan(probs[1]).all() and np.allclose(probs[0], [0.0, 1.0]), probs
            results[f"{name}/jit"] = probs
    loss = ks.SparsemaxLoss(sparse_labels=True, reduction="none")
    logits = np.array([[0.0, 5.0, 0.0], [0.0, 1.0, 0.0]], "float32")
    assert np.isfinite(to_numpy(loss(np.array([1, 1]), logits))).all()
    for labels in ([1, 3], [1, -1]):
        with pytest.raises(ValueError, match="y_true"):
            loss(np.array(labels), logits)
    with pytest.raises(ValueError, match=r"Received: logits.shape=\(2, 0\)"):
        ks.sparsemax(np.zeros((2, 0), "float32"))
    with pytest.raises(ValueError, match="mask must be broadcastable"):
        ks.Sparsemax()(np.ones((2, 3), "float32"), mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match="from_logits=False"):
        ks.SparsemaxLoss(from_logits=False)(np.array([1]), keras.ops.softmax(np.ones((1, 3), "float32")))
    return results


def layer_checks(tmp_dir: str) -> dict:
    """``tests/layer_checks.py`` on the Sparsemax layer, as ``tests/test_sparsemax.py`` runs it."""
    rng = np.random.default_rng(8)
    for index, (kwargs, shape, masked) in enumerate(
        [({}, (4, 5), False), ({}, (4, 5), True), ({"axis": 1}, (3, 4, 2), False)]
    ):
        call_kwargs = {"mask": rng.random(shape) > 0.3} if masked else {}
        path = Path(tmp_dir) / f"layer_checks_{keras.backend.backend()}_{index}"
        path.mkdir(parents=True, exist_ok=True)
        inputs = rng.normal(size=shape).astype("float32")
        check_layer(ks.Sparsemax, kwargs, inputs, call_kwargs=call_kwargs, tmp_path=path)
    return {}


def fit_with_sparsemax_loss() -> dict:
    """``model.fit`` with SparsemaxLoss, on Sparsemax outputs (also under ``mixed_float16``) and
    on scores: the loss goes down."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(64, 5)).astype("float32")
    y = np.argmax(x[:, :3], axis=1)
    results = {}
    for name, layers, loss, policy in [
        ("probabilities", [ks.Sparsemax()], ks.SparsemaxLoss(from_logits=False, sparse_labels=True), None),
        ("scores", [], "SparsemaxLoss", None),
        (
            "mixed_float16",
            [ks.Sparsemax()],
            ks.SparsemaxLoss(from_logits=False, sparse_labels=True),
            "mixed_float16",
        ),
    ]:
        keras.utils.set_random_seed(0)
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(policy or previous)
        try:
            model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3), *layers])
        finally:
            keras.config.set_dtype_policy(previous)
        model.compile(keras.optimizers.Adam(0.05), loss)
        history = model.fit(x, y, epochs=4, batch_size=16, verbose=0).history["loss"]
        assert np.isfinite(history).all() and history[-1] < history[0], (name, history)
        results[name] = np.array(history)
    return results


def _saved_model_inputs() -> np.ndarray:
    return np.random.default_rng(12).normal(size=(6, 4)).astype("float32")


def _weights() -> list:
    rng = np.random.default_rng(13)
    return [rng.normal(size=(4, 5)).astype("float32"), rng.normal(size=5).astype("float32")]


def save_sparsemax_model(path: str) -> dict:
    """A Dense + Sparsemax(axis=-1) model with fixed weights, saved to ``path``; its predictions."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5), ks.Sparsemax()])
    model.layers[0].set_weights(_weights())
    model.save(path)
    return {"predictions": to_numpy(model.predict(_saved_model_inputs(), verbose=0))}


def load_sparsemax_model(path: str) -> dict:
    """The predictions of the model saved at ``path`` (by any backend)."""
    model = keras.saving.load_model(path)
    assert type(model.layers[-1]) is ks.Sparsemax
    return {"predictions": to_numpy(model.predict(_saved_model_inputs(), verbose=0))}


# --- the tests, under TensorFlow --------------------------------------------------------

# The calls each test reads, so that a backend process runs those of the selected tests only
# (``-m "not slow"`` leaves out the layer checks).
NEEDED_CALLS = {
    "test_forward_values_and_gradients_equal_tensorflow": ["values"],
    "test_jax_jit_equals_tensorflow": ["jit_values"],
    "test_float16_and_float64_equal_tensorflow": ["dtypes"],
    "test_invalid_inputs_raise_or_give_nan": ["invalid"],
    "test_layer_passes_the_layer_checks": ["layer_checks"],
    "test_model_fit_with_sparsemax_loss": ["fit"],
    "test_keras_file_loads_and_predicts_the_same_across_backends": ["load_tensorflow_model", "save_model"],
}


def _calls(backend: str, directory: Path) -> dict:
    calls = {
        "values": f"{MODULE}:sparsemax_values",
        "dtypes": f"{MODULE}:dtype_values",
        "invalid": f"{MODULE}:invalid_inputs",
        "fit": f"{MODULE}:fit_with_sparsemax_loss",
        "layer_checks": (f"{MODULE}:layer_checks", {"tmp_dir": str(directory)}),
        "load_tensorflow_model": (
            f"{MODULE}:load_sparsemax_model",
            {"path": str(directory / "tensorflow.keras")},
        ),
        "save_model": (f"{MODULE}:save_sparsemax_model", {"path": str(directory / f"{backend}.keras")}),
    }
    if backend == "jax":
        calls["jit_values"] = (f"{MODULE}:sparsemax_values", {"compiled": True})
    return calls


# The model saved under TensorFlow (``tensorflow.keras``), and the backends' processes.
saved_directory = saved_directory_fixture(
    "backends_sparsemax", lambda directory: save_sparsemax_model(str(directory / "tensorflow.keras"))
)
backend_runs = backend_runs_fixture(_calls, NEEDED_CALLS)


@pytest.fixture(scope="module")
def tensorflow_values() -> dict:
    return sparsemax_values()


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_forward_values_and_gradients_equal_tensorflow(backend, backend_runs, tensorflow_values):
    values = backend_runs[backend].wait()["values"]
    assert_all_close(values, tensorflow_values, FORWARD_TOL, GRADIENT_TOL)
    huge = values["plain/probs"][-3:, :3]  # finite for float32 inputs of 1e8
    np.testing.assert_allclose(huge, [[1, 0, 0], [0, 1, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-6)


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_jax_jit_equals_tensorflow(backend, backend_runs, tensorflow_values):
    assert_all_close(backend_runs[backend].wait()["jit_values"], tensorflow_values, FORWARD_TOL, GRADIENT_TOL)


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_float16_and_float64_equal_tensorflow(backend, backend_runs):
    values, expected = dict(backend_runs[backend].wait()["dtypes"]), dtype_values()
    np.testing.assert_allclose(values.pop("float16/probs"), expected.pop("float16/probs"), atol=1e-3)
    assert_all_close(values, expected, FLOAT64_TOL, FLOAT64_TOL)


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_invalid_inputs_raise_or_give_nan(backend, backend_runs):
    backend_runs[backend].wait()["invalid"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_layer_passes_the_layer_checks(backend, backend_runs):
    backend_runs[backend].wait()["layer_checks"]


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_model_fit_with_sparsemax_loss(backend, backend_runs):
    backend_runs[backend].wait()["fit"]


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_keras_file_loads_and_predicts_the_same_across_backends(backend, backend_runs, saved_directory):
    results = backend_runs[backend].wait()
    assert_keras_files_move(
        results, load_sparsemax_model, saved_directory, backend, "save_model", same_model=True
    )
