"""Interpolation-based projections: constraints, the core op and the Keras layer."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from keras_structured.projections import (
    Constraint,
    EntropyLowerBound,
    Halfspace,
    InterpolationProjection,
    Intersection,
    KLTrustRegion,
    L1Ball,
    L2Ball,
    LinfBall,
    Monotone,
    Polytope,
    UserConstraint,
    interpolate,
    interpolation_coefficient,
    mix,
    project,
)
from tests.jacobians import row_jacobians
from tests.layer_checks import check_layer

RNG = np.random.default_rng(1234)
A_POLY = RNG.normal(size=(6, 3))
X0_POLY = np.array([0.3, -0.2, 0.5])
B_POLY = A_POLY @ X0_POLY + RNG.uniform(0.5, 2.0, size=6)


@keras.saving.register_keras_serializable(package="keras_structured_tests")
def logsumexp_h(x):
    return tf.reduce_logsumexp(x, axis=-1) - 2.0


@keras.saving.register_keras_serializable(package="keras_structured_tests")
def zeros_anchor(x):
    return tf.zeros_like(x)


def softmax(z):
    z = z - z.max(-1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(-1, keepdims=True)


# name -> (constraint, row shape, input kind, reference)
CASES = {
    "l1": (L1Ball(1.5, center=[0.5, -1.0, 0.0, 2.0]), (4,), "real", None),
    "l2_rank3": (L2Ball(2.0), (3, 2), "real", None),
    "linf": (LinfBall(0.7, center=[1.0, 2.0, 3.0]), (3,), "real", None),
    "halfspace": (Halfspace([1.0, -2.0, 0.5], 0.3), (3,), "real", None),
    "polytope": (Polytope(A_POLY, B_POLY, X0_POLY), (3,), "real", None),
    "monotone": (Monotone(spacing=0.3), (6,), "real", None),
    "user": (UserConstraint(logsumexp_h, zeros_anchor), (3,), "real", None),
    "entropy_logits": (EntropyLowerBound(0.8, from_logits=True), (4,), "real", None),
    "entropy_probs": (EntropyLowerBound(1.0), (4,), "probs", None),
    "kl_logits": (KLTrustRegion(0.05, from_logits=True), (4,), "real", "logits"),
    "kl_reverse_probs": (KLTrustRegion(0.2, reverse=True), (4,), "probs", "probs"),
    "entropy_and_kl": (
        Intersection([EntropyLowerBound(0.5, from_logits=True), KLTrustRegion(0.1, from_logits=True)]),
        (4,),
        "real",
        "logits",
    ),
}
NAMES = sorted(CASES)
SCALES = [1e-3, 0.3, 3.0, 100.0, 1e6]


def make_inputs(name, seed, scale, batch=5, clip=50.0):
    constraint, shape, kind, ref_kind = CASES[name]
    rng = np.random.default_rng(seed)
    x = (
        rng.normal(size=(batch,) + shape)
        * scale
        * 10.0 ** rng.uniform(-1, 1, size=(batch,) + (1,) * len(shape))
    )
    if kind == "probs":
        x = softmax(np.clip(x, -clip, clip))  # probabilities (clipped to avoid exact zeros)
    reference = None
    if ref_kind is not None:
        ref_logits = 0.5 * rng.normal(size=(batch,) + shape)  # high-entropy q
        reference = tf.constant(ref_logits if ref_kind == "logits" else softmax(ref_logits))
    return constraint, tf.constant(x), reference


def prepared(constraint, x, reference):
    return constraint.prepare(tf.constant(x), reference)


def h_of(constraint, y, reference):
    """h on already-prepared outputs (probabilities for categorical constraints)."""
    _, ref = prepared(constraint, y, reference)
    return constraint.h(tf.constant(y), ref).numpy()


def takes_logits(constraint):
    parts = constraint.constraints if isinstance(constraint, Intersection) else [constraint]
    return getattr(parts[0], "from_logits", False)


def seeds_and_scales(f):
    f = given(seed=st.integers(0, 2**31 - 1), scale=st.sampled_from(SCALES))(f)
    return settings(max_examples=30, deadline=None)(f)


@pytest.mark.parametrize("name", NAMES)
@seeds_and_scales
def test_output_is_feasible(name, seed, scale):
    constraint, x, reference = make_inputs(name, seed, scale)
    out = constraint.project(x, reference)
    assert out.shape == x.shape and out.dtype == tf.float64
    assert np.all(np.isfinite(out.numpy()))
    assert np.all(h_of(constraint, out.numpy(), reference) <= 1e-6)


@pytest.mark.parametrize("name", NAMES)
@seeds_and_scales
def test_margin_gives_strict_feasibility(name, seed, scale):
    constraint, x, reference = make_inputs(name, seed, scale)
    xp, ref = prepared(constraint, x, reference)
    h_x0 = constraint.h(constraint.anchor(xp, ref), ref).numpy()
    out = constraint.project(x, reference, margin=0.25).numpy()
    assert np.all(h_of(constraint, out, reference) <= -0.25 * np.abs(h_x0) + 1e-6)


@pytest.mark.parametrize("name", NAMES)
@seeds_and_scales
def test_feasible_inputs_unchanged(name, seed, scale):
    constraint, x, reference = make_inputs(name, seed, scale)
    feasible = constraint.project(x, reference, margin=0.5).numpy()
    if takes_logits(constraint):
        feasible = np.log(feasible)  # logits whose softmax is (up to round-off) the feasible point
    expected, ref = prepared(constraint, feasible, reference)
    assume(np.all(constraint.h(expected, ref).numpy() <= 0))
    np.testing.assert_array_equal(
        constraint.project(tf.constant(feasible), reference).numpy(), expected.numpy()
    )


@pytest.mark.parametrize("name", NAMES)
@seeds_and_scales
def test_output_on_segment_from_anchor(name, seed, scale):
    constraint, x, reference = make_inputs(name, seed, scale)
    xp, ref = prepared(constraint, x, reference)
    x0 = constraint.anchor(xp, ref).numpy().reshape(len(x), -1)
    xp = xp.numpy().reshape(len(x), -1)
    out = constraint.project(x, reference).numpy().reshape(len(x), -1)
    direction = xp - x0
    norm2 = np.maximum((direction**2).sum(-1), 1e-300)
    t = ((out - x0) * direction).sum(-1) / norm2
    assert np.all(t >= -1e-12) and np.all(t <= 1 + 1e-12)
    residual = out - x0 - t[:, None] * direction
    assert np.all(np.abs(residual) <= 1e-9 * (1 + np.abs(xp) + np.abs(x0)))


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([0.3, 3.0]))
def test_gradients_match_finite_differences(name, seed, scale):
    constraint, x, reference = make_inputs(name, seed, scale, batch=2, clip=4.0)  # p >> delta
    xp, ref = prepared(constraint, x, reference)
    h_x = constraint.h(xp, ref).numpy()
    assume(np.all(np.abs(h_x) > 1e-3))  # away from the boundary kink
    assume(np.any(h_x > 0))
    theoretical, numerical = row_jacobians(constraint.project, x, reference, delta=1e-6)
    np.testing.assert_allclose(theoretical, numerical, atol=2e-5, rtol=1e-4)
    # The eager gradient is the traced Jacobian's product.
    x = tf.convert_to_tensor(x)
    cotangent = np.random.default_rng(seed).normal(size=x.shape)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = constraint.project(x, reference)
    eager = tape.gradient(out, x, output_gradients=tf.constant(cotangent)).numpy()
    np.testing.assert_allclose(eager.ravel(), cotangent.ravel() @ theoretical, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_tf_function_matches_eager_and_half_precision(name):
    constraint, x, reference = make_inputs(name, 3, 3.0)
    eager = constraint.project(x, reference).numpy()
    graph = tf.function(lambda v: constraint.project(v, reference))(x).numpy()
    np.testing.assert_allclose(graph, eager, rtol=1e-12, atol=1e-15)
    ref16 = None if reference is None else tf.cast(reference, tf.float16)
    half = constraint.project(tf.cast(x, tf.float16), ref16)
    assert half.dtype == tf.float16 and np.all(np.isfinite(half.numpy()))


def test_gradients_flow_through_the_coefficient_and_barely_violated_is_safe():
    h0 = tf.constant([-1.0, -1.0, -1.0], tf.float64)
    h = tf.Variable([1e-300, 0.0, 1e300], dtype=tf.float64)
    with tf.GradientTape() as tape:
        coefficient = interpolation_coefficient(h, h0)
    grad = tape.gradient(coefficient, h).numpy()
    np.testing.assert_allclose(coefficient.numpy()[:2], [1.0, 1.0])
    assert 0 < coefficient.numpy()[2] <= 1e-299
    assert np.all(np.isfinite(grad))
    # t = h0 / (h0 - h): d t / d h = h0 / (h0 - h)^2 = -0.25 at h = 1
    x = tf.Variable([[2.0, 0.0]], dtype=tf.float64)
    with tf.GradientTape() as tape:
        out = L2Ball(1.0).project(x)
    np.testing.assert_allclose(
        tape.jacobian(out, x).numpy().reshape(2, 2), [[0.0, 0.0], [0.0, 0.5]], atol=1e-12
    )


def test_l2_gradient_at_center_is_finite():
    x = tf.Variable(tf.zeros((2, 3), tf.float64))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(L2Ball(1.0).project(x))
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), np.ones((2, 3)))


def test_several_constraints_take_the_minimum_coefficient():
    h_x = tf.constant([[3.0, 1.0], [-1.0, -2.0]])
    h_x0 = tf.constant([[-1.0, -1.0], [-1.0, -1.0]])
    np.testing.assert_allclose(interpolation_coefficient(h_x, h_x0).numpy(), [0.25, 1.0])
    out = interpolate(tf.constant([[4.0, 0.0], [0.1, 0.1]]), tf.zeros((2, 2)), h_x, h_x0)
    np.testing.assert_allclose(out.numpy(), [[1.0, 0.0], [0.1, 0.1]])


def test_the_names_of_the_coefficient_before_its_rename_still_work():
    """``eta`` was the interpolation coefficient's name: the old names warn and give the same values."""
    x, x0 = tf.constant([[3.0, 4.0], [0.3, 0.4]]), tf.zeros((2, 2))
    ball, expected = L2Ball(1.0), [0.2, 1.0]
    with pytest.warns(DeprecationWarning, match="Constraint.eta is deprecated"):
        np.testing.assert_allclose(ball.eta(x, x0).numpy(), expected, rtol=1e-6)
    with pytest.warns(DeprecationWarning, match="batch_mean_eta is deprecated"):
        np.testing.assert_allclose(
            ball.batch_mean_eta(x, x0).numpy(), ball.batch_mean_interpolation_coefficient(x, x0).numpy()
        )
    from keras_structured.projections import affine_rows_eta

    with pytest.warns(DeprecationWarning, match="affine_rows_eta is deprecated"):
        np.testing.assert_allclose(affine_rows_eta([[3.0, -1.0]], [[-1.0, -1.0]]).numpy(), [0.25])
    with pytest.warns(DeprecationWarning, match=r"mix\(..., eta=...\) is deprecated"):
        np.testing.assert_allclose(mix(x, x0, eta=[0.5, 1.0]).numpy(), [[1.5, 2.0], [0.3, 0.4]])
    with pytest.raises(TypeError, match="both coefficient and its deprecated name eta"):
        mix(x, x0, [0.5, 1.0], eta=[0.5, 1.0])
    with pytest.warns(DeprecationWarning, match="HalfStep.eta is deprecated"):

        class HalfStep(L2Ball):  # overrides the coefficient under its old name
            def eta(self, x, x0, reference=None, margin=0.0):
                return tf.fill(tf.shape(x)[:1], 0.5)

    np.testing.assert_allclose(HalfStep(1.0).project(x).numpy(), [[1.5, 2.0], [0.15, 0.2]], rtol=1e-6)


def test_project_helper_equals_intersection():
    x = tf.constant(np.random.default_rng(0).normal(size=(8, 3)) * 5)
    constraints = [L2Ball(2.0), Halfspace([1.0, 1.0, 1.0], 0.5, interior_point=[0.0, 0.0, 0.0])]
    np.testing.assert_array_equal(
        project(x, constraints).numpy(), Intersection(constraints).project(x).numpy()
    )
    for c in constraints:
        assert np.all(c.h(project(x, constraints)).numpy() <= 1e-9)
    # a shared anchor given explicitly
    out = project(x, constraints, anchor=[-0.1, -0.1, -0.1]).numpy()
    assert np.all(Intersection(constraints).h(tf.constant(out)).numpy() <= 1e-9)


def test_exact_values():
    np.testing.assert_allclose(
        L2Ball(1.0).project(tf.constant([[3.0, 4.0]])).numpy(), [[0.6, 0.8]], rtol=1e-6
    )
    out = Monotone().project(tf.constant([[1.0, 0.0, 2.0]], tf.float64)).numpy()
    np.testing.assert_allclose(out, [[0.5, 0.5, 2.0]])


# ----------------------------------------------------------------------------- errors


def test_anchor_not_strictly_feasible_raises():
    with pytest.raises(ValueError, match=r"interior_point.*Received: max\(A x0 - b\)="):
        Polytope([[1.0, 0.0]], [1.0], interior_point=[1.0, 0.0])
    bad = UserConstraint(logsumexp_h, [5.0, 5.0, 5.0])
    x = tf.constant([[10.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"UserConstraint.*logsumexp_h.*Received: h\(anchor\)=4\.09"):
        bad.project(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="strictly feasible"):
        tf.function(bad.project)(x)
    with pytest.raises(ValueError, match=r"L2Ball.*Received: h\(anchor\)=0\.0"):
        L2Ball(1.0).project(x, anchor=[1.0, 0.0, 0.0])


def test_nan_inputs_raise_with_validate_args():
    x = tf.constant([[np.nan, 0.0]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or inf"):
        L2Ball(1.0).project(x, validate_args=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or inf"):
        tf.function(lambda v: L1Ball(1.0).project(v, validate_args=True))(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or inf"):
        InterpolationProjection(LinfBall(1.0), validate_args=True)(x)


def test_entropy_bound_above_log_k_raises():
    with pytest.raises(ValueError, match=r"min_entropy must be < log\(K\).*Received: min_entropy=1\.4"):
        EntropyLowerBound(1.4).project(tf.constant([[0.25, 0.25, 0.25, 0.25]]))
    with pytest.raises(ValueError, match="min_entropy"):
        InterpolationProjection(EntropyLowerBound(np.log(4.0)))(tf.zeros((1, 4)))


def test_argument_validation():
    with pytest.raises(ValueError, match="Received: radius=-1"):
        L2Ball(-1.0)
    with pytest.raises(ValueError, match="Received: margin=1.0"):
        L2Ball(1.0).project(tf.zeros((1, 2)), margin=1.0)
    with pytest.raises(ValueError, match="Received: reference=None"):
        KLTrustRegion(0.1).project(tf.constant([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="Received: epsilon=0"):
        KLTrustRegion(0)
    with pytest.raises(ValueError, match="Received: inputs="):
        InterpolationProjection(KLTrustRegion(0.1))(tf.constant([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="same inputs"):
        Intersection([EntropyLowerBound(0.1, from_logits=True), KLTrustRegion(0.1)])
    with pytest.raises(ValueError, match="at least 2"):
        Monotone().project(tf.zeros((2, 1)))


# ----------------------------------------------------------------------------- serialization and layer


@pytest.mark.parametrize("name", NAMES)
def test_constraint_serialization_round_trip(name):
    constraint, x, reference = make_inputs(name, 0, 3.0)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(constraint))
    assert type(restored) is type(constraint) and repr(restored) == repr(constraint)
    np.testing.assert_array_equal(
        restored.project(x, reference).numpy(), constraint.project(x, reference).numpy()
    )


def test_layer_eager_and_tf_function():
    layer = InterpolationProjection(L2Ball(1.0), margin=0.1, validate_args=True, dtype="float64")
    x = tf.constant(np.random.default_rng(0).normal(size=(6, 3)) * 10)
    eager = layer(x).numpy()
    graph = tf.function(layer)(x).numpy()
    np.testing.assert_allclose(eager, graph, rtol=1e-12)
    assert np.all(np.linalg.norm(eager, axis=-1) <= 0.9 + 1e-9)
    assert layer.compute_output_shape((None, 3)) == (None, 3)
    assert layer.compute_output_shape([(None, 3), (None, 3)]) == (None, 3)


def test_layer_validate_args_catches_a_wrong_h():
    class Broken(Constraint):  # not convex: the interpolation bound does not hold
        def h(self, x, reference=None):
            return tf.cos(3.0 * x[:, 0]) - 0.5

        def anchor(self, x, reference=None):
            return tf.fill(tf.shape(x), tf.cast(np.pi / 3, x.dtype))

    x = tf.constant([[0.0, 0.0]], tf.float64)
    assert Broken().project(x).shape == (1, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="infeasible"):
        Broken().project(x, validate_args=True)


@pytest.mark.parametrize("name", NAMES)
def test_layer_checks(name, tmp_path):
    constraint, _, kind, _ = CASES[name]
    _, x, reference = make_inputs(name, 0, 3.0, batch=4)
    inputs = x.numpy().astype("float32")
    if reference is not None:
        inputs = [inputs, reference.numpy().astype("float32")]
    layer = check_layer(
        InterpolationProjection,
        {"constraint": constraint, "margin": 0.05, "validate_args": True},
        inputs,
        tmp_path=tmp_path,
        upstream_activation="softmax" if kind == "probs" else None,
    )
    if takes_logits(constraint):  # the layer returns probabilities
        np.testing.assert_allclose(layer(inputs).numpy().sum(-1), 1.0, rtol=1e-5)


def test_layer_checks_list_of_constraints(tmp_path):
    constraints = [L2Ball(2.0), Halfspace([1.0, 1.0, 1.0, 1.0], 1.0, interior_point=[0.0] * 4)]
    x = 3.0 * np.random.default_rng(0).normal(size=(4, 4)).astype("float32")
    check_layer(
        InterpolationProjection,
        {"constraint": constraints, "margin": 0.05, "validate_args": True},
        x,
        tmp_path=tmp_path,
    )
