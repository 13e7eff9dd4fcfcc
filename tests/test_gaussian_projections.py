"""Tests for the Gaussian entropy / KL projections, checked against tensorflow-probability."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_structured.projections.gaussian import (
    gaussian_entropy,
    gaussian_kl_parts,
    project_gaussian_entropy,
    project_gaussian_kl,
)

tfd = tfp.distributions
TOL = 1e-6


def random_tril(rng: np.random.Generator, batch: int, d: int, scale: float = 1.0) -> np.ndarray:
    lower = np.tril(0.5 * rng.standard_normal((batch, d, d)), -1)
    diag = np.exp(0.5 * rng.standard_normal((batch, d)))
    return scale * (lower + np.einsum("bi,ij->bij", diag, np.eye(d)))


def mvn(mean, scale, diagonal: bool):
    if diagonal:
        return tfd.MultivariateNormalDiag(loc=mean, scale_diag=scale)
    return tfd.MultivariateNormalTriL(loc=mean, scale_tril=scale)


def tfp_kl_parts(mean, scale, old_mean, old_scale, diagonal: bool):
    """(mean part, covariance part, total) of KL(new || old), all computed by tfp."""
    old = mvn(old_mean, old_scale, diagonal)
    kl_mean = mvn(mean, old_scale, diagonal).kl_divergence(old)
    kl_cov = mvn(old_mean, scale, diagonal).kl_divergence(old)
    total = mvn(mean, scale, diagonal).kl_divergence(old)
    return kl_mean.numpy(), kl_cov.numpy(), total.numpy()


def make_problem(seed: int, batch: int, d: int, diagonal: bool, spread: float = 2.0):
    rng = np.random.default_rng(seed)
    old_mean = rng.standard_normal((batch, d))
    mean = old_mean + spread * rng.standard_normal((batch, d))
    if diagonal:
        old_scale = np.exp(0.5 * rng.standard_normal((batch, d)))
        scale = old_scale * np.exp(spread * rng.standard_normal((batch, d)))
    else:
        old_scale = random_tril(rng, batch, d)
        scale = random_tril(rng, batch, d, scale=np.exp(spread * rng.standard_normal()))
    return mean, scale, old_mean, old_scale


def covariance(scale, diagonal: bool) -> np.ndarray:
    scale = np.asarray(scale)
    if diagonal:
        return np.apply_along_axis(np.diag, -1, scale**2)
    return scale @ np.swapaxes(scale, -1, -2)


# --------------------------------------------------------------------------- entropy


@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("d", [1, 3])
def test_entropy_bound_against_tfp(diagonal, d):
    mean, scale, _, _ = make_problem(0, 6, d, diagonal)
    entropies = mvn(mean, scale, diagonal).entropy().numpy()
    np.testing.assert_allclose(gaussian_entropy(scale, diagonal).numpy(), entropies, rtol=1e-12)
    bound = float(np.median(entropies))
    new_mean, new_scale = project_gaussian_entropy(mean, scale, bound, diagonal=diagonal)
    projected = mvn(new_mean, new_scale, diagonal).entropy().numpy()
    assert np.all(projected >= bound - TOL)
    active = entropies < bound
    np.testing.assert_allclose(projected[active], bound, atol=1e-9)
    # feasible rows are returned exactly, the mean always
    np.testing.assert_array_equal(new_scale.numpy()[~active], scale[~active])
    np.testing.assert_array_equal(new_mean.numpy(), mean)
    # active rows are a rescaling by c >= 1
    new_active, old_active = new_scale.numpy()[active], scale[active]
    if not diagonal:
        new_active, old_active = np.diagonal(new_active, 0, -2, -1), np.diagonal(old_active, 0, -2, -1)
    c = new_active / old_active
    np.testing.assert_allclose(c, c[:, :1] * np.ones_like(c), rtol=1e-12)
    factor = c[:, 0].reshape((-1,) + (1,) * (scale.ndim - 1))
    np.testing.assert_allclose(new_scale.numpy()[active], factor * scale[active], rtol=1e-12)
    assert np.all(c >= 1.0 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    d=st.integers(1, 4),
    diagonal=st.booleans(),
    bound=st.floats(-5.0, 10.0),
)
def test_entropy_bound_property(seed, d, diagonal, bound):
    mean, scale, _, _ = make_problem(seed, 3, d, diagonal)
    _, new_scale = project_gaussian_entropy(mean, scale, bound, diagonal=diagonal)
    assert np.all(mvn(mean, new_scale, diagonal).entropy().numpy() >= bound - TOL)


@pytest.mark.parametrize("diagonal", [False, True])
def test_entropy_bound_on_batch_mean_with_tensor_bound(diagonal):
    mean, scale, _, _ = make_problem(3, 4, 2, diagonal)
    entropies = mvn(mean, scale, diagonal).entropy().numpy()
    bound = float(entropies.mean()) + 0.5  # violated on average, not by every row
    project = tf.function(
        lambda b: project_gaussian_entropy(mean, scale, b, diagonal=diagonal, average_over_batch=True)[1]
    )
    new_scale = project(tf.constant(bound, tf.float64)).numpy()
    new_entropies = mvn(mean, new_scale, diagonal).entropy().numpy()
    assert abs(new_entropies.mean() - bound) < TOL
    np.testing.assert_allclose(new_entropies - entropies, new_entropies[0] - entropies[0], atol=TOL)
    _, same = project_gaussian_entropy(mean, scale, float(entropies.mean()) - 1.0, diagonal, True)
    np.testing.assert_array_equal(same.numpy(), np.asarray(scale))


@pytest.mark.parametrize("diagonal", [False, True])
def test_entropy_gradient_matches_finite_differences(diagonal):
    rng = np.random.default_rng(1)
    scale = random_tril(rng, 2, 2, scale=0.1)
    scale = tf.constant(np.diagonal(scale, 0, -2, -1) if diagonal else scale)
    bound = 3.0  # far above the entropies: active for both rows

    def f(s):
        return project_gaussian_entropy(tf.zeros([2, 2], tf.float64), s, bound, diagonal=diagonal)[1]

    theoretical, numerical = tf.test.compute_gradient(f, [scale], delta=1e-6)
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


# --------------------------------------------------------------------------- KL


def check_kl_bounds(mean, scale, old_mean, old_scale, eps_mean, eps_cov, diagonal, average=False):
    kl_mean, kl_cov, total = tfp_kl_parts(mean, scale, old_mean, old_scale, diagonal)
    if average:
        kl_mean, kl_cov, total = kl_mean.mean(), kl_cov.mean(), total.mean()
    assert np.all(kl_mean <= eps_mean + TOL), kl_mean
    assert np.all(kl_cov <= eps_cov + TOL), kl_cov
    assert np.all(total <= eps_mean + eps_cov + TOL), total


@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("d", [1, 3])
def test_kl_bounds_against_tfp(diagonal, d):
    mean, scale, old_mean, old_scale = make_problem(2, 8, d, diagonal)
    new_mean, new_scale = project_gaussian_kl(mean, scale, old_mean, old_scale, 0.05, 0.1, diagonal=diagonal)
    assert new_scale.shape == scale.shape and new_mean.shape == mean.shape
    check_kl_bounds(new_mean, new_scale, old_mean, old_scale, 0.05, 0.1, diagonal)
    # our split matches tfp's split, and the split sums to tfp's total KL
    ours = gaussian_kl_parts(mean, scale, old_mean, old_scale, diagonal=diagonal)
    kl_mean, kl_cov, total = tfp_kl_parts(mean, scale, old_mean, old_scale, diagonal)
    np.testing.assert_allclose(ours[0].numpy(), kl_mean, rtol=1e-9)
    np.testing.assert_allclose(ours[1].numpy(), kl_cov, rtol=1e-9)
    np.testing.assert_allclose(kl_mean + kl_cov, total, rtol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 4),
    d=st.integers(1, 4),
    diagonal=st.booleans(),
    average=st.booleans(),
    eps_mean=st.floats(1e-3, 1.0),
    eps_cov=st.floats(1e-3, 1.0),
    spread=st.floats(0.0, 3.0),
)
def test_kl_bounds_property(seed, batch, d, diagonal, average, eps_mean, eps_cov, spread):
    mean, scale, old_mean, old_scale = make_problem(seed, batch, d, diagonal, spread)
    new_mean, new_scale = project_gaussian_kl(
        mean, scale, old_mean, old_scale, eps_mean, eps_cov, average_over_batch=average, diagonal=diagonal
    )
    check_kl_bounds(new_mean, new_scale, old_mean, old_scale, eps_mean, eps_cov, diagonal, average)


@pytest.mark.parametrize("diagonal", [False, True])
def test_kl_feasible_inputs_unchanged(diagonal):
    _, _, old_mean, old_scale = make_problem(3, 4, 3, diagonal)
    mean, scale = old_mean + 1e-3, old_scale * 1.01
    for average in (False, True):
        new_mean, new_scale = project_gaussian_kl(
            mean, scale, old_mean, old_scale, 0.1, 0.1, average_over_batch=average, diagonal=diagonal
        )
        np.testing.assert_array_equal(new_mean.numpy(), mean)
        np.testing.assert_array_equal(new_scale.numpy(), scale)
    # only the mean part violated: the scale is returned exactly, the mean is moved
    new_mean, new_scale = project_gaussian_kl(
        mean + 10.0, scale, old_mean, old_scale, 0.1, 0.1, diagonal=diagonal
    )
    np.testing.assert_array_equal(new_scale.numpy(), scale)
    assert not np.allclose(new_mean.numpy(), mean + 10.0)


@pytest.mark.parametrize("diagonal", [False, True])
def test_kl_projected_covariance_on_segment(diagonal):
    mean, scale, old_mean, old_scale = make_problem(4, 5, 3, diagonal, spread=2.5)
    new_mean, new_scale = project_gaussian_kl(mean, scale, old_mean, old_scale, 0.05, 0.05, diagonal=diagonal)
    for new, start, end in [
        (covariance(new_scale, diagonal), covariance(old_scale, diagonal), covariance(scale, diagonal)),
        (new_mean.numpy(), old_mean, mean),
    ]:
        for row in range(len(start)):
            direction = (end[row] - start[row]).ravel()
            offset = (new[row] - start[row]).ravel()
            t = direction @ offset / (direction @ direction)
            assert -1e-9 <= t <= 1.0 + 1e-9
            np.testing.assert_allclose(offset, t * direction, atol=1e-9 * (1 + np.abs(direction).max()))


@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("average", [False, True])
def test_kl_gradient_matches_finite_differences(diagonal, average):
    mean, scale, old_mean, old_scale = make_problem(5, 2, 2, diagonal, spread=1.5)
    kl_mean, kl_cov, _ = tfp_kl_parts(mean, scale, old_mean, old_scale, diagonal)
    assert np.all(kl_mean > 0.2) and np.all(kl_cov > 0.2)  # both constraints active

    def f(m, s):
        new_mean, new_scale = project_gaussian_kl(
            m, s, old_mean, old_scale, 0.1, 0.1, average_over_batch=average, diagonal=diagonal
        )
        return tf.concat([tf.reshape(new_mean, [-1]), tf.reshape(new_scale, [-1])], 0)

    theoretical, numerical = tf.test.compute_gradient(f, [tf.constant(mean), tf.constant(scale)], delta=1e-6)
    for t, n in zip(theoretical, numerical, strict=True):
        np.testing.assert_allclose(t, n, atol=1e-5)
        assert np.abs(t).max() > 0


@pytest.mark.parametrize("diagonal", [False, True])
def test_kl_average_over_batch_shared_covariance(diagonal):
    rng = np.random.default_rng(6)
    batch, d = 6, 3
    old_mean = rng.standard_normal((batch, d))
    mean = old_mean + 2.0 * rng.standard_normal((batch, d))
    if diagonal:
        old_scale, scale = np.exp(rng.standard_normal(d)), np.exp(rng.standard_normal(d))
    else:
        old_scale, scale = random_tril(rng, 1, d)[0], 3.0 * random_tril(rng, 1, d)[0]
    new_mean, new_scale = project_gaussian_kl(
        mean, scale, old_mean, old_scale, 0.1, 0.05, average_over_batch=True, diagonal=diagonal
    )
    assert new_scale.shape == scale.shape  # stays shared
    check_kl_bounds(new_mean, new_scale, old_mean, old_scale, 0.1, 0.05, diagonal, average=True)
    # a single coefficient t for all means
    coefficients = np.linalg.norm(new_mean.numpy() - old_mean, axis=-1) / np.linalg.norm(
        mean - old_mean, axis=-1
    )
    np.testing.assert_allclose(coefficients, coefficients[0], rtol=1e-9)
    # per-state bounds do not hold in general, the average does; the per-state variant is stricter
    per_state_mean, per_state_scale = project_gaussian_kl(
        mean, scale, old_mean, old_scale, 0.1, 0.05, diagonal=diagonal
    )
    assert per_state_scale.shape[0] == batch
    check_kl_bounds(per_state_mean, per_state_scale, old_mean, old_scale, 0.1, 0.05, diagonal)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("diagonal", [False, True])
def test_huge_inputs_stay_finite(dtype, diagonal):
    mean, scale, old_mean, old_scale = make_problem(7, 4, 3, diagonal, spread=0.5)
    mean, scale = (1e3 * mean).astype(dtype), (1e3 * scale).astype(dtype)
    old_mean, old_scale = old_mean.astype(dtype), old_scale.astype(dtype)
    for average in (False, True):
        new_mean, new_scale = project_gaussian_kl(
            mean, scale, old_mean, old_scale, 0.1, 0.1, average_over_batch=average, diagonal=diagonal
        )
        assert new_mean.dtype == dtype and new_scale.dtype == dtype
        assert np.all(np.isfinite(new_mean.numpy())) and np.all(np.isfinite(new_scale.numpy()))
        kl_mean, kl_cov, _ = tfp_kl_parts(
            new_mean.numpy().astype(np.float64),
            new_scale.numpy().astype(np.float64),
            old_mean.astype(np.float64),
            old_scale.astype(np.float64),
            diagonal,
        )
        tol = 1e-3 if dtype == np.float32 else TOL
        assert np.all(kl_mean.mean() <= 0.1 + tol) and np.all(kl_cov.mean() <= 0.1 + tol)
    bound = 40.0  # above the entropies of these huge scales (about 25 nats)
    _, new_scale = project_gaussian_entropy(mean, scale, bound, diagonal=diagonal)
    assert np.all(np.isfinite(new_scale.numpy()))
    entropies = mvn(mean.astype(np.float64), new_scale.numpy().astype(np.float64), diagonal).entropy().numpy()
    assert np.all(entropies >= bound - (1e-4 if dtype == np.float32 else TOL))


def test_works_in_tf_function_float32():
    mean, scale, old_mean, old_scale = (x.astype(np.float32) for x in make_problem(8, 3, 2, False))

    @tf.function
    def f(m, s):
        return project_gaussian_kl(m, s, old_mean, old_scale, 0.1, 0.1)

    new_mean, new_scale = f(mean, scale)
    assert new_mean.dtype == tf.float32
    kl_mean, kl_cov, _ = tfp_kl_parts(
        new_mean.numpy().astype(np.float64),
        new_scale.numpy().astype(np.float64),
        old_mean.astype(np.float64),
        old_scale.astype(np.float64),
        False,
    )
    assert np.all(kl_mean <= 0.1 + 1e-4) and np.all(kl_cov <= 0.1 + 1e-4)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("eps_mean, eps_cov, name", [(0.0, 0.1, "epsilon_mean"), (0.1, -1.0, "epsilon_cov")])
def test_nonpositive_epsilon_raises(eps_mean, eps_cov, name):
    mean, scale, old_mean, old_scale = make_problem(9, 2, 2, False)
    with pytest.raises(ValueError, match=f"Received: {name}="):
        project_gaussian_kl(mean, scale, old_mean, old_scale, eps_mean, eps_cov)


def test_non_finite_min_entropy_raises():
    with pytest.raises(ValueError, match="Received: min_entropy="):
        project_gaussian_entropy(np.zeros((1, 2)), np.ones((1, 2)), float("nan"), diagonal=True)


def test_nan_inputs_raise():
    mean, scale, old_mean, old_scale = make_problem(10, 2, 2, False)
    bad = mean.copy()
    bad[0, 0] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError):
        project_gaussian_kl(bad, scale, old_mean, old_scale, 0.1, 0.1)
    bad_scale = scale.copy()
    bad_scale[1, 1, 1] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError):
        project_gaussian_kl(mean, scale, old_mean, bad_scale, 0.1, 0.1)
    with pytest.raises(tf.errors.InvalidArgumentError):
        project_gaussian_entropy(mean, bad_scale, 1.0)
