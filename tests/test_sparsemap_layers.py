"""SparseMAP Keras layers: eager, tf.function, fit, save/load, masks, structures, distribution."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import DependencyTreeStructure, SequenceStructure, SimplexStructure
from tests.layer_checks import check_layer


def scores(seed, shape):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padding_mask(sizes, width):
    return np.arange(width)[None, :] < np.asarray(sizes)[:, None]


# name -> (layer class, constructor arguments, scores, call arguments)
CASES = {
    "sequence": (
        ks.SparseMAPSequence,
        {"transitions_initializer": "random_normal"},
        scores(0, (4, 6, 3)),
        {},
    ),
    "sequence_mask": (
        ks.SparseMAPSequence,
        {"use_boundary": True, "transitions_initializer": "random_normal"},
        scores(2, (4, 6, 3)),
        {"mask": padding_mask([6, 3, 1, 4], 6)},
    ),
    "simplex": (ks.SparseMAP, {"structure": SimplexStructure()}, scores(1, (4, 5)), {}),
    "tree": (ks.SparseMAPDependencyTree, {}, scores(3, (4, 5, 5)), {}),
    "tree_mask": (
        ks.SparseMAPDependencyTree,
        {},
        scores(8, (4, 5, 5)),
        {"mask": padding_mask([5, 3, 2, 4], 5)},
    ),
    "projective_tree": (
        ks.SparseMAPDependencyTree,
        {"single_root": True, "projective": True},
        scores(4, (4, 5, 5)),
        {},
    ),
    "matching": (ks.SparseMAPMatching, {"unmatched_score": -0.5}, scores(5, (4, 3, 4)), {}),
    "matching_lengths": (
        ks.SparseMAPMatching,
        {},
        scores(9, (4, 3, 4)),
        {"lengths": np.array([[3, 4], [2, 3], [3, 1], [1, 2]], "int32")},
    ),
    "budget": (ks.SparseMAPBudget, {"k": 2}, scores(6, (4, 6)), {}),
    "budget_mask": (
        ks.SparseMAPBudget,
        {"k": 2, "exact": False},
        scores(10, (4, 6)),
        {"mask": padding_mask([6, 4, 2, 3], 6)},
    ),
}
STRUCTURES = ["sequence", "simplex", "tree", "projective_tree", "matching", "budget"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_checks(name, tmp_path):
    layer_class, kwargs, x, call_kwargs = CASES[name]
    check_layer(layer_class, kwargs, x, call_kwargs=call_kwargs, tmp_path=tmp_path)


@pytest.mark.parametrize("name", STRUCTURES)
def test_return_structures(name):
    layer_class, kwargs, scores, _ = CASES[name]
    layer = layer_class(**kwargs, return_structures=True)
    out = layer(scores)
    weights = out["weights"].numpy()
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    structures = out["structures"].numpy()
    structure = layer.structure
    for b in range(len(scores)):
        used = structures[b][weights[b] > 0]
        m, _ = structure.indicators(used, scores.shape[1:], out["v"].shape[1:])
        np.testing.assert_allclose(
            np.tensordot(weights[b][weights[b] > 0], m, 1), out["u"].numpy()[b], atol=1e-9
        )


def _structures_model() -> keras.Model:
    """Two SparseMAP layers with ``return_structures=True`` on ``keras.Input``s: trees (``v``
    from the structure) and sequences given ``[eta_u, eta_v]``; outputs flattened to
    ``"<name>/<key>"``."""
    arcs = keras.Input((5, 5), name="arcs")
    unary, pairwise = keras.Input((4, 3), name="unary"), keras.Input((3, 3, 3), name="pairwise")
    layers = {
        "tree": ks.SparseMAPDependencyTree(return_structures=True)(arcs),
        "sequence": ks.SparseMAP(SequenceStructure(), return_structures=True)([unary, pairwise]),
    }
    outputs = {f"{name}/{key}": value for name, result in layers.items() for key, value in result.items()}
    return keras.Model([arcs, unary, pairwise], outputs)


def _structures_inputs() -> list:
    return [scores(12, (3, 5, 5)), scores(13, (3, 4, 3)), scores(14, (3, 3, 3, 3))]


def symbolic_structures_model(save_path: str, load_path: str | None = None) -> dict:
    """:func:`_structures_model`'s symbolic shapes (None as -1, under ``shape/``), predictions,
    and the predictions of the model saved to ``save_path`` and loaded, which must be equal;
    with ``load_path``, also those of a model saved there (under another backend), under
    ``loaded/``. Run under every backend by ``tests/test_sparsemap_backends.py``."""
    model = _structures_model()
    predictions = model.predict(_structures_inputs(), verbose=0)
    model.save(save_path)
    reloaded = keras.saving.load_model(save_path).predict(_structures_inputs(), verbose=0)
    for key, value in predictions.items():
        np.testing.assert_array_equal(reloaded[key], value, err_msg=key)
    results = {key: np.asarray(value) for key, value in predictions.items()}
    for key, value in model.output.items():
        results[f"shape/{key}"] = np.array([-1 if d is None else d for d in value.shape])
    if load_path is not None:
        loaded = keras.saving.load_model(load_path).predict(_structures_inputs(), verbose=0)
        results.update({f"loaded/{key}": np.asarray(value) for key, value in loaded.items()})
    return results


def test_return_structures_in_a_symbolic_model(tmp_path):
    results = symbolic_structures_model(str(tmp_path / "structures.keras"))
    # Shapes from the structure: v (the trees have none), codes (heads; labels); k is known on JAX only.
    want = {"tree": ((5, 5), (0,), (5,)), "sequence": ((4, 3), (3, 3, 3), (4,))}
    for name, (u_shape, v_shape, code_shape) in want.items():
        assert tuple(results[f"shape/{name}/u"]) == (-1, *u_shape)
        assert tuple(results[f"shape/{name}/v"]) == (-1, *v_shape)
        assert tuple(results[f"shape/{name}/weights"]) == (-1, -1)
        assert tuple(results[f"shape/{name}/structures"]) == (-1, -1, *code_shape)
        weights, codes = results[f"{name}/weights"], results[f"{name}/structures"]
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
        structure = DependencyTreeStructure() if name == "tree" else SequenceStructure()
        for b in range(len(weights)):
            used = weights[b] > 0
            m_and_n = structure.indicators(codes[b][used], u_shape, v_shape)
            for indicators, key in zip(m_and_n, "uv", strict=True):
                mean = np.tensordot(weights[b][used], indicators, 1)
                np.testing.assert_allclose(mean, results[f"{name}/{key}"][b], atol=1e-6)


def test_return_structures_shapes_with_unknown_dimensions():
    layer = ks.SparseMAPSequence(return_structures=True)
    shapes = layer.compute_output_shape((None, None, 3))
    assert shapes == {
        "u": (None, None, 3),
        "v": (None, None, 3, 3),
        "weights": (None, None),
        "structures": (None, None, None),
    }
    outputs = layer(keras.Input((None, 3)))
    assert {key: tuple(value.shape) for key, value in outputs.items()} == shapes


def test_sequence_mask_equals_unpadded_examples():
    rng = np.random.default_rng(2)
    layer = ks.SparseMAPSequence(transitions_initializer="random_normal", use_boundary=True, tol=1e-10)
    scores = rng.normal(size=(3, 6, 4))
    layer.build(scores.shape)
    layer.end.assign(rng.normal(size=4))
    lengths = np.array([6, 3, 1])
    mask = np.arange(6)[None, :] < lengths[:, None]
    x = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(x)
        padded = layer(x, mask=tf.constant(mask))
        total = tf.reduce_sum(padded * rng.normal(size=padded.shape))
    grad = tape.gradient(total, x).numpy()
    for b, length in enumerate(lengths):
        single = layer(scores[b : b + 1, :length]).numpy()[0]
        np.testing.assert_allclose(padded.numpy()[b, :length], single, atol=1e-8)
        assert np.all(padded.numpy()[b, length:] == 0) and np.all(grad[b, length:] == 0)
    np.testing.assert_allclose(layer(x, lengths=tf.constant(lengths)).numpy(), padded.numpy())


def check_padded_equals_unpadded(layer, scores, padded_kwargs, lengths, crop):
    x = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(x)
        padded = layer(x, **padded_kwargs)
        total = tf.reduce_sum(padded * np.random.default_rng(7).normal(size=padded.shape))
    grad = tape.gradient(total, x).numpy()
    padded = padded.numpy()
    for b, length in enumerate(lengths):
        region = crop(length)
        single = layer(scores[b : b + 1][(slice(None),) + region]).numpy()[0]
        np.testing.assert_allclose(padded[b][region], single, atol=1e-7)
        outside = np.ones(padded.shape[1:], bool)
        outside[region] = False
        assert np.all(padded[b][outside] == 0) and np.all(grad[b][outside] == 0)


def test_tree_mask_equals_unpadded_examples():
    words = np.array([4, 2, 1, 0])
    mask = np.arange(5)[None, :] <= words[:, None]
    check_padded_equals_unpadded(
        ks.SparseMAPDependencyTree(tol=1e-10),
        np.random.default_rng(8).normal(size=(4, 5, 5)),
        {"mask": tf.constant(mask)},
        words,
        lambda n: (slice(0, n + 1), slice(0, n + 1)),
    )


def test_matching_lengths_equal_unpadded_examples():
    sizes = np.array([[3, 4], [2, 3], [3, 1], [0, 2]])
    check_padded_equals_unpadded(
        ks.SparseMAPMatching(tol=1e-10),
        np.random.default_rng(9).normal(size=(4, 3, 4)),
        {"lengths": tf.constant(sizes)},
        sizes,
        lambda size: (slice(0, size[0]), slice(0, size[1])),
    )


def test_budget_mask_equals_unpadded_examples():
    items = np.array([6, 4, 2, 3])
    check_padded_equals_unpadded(
        ks.SparseMAPBudget(k=2, tol=1e-10),
        np.random.default_rng(10).normal(size=(4, 6)) * 0.3,
        {"mask": tf.constant(np.arange(6)[None, :] < items[:, None])},
        items,
        lambda d: (slice(0, d),),
    )


def test_mask_from_embedding_propagates():
    tokens = np.array([[3, 4, 5, 0, 0], [1, 2, 0, 0, 0]])
    inputs = keras.Input((5,), dtype="int32")
    hidden = keras.layers.Embedding(6, 3, mask_zero=True)(inputs)
    outputs = ks.SparseMAPSequence()(hidden)
    u = keras.Model(inputs, outputs)(tokens).numpy()
    assert np.all(u[0, 3:] == 0) and np.all(u[1, 2:] == 0)
    np.testing.assert_allclose(u[0, :3].sum(-1), 1.0, atol=1e-6)


def test_dynamic_lengths_in_a_functional_model():
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    model = keras.Model(tokens, ks.SparseMAPSequence(use_boundary=True)(keras.layers.Dense(4)(hidden)))
    model.compile("adam", "mse")
    x = np.random.default_rng(11).integers(1, 20, size=(8, 6))
    x[:, 4:] = 0
    y = np.eye(4)[x % 4]
    history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    out = model.predict(x[:, :5], verbose=0)
    assert out.shape == (8, 5, 4) and np.all(out[:, 4:] == 0)


def test_float16_inputs():
    out = ks.SparseMAPSequence(dtype="mixed_float16")(tf.random.normal([2, 4, 3], dtype="float16"))
    assert out.dtype == tf.float16
    np.testing.assert_allclose(tf.reduce_sum(tf.cast(out, tf.float32), -1).numpy(), 1.0, atol=1e-2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: structure="):
        ks.SparseMAP("sequence")
    with pytest.raises(ValueError, match="Received: method="):
        ks.SparseMAP(SimplexStructure(), method="fast")
    with pytest.raises(ValueError, match="Received: input_shape="):
        ks.SparseMAPSequence()(tf.zeros([2, 3]))
    with pytest.raises(ValueError, match="Received: class_name="):
        ks.SparseMAP({"class_name": "Nope", "config": {}})


@pytest.mark.slow  # 12 s: a fresh process with two logical devices
def test_layers_train_under_mirrored_strategy():
    script = os.path.join(os.path.dirname(__file__), "scripts", "mirrored_fit.py")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "replicas=2" in result.stdout and "predict ok" in result.stdout
