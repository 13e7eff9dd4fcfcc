"""The interpolation projections on JAX and PyTorch, against TensorFlow.

Each backend runs in its own process (``tests/backend_harness.py``), started once for this
module; the functions below without a ``test_`` prefix are what it runs, and the tests compare
what they return with the same functions run here, under TensorFlow: projected values to 1e-6
and gradients to 1e-5 in float32, for every constraint family (norm balls, polytopes,
``Monotone``, a user constraint, the categorical entropy and KL constraints, intersections,
margins, batch means, per-row and traced bounds) and for the Gaussian and categorical policy
projections; the same in float64 (JAX with 64-bit types on) and under ``jax.jit``. Then
``model.fit`` with both projection layers, a ``.keras`` file across backends, and the errors.

The default part runs JAX under ``jax.jit`` and PyTorch eagerly; marked ``slow`` (JAX's eager
dispatch costs about 30 s a call): JAX eagerly, float64 on both, and the layer checks
(``tests/layer_checks.py``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

from keras_structured import projections as kp
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
BATCH = 6


@keras.saving.register_keras_serializable(package="keras_structured_tests")
def logsumexp_h(x):
    """A convex ``h`` written with ``keras.ops``: ``logsumexp(x) <= 2``."""
    return ops.logsumexp(x, axis=-1) - 2.0


# --- what each backend runs ---------------------------------------------------------------


def _softmax(z: np.ndarray) -> np.ndarray:
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _constraint_cases() -> dict:
    """name -> (constraint, x, reference or None, project kwargs): the same on every backend."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 3))
    interior = np.array([0.3, -0.2, 0.5])
    b = a @ interior + rng.uniform(0.5, 2.0, size=6)

    def points(*shape):
        return 3.0 * rng.normal(size=(BATCH, *shape))

    def logits(scale=2.0):
        return scale * rng.normal(size=(BATCH, 4))

    return {
        "l1": (kp.L1Ball(1.5, center=[0.5, -1.0, 0.0, 2.0]), points(4), None, {}),
        "l2_rank3": (kp.L2Ball(2.0), points(3, 2), None, {}),
        "l2_per_row_radius": (kp.L2Ball(np.linspace(0.5, 3.0, BATCH)), points(3), None, {}),
        "linf": (kp.LinfBall(0.7, center=[1.0, 2.0, 3.0]), points(3), None, {}),
        "halfspace": (kp.Halfspace([1.0, -2.0, 0.5], 0.3), points(3), None, {}),
        "polytope": (kp.Polytope(a, b, interior), points(3), None, {}),
        "monotone": (kp.Monotone(spacing=0.3), points(6), None, {}),
        "user": (kp.UserConstraint(logsumexp_h, [0.0, 0.0, 0.0]), points(3), None, {}),
        "entropy_probs": (kp.EntropyLowerBound(1.0), _softmax(logits()), None, {}),
        "entropy_logits_margin": (
            kp.EntropyLowerBound(0.8, from_logits=True),
            logits(),
            None,
            {"margin": 0.2},
        ),
        "kl_logits": (kp.KLTrustRegion(0.05, from_logits=True), logits(), logits(0.5), {}),
        "kl_reverse_probs": (
            kp.KLTrustRegion(0.2, reverse=True),
            _softmax(logits()),
            _softmax(logits(0.5)),
            {},
        ),
        "kl_batch_mean": (
            kp.KLTrustRegion(0.05),
            _softmax(logits()),
            _softmax(logits(0.5)),
            {"average_over_batch": True},
        ),
        "entropy_and_kl": (
            kp.Intersection(
                [kp.EntropyLowerBound(0.5, from_logits=True), kp.KLTrustRegion(0.1, from_logits=True)]
            ),
            logits(),
            logits(0.5),
            {},
        ),
        "ball_and_halfspace_batch_mean": (
            kp.Intersection([kp.L2Ball(2.0), kp.Halfspace([1.0, 1.0, 1.0], 1.0, interior_point=[0.0] * 3)]),
            points(3),
            None,
            {"average_over_batch": True, "validate_args": True},
        ),
    }


def projection_values(dtype: str = "float32", compiled: bool = False) -> dict:
    """Every constraint's projection and its gradients (inputs, reference, a traced bound)."""
    results = {}
    with jax_x64(dtype == "float64"):
        for index, (name, (constraint, x, reference, kwargs)) in enumerate(_constraint_cases().items()):
            inputs = [x.astype(dtype)] + ([] if reference is None else [reference.astype(dtype)])

            def project(x, reference=None, constraint=constraint, kwargs=kwargs):
                return constraint.project(x, reference, **kwargs)

            out, grads = value_and_vjp(
                project, inputs, random_upstream(x.shape, dtype, index), compiled=compiled
            )
            assert keras.backend.standardize_dtype(out.dtype) == dtype, (name, out.dtype)
            results[f"{name}/out"] = out
            for i, grad in enumerate(grads):
                results[f"{name}/grad{i}"] = grad
        # A bound that is a traced tensor (an input of the compiled function), one per row.
        probs = _softmax(2.0 * np.random.default_rng(1).normal(size=(BATCH, 4))).astype(dtype)
        bounds = np.linspace(0.6, 1.3, BATCH).astype(dtype)
        out, grads = value_and_vjp(
            lambda p, bound: kp.EntropyLowerBound(bound).project(p),
            [probs, bounds],
            random_upstream(probs.shape, dtype, 99),
            compiled=compiled,
        )
        results["entropy_tensor_bound/out"] = out
        results["entropy_tensor_bound/grad0"], results["entropy_tensor_bound/grad1"] = grads
    return results


def _gaussian_inputs(dtype: str, diagonal: bool, shared: bool, seed: int) -> list:
    rng = np.random.default_rng(seed)
    d = 3
    mean, old_mean = rng.normal(size=(BATCH, d)), 0.3 * rng.normal(size=(BATCH, d))
    if diagonal:
        scale = np.exp(0.5 * rng.normal(size=(d,) if shared else (BATCH, d)))
        old_scale = np.exp(0.3 * rng.normal(size=(BATCH, d)))
    else:

        def cholesky(batch):
            factor = np.tril(0.3 * rng.normal(size=(*batch, d, d)))
            factor[..., np.arange(d), np.arange(d)] = np.exp(0.5 * rng.normal(size=(*batch, d)))
            return factor

        scale, old_scale = cholesky(() if shared else (BATCH,)), cholesky((BATCH,))
    return [np.asarray(v, dtype) for v in (mean, scale, old_mean, old_scale)]


def gaussian_values(dtype: str = "float32", compiled: bool = False) -> dict:
    """``project_gaussian`` (entropy then KL) and ``project_categorical``, values and gradients."""
    results = {}
    with jax_x64(dtype == "float64"):
        for seed, (diagonal, shared, average) in enumerate(
            [(False, False, False), (False, True, True), (True, False, False), (True, True, True)]
        ):

            def project(mean, scale, old_mean, old_scale, diagonal=diagonal, average=average):
                (mean, scale), _ = kp.project_gaussian(
                    mean,
                    scale,
                    old_mean,
                    old_scale,
                    min_entropy=2.5,
                    epsilon_mean=0.05,
                    epsilon_cov=0.1,
                    average_over_batch=average,
                    diagonal=diagonal,
                )
                return ops.concatenate([ops.reshape(mean, (-1,)), ops.reshape(scale, (-1,))])

            inputs = _gaussian_inputs(dtype, diagonal, shared, seed)
            size = inputs[0].size + (inputs[0].size if diagonal else BATCH * 9)
            out, grads = value_and_vjp(
                project, inputs, random_upstream((size,), dtype, seed), compiled=compiled
            )
            name = f"gaussian_diagonal{diagonal}_shared{shared}_average{average}"
            results[f"{name}/out"] = out
            for i, grad in enumerate(grads):
                results[f"{name}/grad{i}"] = grad
        rng = np.random.default_rng(7)
        probs, old = (_softmax(s * rng.normal(size=(BATCH, 5))).astype(dtype) for s in (2.0, 0.5))
        for average in (False, True):
            out, grads = value_and_vjp(
                lambda p, q, average=average: kp.project_categorical(
                    p, q, min_entropy=1.2, epsilon=0.05, average_over_batch=average
                )[0],
                [probs, old],
                random_upstream(probs.shape, dtype, 8),
                compiled=compiled,
            )
            results[f"categorical_average{average}/out"] = out
            results[f"categorical_average{average}/grad0"], results[f"categorical_average{average}/grad1"] = (
                grads
            )
    return results


def errors() -> dict:
    """Eagerly, the errors of the TensorFlow tests (``ValueError`` on JAX and PyTorch); under
    ``jax.jit``, where values cannot raise, the projection returns without checking."""
    x = np.array([[10.0, 0.0, 0.0]], "float32")
    bad_anchor = kp.UserConstraint(logsumexp_h, [5.0, 5.0, 5.0])
    with pytest.raises(ValueError, match=r"strictly feasible.*Received: h\(anchor\)=4\.09"):
        bad_anchor.project(x)
    nan = np.array([[np.nan, 0.0]], "float32")
    with pytest.raises(ValueError, match="NaN or inf"):
        kp.L2Ball(1.0).project(nan, validate_args=True)
    with pytest.raises(ValueError, match="NaN or inf"):
        kp.InterpolationProjection(kp.LinfBall(1.0), validate_args=True)(nan)
    with pytest.raises(ValueError, match="mean has NaN or infinite entries"):
        kp.project_gaussian_entropy(nan, np.ones((1, 2), "float32"), 1.0, diagonal=True)
    with pytest.raises(ValueError, match=r"min_entropy must be finite\. Received: min_entropy="):
        kp.EntropyLowerBound(ops.convert_to_tensor([0.5, np.nan]))
    with pytest.raises(ValueError, match=r"min_entropy must be < log\(K\)"):
        kp.InterpolationProjection(kp.EntropyLowerBound(np.log(4.0)))(np.zeros((1, 4), "float32"))
    with pytest.raises(NotImplementedError, match="TensorFlow backend only"):
        kp.minimize(lambda v: ops.sum(v, axis=-1), kp.L2Ball(1.0), [0.0, 0.0], steps=3)
    results = {}
    if keras.backend.backend() == "jax":
        import jax

        results["jit_bad_anchor"] = np.asarray(jax.jit(bad_anchor.project)(x))
        results["jit_nan"] = np.asarray(jax.jit(lambda v: kp.L2Ball(1.0).project(v, validate_args=True))(nan))
    return results


def layer_checks(tmp_dir: str) -> dict:
    """``tests/layer_checks.py`` on both layers, as the TensorFlow tests run them."""
    rng = np.random.default_rng(3)
    x = 3.0 * rng.normal(size=(4, 4)).astype("float32")
    logits, reference = (s * rng.normal(size=(4, 4)).astype("float32") for s in (3.0, 0.5))
    cases = [
        (
            kp.InterpolationProjection,
            {"constraint": kp.L2Ball(2.0), "margin": 0.05, "validate_args": True},
            x,
        ),
        (
            kp.InterpolationProjection,
            {"constraint": [kp.L2Ball(2.0), kp.Halfspace([1.0] * 4, 1.0, interior_point=[0.0] * 4)]},
            x,
        ),
        (kp.InterpolationProjection, {"constraint": kp.Monotone(spacing=0.3)}, x),
        (
            kp.InterpolationProjection,
            {"constraint": kp.KLTrustRegion(0.05, from_logits=True)},
            [logits, reference],
        ),
    ]
    for diagonal, kwargs in [
        (True, {"min_entropy": 2.0}),
        (False, {"epsilon_mean": 0.05, "epsilon_cov": 0.1}),
    ]:
        inputs = _gaussian_inputs("float32", diagonal, False, 5)
        kwargs = {**kwargs, "diagonal": diagonal}
        cases.append((kp.GaussianProjection, kwargs, inputs if "epsilon_mean" in kwargs else inputs[:2]))
    for index, (layer_class, kwargs, inputs) in enumerate(cases):
        path = Path(tmp_dir) / f"layer_checks_{keras.backend.backend()}_{index}"
        path.mkdir(parents=True, exist_ok=True)
        check_layer(layer_class, kwargs, inputs, tmp_path=path)
    return {}


def fit_with_projections() -> dict:
    """``model.fit`` through an ``InterpolationProjection`` and a ``GaussianProjection``: the loss
    goes down and the outputs stay feasible."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(64, 4)).astype("float32")
    results = {}
    keras.utils.set_random_seed(0)
    ball = kp.L2Ball(1.0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), kp.InterpolationProjection(ball)])
    model.compile(keras.optimizers.Adam(0.05), "mse")
    y = np.clip(x[:, :3], -0.5, 0.5)
    history = model.fit(x, y, epochs=4, batch_size=16, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0], history
    assert np.all(np.linalg.norm(to_numpy(model.predict(x, verbose=0)), axis=-1) <= 1.0 + 1e-5)
    results["interpolation"] = np.array(history)

    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    mean = keras.layers.Dense(2)(inputs)
    std = keras.layers.Dense(2, activation="softplus")(inputs)
    mean, std = kp.GaussianProjection(min_entropy=2.5, diagonal=True)([mean, std])
    model = keras.Model(inputs, [mean, std])
    model.compile(keras.optimizers.Adam(0.05), ["mse", "mse"])
    history = model.fit(x, [x[:, :2], np.ones((64, 2), "float32")], epochs=4, batch_size=16, verbose=0)
    history = history.history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0], history
    _, std = model.predict(x, verbose=0)
    assert np.all(to_numpy(kp.gaussian_entropy(to_numpy(std), diagonal=True)) >= 2.5 - 1e-4)
    results["gaussian"] = np.array(history)
    return results


def _saved_model_inputs() -> np.ndarray:
    return np.random.default_rng(12).normal(size=(6, 4)).astype("float32")


def save_projection_model(path: str) -> dict:
    """A model with both projection layers and fixed weights, saved to ``path``; its predictions."""
    keras.utils.set_random_seed(13)
    inputs = keras.Input((4,))
    points = kp.InterpolationProjection([kp.L2Ball(1.5), kp.Halfspace([1.0, 1.0, 1.0], 0.5)], margin=0.1)(
        keras.layers.Dense(3)(inputs)
    )
    mean, std = kp.GaussianProjection(min_entropy=3.0, diagonal=True)(
        [keras.layers.Dense(2)(inputs), keras.layers.Dense(2, activation="softplus")(inputs)]
    )
    model = keras.Model(inputs, [points, mean, std])
    rng = np.random.default_rng(13)
    model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
    model.save(path)
    return _predictions(model)


def load_projection_model(path: str) -> dict:
    """The predictions of the model saved at ``path`` (by any backend)."""
    model = keras.saving.load_model(path)
    assert {type(layer) for layer in model.layers} >= {kp.InterpolationProjection, kp.GaussianProjection}
    return _predictions(model)


def _predictions(model) -> dict:
    points, mean, std = model.predict(_saved_model_inputs(), verbose=0)
    return {"points": to_numpy(points), "mean": to_numpy(mean), "std": to_numpy(std)}


# --- the tests, under TensorFlow --------------------------------------------------------


def _slow_on(slow_backend: str) -> list:
    """``backend_params`` of both backends, ``slow_backend``'s also marked ``slow``."""
    return [
        pytest.param(*param.values, id=param.id, marks=[*param.marks, pytest.mark.slow])
        if param.id == slow_backend
        else param
        for param in backend_params(*OTHER_BACKENDS)
    ]


@functools.cache
def _tensorflow(function: str, dtype: str = "float32") -> dict:
    """What ``function`` returns here, under TensorFlow (computed once per module run)."""
    return globals()[function](dtype)


# The calls each test reads, so that a backend process runs those of the selected tests only.
NEEDED_CALLS = {
    "test_projections_equal_tensorflow": ["values", "gaussian"],
    "test_projections_in_float64_equal_tensorflow": ["values64", "gaussian64"],
    "test_jax_jit_equals_tensorflow": ["jit_values", "jit_gaussian"],
    "test_errors": ["errors"],
    "test_layers_pass_the_layer_checks": ["layer_checks"],
    "test_model_fit_with_projection_layers": ["fit"],
    "test_keras_file_loads_and_predicts_the_same_across_backends": ["load_tensorflow_model", "save_model"],
}


def _calls(backend: str, directory: Path) -> dict:
    calls = {
        "values": f"{MODULE}:projection_values",
        "values64": (f"{MODULE}:projection_values", {"dtype": "float64"}),
        "gaussian": f"{MODULE}:gaussian_values",
        "gaussian64": (f"{MODULE}:gaussian_values", {"dtype": "float64"}),
        "errors": f"{MODULE}:errors",
        "layer_checks": (f"{MODULE}:layer_checks", {"tmp_dir": str(directory)}),
        "fit": f"{MODULE}:fit_with_projections",
        "load_tensorflow_model": (
            f"{MODULE}:load_projection_model",
            {"path": str(directory / "tensorflow.keras")},
        ),
        "save_model": (f"{MODULE}:save_projection_model", {"path": str(directory / f"{backend}.keras")}),
    }
    if backend == "jax":
        calls["jit_values"] = (f"{MODULE}:projection_values", {"compiled": True})
        calls["jit_gaussian"] = (f"{MODULE}:gaussian_values", {"compiled": True})
    return calls


# The model saved under TensorFlow (``tensorflow.keras``), and the backends' processes.
saved_directory = saved_directory_fixture(
    "backends_projections", lambda directory: save_projection_model(str(directory / "tensorflow.keras"))
)
backend_runs = backend_runs_fixture(_calls, NEEDED_CALLS)


@pytest.mark.parametrize("backend", _slow_on("jax"))
def test_projections_equal_tensorflow(backend, backend_runs):
    results = backend_runs[backend].wait()
    assert_all_close(results["values"], _tensorflow("projection_values"), FORWARD_TOL, GRADIENT_TOL)
    assert_all_close(results["gaussian"], _tensorflow("gaussian_values"), FORWARD_TOL, GRADIENT_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_projections_in_float64_equal_tensorflow(backend, backend_runs):
    results = backend_runs[backend].wait()
    for name, function in [("values64", "projection_values"), ("gaussian64", "gaussian_values")]:
        assert_all_close(results[name], _tensorflow(function, "float64"), FLOAT64_TOL, FLOAT64_TOL)


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_jax_jit_equals_tensorflow(backend, backend_runs):
    results = backend_runs[backend].wait()
    assert_all_close(results["jit_values"], _tensorflow("projection_values"), FORWARD_TOL, GRADIENT_TOL)
    assert_all_close(results["jit_gaussian"], _tensorflow("gaussian_values"), FORWARD_TOL, GRADIENT_TOL)


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_errors(backend, backend_runs):
    results = backend_runs[backend].wait()["errors"]
    if backend == "jax":  # unchecked under jax.jit: the infeasible anchor's interpolation, NaN kept
        assert np.isfinite(results["jit_bad_anchor"]).all()
        assert np.isnan(results["jit_nan"][0, 0])


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_layers_pass_the_layer_checks(backend, backend_runs):
    backend_runs[backend].wait()["layer_checks"]


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_model_fit_with_projection_layers(backend, backend_runs):
    backend_runs[backend].wait()["fit"]


@pytest.mark.parametrize("backend", backend_params(*OTHER_BACKENDS))
def test_keras_file_loads_and_predicts_the_same_across_backends(backend, backend_runs, saved_directory):
    results = backend_runs[backend].wait()
    assert_keras_files_move(
        results, load_projection_model, saved_directory, backend, "save_model", same_model=True
    )
