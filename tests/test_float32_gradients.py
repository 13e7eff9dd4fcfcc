"""Gradients in the dtypes users train in, at the sizes they train at.

Each case draws N(0, 1) scores, rounds them to the low-precision dtype, and compares the
gradient of ``<sparsemap(scores), g>`` computed in that dtype with the one computed in
float64 on the same (rounded) scores and cotangent ``g``. The solver sees identical
float64 inputs in both runs, so any difference comes from how the backward pass rounds:
relative error per example, median <= 1e-5 and max <= 1e-3 for float32. The cases are
those of ``benchmarks/bench_sizes.py --gradients``, which prints the table.

Before the op kept its Jacobian factors in float64, the trees of 30 to 80 words, the
half-precision cases and the ``mixed_float16`` layer failed here: the inverse KKT block
of the active set has condition numbers near 1e12, and its float32 copy gave errors of
0.04 to 5.9e3 (wrong sign and magnitude) on some examples.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from benchmarks import bench_sizes
from keras_structured.engine import DependencyTreeStructure

CASES = bench_sizes.gradient_cases()
BATCH = bench_sizes.GRADIENT_BATCH
TREE = DependencyTreeStructure()
MEDIAN_TOL, MAX_TOL = 1e-5, 1e-3


def _check(function, shapes, cotangent_shapes, *, dtype="float32", seed=0, tols=(MEDIAN_TOL, MAX_TOL)):
    for errors in bench_sizes.gradient_errors(function, shapes, cotangent_shapes, dtype, seed):
        assert np.median(errors) <= tols[0] and errors.max() <= tols[1], (
            f"median {np.median(errors):.2e}, max {errors.max():.2e}, worst examples {np.sort(errors)[-3:]}"
        )


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_in_float32(name):
    """Trees of 10-80 words (single and multi-root), sequences 30x20 and 60x40 (unary and
    per-example transitions, whose gradient sums over positions), matchings, a budget."""
    _check(*CASES[name])


def test_tree_gradients_in_float32_with_lengths():
    lengths = tf.constant(np.arange(BATCH) % 4 * 10 + 50)  # 50, 60, 70, 80 words
    shape = (BATCH, 81, 81)
    _check(lambda x: ks.sparsemap(TREE, x, lengths=lengths)[:1], [shape], [shape], seed=1)


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
    shape = (BATCH, 51, 51)
    _check(lambda x: (ks.sparsemap_loss(heads, x, TREE),), [shape], [(BATCH,)])


def test_tree_layer_gradients_under_mixed_float16():
    """A SparseMAP tree layer under ``mixed_float16``: float16 in and out, the gradient to
    float16 precision of the float64 one."""
    rng = np.random.default_rng(4)
    shape = (BATCH, 51, 51)
    scores, cotangent = (bench_sizes.rounded_normal(rng, shape, "float16") for _ in range(2))
    layer = ks.SparseMAPDependencyTree(dtype="mixed_float16")
    gradients = {}
    for dtype, solve in (("float16", layer), ("float64", lambda x: ks.sparsemap(TREE, x)[0])):
        x = tf.constant(scores, dtype)
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = solve(x)
            total = tf.reduce_sum(tf.cast(out, tf.float64) * cotangent)
        assert out.dtype == dtype
        gradients[dtype] = tf.cast(tape.gradient(total, x), tf.float64).numpy()
    errors = bench_sizes.relative_errors(gradients["float16"], gradients["float64"])
    assert errors.max() <= 4e-3, np.sort(errors)[-3:]
    assert keras.config.dtype_policy().name == "float32"  # the policy is the layer's own
