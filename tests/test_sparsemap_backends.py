"""SparseMAP (the op and the layers) on JAX and PyTorch, against TensorFlow.

Each backend runs in its own process (``tests/backend_harness.py``), started once for this
module; the functions below without a ``test_`` prefix are what it runs, and the tests compare
what they return with the same functions run here, under TensorFlow: forward values to 1e-6,
gradients to 1e-5 in float32, both to 1e-12 in float64; the solver info (``return_info``,
``return_structures``) and ``ks.map_decode`` eagerly and compiled (``jax.jit``,
``torch.compile``, where the info is padded to its static bound). The backends whose package
is not installed are skipped. The layer checks of every structure and ``torch.compile`` with
Inductor (a C++ compiler) are marked ``slow``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_structured as ks
from keras_structured.engine import DependencyTreeStructure, MatchingStructure, SequenceStructure, solve
from tests.backend_harness import (
    FLOAT64_TOL,
    FORWARD_TOL,
    GRADIENT_TOL,
    OTHER_BACKENDS,
    assert_all_close,
    assert_keras_files_move,
    backend_runs_fixture,
    jax_x64,
    random_upstream,
    saved_directory_fixture,
    start_calls,
    to_numpy,
    value_and_vjp,
)
from tests.layer_checks import check_layer
from tests.test_sparsemap_layers import symbolic_structures_model

MODULE = __name__
# Made once, outside the compiled functions (torch.compile cannot trace their construction).
SEQUENCE, TREE, MATCHING = SequenceStructure(), DependencyTreeStructure(), MatchingStructure()
SEQUENCE_LENGTHS = np.array([6, 3, 1, 4], "int32")
TREE_WORDS = np.array([5, 3, 2, 4], "int32")


# --- what each backend runs ---------------------------------------------------------------


def _flat_marginals(u, v):
    """``(u, v)`` as one ``(batch, size)`` tensor, for :func:`value_and_vjp`."""
    batch = u.shape[0]
    return keras.ops.concatenate([keras.ops.reshape(u, (batch, -1)), keras.ops.reshape(v, (batch, -1))], 1)


def _cases(dtype: str) -> dict:
    """name -> (function, inputs, output shape): the same problems on every backend."""
    rng = np.random.default_rng(0)
    # Tensors of the backend, made before any tracing (torch.compile cannot trace a conversion).
    sequence_lengths, tree_words = map(keras.ops.convert_to_tensor, (SEQUENCE_LENGTHS, TREE_WORDS))

    def draw(*shape):
        return rng.normal(size=shape).astype(dtype)

    return {
        "sequence": (
            lambda unary, pairwise: _flat_marginals(
                *ks.sparsemap(SEQUENCE, unary, pairwise, lengths=sequence_lengths)
            ),
            [draw(4, 6, 3), draw(4, 5, 3, 3)],
            (4, 6 * 3 + 5 * 3 * 3),
        ),
        "tree": (
            lambda scores: ks.sparsemap(TREE, scores, lengths=tree_words)[0],
            [draw(4, 6, 6)],
            (4, 6, 6),
        ),
        "sequence_wrapper": (
            lambda unary, transitions, start, end: _flat_marginals(
                *ks.sparsemap_sequence(unary, transitions, start, end, lengths=sequence_lengths)
            ),
            [draw(4, 6, 3), draw(3, 3), draw(3), draw(3)],
            (4, 6 * 3 + 5 * 3 * 3),
        ),
    }


def sparsemap_values(dtype: str = "float32", compiled: bool = False) -> dict:
    """Outputs and gradients of ``ks.sparsemap`` (sequences, trees) and ``ks.sparsemap_sequence``."""
    results = {}
    with jax_x64(dtype == "float64"):
        for name, (function, inputs, shape) in _cases(dtype).items():
            outputs, gradients = value_and_vjp(
                function, inputs, random_upstream(shape, dtype), compiled=compiled
            )
            assert outputs.dtype == dtype and all(g.dtype == dtype for g in gradients)
            results[f"{name}/out"] = outputs
            for index, gradient in enumerate(gradients):
                results[f"{name}/grad{index}"] = gradient
    return results


def double_backward() -> dict:
    """The gradient of a vector-Jacobian product with respect to its cotangent: a Jacobian-vector
    product, which every backend's backward pass must give (its own backward is the same product)."""
    rng = np.random.default_rng(11)
    scores, cotangent, direction = (rng.normal(size=(3, 5, 5)).astype("float32") for _ in range(3))
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        cotangent = tf.Variable(cotangent)
        x = tf.constant(scores)
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                inner.watch(x)
                u, _ = ks.sparsemap(TREE, x)
            vjp = inner.gradient(u, x, output_gradients=cotangent)
            projected = tf.reduce_sum(vjp * direction)
        jvp = outer.gradient(projected, cotangent)
    elif backend == "jax":
        import jax

        def projected(cotangent):
            _, pullback = jax.vjp(lambda x: ks.sparsemap(TREE, x)[0], scores)
            return (pullback(cotangent)[0] * direction).sum()

        jvp = jax.grad(projected)(cotangent)
    else:
        import torch

        x = torch.tensor(scores, requires_grad=True)
        cotangent = torch.tensor(cotangent, requires_grad=True)
        (vjp,) = torch.autograd.grad(ks.sparsemap(TREE, x)[0], x, cotangent, create_graph=True)
        (jvp,) = torch.autograd.grad((vjp * torch.tensor(direction)).sum(), cotangent)
    return {"jvp": to_numpy(jvp)}


def jax_transformations() -> dict:
    """Under ``jax.jit`` and ``jax.vmap`` (one host call per vmapped batch), ``jax.jacrev``
    against central differences in float64, and the support store left empty."""
    import jax
    import jax.numpy as jnp

    from keras_structured.ops.host_call import SUPPORTS, _host

    calls = []
    solve_once = _host.solve

    def counted_solve(*args, **kwargs):
        calls.append(args[1].shape[0])
        return solve_once(*args, **kwargs)

    _host.solve = counted_solve
    try:
        rng = np.random.default_rng(3)
        stacked = rng.normal(size=(3, 4, 6, 6)).astype("float32")

        def marginals(scores):
            return ks.sparsemap(TREE, scores, lengths=TREE_WORDS)[0]

        vmapped = np.asarray(jax.vmap(marginals)(stacked))
        one_call = list(calls)
        looped = np.stack([np.asarray(marginals(scores)) for scores in stacked])
        assert one_call == [12], one_call  # 3 mapped batches of 4 trees: one call of 12 problems
        np.testing.assert_array_equal(vmapped, looped)

        calls.clear()
        upstream = rng.normal(size=stacked.shape).astype("float32")
        gradient = jax.jit(jax.grad(lambda s: (jax.vmap(marginals)(s) * upstream).sum()))(stacked)
        assert calls == [12], calls  # the backward pass found the support: no second solve
        looped = [
            jax.grad(lambda s, g=g: (marginals(s) * g).sum())(s)
            for s, g in zip(stacked, upstream, strict=True)
        ]
        np.testing.assert_allclose(np.asarray(gradient), np.stack(looped), atol=1e-6)
    finally:
        _host.solve = solve_once

    with jax_x64(True):
        errors = {}
        for name, function, inputs in [
            ("tree", lambda s: ks.sparsemap(TREE, s, tol=1e-12)[0], [rng.normal(size=(1, 5, 5))]),
            (
                "sequence",
                lambda a, b: _flat_marginals(*ks.sparsemap(SEQUENCE, a, b, tol=1e-12)),
                [rng.normal(size=(1, 4, 3)), rng.normal(size=(1, 3, 3, 3))],
            ),
        ]:
            jacobians = jax.jacrev(function, argnums=tuple(range(len(inputs))))(*map(jnp.asarray, inputs))
            for index, jacobian in enumerate(jacobians):
                numerical = _central_differences(function, inputs, index)
                jacobian = np.asarray(jacobian).reshape(numerical.shape)  # batches of one
                errors[f"{name}/{index}"] = np.abs(jacobian - numerical).max()
    assert len(SUPPORTS) == 0, len(SUPPORTS)
    return errors


def _central_differences(function, inputs, index: int, delta: float = 1e-6) -> np.ndarray:
    """``d function / d inputs[index]`` of one example, ``(*output_shape, *input_shape)`` without
    their batch dimensions: every shifted input is one example of a single batch."""
    x = inputs[index][0]
    shifts = np.eye(x.size).reshape((x.size,) + x.shape) * delta
    arguments = [np.repeat(array, 2 * x.size, axis=0) for array in inputs]
    arguments[index] = np.concatenate([x + shifts, x - shifts])
    outputs = np.asarray(function(*arguments))
    differences = (outputs[: x.size] - outputs[x.size :]) / (2 * delta)
    return np.moveaxis(differences, 0, -1).reshape(outputs.shape[1:] + x.shape)


def torch_compiled(backend: str = "aot_eager") -> dict:
    """``torch.compile(fullgraph=True)`` (no graph break) forward and backward equal eager;
    ``gradcheck`` and ``gradgradcheck`` in float64."""
    import torch

    torch._dynamo.reset()
    results = {}
    for name, (function, inputs, shape) in _cases("float32").items():
        compiled = torch.compile(function, backend=backend, fullgraph=True)
        upstream = torch.tensor(random_upstream(shape, "float32"))
        for key, run in (("eager", function), ("compiled", compiled)):
            tensors = [torch.tensor(x, requires_grad=True) for x in inputs]
            outputs = run(*tensors)
            outputs.backward(upstream)
            results[f"{name}/{key}/out"] = to_numpy(outputs)
            for index, tensor in enumerate(tensors):
                results[f"{name}/{key}/grad{index}"] = to_numpy(tensor.grad)
    rng = np.random.default_rng(5)
    scores = torch.tensor(rng.normal(size=(2, 4, 4)), requires_grad=True)
    function = lambda s: ks.sparsemap(TREE, s, tol=1e-12)[0]  # noqa: E731
    assert torch.autograd.gradcheck(function, (scores,), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradgradcheck(function, (scores,), eps=1e-6, atol=1e-6)
    return results


# The tagger of the README, scaled down: Embedding (mask) -> Dense -> SparseMAPSequence.
def _tagger_data():
    rng = np.random.default_rng(0)
    words = rng.integers(1, 12, size=(48, 7))
    lengths = rng.integers(3, 8, size=48)
    words[np.arange(7) >= lengths[:, None]] = 0
    return words, np.eye(3, dtype="float32")[words % 3]


def _tagger() -> keras.Model:
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(12, 8, mask_zero=True)(tokens)
    marginals = ks.SparseMAPSequence(use_boundary=True)(keras.layers.Dense(3)(hidden))
    return keras.Model(tokens, marginals)


def fit_tagger(save_path: str) -> dict:
    """``model.fit`` of the tagger (jitted steps on JAX): the loss goes down, padding gets zero
    marginals; the model is saved to ``save_path``. Returns the losses and predictions."""
    keras.utils.set_random_seed(0)
    words, targets = _tagger_data()
    model = _tagger()
    model.compile(keras.optimizers.Adam(0.05), "mse")
    if keras.backend.backend() == "jax":
        assert model.jit_compile, "the JAX trainer should jit the train step"
    history = model.fit(words, targets, epochs=4, batch_size=16, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0], history
    predictions = model.predict(words, verbose=0)
    assert np.all(predictions[words == 0] == 0)
    np.testing.assert_allclose(predictions.sum(-1)[words > 0], 1.0, atol=1e-5)
    model.save(save_path)
    return {"losses": np.array(history), "predictions": predictions}


def load_tagger(path: str) -> dict:
    """The predictions of the tagger saved at ``path`` (by any backend)."""
    model = keras.saving.load_model(path, compile=False)
    assert any(type(layer) is ks.SparseMAPSequence for layer in model.layers)
    return {"predictions": model.predict(_tagger_data()[0], verbose=0)}


def _padding_mask(sizes, width):
    return np.arange(width)[None, :] < np.asarray(sizes)[:, None]


def _scores(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


#: name -> (layer class, constructor arguments, (seed, shape) of the scores, call arguments), cases
#: of tests/test_sparsemap_layers.py.
LAYER_CASES = {
    "sequence_mask": (
        ks.SparseMAPSequence,
        {"use_boundary": True, "transitions_initializer": "random_normal"},
        (2, (4, 6, 3)),
        {"mask": _padding_mask([6, 3, 1, 4], 6)},
    ),
    "tree_mask": (ks.SparseMAPDependencyTree, {}, (8, (4, 5, 5)), {"mask": _padding_mask([5, 3, 2, 4], 5)}),
    "sequence": (ks.SparseMAPSequence, {"transitions_initializer": "random_normal"}, (0, (4, 6, 3)), {}),
    "projective_tree": (
        ks.SparseMAPDependencyTree,
        {"single_root": True, "projective": True},
        (4, (4, 5, 5)),
        {},
    ),
    "matching": (ks.SparseMAPMatching, {"unmatched_score": -0.5}, (5, (4, 3, 4)), {}),
    "matching_lengths": (
        ks.SparseMAPMatching,
        {},
        (9, (4, 3, 4)),
        {"lengths": np.array([[3, 4], [2, 3], [3, 1], [1, 2]], "int32")},
    ),
    "budget_mask": (
        ks.SparseMAPBudget,
        {"k": 2, "exact": False},
        (10, (4, 6)),
        {"mask": _padding_mask([6, 4, 2, 3], 6)},
    ),
}


def layer_checks(tmp_dir: str, names: list) -> dict:
    """``tests/layer_checks.py`` on SparseMAP layers: config, eager and symbolic calls, ``jax.jit``,
    ``model.fit``, ``.keras`` save/load, ``mixed_float16``."""
    for name in names:
        layer_class, kwargs, (seed, shape), call_kwargs = LAYER_CASES[name]
        path = Path(tmp_dir) / f"layer_checks_{keras.backend.backend()}_{name}"
        path.mkdir(parents=True, exist_ok=True)
        check_layer(layer_class, kwargs, _scores(seed, shape), call_kwargs=call_kwargs, tmp_path=path)
    return {}


def _compiled(function):
    """``function`` traced and compiled by the backend: ``jax.jit``, ``torch.compile`` (Inductor
    aside: ``aot_eager``), ``tf.function``."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(function)
    if backend == "torch":
        import torch

        torch._dynamo.reset()
        return torch.compile(function, backend="aot_eager", fullgraph=True)
    import tensorflow as tf

    return tf.function(function)


def _info_cases() -> dict:
    """name -> (function returning ``(u, v, info)``, inputs): ``return_info`` on sequences,
    trees, the sequence wrapper, a Frank-Wolfe run stopped by ``max_iter`` (its bound is
    ``max_iter + 1``), float16 scores (float32 weights) and the layer's ``return_structures``."""
    rng = np.random.default_rng(7)
    sequence_lengths, tree_words = map(keras.ops.convert_to_tensor, (SEQUENCE_LENGTHS, TREE_WORDS))
    layer = ks.SparseMAPDependencyTree(return_structures=True)

    def draw(*shape, dtype="float32"):
        return rng.normal(size=shape).astype(dtype)

    def from_layer(scores):
        out = layer(scores)
        return out["u"], out["v"], {"weights": out["weights"], "structures": out["structures"]}

    return {
        "sequence": (
            lambda a, b: ks.sparsemap(SEQUENCE, a, b, lengths=sequence_lengths, return_info=True),
            [draw(4, 6, 3), draw(4, 5, 3, 3)],
        ),
        "tree": (lambda s: ks.sparsemap(TREE, s, lengths=tree_words, return_info=True), [draw(4, 6, 6)]),
        "sequence_wrapper": (
            lambda a, t: ks.sparsemap_sequence(a, t, lengths=sequence_lengths, return_info=True),
            [draw(4, 6, 3), draw(3, 3)],
        ),
        "frank_wolfe": (
            lambda s: ks.sparsemap(TREE, s, method="pairwise_frank_wolfe", max_iter=3, return_info=True),
            [draw(2, 6, 6)],
        ),
        "float16": (lambda s: ks.sparsemap(TREE, s, return_info=True), [draw(2, 4, 4, dtype="float16")]),
        "layer": (from_layer, [draw(3, 5, 5)]),
    }


def solver_info(compiled: bool = False) -> dict:
    """``return_info`` / ``return_structures``: ``u`` and the info arrays of every case of
    :func:`_info_cases`, eagerly or compiled (then padded to the static bound off TensorFlow)."""
    results = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ks.engine.SparseMAPConvergenceWarning)  # the Frank-Wolfe case
        for name, (function, inputs) in _info_cases().items():
            if compiled and name == "layer" and keras.backend.backend() == "torch":
                continue  # torch.compile of a Keras layer call is not what this checks
            run = _compiled(function) if compiled else function
            u, _, info = run(*map(keras.ops.convert_to_tensor, inputs))
            results[f"{name}/u"] = to_numpy(u)
            results.update({f"{name}/{key}": to_numpy(value) for key, value in info.items()})
            results.update(
                {f"{name}/dtype/{key}": np.array(str(to_numpy(value).dtype)) for key, value in info.items()}
            )
    return results


def _decode_cases() -> dict:
    """name -> (function returning ``(codes, m, n)``, inputs) of ``ks.map_decode``."""
    rng = np.random.default_rng(9)
    sequence_lengths, tree_words = map(keras.ops.convert_to_tensor, (SEQUENCE_LENGTHS, TREE_WORDS))
    forbidden = rng.normal(size=(4, 3, 4)).astype("float32")
    forbidden[:, 0, 0] = -np.inf
    return {
        "sequence": (
            lambda a, b: ks.map_decode(SEQUENCE, a, b, lengths=sequence_lengths),
            [rng.normal(size=(4, 6, 3)).astype("float32"), rng.normal(size=(4, 5, 3, 3)).astype("float32")],
        ),
        "tree": (
            lambda s: ks.map_decode(TREE, s, lengths=tree_words),
            [rng.normal(size=(4, 6, 6)).astype("float32")],
        ),
        "matching_forbidden": (lambda s: ks.map_decode(MATCHING, s), [forbidden]),
    }


def decode_values(compiled: bool = False) -> dict:
    """``ks.map_decode``'s codes and indicator vectors, eagerly or compiled; on JAX also the
    gradient through it (zero: it is piecewise constant)."""
    results = {}
    for name, (function, inputs) in _decode_cases().items():
        run = _compiled(function) if compiled else function
        for key, value in zip(
            ("codes", "m", "n"), run(*map(keras.ops.convert_to_tensor, inputs)), strict=True
        ):
            results[f"{name}/{key}"] = to_numpy(value)
    if keras.backend.backend() == "jax":
        import jax

        function, inputs = _decode_cases()["tree"]
        results["tree/gradient"] = np.asarray(jax.grad(lambda s: function(s)[1].sum())(inputs[0]))
    return results


def bad_scores_raise() -> dict:
    """NaN scores raise a ValueError naming ``eta_u`` eagerly, in ``ks.sparsemap`` and
    ``ks.map_decode``, on every backend (on JAX too: only under ``jax.jit`` does JAX's runtime
    error hold it)."""
    for function in (lambda s: ks.sparsemap(TREE, s)[0], lambda s: ks.map_decode(TREE, s)[1]):
        with pytest.raises(ValueError, match="eta_u"):
            to_numpy(function(np.full((1, 3, 3), np.nan, "float32")))
    return {}


# --- the tests, under TensorFlow --------------------------------------------------------


def _calls(backend: str, directory: Path) -> dict:
    calls = {
        "float32": f"{MODULE}:sparsemap_values",
        "float64": (f"{MODULE}:sparsemap_values", {"dtype": "float64", "compiled": backend == "jax"}),
        "double_backward": f"{MODULE}:double_backward",
        "info": f"{MODULE}:solver_info",
        "info_compiled": (f"{MODULE}:solver_info", {"compiled": True}),
        "decode": f"{MODULE}:decode_values",
        "decode_compiled": (f"{MODULE}:decode_values", {"compiled": True}),
        "bad_scores": f"{MODULE}:bad_scores_raise",
        "load_tensorflow_model": (f"{MODULE}:load_tagger", {"path": str(directory / "tensorflow.keras")}),
        "fit": (f"{MODULE}:fit_tagger", {"save_path": str(directory / f"{backend}.keras")}),
        "structures_model": (
            "tests.test_sparsemap_layers:symbolic_structures_model",
            {
                "save_path": str(directory / f"{backend}_structures.keras"),
                "load_path": str(directory / "tensorflow_structures.keras"),
            },
        ),
    }
    if backend == "jax":
        calls["jit"] = (f"{MODULE}:sparsemap_values", {"compiled": True})
        calls["transformations"] = f"{MODULE}:jax_transformations"
    if backend == "torch":
        calls["compiled"] = f"{MODULE}:torch_compiled"
    return calls


def _save_models(directory: Path) -> None:
    """The tagger (``tensorflow.keras``) and the model returning structures, saved under TensorFlow."""
    fit_tagger(str(directory / "tensorflow.keras"))
    symbolic_structures_model(str(directory / "tensorflow_structures.keras"))


saved_directory = saved_directory_fixture("backends_sparsemap", _save_models)
backend_runs = backend_runs_fixture(_calls)


@pytest.fixture(scope="module")
def tensorflow_values() -> dict:
    return {dtype: sparsemap_values(dtype) for dtype in ("float32", "float64")}


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_forward_values_and_gradients_equal_tensorflow(backend, backend_runs, tensorflow_values):
    results = backend_runs[backend].wait()
    assert_all_close(results["float32"], tensorflow_values["float32"], FORWARD_TOL, GRADIENT_TOL)
    assert_all_close(results["float64"], tensorflow_values["float64"], FLOAT64_TOL, FLOAT64_TOL)


def test_jax_jit_equals_tensorflow(backend_runs, tensorflow_values):
    assert_all_close(
        backend_runs["jax"].wait()["jit"], tensorflow_values["float32"], FORWARD_TOL, GRADIENT_TOL
    )


def test_jax_vmap_makes_one_host_call_and_jacrev_matches_finite_differences(backend_runs):
    for name, error in backend_runs["jax"].wait()["transformations"].items():
        assert error < 1e-6, (name, error)


def test_torch_compile_equals_eager(backend_runs, tensorflow_values):
    compiled = backend_runs["torch"].wait()["compiled"]
    expected = tensorflow_values["float32"]
    for key in expected:
        name, what = key.split("/")
        for mode in ("eager", "compiled"):
            np.testing.assert_allclose(compiled[f"{name}/{mode}/{what}"], expected[key], atol=GRADIENT_TOL)


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_double_backward_equals_tensorflow(backend, backend_runs):
    expected = double_backward()["jvp"]
    np.testing.assert_allclose(
        backend_runs[backend].wait()["double_backward"]["jvp"], expected, atol=GRADIENT_TOL
    )
    rng = np.random.default_rng(11)
    scores, _, direction = (rng.normal(size=(3, 5, 5)).astype("float32") for _ in range(3))
    exact = solve(TREE, scores.astype("float64")).jacobian_product(direction.astype("float64"))[0]
    np.testing.assert_allclose(expected, exact, atol=GRADIENT_TOL)


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_tagger_fits_and_keras_files_move_between_backends(backend, backend_runs, saved_directory):
    assert_keras_files_move(backend_runs[backend].wait(), load_tagger, saved_directory, backend, "fit")


@pytest.mark.slow
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_every_layer_passes_the_layer_checks(backend, tmp_path):
    calls = {
        "layer_checks": (f"{MODULE}:layer_checks", {"tmp_dir": str(tmp_path), "names": list(LAYER_CASES)})
    }
    start_calls(backend, calls, tmp_path).wait()["layer_checks"]


@pytest.mark.slow
def test_torch_compile_with_inductor_equals_tensorflow(tmp_path, tensorflow_values):
    calls = {"compiled": (f"{MODULE}:torch_compiled", {"backend": "inductor"})}
    compiled = start_calls("torch", calls, tmp_path).wait()["compiled"]
    for key, expected in tensorflow_values["float32"].items():
        name, what = key.split("/")
        np.testing.assert_allclose(compiled[f"{name}/compiled/{what}"], expected, atol=GRADIENT_TOL)


@pytest.fixture(scope="module")
def tensorflow_info() -> dict:
    return {"info": solver_info(), "decode": decode_values()}


def _assert_padded_to(values: dict, expected: dict, name: str) -> None:
    """``values`` (padded to the static bound) equal ``expected`` (the batch's largest support)
    on its first ``k`` structures, and padding after: weights 0, codes -1."""
    k = expected[f"{name}/weights"].shape[1]
    bound = values[f"{name}/weights"].shape[1]
    assert bound >= k, (name, bound, k)
    assert np.all(values[f"{name}/weights"][:, k:] == 0), name
    if f"{name}/structures" in values:
        assert np.all(values[f"{name}/structures"][:, k:] == -1), name
        values = {**values, f"{name}/structures": values[f"{name}/structures"][:, :k]}
    _assert_info_equal({**values, f"{name}/weights": values[f"{name}/weights"][:, :k]}, expected, name)


def _assert_info_equal(values: dict, expected: dict, name: str) -> None:
    for key in [key for key in expected if key.startswith(f"{name}/") and "/dtype/" not in key]:
        if values[key].dtype.kind == "f":
            np.testing.assert_allclose(values[key], expected[key], atol=FORWARD_TOL, err_msg=key)
        else:  # codes, MAP calls, flags: exactly (int32 codes on JAX without 64-bit types)
            np.testing.assert_array_equal(values[key], expected[key], err_msg=key)


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_return_info_and_structures_equal_tensorflow(backend, backend_runs, tensorflow_info):
    results = backend_runs[backend].wait()
    expected = tensorflow_info["info"]
    assert sorted(results["info"]) == sorted(expected)
    for name in _info_cases():
        _assert_info_equal(results["info"], expected, name)
        # Weights and gaps in the compute dtype, as on TensorFlow (float32 for float16 scores).
        for key in ("weights", "gap"):
            if f"{name}/dtype/{key}" in expected:
                assert results["info"][f"{name}/dtype/{key}"] == expected[f"{name}/dtype/{key}"], (name, key)
        if f"{name}/weights" in results["info_compiled"]:
            _assert_padded_to(results["info_compiled"], expected, name)
    assert expected["frank_wolfe/weights"].shape[1] <= 4 and not expected["frank_wolfe/converged"].all()
    assert results["info_compiled"]["frank_wolfe/weights"].shape[1] == 4  # max_iter + 1
    assert results["info_compiled"]["tree/weights"].shape[1] == 6 * 6 + 1  # prod(u_shape) + 1


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_symbolic_model_returning_structures_equals_tensorflow(backend, backend_runs, saved_directory):
    """A functional model over layers with ``return_structures=True``: symbolic shapes from the
    structure (``k`` the static bound on JAX), predictions equal to TensorFlow's (padded to the
    bound where the backend compiles ``predict``), ``.keras`` files both ways."""
    results = backend_runs[backend].wait()["structures_model"]
    here = symbolic_structures_model(
        str(saved_directory / "check.keras"), str(saved_directory / f"{backend}_structures.keras")
    )
    expected = {key: value for key, value in here.items() if not key.startswith("loaded/")}
    for name in ("tree", "sequence"):
        bound = {"tree": 5 * 5 + 1, "sequence": 4 * 3 + 1}[name] if backend == "jax" else -1
        shapes = {key: tuple(results[f"shape/{name}/{key}"]) for key in ("u", "v", "weights", "structures")}
        assert shapes["weights"] == (-1, bound)
        assert shapes["structures"] == (-1, bound, *expected[f"shape/{name}/structures"][2:])
        for key in ("u", "v"):
            assert shapes[key] == tuple(expected[f"shape/{name}/{key}"])
        # Predicted under the backend, saved under TensorFlow and loaded there, and the converse.
        for values in (results, _loaded(results), _loaded(here)):
            _assert_padded_to(values, expected, name)


def _loaded(results: dict) -> dict:
    """The predictions of the model that :func:`symbolic_structures_model` loaded."""
    return {key.removeprefix("loaded/"): value for key, value in results.items() if key.startswith("loaded/")}


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_map_decode_equals_tensorflow(backend, backend_runs, tensorflow_info):
    results = backend_runs[backend].wait()
    expected = tensorflow_info["decode"]
    for key in ("decode", "decode_compiled"):
        values = results[key]
        for name, want in expected.items():
            np.testing.assert_array_equal(values[name], want, err_msg=f"{key} {name}")
    if backend == "jax":
        assert not results["decode"]["tree/gradient"].any()


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_bad_scores_raise(backend, backend_runs):
    backend_runs[backend].wait()["bad_scores"]
