"""Gradients in the dtypes users train in, at the sizes they train at.

Each case draws N(0, 1) scores, rounds them to the low-precision dtype, and compares the
gradient of ``<sparsemap(scores), g>`` computed in that dtype with the one computed in
float64 on the same (rounded) scores and cotangent ``g``. The solver sees identical
float64 inputs in both runs, so any difference comes from how the backward pass rounds:
relative error per example, median <= 1e-5 and max <= 1e-3 for float32.

Before the op kept its Jacobian factors in float64, trees of 50 and 80 words failed here:
the inverse KKT block of the active set has condition numbers near 1e12, and its float32
copy gave errors of 0.04 to 5.9e3 (wrong sign and magnitude) on some examples.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import (
    BudgetStructure,
    DependencyTreeStructure,
    MatchingStructure,
)

BATCH = 16
TREE = DependencyTreeStructure()
MEDIAN_TOL, MAX_TOL = 1e-5, 1e-3


def _rounded(rng, shape, dtype):
    """N(0, 1) values rounded to ``dtype``, returned in float64."""
    return tf.cast(tf.constant(rng.normal(size=shape), dtype), tf.float64).numpy()


def _gradients(function, inputs, cotangents, dtype):
    """Gradients of ``sum_i <function(*inputs)[i], cotangents[i]>`` w.r.t. the inputs, in float64."""
    tensors = [tf.constant(x, dtype) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        outputs = function(*tensors)
        total = sum(
            tf.reduce_sum(tf.cast(out, tf.float64) * tf.constant(g))
            for out, g in zip(outputs, cotangents, strict=True)
        )
    return [tf.cast(g, tf.float64).numpy() for g in tape.gradient(total, tensors)]


def _relative_errors(low, high):
    """Per-example relative error ``||low - high|| / ||high||`` of ``(batch, ...)`` arrays."""
    difference = np.linalg.norm((low - high).reshape(len(high), -1), axis=1)
    return difference / np.maximum(np.linalg.norm(high.reshape(len(high), -1), axis=1), 1e-300)


def _check(function, shapes, cotangent_shapes, *, dtype="float32", seed=0, tols=(MEDIAN_TOL, MAX_TOL)):
    rng = np.random.default_rng(seed)
    inputs = [_rounded(rng, shape, dtype) for shape in shapes]
    cotangents = [_rounded(rng, shape, dtype) for shape in cotangent_shapes]
    exact = _gradients(function, inputs, cotangents, tf.float64)
    rounded = _gradients(function, inputs, cotangents, dtype)
    for low, high in zip(rounded, exact, strict=True):
        errors = _relative_errors(low, high)
        assert np.median(errors) <= tols[0] and errors.max() <= tols[1], (
            f"median {np.median(errors):.2e}, max {errors.max():.2e}, worst examples {np.sort(errors)[-3:]}"
        )


@pytest.mark.parametrize("single_root", [False, True], ids=["multi_root", "single_root"])
@pytest.mark.parametrize("words", [10, 30, 50, 80])
def test_tree_gradients_in_float32(words, single_root):
    structure = DependencyTreeStructure(single_root=single_root)
    shape = (BATCH, words + 1, words + 1)
    _check(lambda x: ks.sparsemap(structure, x)[:1], [shape], [shape])


def test_tree_gradients_in_float32_with_lengths():
    lengths = tf.constant(np.arange(BATCH) % 4 * 10 + 50)  # 50, 60, 70, 80 words
    shape = (BATCH, 81, 81)
    _check(lambda x: ks.sparsemap(TREE, x, lengths=lengths)[:1], [shape], [shape], seed=1)


@pytest.mark.parametrize("positions, labels", [(30, 20), (60, 40)])
def test_sequence_gradients_in_float32(positions, labels):
    """Unary and per-example transition scores: the transition gradient sums over positions."""
    u_shape, v_shape = (BATCH, positions, labels), (BATCH, positions - 1, labels, labels)
    _check(
        lambda unary, transitions: ks.sparsemap_sequence(unary, transitions),
        [u_shape, (BATCH, labels, labels)],
        [u_shape, v_shape],
    )


@pytest.mark.parametrize("shape", [(20, 20), (15, 25)])
def test_matching_gradients_in_float32(shape):
    shape = (BATCH, *shape)
    _check(lambda x: ks.sparsemap(MatchingStructure(), x)[:1], [shape], [shape])


def test_budget_gradients_in_float32():
    shape = (BATCH, 60)
    _check(lambda x: ks.sparsemap(BudgetStructure(10), x)[:1], [shape], [shape])


@pytest.mark.parametrize("dtype, tol", [("float16", 4e-3), ("bfloat16", 3e-2)])
def test_tree_gradients_in_half_precision(dtype, tol):
    """Half precision rounds the result and the cotangent once each: errors of its epsilon."""
    shape = (BATCH, 51, 51)
    _check(lambda x: ks.sparsemap(TREE, x)[:1], [shape], [shape], dtype=dtype, tols=(tol, tol))


def test_tree_loss_gradients_in_float32():
    """The SparseMAP loss's gradient (its solution minus the gold tree) in float32."""
    rng = np.random.default_rng(3)
    heads = np.stack([rng.integers(0, i, size=BATCH) for i in range(1, 51)], axis=1)  # a random tree
    heads = np.concatenate([np.full((BATCH, 1), -1), heads], axis=1)

    def loss(x):
        return (ks.sparsemap_loss(heads, x, TREE),)

    shape = (BATCH, 51, 51)
    _check(loss, [shape], [(BATCH,)])


def test_tree_layer_gradients_under_mixed_float16():
    """A SparseMAP tree layer under ``mixed_float16``: float16 in and out, the gradient to
    float16 precision of the float64 one."""
    shape = (BATCH, 51, 51)
    rng = np.random.default_rng(4)
    scores = _rounded(rng, shape, "float16")
    cotangent = _rounded(rng, shape, "float16")
    exact = _gradients(lambda x: ks.sparsemap(TREE, x)[:1], [scores], [cotangent], tf.float64)
    layer = ks.SparseMAPDependencyTree(dtype="mixed_float16")
    x = tf.constant(scores, tf.float16)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x)
        total = tf.reduce_sum(tf.cast(out, tf.float64) * cotangent)
    assert out.dtype == tf.float16
    errors = _relative_errors(tf.cast(tape.gradient(total, x), tf.float64).numpy(), exact[0])
    assert errors.max() <= 4e-3, np.sort(errors)[-3:]
    assert keras.config.dtype_policy().name == "float32"  # the policy is the layer's own
