"""SparseMAP Keras layers: eager, tf.function, fit, save/load, masks, structures, distribution."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import SimplexStructure


def sequence_case():
    rng = np.random.default_rng(0)
    return ks.SparseMAPSequence(transitions_initializer="random_normal"), rng.normal(size=(4, 6, 3))


def simplex_case():
    return ks.SparseMAP(SimplexStructure()), np.random.default_rng(1).normal(size=(4, 5))


def tree_case():
    return ks.SparseMAPDependencyTree(), np.random.default_rng(3).normal(size=(4, 5, 5))


def projective_tree_case():
    return ks.SparseMAPDependencyTree(single_root=True, projective=True), np.random.default_rng(4).normal(
        size=(4, 5, 5)
    )


def matching_case():
    return ks.SparseMAPMatching(unmatched_score=-0.5), np.random.default_rng(5).normal(size=(4, 3, 4))


def budget_case():
    return ks.SparseMAPBudget(k=2), np.random.default_rng(6).normal(size=(4, 6))


CASES = {
    "sequence": sequence_case,
    "simplex": simplex_case,
    "tree": tree_case,
    "projective_tree": projective_tree_case,
    "matching": matching_case,
    "budget": budget_case,
}


def model_around(layer, shape):
    inputs = keras.Input(shape[1:])
    return keras.Model(inputs, layer(keras.layers.Dense(shape[-1])(inputs)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_graph_and_fit(name):
    layer, scores = CASES[name]()
    x = scores.astype("float32")
    eager = layer(x).numpy()
    graph = tf.function(layer)(x).numpy()
    np.testing.assert_allclose(eager, graph, atol=1e-6)
    model = model_around(layer, x.shape)
    model.compile(keras.optimizers.Adam(0.01), "mse")
    target = np.eye(x.shape[-1])[np.argmax(x, -1)]
    history = model.fit(x, target, epochs=2, batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("name", sorted(CASES))
def test_save_load_gives_identical_outputs(name, tmp_path):
    layer, scores = CASES[name]()
    x = scores.astype("float32")
    model = model_around(layer, x.shape)
    expected = model(x).numpy()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(restored(x).numpy(), expected)
    assert type(restored.layers[-1]) is type(layer)


@pytest.mark.parametrize("name", sorted(CASES))
def test_return_structures(name):
    layer, scores = CASES[name]()
    config = layer.get_config()
    config["return_structures"] = True
    layer = type(layer).from_config(config)
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


def test_layers_train_under_mirrored_strategy():
    script = os.path.join(os.path.dirname(__file__), "scripts", "mirrored_fit.py")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "replicas=2" in result.stdout and "predict ok" in result.stdout
