"""Regression tests for two audit findings on the interpolation projections.

1. ``KLTrustRegion``: infinite KL (a zero reference probability, or a zero input
   probability for the reverse direction) gave NaN gradients that poisoned the batch.
2. float32 ``Halfspace`` / ``Polytope`` / ``Monotone`` outputs landed one ulp outside
   the set, and ``Monotone`` rejected its own anchor near 1e8.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_structured.projections import Halfspace, KLTrustRegion, Monotone, Polytope, kl_divergence

# dtype -> a logit gap whose softmax underflows to an exact zero in that dtype
UNDERFLOWING_GAP = {tf.float32: 200.0, tf.float64: 800.0}
DTYPES = [tf.float32, tf.float64]


def _softmax(z):
    z = z - z.max(-1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(-1, keepdims=True)


def _kl_batch(dtype, from_logits, reverse, bad_row, batch=4, k=4):
    """``(x, reference)``; in row 0 the KL is infinite when ``bad_row``, through a zero
    reference probability (forward) or a zero input probability (reverse)."""
    rng = np.random.default_rng(7)
    x, reference = rng.normal(size=(batch, k)), 0.5 * rng.normal(size=(batch, k))
    if not from_logits:
        x, reference = _softmax(x), _softmax(reference)
    if bad_row:
        gap = UNDERFLOWING_GAP[dtype]
        degenerate = np.array([0.0, -gap, 0.0, 0.0]) if from_logits else np.array([0.0, 0.0, 1.0, 0.0])
        if reverse:
            x[0] = degenerate
        else:
            reference[0] = degenerate
    return tf.constant(x, dtype), tf.constant(reference, dtype)


def _kl_project_with_gradients(constraint, x, reference, graph):
    """Output and gradients of a weighted sum of outputs w.r.t. ``x``, the reference and
    a scale shared by all rows (as a network weight would be)."""
    weights = tf.constant(np.arange(1.0, 1.0 + x.shape[-1]), x.dtype)
    shared = tf.Variable(1.0, dtype=x.dtype)

    def run(x, reference):
        with tf.GradientTape() as tape:
            tape.watch([x, reference])
            out = constraint.project(shared * x, reference, validate_args=True)
            loss = tf.reduce_sum(out * weights)
        return (out, *tape.gradient(loss, [x, reference, shared]))

    return [t.numpy() for t in (tf.function(run) if graph else run)(x, reference)]


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("from_logits", [False, True], ids=["probs", "logits"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_kl_trust_region_infinite_kl_has_finite_gradients(dtype, from_logits, reverse, graph):
    constraint = KLTrustRegion(0.1, from_logits=from_logits, reverse=reverse)
    x, reference = _kl_batch(dtype, from_logits, reverse, bad_row=True)
    probs, ref_probs = constraint.prepare(x, reference)
    assert np.isinf(constraint.h(probs, ref_probs).numpy()[0])  # the case under test

    out, grad_x, grad_ref, grad_shared = _kl_project_with_gradients(constraint, x, reference, graph)
    assert np.all(np.isfinite(out))
    assert np.all(np.isfinite(grad_x)) and np.all(np.isfinite(grad_ref)) and np.isfinite(grad_shared)
    assert np.all(constraint.h(tf.constant(out), ref_probs).numpy() <= 1e-6)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-6)

    # the other rows have the gradients they have without the infinite row
    _, clean_grad_x, clean_grad_ref, _ = _kl_project_with_gradients(constraint, x[1:], reference[1:], graph)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == tf.float32 else {"rtol": 1e-12, "atol": 1e-14}
    np.testing.assert_allclose(grad_x[1:], clean_grad_x, **tolerance)
    np.testing.assert_allclose(grad_ref[1:], clean_grad_ref, **tolerance)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_kl_divergence_is_infinite_with_zero_gradient_off_the_support(dtype):
    p = tf.constant([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]], dtype)
    q = tf.constant([[1.0, 0.0, 0.0], [0.25, 0.25, 0.5]], dtype)
    with tf.GradientTape() as tape:
        tape.watch([p, q])
        kl = kl_divergence(p, q)
    grad_p, grad_q = tape.gradient(kl, [p, q])
    assert np.isposinf(kl.numpy()[0])
    np.testing.assert_allclose(kl.numpy()[1], np.log(2.0), rtol=1e-6)
    np.testing.assert_array_equal(grad_p.numpy()[0], 0.0)
    np.testing.assert_array_equal(grad_q.numpy()[0], 0.0)
    # d/dp_i = log(p_i / q_i) + 1 and d/dq_i = -p_i / q_i on the support
    np.testing.assert_allclose(grad_p.numpy()[1, :2], np.log(2.0) + 1.0, rtol=1e-6)
    np.testing.assert_allclose(grad_q.numpy()[1], [-2.0, -2.0, 0.0], rtol=1e-6)


# ----------------------------------------------------------------------------- float32 feasibility

RNG = np.random.default_rng(2024)
D = 5
POLY_A = RNG.normal(size=(7, D))
POLY_X0 = RNG.normal(size=D)
POLY_B = POLY_A @ POLY_X0 + RNG.uniform(0.5, 2.0, size=7)
AFFINE = {
    "halfspace": Halfspace(RNG.normal(size=D), 0.3),
    "polytope": Polytope(POLY_A, POLY_B, POLY_X0),
    "monotone": Monotone(spacing=0.3),
}


def _feasibility_report(constraint, out):
    """``max h(out)`` with ``h`` evaluated in the output's dtype and in float64."""
    return [float(tf.reduce_max(constraint.h(tf.cast(out, dtype)))) for dtype in (out.dtype, tf.float64)]


@pytest.mark.parametrize("scale", [1e3, 1e6])
@pytest.mark.parametrize("name", sorted(AFFINE))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_affine_outputs_are_feasible_in_their_dtype(name, dtype, scale):
    constraint = AFFINE[name]
    x = tf.constant(np.random.default_rng(int(scale)).normal(size=(4096, D)) * scale, dtype)
    assert np.mean(constraint.h(x).numpy() > 0) > 0.2  # many rows are projected
    eager = constraint.project(x, validate_args=True)
    graph = tf.function(lambda v: constraint.project(v, validate_args=True))(x)  # rounds differently
    for out in (eager, graph):
        assert out.dtype == dtype
        h_own, h_float64 = _feasibility_report(constraint, out)
        assert h_own <= 0.0 and h_float64 <= 0.0

    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(constraint.project(x) * tf.range(1.0, D + 1.0, dtype=dtype))
    assert np.all(np.isfinite(tape.gradient(loss, x).numpy()))


def test_monotone_accepts_its_own_anchor_near_1e8_in_float32():
    rng = np.random.default_rng(3)
    x = tf.constant(1e8 + rng.normal(size=(64, D)) * 100.0, tf.float32)
    for constraint in (Monotone(), Monotone(spacing=0.3)):
        out = constraint.project(x, validate_args=True)
        assert np.all(np.isfinite(out.numpy()))
        assert np.all(np.diff(out.numpy(), axis=-1) >= 0.0)  # ordered in float32
        graph_out = tf.function(lambda v, c=constraint: c.project(v, validate_args=True))(x)
        assert np.all(np.diff(graph_out.numpy(), axis=-1) >= 0.0)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(constraint.project(x) * tf.range(1.0, D + 1.0))
        assert np.all(np.isfinite(tape.gradient(loss, x).numpy()))


def test_really_infeasible_anchors_still_raise():
    x = tf.constant(1e8 + np.random.default_rng(4).normal(size=(8, D)) * 100.0, tf.float32)
    decreasing = 1e8 - 1000.0 * np.arange(D)  # violates x_i <= x_{i+1} by 1000 (125 ulps)
    with pytest.raises(ValueError, match=r"Monotone.*strictly feasible.*Received: h\(anchor\)=1000\.0"):
        Monotone().project(x, anchor=decreasing)
    with pytest.raises(tf.errors.InvalidArgumentError, match="strictly feasible"):
        tf.function(lambda v: Monotone().project(v, anchor=decreasing))(x)

    halfspace = Halfspace([1.0, 0.0], 1000.0, interior_point=[0.0, 0.0])
    x = tf.constant([[3000.0, 0.0]], tf.float32)
    with pytest.raises(ValueError, match=r"Halfspace.*Received: h\(anchor\)=0\.5"):
        halfspace.project(x, anchor=[1000.5, 0.0])  # 8000 ulps of 1000.5
    with pytest.raises(ValueError, match=r"Halfspace.*Received: h\(anchor\)=9\.99"):  # 9000 ulps in float64
        halfspace.project(tf.cast(x, tf.float64), anchor=np.array([1000.0 + 1e-9, 0.0]))
