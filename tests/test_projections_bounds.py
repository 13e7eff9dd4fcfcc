"""Tensor bounds, batch-mean constraints and declared input spaces of the projection constraints."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_structured.projections import (
    LOGITS,
    POINTS,
    PROBABILITIES,
    Constraint,
    EntropyLowerBound,
    InterpolationProjection,
    Intersection,
    KLTrustRegion,
    L1Ball,
    L2Ball,
    LinfBall,
    UserConstraint,
    entropy,
    kl_divergence,
    project,
)

BATCH = 6
K = 4


def _softmax(z):
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _probs(rng):
    return _softmax(3.0 * rng.normal(size=(BATCH, K)))


def _logits(rng):
    return 3.0 * rng.normal(size=(BATCH, K))


def _points(rng):
    return 3.0 * rng.normal(size=(BATCH, 3))


# name -> (constraint from a bound, inputs, per-row bounds, reference or None)
CASES = {
    "entropy": (EntropyLowerBound, _probs, lambda rng: rng.uniform(0.3, 1.2, BATCH), None),
    "entropy_logits": (
        lambda b: EntropyLowerBound(b, from_logits=True),
        _logits,
        lambda rng: rng.uniform(0.3, 1.2, BATCH),
        None,
    ),
    "kl": (KLTrustRegion, _probs, lambda rng: rng.uniform(0.01, 0.3, BATCH), _probs),
    "kl_reverse": (
        lambda b: KLTrustRegion(b, reverse=True),
        _probs,
        lambda rng: rng.uniform(0.01, 0.3, BATCH),
        _probs,
    ),
    "l1": (L1Ball, _points, lambda rng: rng.uniform(0.5, 4.0, BATCH), None),
    "l2": (L2Ball, _points, lambda rng: rng.uniform(0.5, 4.0, BATCH), None),
    "linf": (LinfBall, _points, lambda rng: rng.uniform(0.5, 4.0, BATCH), None),
}


def _case(name, dtype=np.float32):
    factory, make_x, make_bounds, make_reference = CASES[name]
    rng = np.random.default_rng(0)
    x = make_x(rng).astype(dtype)
    bounds = make_bounds(rng)
    reference = None if make_reference is None else (0.3 * make_reference(rng) + 0.7 / K).astype(dtype)
    return factory, x, bounds, reference


def _row(array, i):
    return None if array is None else array[i : i + 1]


# ------------------------------------------------------------------------ tensor bounds


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_per_row_bound_equals_a_loop_of_scalar_bounds(name, graph):
    factory, x, bounds, reference = _case(name)

    def per_row(bound):
        return factory(bound).project(x, reference)

    if graph:  # the bound is a symbolic tensor inside the function
        per_row = tf.function(per_row)
    got = per_row(tf.constant(bounds, tf.float32)).numpy()
    expected = np.concatenate(
        [factory(float(b)).project(x[i : i + 1], _row(reference, i)).numpy() for i, b in enumerate(bounds)]
    )
    # One row at a time, softmax and the reductions may round differently by an ulp.
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    kept = np.all(got == factory(float(bounds.max())).prepare(tf.constant(x))[0].numpy(), axis=-1)
    assert not kept.all()  # the bounds move some rows


@pytest.mark.parametrize("name", ["entropy", "kl", "l2"])
def test_per_row_bound_in_float64_matches_the_loop(name):
    factory, x, bounds, reference = _case(name, np.float64)
    got = factory(bounds).project(x, reference).numpy()  # a float64 array bound
    expected = np.concatenate(
        [factory(float(b)).project(x[i : i + 1], _row(reference, i)).numpy() for i, b in enumerate(bounds)]
    )
    # A Python-float bound reaches float64 inputs through tf.cast, which rounds it to float32
    # first; an array bound does not: the two agree to float32 precision.
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(CASES))
def test_scalar_tensor_bound_equals_the_number(name):
    factory, x, bounds, reference = _case(name)
    bound = float(np.float32(bounds[0]))
    scalar = factory(tf.constant(bound)).project(x, reference).numpy()
    np.testing.assert_array_equal(scalar, factory(bound).project(x, reference).numpy())


def test_bound_changes_without_retracing():
    x = tf.constant(_probs(np.random.default_rng(1)), tf.float32)
    traces = []

    @tf.function
    def projected_entropy(bound):
        traces.append(1)
        return entropy(EntropyLowerBound(bound).project(x))

    for bound in (0.5, 0.9, 1.2):
        assert float(tf.reduce_min(projected_entropy(tf.constant(bound)))) >= bound - 1e-5
    assert len(traces) == 1


def test_symbolic_bound_out_of_range_fails_at_run_time():
    x = tf.constant(_probs(np.random.default_rng(2)), tf.float32)
    reference = tf.constant(_probs(np.random.default_rng(3)), tf.float32)
    entropy_project = tf.function(lambda b: EntropyLowerBound(b).project(x))
    entropy_project(tf.constant(1.0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="strictly feasible"):
        entropy_project(tf.constant(np.log(K) + 0.1, tf.float32))  # the uniform anchor is infeasible
    # A bound outside its own range is named by check_bound's run-time assertion.
    with pytest.raises(tf.errors.InvalidArgumentError, match="epsilon must be a finite number > 0"):
        tf.function(lambda e: KLTrustRegion(e).project(x, reference))(
            tf.constant([0.1, -0.1, 0.1, 0.1, 0.1, 0.1])
        )


def test_known_bad_bounds_raise_at_construction():
    with pytest.raises(ValueError, match=r"min_entropy must be finite\. Received: min_entropy="):
        EntropyLowerBound(tf.constant([0.5, np.nan]))
    with pytest.raises(ValueError, match=r"epsilon must be a finite number > 0\. Received: epsilon="):
        KLTrustRegion(tf.constant(-1.0))
    with pytest.raises(ValueError, match=r"epsilon must be a finite number > 0\. Received: epsilon="):
        KLTrustRegion(np.array([0.1, 0.0]))
    with pytest.raises(
        ValueError, match=r"radius must be a scalar or have shape \(batch,\)\. Received: radius="
    ):
        L2Ball(np.ones((2, 2)))
    with pytest.raises(ValueError, match="radius must be a finite number > 0. Received: radius='1'"):
        L2Ball("1")
    with pytest.raises(ValueError, match="Received: radius=True"):
        L2Ball(True)
    with pytest.raises(
        ValueError, match=r"min_entropy must be < log\(K\).*Received: min_entropy=\[0\.5, 1\.5\]"
    ):
        EntropyLowerBound([0.5, 1.5]).project(tf.constant(_probs(np.random.default_rng(0))[:2]))


def test_array_bounds_serialize_and_symbolic_ones_say_why_not():
    x = tf.constant(_probs(np.random.default_rng(4)), tf.float32)
    bounds = np.linspace(0.4, 1.2, BATCH)
    for constraint in (EntropyLowerBound(bounds), EntropyLowerBound(tf.constant(bounds))):
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(constraint))
        assert restored.get_config()["min_entropy"] == pytest.approx(bounds.tolist())
        np.testing.assert_allclose(restored.project(x).numpy(), constraint.project(x).numpy(), rtol=1e-6)

    @tf.function
    def config_of(bound):
        constraint = EntropyLowerBound(bound)
        assert "EntropyLowerBound(" in repr(constraint)  # repr does not need the config
        constraint.get_config()

    with pytest.raises(ValueError, match="symbolic tensor bound cannot be saved.*Received: min_entropy="):
        config_of(tf.constant(0.5))


# ------------------------------------------------------------------ batch-mean constraints


def test_kl_on_the_batch_mean_has_one_closed_form_coefficient():
    rng = np.random.default_rng(5)
    p, q = _probs(rng), 0.3 * _probs(rng) + 0.7 / K
    eps = 2.0**-5  # a float32 number: a Python-float bound reaches float64 through float32
    out, coefficient = KLTrustRegion(eps).project(p, q, average_over_batch=True, return_coefficient=True)
    mean_kl = float(np.mean(kl_divergence(p, q)))
    assert mean_kl > eps
    np.testing.assert_allclose(coefficient.numpy(), np.full(BATCH, eps / mean_kl), rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), q + eps / mean_kl * (p - q), rtol=1e-12)
    assert float(np.mean(kl_divergence(out, q))) <= eps * (1 + 1e-9)
    per_row = KLTrustRegion(eps).project(p, q).numpy()  # one coefficient per row instead
    assert np.max(np.abs(per_row - out.numpy())) > 1e-3


def test_feasible_batch_mean_keeps_every_row():
    rng = np.random.default_rng(6)
    x = _probs(rng)
    bound = float(np.mean(entropy(x))) - 0.05  # some rows are below it, the mean is not
    assert np.any(entropy(x).numpy() < bound)
    out, coefficient = EntropyLowerBound(bound).project(x, average_over_batch=True, return_coefficient=True)
    np.testing.assert_array_equal(out.numpy(), x)
    np.testing.assert_array_equal(coefficient.numpy(), np.ones(BATCH))


def test_intersection_on_the_batch_mean_holds_each_constraint():
    rng = np.random.default_rng(7)
    x = 3.0 * rng.normal(size=(BATCH, 3))
    constraints = [L2Ball(1.0), LinfBall(0.6)]
    out = project(x, constraints, average_over_batch=True)
    for c in constraints:
        assert float(tf.reduce_mean(c.h(out))) <= 1e-12
    single = [c.project(x, average_over_batch=True, return_coefficient=True)[1][0] for c in constraints]
    np.testing.assert_allclose(out.numpy(), min(float(e) for e in single) * x, rtol=1e-12)


def test_batch_mean_anchor_check_and_validate_args():
    def h_fn(x):
        return tf.reduce_sum(x, -1)

    constraint = UserConstraint(h_fn, [0.0, 0.0])
    x = tf.constant([[2.0, 1.0], [-1.0, -3.0]])
    anchor = tf.constant([[-1.0, 0.0], [0.25, 0.25]])  # h = -1, 0.5: feasible only on average
    with pytest.raises(ValueError, match=r"Received: h\(anchor\)=0\.5"):
        constraint.project(x, anchor=anchor)
    out = constraint.project(x, anchor=anchor, average_over_batch=True, validate_args=True)
    assert float(tf.reduce_mean(h_fn(out))) <= 1e-6


def test_layer_average_over_batch_round_trip():
    x = _probs(np.random.default_rng(8)).astype("float32")
    layer = InterpolationProjection(KLTrustRegion(0.05), average_over_batch=True)
    reference = np.full_like(x, 1.0 / K)
    expected = KLTrustRegion(0.05).project(x, reference, average_over_batch=True)
    np.testing.assert_array_equal(layer([x, reference]).numpy(), expected.numpy())
    restored = InterpolationProjection.from_config(layer.get_config())
    assert restored.average_over_batch
    np.testing.assert_array_equal(restored([x, reference]).numpy(), expected.numpy())


# ------------------------------------------------------------------------- input spaces


def test_input_space_is_declared():
    assert Constraint.input_space == POINTS
    assert L2Ball(1.0).input_space == POINTS and not L2Ball(1.0).from_logits
    assert EntropyLowerBound(0.5).input_space == PROBABILITIES and not EntropyLowerBound(0.5).from_logits
    assert KLTrustRegion(0.1, from_logits=True).input_space == LOGITS
    assert KLTrustRegion(0.1, from_logits=True).from_logits
    both = Intersection([EntropyLowerBound(0.5, from_logits=True), KLTrustRegion(0.1, from_logits=True)])
    assert both.input_space == LOGITS
    with pytest.raises(ValueError, match="same inputs"):
        Intersection([EntropyLowerBound(0.5), L2Ball(1.0)])


class _CentredProbabilities(Constraint):
    """``||p - uniform||_2 <= radius`` on the softmax of logits: only declares its input space."""

    input_space = LOGITS

    def __init__(self, radius):
        self.radius = radius

    def h(self, x, reference=None):
        uniform = 1.0 / tf.cast(tf.shape(x)[-1], x.dtype)
        return tf.norm(x - uniform, axis=-1) - self.radius

    def anchor(self, x, reference=None):
        return tf.ones_like(x) / tf.cast(tf.shape(x)[-1], x.dtype)


def test_declared_logits_input_space_maps_by_softmax():
    logits = _logits(np.random.default_rng(9))
    out = _CentredProbabilities(0.1).project(logits).numpy()
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-12)
    assert np.all(np.linalg.norm(out - 1.0 / K, axis=-1) <= 0.1 + 1e-12)
    expected = EntropyLowerBound(0.5).project(tf.nn.softmax(logits))
    np.testing.assert_array_equal(EntropyLowerBound(0.5, from_logits=True).project(logits), expected)


class _ThreeColumns(L2Ball):
    def check_input_shape(self, input_shape):
        if input_shape[-1] != 3:
            raise ValueError(f"_ThreeColumns needs 3 columns. Received: input_shape={input_shape}")


def test_layer_build_asks_the_constraint_to_check_the_shape():
    InterpolationProjection(_ThreeColumns(1.0))(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="needs 3 columns"):
        InterpolationProjection(_ThreeColumns(1.0))(np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"min_entropy must be < log\(K\)"):  # through an Intersection
        InterpolationProjection([EntropyLowerBound(1.5), KLTrustRegion(0.1)])(
            [np.zeros((2, K)), np.ones((2, K))]
        )
