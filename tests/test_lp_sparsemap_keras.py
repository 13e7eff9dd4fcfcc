"""LP-SparseMAP in Keras: the op ``ks.lp_sparsemap``, the layer ``ks.LPSparseMAP`` and the loss.

References: the numpy core (:mod:`keras_structured.engine.lp`, tested against a direct QP
over the local polytope in ``tests/test_lp_sparsemap_engine.py``) for values, central finite
differences (``tf.test.compute_gradient`` in float64) for gradients, the float64 run for
float32 gradients, and the loss's formula. The JAX and PyTorch runs (``tests/backend_harness.py``,
skipped where the backend is not installed) must equal TensorFlow's: values to 1e-6 and
gradients to 1e-5 in float32.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import SequenceStructure
from keras_structured.engine.lp import (
    AtMostOne,
    Budget,
    FactorGraph,
    LPSparseMAPConvergenceWarning,
    LPSparseMAPOptions,
    Pair,
    StructureFactor,
    lp_sparsemap_batch,
)
from keras_structured.ops.lp_sparsemap_host import SOLUTIONS
from tests.backend_harness import backend_params, start_calls, value_and_vjp
from tests.layer_checks import check_layer

FORWARD_TOL = 1e-6
GRADIENT_TOL = 1e-5


def tagger_graph() -> FactorGraph:
    """3 words, 2 tags (a sequence factor: 8 transition parts), at most one word tagged 1,
    and a Pair coupling tag 1 of the first word with tag 1 of the last: 6 variables, 9 parts."""
    tags = np.arange(6).reshape(3, 2)
    return FactorGraph(6, [StructureFactor(SequenceStructure(), tags), AtMostOne(tags[:, 1]), Pair(1, 5)])


def multilabel_graph() -> FactorGraph:
    """4 labels, at most 3 on, a Pair on each of two label pairs: 4 variables, 2 parts."""
    return FactorGraph(4, [Budget([0, 1, 2, 3], 3), Pair(0, 1), Pair(2, 3)])


# Made once: the host functions are found by graph object.
TAGGER, MULTILABEL = tagger_graph(), multilabel_graph()


def _scores(
    graph: FactorGraph, batch: int, seed: int, dtype: str = "float64"
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    eta_u = rng.normal(size=(batch, graph.num_variables))
    eta_v = rng.normal(size=(batch, graph.v_size))
    return eta_u.astype(dtype), eta_v.astype(dtype)


def _flat(u, v):
    """``(u, v)`` as one ``(batch, num_variables + v_size)`` tensor."""
    return keras.ops.concatenate([u, v], axis=1)


def _core(graph: FactorGraph, eta_u: np.ndarray, eta_v: np.ndarray) -> list:
    return lp_sparsemap_batch(graph, eta_u.astype(np.float64), eta_v.astype(np.float64))


def _core_flat(graph: FactorGraph, eta_u, eta_v) -> np.ndarray:
    return np.array([np.concatenate([s.u, *(p.ravel() for p in s.v)]) for s in _core(graph, eta_u, eta_v)])


# --- the op ---------------------------------------------------------------------------------


@pytest.mark.parametrize("graph", [TAGGER, MULTILABEL], ids=["tagger", "multilabel"])
def test_op_equals_the_core_eagerly_and_traced(graph):
    eta_u, eta_v = _scores(graph, 3, seed=0)
    expected = _core_flat(graph, eta_u, eta_v)
    u, v, info = ks.lp_sparsemap(graph, eta_u, eta_v, return_info=True)
    np.testing.assert_array_equal(_flat(u, v).numpy(), expected)
    assert info["converged"].numpy().all() and info["iterations"].dtype == tf.int32

    @tf.function(input_signature=[tf.TensorSpec([None, graph.num_variables], tf.float64)] * 1)
    def traced(scores):  # unknown batch size, no eta_v: zeros
        u, v = ks.lp_sparsemap(graph, scores)
        return _flat(u, v)

    got = traced(tf.constant(eta_u))
    assert got.shape[1] == graph.num_variables + graph.v_size
    np.testing.assert_array_equal(got.numpy(), _core_flat(graph, eta_u, np.zeros_like(eta_v)))


def test_gradients_match_finite_differences_in_float64():
    eta_u, eta_v = _scores(TAGGER, 1, seed=1)
    theoretical, numerical = tf.test.compute_gradient(
        lambda a, b: _flat(*ks.lp_sparsemap(TAGGER, a, b)),
        [tf.constant(eta_u), tf.constant(eta_v)],
        delta=1e-6,
    )
    for jacobian, reference in zip(theoretical, numerical, strict=True):
        assert np.abs(jacobian).max() > 0.1  # not a flat region
        np.testing.assert_allclose(jacobian, reference, atol=1e-7)


def test_float32_scores_get_float64_accurate_gradients():
    eta_u, eta_v = _scores(TAGGER, 4, seed=2, dtype="float32")
    upstream = np.random.default_rng(3).normal(size=(4, TAGGER.num_variables + TAGGER.v_size))
    results = {}
    for dtype in ("float32", "float64"):
        outputs, gradients = value_and_vjp(
            lambda a, b: _flat(*ks.lp_sparsemap(TAGGER, a, b)),
            [eta_u.astype(dtype), eta_v.astype(dtype)],  # float64: the same float32 numbers
            upstream.astype(dtype),
        )
        assert outputs.dtype == dtype and all(g.dtype == dtype for g in gradients)
        results[dtype] = outputs, gradients
    (out32, grads32), (out64, grads64) = results["float32"], results["float64"]
    np.testing.assert_allclose(out32, out64, atol=1e-7)  # float64 results rounded once
    for grad32, grad64 in zip(grads32, grads64, strict=True):
        np.testing.assert_allclose(grad32, grad64, rtol=1e-6, atol=1e-6)


def test_backward_solves_again_when_the_store_has_dropped_the_solutions(monkeypatch):
    eta_u, eta_v = (tf.constant(x) for x in _scores(MULTILABEL, 3, seed=4))
    upstream = tf.constant(np.random.default_rng(5).normal(size=(3, MULTILABEL.num_variables)))
    gradients = []
    for dropped in (False, True):
        kept = len(SOLUTIONS)
        with tf.GradientTape() as tape:
            tape.watch([eta_u, eta_v])
            u, _ = ks.lp_sparsemap(MULTILABEL, eta_u, eta_v)
        assert len(SOLUTIONS) == kept + 1
        if dropped:
            monkeypatch.setattr(SOLUTIONS, "take", lambda handles: None)
        gradients.append(tape.gradient(u, [eta_u, eta_v], output_gradients=upstream))
        assert len(SOLUTIONS) == kept + dropped
    for kept, solved_again in zip(*gradients, strict=True):
        np.testing.assert_array_equal(kept.numpy(), solved_again.numpy())


def test_non_finite_scores_raise_at_run_time_naming_the_example():
    eta_u, eta_v = _scores(MULTILABEL, 3, seed=6)
    eta_u[1, 2] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="Example 1 of the batch: eta_u must be finite"):
        ks.lp_sparsemap(MULTILABEL, eta_u, eta_v)
    eta_u[1, 2], eta_v[2, 0] = 0.0, np.inf
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"Example 2 of the batch: eta_v\[1\] must be finite"
    ):
        tf.function(lambda a, b: ks.lp_sparsemap(MULTILABEL, a, b))(eta_u, eta_v)


def test_bad_arguments_raise_clear_errors():
    eta_u, eta_v = _scores(MULTILABEL, 2, seed=7)
    with pytest.raises(
        ValueError, match=r"eta_u must have shape \(batch, 4\).*Received: eta_u.shape=\(2, 3\)"
    ):
        ks.lp_sparsemap(MULTILABEL, eta_u[:, :3])
    with pytest.raises(
        ValueError, match=r"eta_v must have shape \(batch, 2\).*Received: eta_v.shape=\(2, 1\)"
    ):
        ks.lp_sparsemap(MULTILABEL, eta_u, eta_v[:, :1])
    with pytest.raises(ValueError, match="same batch size"):
        ks.lp_sparsemap(MULTILABEL, eta_u, eta_v[:1])
    with pytest.raises(ValueError, match="needs a keras_structured.engine.lp.FactorGraph.*Received: graph="):
        ks.lp_sparsemap(SequenceStructure(), eta_u)
    with pytest.raises(ValueError, match="Received: options="):
        ks.lp_sparsemap(MULTILABEL, eta_u, options=ks.SolverOptions())
    with pytest.raises(TypeError, match="Received: dtype=int32"):
        ks.lp_sparsemap(MULTILABEL, eta_u.astype("int32"))
    with pytest.raises(ValueError, match="cannot be XLA-compiled"):
        tf.function(lambda a: ks.lp_sparsemap(MULTILABEL, a), jit_compile=True)(eta_u)


def test_examples_stopped_at_max_iter_warn_once_and_are_flagged():
    eta_u, eta_v = _scores(TAGGER, 3, seed=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, _, info = ks.lp_sparsemap(
            TAGGER, eta_u, eta_v, options=LPSparseMAPOptions(max_iter=2), return_info=True
        )
    relevant = [w for w in caught if issubclass(w.category, LPSparseMAPConvergenceWarning)]
    assert len(relevant) == 1 and "on 3 of 3 problems within max_iter=2" in str(relevant[0].message)
    assert not info["converged"].numpy().any()
    np.testing.assert_array_equal(info["iterations"].numpy(), [2, 2, 2])


# --- the layer ------------------------------------------------------------------------------


def layer_checks(tmp_dir: str, packed: bool) -> dict:
    """``tests/layer_checks.py`` on ``LPSparseMAP`` over the tagger graph, with learned
    additional scores or packed ones, on the backend of this process."""
    graph = TAGGER
    width = graph.num_variables + (graph.v_size if packed else 0)
    scores = np.random.default_rng(9).normal(size=(4, width)).astype("float32")
    layer = check_layer(
        ks.LPSparseMAP,
        {"graph": graph, "additional_initializer": "random_normal", "tol": 1e-7},
        scores,
        tmp_path=Path(tmp_dir),
    )
    assert [w.name for w in layer.trainable_weights] == ([] if packed else ["additional_scores"])
    return {}


@pytest.mark.parametrize("packed", [False, True], ids=["learned_additional_scores", "packed_scores"])
def test_layer_checks(packed, tmp_path):
    layer_checks(str(tmp_path), packed)


def test_layer_info_and_errors():
    layer = ks.LPSparseMAP(MULTILABEL, return_info=True, additional_initializer="ones")
    eta_u, _ = _scores(MULTILABEL, 3, seed=10, dtype="float32")
    out = layer(eta_u)
    u, v = ks.lp_sparsemap(MULTILABEL, eta_u, np.ones((3, 2), "float32"))
    np.testing.assert_array_equal(out["u"].numpy(), u.numpy())
    np.testing.assert_array_equal(out["v"].numpy(), v.numpy())
    assert out["converged"].numpy().all()
    assert {key: tuple(shape) for key, shape in layer.compute_output_shape((3, 4)).items()} == {
        "u": (3, 4),
        "v": (3, 2),
        "converged": (3,),
        "iterations": (3,),
        "map_calls": (3,),
    }
    with pytest.raises(
        ValueError, match=r"\(batch, 4\) or packed scores \(batch, 6\).*Received: input_shape"
    ):
        ks.LPSparseMAP(MULTILABEL)(np.zeros((2, 5), "float32"))
    with pytest.raises(ValueError, match="Received: max_iter=0"):
        ks.LPSparseMAP(MULTILABEL, max_iter=0)
    with pytest.raises(ValueError, match="Received: graph="):
        ks.LPSparseMAP("graph")
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be finite"):
        ks.LPSparseMAP(MULTILABEL)(np.full((1, 4), np.nan, "float32"))


# --- the loss -------------------------------------------------------------------------------


def _gold(graph: FactorGraph, batch: int, seed: int) -> np.ndarray:
    """Random gold variables that every factor allows: random bits, drawn until they do."""
    rng = np.random.default_rng(seed)
    gold = []
    while len(gold) < batch:
        u = rng.integers(0, 2, size=graph.num_variables).astype("float64")
        try:
            graph.additional_parts(u)
        except ValueError:
            continue
        gold.append(u)
    return np.array(gold)


@pytest.mark.parametrize("graph", [TAGGER, MULTILABEL], ids=["tagger", "multilabel"])
def test_loss_value_and_gradient_are_the_fenchel_young_formulas(graph):
    eta_u, eta_v = _scores(graph, 3, seed=11)
    gold_u = _gold(graph, 3, seed=12)
    packed = tf.constant(np.concatenate([eta_u, eta_v], axis=1))
    with tf.GradientTape() as tape:
        tape.watch(packed)
        loss = ks.lp_sparsemap_loss(gold_u, packed, graph)
    gradient = tape.gradient(loss, packed).numpy()
    for example, solution in enumerate(_core(graph, eta_u, eta_v)):
        gold_v = np.concatenate([p.ravel() for p in graph.additional_parts(gold_u[example])])
        gold = np.concatenate([gold_u[example], gold_v])
        expected = solution.objective - (
            packed[example].numpy() @ gold - gold_u[example] @ gold_u[example] / 2
        )
        assert loss[example].numpy() == pytest.approx(expected, abs=1e-12)
        prediction = np.concatenate([solution.u, *(p.ravel() for p in solution.v)])
        np.testing.assert_allclose(gradient[example], prediction - gold, atol=1e-12)


def test_loss_is_zero_at_a_gold_that_is_the_solution():
    gold_u = _gold(TAGGER, 4, seed=13)
    gold_v = np.array([np.concatenate([p.ravel() for p in TAGGER.additional_parts(u)]) for u in gold_u])
    scores = np.concatenate([3 * (2 * gold_u - 1), 3 * (2 * gold_v - 1)], axis=1)
    np.testing.assert_array_equal(ks.lp_sparsemap_loss(gold_u, scores, TAGGER).numpy(), 0.0)
    variables_only = ks.lp_sparsemap_loss(gold_u, scores[:, : TAGGER.num_variables].astype("float32"), TAGGER)
    assert variables_only.dtype == tf.float32 and variables_only.shape == (4,)


def test_fit_on_logic_graphs_whose_solutions_are_inside_the_polytope():
    """Scores strictly inside the local polytope (no constraint tight: ``u = eta_u``) failed
    the whole batch with an InvalidScoresError blaming them, so fit stopped in its first
    epoch; the layer's gradient there is the identity."""
    graph = FactorGraph(3, [AtMostOne([0, 1]), Budget([0, 1, 2], 2)])
    inputs = keras.Input((2,))
    scores = keras.layers.Dense(
        3, kernel_initializer="zeros", bias_initializer=keras.initializers.Constant(0.3)
    )(inputs)
    model = keras.Model(inputs, scores)
    model.compile(optimizer="sgd", loss=ks.LPSparseMAPLoss(graph))
    x = np.random.default_rng(0).normal(size=(8, 2)).astype("float32")
    history = model.fit(x, np.tile([[1.0, 0.0, 1.0]], (8, 1)), batch_size=4, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    eta_u = tf.constant([[0.3, 0.2, 0.4]])
    with tf.GradientTape() as tape:
        tape.watch(eta_u)
        u = ks.LPSparseMAP(graph)(eta_u)
    np.testing.assert_array_equal(u.numpy(), eta_u.numpy())
    upstream = tf.constant([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(tape.gradient(u, eta_u, output_gradients=upstream), upstream)


def test_loss_rejects_gold_that_is_no_vertex():
    scores = np.zeros((2, 6), "float32")
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Example 1 of the gold variables.*factors\[0\] \(Budget.*\[1.0, 1.0, 1.0, 1.0\]",
    ):
        ks.lp_sparsemap_loss([[1, 0, 0, 1], [1, 1, 1, 1]], scores, MULTILABEL)  # the budget allows 3
    with pytest.raises(tf.errors.InvalidArgumentError, match="each 0 or 1. Received: u="):
        ks.lp_sparsemap_loss([[0.5, 0, 0, 1]], scores[:1], MULTILABEL)
    with pytest.raises(
        ValueError, match=r"y_true must have shape \(batch, 4\).*Received: y_true.shape=\(1, 3\)"
    ):
        ks.lp_sparsemap_loss([[0, 0, 1]], scores[:1], MULTILABEL)
    with pytest.raises(
        ValueError, match=r"y_pred must have shape \(batch, 4\).*Received: y_pred.shape=\(2, 5\)"
    ):
        ks.lp_sparsemap_loss([[0, 0, 1, 0]] * 2, scores[:, :5], MULTILABEL)


def _multilabel_task(size: int = 96):
    """Labels 0 and 1 on together when x0 > 0; label 2 when x1 > 0, label 3 when x1 <= 0."""
    rng = np.random.default_rng(14)
    x = rng.normal(size=(size, 5)).astype("float32")
    on = (x[:, 0] > 0).astype("float32")
    second = (x[:, 1] > 0).astype("float32")
    return x, np.stack([on, on, second, 1 - second], axis=1)


def fit_multilabel(tmp_dir: str) -> dict:
    """``model.fit`` of a multi-label model on packed scores with ``LPSparseMAPLoss`` (jitted
    steps on JAX), predictions by ``LPSparseMAP`` on the same scores, a ``.keras`` round trip."""
    keras.utils.set_random_seed(0)
    x, y = _multilabel_task()
    graph = MULTILABEL
    inputs = keras.Input((5,))
    scores = keras.layers.Dense(graph.num_variables + graph.v_size)(inputs)  # packed [eta_u, eta_v]
    model = keras.Model(inputs, scores)
    loss = ks.LPSparseMAPLoss(graph, tol=1e-5)
    assert ks.LPSparseMAPLoss.from_config(loss.get_config()).get_config() == loss.get_config()
    model.compile(keras.optimizers.Adam(0.1), loss)
    history = model.fit(x, y, epochs=6, batch_size=32, verbose=0).history["loss"]
    assert history[-1] < 0.25 * history[0], history
    predictor = keras.Sequential([model, ks.LPSparseMAP(graph)])
    marginals = predictor.predict(x, verbose=0)
    assert np.mean((marginals > 0.5) == y) > 0.9  # chance: 0.5
    path = Path(tmp_dir) / f"predictor_{keras.backend.backend()}.keras"
    predictor.save(path)
    np.testing.assert_array_equal(keras.saving.load_model(path).predict(x, verbose=0), marginals)
    return {"losses": np.array(history)}


def test_a_multilabel_model_learns_with_the_loss_and_predicts_with_the_layer(tmp_path):
    fit_multilabel(str(tmp_path))


# --- JAX and PyTorch, against TensorFlow ----------------------------------------------------


def backend_values() -> dict:
    """The op's outputs and gradients, and the loss's, in float32 on the backend of this process."""
    results = {}
    for name, graph in (("tagger", TAGGER), ("multilabel", MULTILABEL)):
        eta_u, eta_v = _scores(graph, 3, seed=15, dtype="float32")
        upstream = (
            np.random.default_rng(16).normal(size=(3, graph.num_variables + graph.v_size)).astype("float32")
        )
        outputs, gradients = value_and_vjp(
            lambda a, b, graph=graph: _flat(*ks.lp_sparsemap(graph, a, b)), [eta_u, eta_v], upstream
        )
        results[f"{name}/out"], results[f"{name}/grad_u"], results[f"{name}/grad_v"] = outputs, *gradients
        gold_u = _gold(graph, 3, seed=17).astype("float32")
        loss, [grad] = value_and_vjp(
            lambda s, graph=graph, gold_u=gold_u: ks.lp_sparsemap_loss(
                keras.ops.convert_to_tensor(gold_u), s, graph
            ),
            [np.concatenate([eta_u, eta_v], axis=1)],
            np.ones(3, "float32"),
        )
        results[f"{name}/loss"], results[f"{name}/loss_grad"] = loss, grad
    # The tagger's examples of 3, 2 and 1 words: a mask, and -1 gold on the absent variables.
    eta_u, eta_v = _scores(TAGGER, 3, seed=18, dtype="float32")
    mask = np.repeat(np.arange(3)[None, :] < np.array([[3], [2], [1]]), 2, axis=1)
    upstream = np.random.default_rng(19).normal(size=(3, TAGGER.num_variables + TAGGER.v_size))
    upstream = upstream.astype("float32")
    outputs, gradients = value_and_vjp(
        lambda a, b: _flat(*ks.lp_sparsemap(TAGGER, a, b, mask=mask)), [eta_u, eta_v], upstream
    )
    results["masked/out"], results["masked/grad_u"], results["masked/grad_v"] = outputs, *gradients
    gold_u = np.where(mask, np.tile([1.0, 0.0], 3), -1.0).astype("float32")
    loss, [grad] = value_and_vjp(
        lambda s: ks.lp_sparsemap_loss(keras.ops.convert_to_tensor(gold_u), s, TAGGER),
        [np.concatenate([eta_u, eta_v], axis=1)],
        np.ones(3, "float32"),
    )
    results["masked/loss"], results["masked/loss_grad"] = loss, grad
    return results


@pytest.mark.parametrize("backend", backend_params("jax", "torch"))
def test_jax_and_torch_equal_tensorflow(backend, tmp_path):
    pending = start_calls(backend, {"values": f"{__name__}:backend_values"}, tmp_path)
    expected = backend_values()
    got = pending.wait()["values"]
    for key, value in expected.items():
        tol = FORWARD_TOL if key.endswith(("out", "loss")) else GRADIENT_TOL
        np.testing.assert_allclose(got[key], value, atol=tol, err_msg=f"{key} on {backend}")


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params("jax", "torch"))
def test_layer_checks_and_fit_on_jax_and_torch(backend, tmp_path):
    calls = {
        f"checks_{packed}": (f"{__name__}:layer_checks", {"tmp_dir": str(tmp_path), "packed": packed})
        for packed in (False, True)
    }
    calls["fit"] = (f"{__name__}:fit_multilabel", {"tmp_dir": str(tmp_path)})
    results = start_calls(backend, calls, tmp_path).wait()
    for name in calls:
        assert results[name] is not None  # raises the child's traceback if a check failed
