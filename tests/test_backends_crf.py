"""The CRF ops and losses and ``SequenceScores`` on JAX and PyTorch, against TensorFlow.

Each backend runs in its own process (``tests/backend_harness.py``), started once for this
module; the functions below without a ``test_`` prefix are what it runs, and the tests compare
what they return with the same functions run here, under TensorFlow: forward values to 1e-6,
gradients to 1e-5 in float32, both to 1e-12 in float64 (on JAX with 64-bit types switched
on). The cases: linear-chain and tree log-partition functions with lengths (and their
gradients, the marginals), the marginals themselves (and their gradients, second derivatives
of ``log Z``), the two CRF losses (also on PyTorch's ``meta`` device), invalid inputs; then
``model.fit`` of a tagger with ``SequenceScores`` and ``LinearChainCRFLoss``, and its
``.keras`` file moved between backends (``tests/test_backends_fit.py`` fits every loss). The
layer checks of ``SequenceScores`` are marked ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

import keras_structured as ks
from keras_structured.ops import (
    linear_chain_crf_log_partition,
    linear_chain_crf_marginals,
    pack_sequence_scores,
    tree_crf_log_partition,
    tree_crf_marginals,
)
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
    value_and_vjp,
)
from tests.layer_checks import check_layer

MODULE = __name__
CHAIN_LENGTHS = np.array([6, 3, 1, 0], "int32")
TREE_WORDS = np.array([5, 3, 1, 0], "int32")
TAGS = np.array([[0, 1, 2, 0, 1, 2], [2, 0, 1, -1, -1, -1], [1, -1, -1, -1, -1, -1], [0, 0, 2, 1, -1, -1]])
HEADS = np.array([[-1, 2, 0, 2, 5, 3], [-1, 0, 1, 1, -1, -1], [-1, 0, -1, -1, -1, -1], [-1, 3, 1, 0, -1, -1]])


# --- what each backend runs ---------------------------------------------------------------


def _flat(u, v):
    """``(u, v)`` as one ``(batch, size)`` tensor, for :func:`value_and_vjp`."""
    batch = u.shape[0]
    return keras.ops.concatenate([keras.ops.reshape(u, (batch, -1)), keras.ops.reshape(v, (batch, -1))], 1)


def _cases(dtype: str) -> dict:
    """name -> (function, inputs, output shape): the same problems on every backend."""
    rng = np.random.default_rng(0)
    # Tensors of the backend, made before any tracing.
    chain_lengths, tree_words = map(keras.ops.convert_to_tensor, (CHAIN_LENGTHS, TREE_WORDS))
    tags, heads = map(keras.ops.convert_to_tensor, (TAGS, HEADS))

    def draw(*shape, scale=1.0):
        return (rng.normal(size=shape) * scale).astype(dtype)

    chain_inputs = [draw(4, 6, 3), draw(3, 3), draw(3), draw(4, 3)]
    return {
        "chain_log_z": (
            lambda *inputs: linear_chain_crf_log_partition(*inputs, lengths=chain_lengths),
            chain_inputs,
            (4,),
        ),
        "chain_marginals": (
            lambda *inputs: _flat(*linear_chain_crf_marginals(*inputs, lengths=chain_lengths)),
            chain_inputs,
            (4, 6 * 3 + 5 * 3 * 3),
        ),
        "chain_loss": (
            lambda unary, pairwise: ks.linear_chain_crf_loss(tags, pack_sequence_scores(unary, pairwise)),
            [draw(4, 6, 3), draw(4, 5, 3, 3)],
            (4,),
        ),
        **{
            f"tree_{name}": case
            for single_root, suffix in ((False, ""), (True, "_single_root"))
            for name, case in {
                f"log_z{suffix}": (
                    lambda s, r=single_root: tree_crf_log_partition(s, tree_words, single_root=r),
                    [draw(4, 6, 6, scale=3.0)],
                    (4,),
                ),
                f"marginals{suffix}": (
                    lambda s, r=single_root: tree_crf_marginals(s, tree_words, single_root=r),
                    [draw(4, 6, 6, scale=3.0)],
                    (4, 6, 6),
                ),
                f"loss{suffix}": (
                    lambda s, r=single_root: ks.tree_crf_loss(heads, s, single_root=r),
                    [draw(4, 6, 6, scale=3.0)],
                    (4,),
                ),
            }.items()
        },
    }


def crf_values(dtype: str = "float32", compiled: bool = False, order: str = "all") -> dict:
    """Outputs and gradients of the CRF ops and losses (:func:`_cases`): for ``order="first"``
    the log-partition functions and losses (gradients: first derivatives), for ``"second"``
    the marginals (gradients: second derivatives of ``log Z``), or ``"all"``."""
    results = {}
    with jax_x64(dtype == "float64"):
        for name, (function, inputs, shape) in _cases(dtype).items():
            if order != "all" and ("marginals" in name) != (order == "second"):
                continue
            outputs, gradients = value_and_vjp(
                function, inputs, random_upstream(shape, dtype), compiled=compiled
            )
            assert outputs.dtype == dtype and all(g.dtype == dtype for g in gradients), name
            results[f"{name}/out"] = outputs
            for index, gradient in enumerate(gradients):
                results[f"{name}/grad{index}"] = gradient
    return results


def invalid_inputs() -> dict:
    """Eagerly, lengths outside ``[0, n]``, labels that are not sequences or trees, and NaN or
    ``+inf`` scores raise a ``ValueError`` naming the argument (the tree's scores first: the
    first call of its host check); under ``jax.jit`` the examples' values are NaN, except for
    the tree's scores, whose host check raises JAX's ``JaxRuntimeError`` holding its message."""
    chain, tree = np.zeros((2, 3, 2), "float32"), np.zeros((2, 4, 4), "float32")
    bad_tree, bad_chain = tree.copy(), chain.copy()
    bad_tree[1, 3, 1], bad_chain[1, 1, 0] = np.nan, np.inf
    bad_packed = pack_sequence_scores(bad_chain, np.zeros((2, 2), "float32"))
    tree_message = r"^Tree CRF arc scores must not be NaN or \+inf .* Received: scores\[1\]"
    for _ in range(2):  # the first call and a later one
        with pytest.raises(ValueError, match=tree_message):
            ks.tree_crf_loss(np.array([[-1, 0, 1, 2], [-1, 0, 1, 2]]), bad_tree)
        with pytest.raises(ValueError, match=r"^Linear-chain CRF scores must not be NaN or \+inf .*: 1$"):
            ks.linear_chain_crf_loss(np.array([[0, 1, 1], [0, 1, 1]]), bad_packed)
    for op in (
        lambda lengths: linear_chain_crf_log_partition(chain, np.zeros((2, 2), "float32"), lengths=lengths),
        lambda lengths: tree_crf_log_partition(tree, lengths),
        lambda lengths: tree_crf_marginals(tree, lengths),
    ):
        with pytest.raises(ValueError, match="lengths must be in"):
            op(np.array([3, 4], "int32"))
    packed = pack_sequence_scores(chain, np.zeros((2, 2), "float32"))
    with pytest.raises(ValueError, match=r"y_true must hold .* i = 1"):
        ks.linear_chain_crf_loss(np.array([[0, 1, 1], [0, -1, 1]]), packed)
    with pytest.raises(ValueError, match=r"y_true must hold .* i = 1"):
        ks.tree_crf_loss(np.array([[-1, 0, 1, 2], [-1, 0, 3, 2]]), tree)
    results = {}
    if keras.backend.backend() == "jax":
        import jax

        results["jit_log_z"] = jax.jit(lambda s, n: tree_crf_log_partition(s, n))(tree, np.array([3, 4]))
        results["jit_loss"] = jax.jit(ks.tree_crf_loss)(np.array([[-1, 0, 1, 2], [-1, 0, 3, 2]]), tree)
        results["jit_chain_scores"] = jax.jit(ks.linear_chain_crf_loss)(np.array([[0, 1, 1]] * 2), bad_packed)
        with pytest.raises(jax.errors.JaxRuntimeError, match=tree_message[1:]):
            jax.block_until_ready(jax.jit(tree_crf_log_partition)(bad_tree))
    return results


def torch_meta() -> dict:
    """On PyTorch's ``meta`` device, where Keras's trainer first builds a loss (on placeholder
    labels), the CRF losses give their shapes without reading a value."""
    with keras.device("meta"):
        for single_root in (False, True):
            loss = ks.tree_crf_loss(keras.ops.ones((83, 6)), keras.ops.ones((83, 6, 6)), single_root)
            assert tuple(loss.shape) == (83,) and loss.device.type == "meta", loss
        loss = ks.linear_chain_crf_loss(keras.ops.ones((83, 6)), keras.ops.ones((83, 6, 3, 4)))
        assert tuple(loss.shape) == (83,) and loss.device.type == "meta", loss
    return {}


def jax_transformations() -> dict:
    """The tree CRF's host call under ``jax.vmap`` (one call for the mapped batches) and
    ``jax.hessian`` of ``log Z`` (the elimination's second derivatives) in float64 against
    central differences of the marginals."""
    import jax

    rng = np.random.default_rng(3)
    stacked = rng.normal(size=(3, 4, 6, 6)).astype("float32")

    def log_z(scores):
        return tree_crf_log_partition(scores, TREE_WORDS)

    vmapped = np.asarray(jax.vmap(jax.grad(lambda s: log_z(s).sum()))(stacked))
    looped = np.stack([np.asarray(jax.grad(lambda s: log_z(s).sum())(s)) for s in stacked])
    np.testing.assert_array_equal(vmapped, looped)
    with jax_x64(True):
        scores = rng.normal(size=(1, 5, 5))
        hessian = np.asarray(jax.jacrev(jax.grad(lambda s: tree_crf_log_partition(s)[0]))(scores))
        delta = 1e-6
        numerical = np.zeros_like(hessian)
        for index in np.ndindex(scores.shape):
            shift = np.zeros_like(scores)
            shift[index] = delta
            plus, minus = (np.asarray(tree_crf_marginals(scores + sign * shift)) for sign in (1, -1))
            numerical[(...,) + index] = (plus - minus) / (2 * delta)
    return {"hessian_error": np.abs(hessian - numerical).max()}


# A tagger trained with the CRF loss: Embedding (mask) -> Dense -> SequenceScores.
def _tagger_data():
    rng = np.random.default_rng(0)
    words = rng.integers(1, 12, size=(48, 7))
    lengths = rng.integers(3, 8, size=48)
    padding = np.arange(7) >= lengths[:, None]
    tags = words % 3
    words[padding], tags[padding] = 0, -1
    return words, tags


def _tagger() -> keras.Model:
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(12, 8, mask_zero=True)(tokens)
    scores = ks.SequenceScores(use_boundary=True)(keras.layers.Dense(3)(hidden))
    return keras.Model(tokens, scores)


def fit_tagger(save_path: str) -> dict:
    """``model.fit`` of the tagger with ``LinearChainCRFLoss`` (jitted steps on JAX): the loss goes
    down; the model is saved to ``save_path``. Returns the losses and the packed scores."""
    keras.utils.set_random_seed(0)
    words, tags = _tagger_data()
    model = _tagger()
    model.compile(keras.optimizers.Adam(0.05), ks.LinearChainCRFLoss())
    history = model.fit(words, tags, epochs=4, batch_size=16, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < 0.5 * history[0], history
    model.save(save_path)
    return {"losses": np.array(history), "predictions": model.predict(words, verbose=0)}


def load_tagger(path: str) -> dict:
    """The packed scores of the tagger saved at ``path`` (by any backend)."""
    model = keras.saving.load_model(path, compile=False)
    assert any(type(layer) is ks.SequenceScores for layer in model.layers)
    return {"predictions": model.predict(_tagger_data()[0], verbose=0)}


def layer_checks(tmp_dir: str) -> dict:
    """``tests/layer_checks.py`` on ``SequenceScores``, with and without boundary scores."""
    unary = np.random.default_rng(0).normal(size=(4, 6, 3)).astype("float32")
    mask = np.arange(6)[None, :] < np.array([6, 3, 1, 4])[:, None]
    for use_boundary in (False, True):
        path = Path(tmp_dir) / f"layer_checks_{keras.backend.backend()}_{use_boundary}"
        path.mkdir(parents=True, exist_ok=True)
        kwargs = {"use_boundary": use_boundary, "transitions_initializer": "random_normal"}
        check_layer(ks.SequenceScores, kwargs, unary, call_kwargs={"mask": mask}, tmp_path=path)
    return {}


# --- the tests, under TensorFlow --------------------------------------------------------


def _calls(backend: str, directory: Path) -> dict:
    """The default part: on JAX, whose eager loops and compilations are slow, the first
    derivatives in float32 (eagerly and jitted); on PyTorch every case in both dtypes."""
    calls = {
        "invalid": f"{MODULE}:invalid_inputs",
        "load_tensorflow_model": (f"{MODULE}:load_tagger", {"path": str(directory / "tensorflow.keras")}),
        "fit": (f"{MODULE}:fit_tagger", {"save_path": str(directory / f"{backend}.keras")}),
    }
    if backend == "jax":
        calls["float32"] = (f"{MODULE}:crf_values", {"order": "first"})
        calls["jit"] = (f"{MODULE}:crf_values", {"compiled": True, "order": "first"})
    else:
        calls["float32"] = f"{MODULE}:crf_values"
        calls["float64"] = (f"{MODULE}:crf_values", {"dtype": "float64"})
        calls["meta"] = f"{MODULE}:torch_meta"
    return calls


#: JAX's slow part: second derivatives, float64, jax.vmap and jax.hessian.
JAX_SLOW_CALLS = {
    "second": (f"{MODULE}:crf_values", {"order": "second"}),
    "float64": (f"{MODULE}:crf_values", {"dtype": "float64"}),
    "transformations": f"{MODULE}:jax_transformations",
}


# The tagger trained and saved under TensorFlow (``tensorflow.keras``), and the backends' processes.
saved_directory = saved_directory_fixture(
    "backends_crf", lambda directory: fit_tagger(str(directory / "tensorflow.keras"))
)
backend_runs = backend_runs_fixture(_calls)


@pytest.fixture(scope="module")
def tensorflow_values() -> dict:
    return {dtype: crf_values(dtype) for dtype in ("float32", "float64")}


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_forward_values_and_gradients_equal_tensorflow(backend, backend_runs, tensorflow_values):
    results = backend_runs[backend].wait()
    assert_all_close(results["float32"], tensorflow_values["float32"], FORWARD_TOL, GRADIENT_TOL, subset=True)
    if backend == "torch":
        assert_all_close(
            results["float64"], tensorflow_values["float64"], FLOAT64_TOL, FLOAT64_TOL, subset=True
        )


def test_jax_jit_equals_tensorflow(backend_runs, tensorflow_values):
    assert_all_close(
        backend_runs["jax"].wait()["jit"],
        tensorflow_values["float32"],
        FORWARD_TOL,
        GRADIENT_TOL,
        subset=True,
    )


@pytest.mark.slow
def test_jax_second_derivatives_float64_vmap_and_hessian(tmp_path, tensorflow_values):
    results = start_calls("jax", JAX_SLOW_CALLS, tmp_path).wait()
    assert_all_close(results["second"], tensorflow_values["float32"], FORWARD_TOL, GRADIENT_TOL, subset=True)
    assert_all_close(results["float64"], tensorflow_values["float64"], FLOAT64_TOL, FLOAT64_TOL, subset=True)
    assert results["transformations"]["hessian_error"] < 1e-6


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_invalid_inputs_raise_eagerly_and_give_nan_under_jit(backend, backend_runs):
    results = backend_runs[backend].wait()["invalid"]
    if backend == "jax":
        assert np.isfinite(results["jit_log_z"][0]) and np.isnan(results["jit_log_z"][1])
        assert np.isfinite(results["jit_loss"][0]) and np.isnan(results["jit_loss"][1])
        assert np.isfinite(results["jit_chain_scores"][0]) and np.isnan(results["jit_chain_scores"][1])


def test_crf_losses_run_on_torch_meta_tensors(backend_runs):
    backend_runs["torch"].wait()["meta"]


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_tagger_fits_and_keras_files_move_between_backends(backend, backend_runs, saved_directory):
    assert_keras_files_move(backend_runs[backend].wait(), load_tagger, saved_directory, backend, "fit")


@pytest.mark.slow
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_sequence_scores_passes_the_layer_checks(backend, tmp_path):
    calls = {"layer_checks": (f"{MODULE}:layer_checks", {"tmp_dir": str(tmp_path)})}
    start_calls(backend, calls, tmp_path).wait()["layer_checks"]
