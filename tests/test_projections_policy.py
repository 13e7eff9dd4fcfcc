"""Entropy-then-KL projections of policies: both constraints hold, and why this order."""

import numpy as np
import pytest
import tensorflow as tf

from keras_structured.projections import (
    EntropyLowerBound,
    GaussianProjection,
    KLTrustRegion,
    entropy,
    gaussian_entropy,
    gaussian_kl_parts,
    kl_divergence,
    project_categorical,
    project_gaussian,
    project_gaussian_entropy,
    project_gaussian_kl,
)

BATCH = 32


def _probs(rng, k, temperature):
    z = temperature * rng.normal(size=(BATCH, k))
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _stat(values, per_state, reduce_max):
    values = np.broadcast_to(np.asarray(values, np.float64), (BATCH,))
    if per_state:
        return values.max() if reduce_max else values.min()
    return values.mean()


# --------------------------------------------------------------------------- categorical


@pytest.mark.parametrize("per_state", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_categorical_both_constraints_hold(seed, per_state):
    rng = np.random.default_rng(seed)
    p, q = _probs(rng, 5, 6.0), _probs(rng, 5, 1.0)
    bound = 0.8 * _stat(entropy(q), per_state, reduce_max=False)  # H(q) >= bound
    eps = 0.02
    out, info = project_categorical(p, q, min_entropy=bound, epsilon=eps, average_over_batch=not per_state)
    assert _stat(entropy(out), per_state, reduce_max=False) >= bound - 1e-9
    assert _stat(kl_divergence(out, q), per_state, reduce_max=True) <= eps * (1 + 1e-9)
    assert info.entropy_active.dtype == tf.bool and bool(tf.reduce_any(info.kl_active))


def test_categorical_single_bounds_are_the_constraints():
    rng = np.random.default_rng(10)
    p, q = _probs(rng, 4, 4.0), _probs(rng, 4, 1.0)
    only_entropy, info = project_categorical(p, min_entropy=1.0)
    np.testing.assert_array_equal(only_entropy, EntropyLowerBound(1.0).project(p))
    assert not bool(tf.reduce_any(info.kl_active))
    only_kl, info = project_categorical(p, q, epsilon=0.05)
    np.testing.assert_array_equal(only_kl, KLTrustRegion(0.05).project(p, q))
    assert not bool(tf.reduce_any(info.entropy_active))


def test_categorical_per_state_bounds_equal_a_loop():
    rng = np.random.default_rng(11)
    p, q = _probs(rng, 4, 4.0), _probs(rng, 4, 0.5)
    bounds = 0.9 * entropy(q).numpy()
    epsilons = rng.uniform(0.01, 0.2, BATCH)
    out, _ = project_categorical(p, q, min_entropy=bounds, epsilon=epsilons)
    for i in range(BATCH):
        row, _ = project_categorical(p[i : i + 1], q[i : i + 1], float(bounds[i]), float(epsilons[i]))
        np.testing.assert_allclose(out[i : i + 1], row, rtol=1e-6, atol=1e-7)


def test_categorical_argument_errors():
    p = np.full((2, 3), 1.0 / 3.0)
    with pytest.raises(ValueError, match="Received: min_entropy=None, epsilon=None"):
        project_categorical(p)
    with pytest.raises(ValueError, match="Received: epsilon=0.1, old_probs=None"):
        project_categorical(p, epsilon=0.1)


# ------------------------------------------------------------------------------ Gaussian


def _gaussian(seed, diagonal, shared):
    rng = np.random.default_rng(seed)
    d = 3
    mean, old_mean = 2.0 * rng.normal(size=(BATCH, d)), rng.normal(size=(BATCH, d))
    batch = () if shared else (BATCH,)
    if diagonal:
        scale = np.exp(rng.normal(size=batch + (d,)) - 1.0)
        old_scale = np.exp(0.3 * rng.normal(size=batch + (d,)))
    else:
        a = rng.normal(size=batch + (d, d))
        b = rng.normal(size=batch + (d, d))
        eye = np.eye(d)
        scale = np.linalg.cholesky(a @ np.swapaxes(a, -1, -2) * 0.3 + 0.01 * eye)
        old_scale = np.linalg.cholesky(b @ np.swapaxes(b, -1, -2) + 0.5 * eye)
    return mean, scale, old_mean, old_scale


@pytest.mark.parametrize("shared", [False, True], ids=["per_state_scale", "shared_scale"])
@pytest.mark.parametrize("diagonal", [False, True], ids=["full", "diag"])
@pytest.mark.parametrize("per_state", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_gaussian_both_constraints_hold(seed, per_state, diagonal, shared):
    mean, scale, old_mean, old_scale = _gaussian(seed, diagonal, shared)
    bound = _stat(gaussian_entropy(old_scale, diagonal), per_state, reduce_max=False) - 0.3
    eps_mean, eps_cov = 0.02, 0.03
    (new_mean, new_scale), info = project_gaussian(
        mean,
        scale,
        old_mean,
        old_scale,
        min_entropy=bound,
        epsilon_mean=eps_mean,
        epsilon_cov=eps_cov,
        average_over_batch=not per_state,
        diagonal=diagonal,
    )
    kl_mean, kl_cov = gaussian_kl_parts(new_mean, new_scale, old_mean, old_scale, diagonal)
    assert _stat(gaussian_entropy(new_scale, diagonal), per_state, reduce_max=False) >= bound - 1e-9
    assert _stat(kl_mean, per_state, reduce_max=True) <= eps_mean * (1 + 1e-9)
    assert _stat(kl_cov, per_state, reduce_max=True) <= eps_cov * (1 + 1e-9)
    assert info.entropy_active.shape == (BATCH,) and bool(tf.reduce_any(info.kl_active))


@pytest.mark.parametrize("diagonal", [False, True], ids=["full", "diag"])
@pytest.mark.parametrize("per_state", [True, False])
def test_gaussian_is_entropy_then_kl(per_state, diagonal):
    mean, scale, old_mean, old_scale = _gaussian(4, diagonal, shared=False)
    bound = float(np.mean(gaussian_entropy(old_scale, diagonal))) - 0.2
    (new_mean, new_scale), info = project_gaussian(
        mean,
        scale,
        old_mean,
        old_scale,
        bound,
        0.05,
        0.05,
        average_over_batch=not per_state,
        diagonal=diagonal,
    )
    _, widened = project_gaussian_entropy(mean, scale, bound, diagonal, average_over_batch=not per_state)
    expected = project_gaussian_kl(mean, widened, old_mean, old_scale, 0.05, 0.05, not per_state, diagonal)
    np.testing.assert_array_equal(new_mean, expected[0])
    np.testing.assert_array_equal(new_scale, expected[1])
    entropies = gaussian_entropy(scale, diagonal).numpy()
    active = entropies < bound if per_state else np.full(BATCH, entropies.mean() < bound)
    np.testing.assert_array_equal(info.entropy_active.numpy(), active)


def _wide_and_narrow():
    """An old ``N(0, I)`` and a new diagonal Gaussian wider than it along one axis, narrower
    along the other: ``tr(Q^-1 S) = 4.1 > d`` but ``det S = 0.4 < det Q``."""
    old_mean, old_scale = np.zeros((1, 2)), np.ones((1, 2))
    mean, scale = np.zeros((1, 2)), np.sqrt([[4.0, 0.1]])
    bound = float(gaussian_entropy(old_scale, diagonal=True)[0]) - 1e-3
    return mean, scale, old_mean, old_scale, bound


def test_kl_then_entropy_would_break_the_kl_bound():
    """Why entropy first: widening after the KL step can leave the trust region."""
    mean, scale, old_mean, old_scale, bound = _wide_and_narrow()
    eps_mean, eps_cov = 0.1, 1.6  # KL_cov(S) = 1.51: the KL step alone keeps S
    kl_first = project_gaussian_kl(mean, scale, old_mean, old_scale, eps_mean, eps_cov, diagonal=True)
    _, kl_first_scale = project_gaussian_entropy(*kl_first, bound, diagonal=True)
    _, kl_cov = gaussian_kl_parts(mean, kl_first_scale, old_mean, old_scale, diagonal=True)
    assert float(kl_cov[0]) > 2.2  # 2.24: the rescaling by c^2 = 1.58 left the region

    (_, new_scale), info = project_gaussian(
        mean, scale, old_mean, old_scale, bound, eps_mean, eps_cov, diagonal=True
    )
    _, kl_cov = gaussian_kl_parts(mean, new_scale, old_mean, old_scale, diagonal=True)
    assert float(kl_cov[0]) <= eps_cov * (1 + 1e-12)
    assert float(gaussian_entropy(new_scale, diagonal=True)[0]) >= bound - 1e-12
    assert bool(info.entropy_active[0]) and bool(info.kl_active[0])


def test_gaussian_projection_layer_uses_the_same_order():
    mean, scale, old_mean, old_scale, bound = _wide_and_narrow()
    layer = GaussianProjection(min_entropy=bound, epsilon_mean=0.1, epsilon_cov=1.6, diagonal=True)
    inputs = [x.astype("float32") for x in (mean, scale, old_mean, old_scale)]
    new_mean, new_scale = layer(inputs)
    (expected_mean, expected_scale), _ = project_gaussian(
        *inputs, min_entropy=bound, epsilon_mean=0.1, epsilon_cov=1.6, diagonal=True
    )
    np.testing.assert_array_equal(new_scale, expected_scale)
    np.testing.assert_array_equal(new_mean, expected_mean)
    _, kl_cov = gaussian_kl_parts(new_mean, new_scale, inputs[2], inputs[3], diagonal=True)
    assert float(kl_cov[0]) <= 1.6 * (1 + 1e-6)


@pytest.mark.parametrize("diagonal", [False, True], ids=["full", "diag"])
def test_gaussian_per_state_tensor_bounds_equal_a_loop(diagonal):
    mean, scale, old_mean, old_scale = _gaussian(5, diagonal, shared=False)
    rng = np.random.default_rng(5)
    bounds = gaussian_entropy(old_scale, diagonal).numpy() - rng.uniform(0.0, 0.5, BATCH)
    eps_mean, eps_cov = rng.uniform(0.01, 0.1, BATCH), rng.uniform(0.01, 0.1, BATCH)

    @tf.function
    def per_state(bounds, eps_mean, eps_cov):
        return project_gaussian(
            mean, scale, old_mean, old_scale, bounds, eps_mean, eps_cov, diagonal=diagonal
        )

    (new_mean, new_scale), _ = per_state(tf.constant(bounds), tf.constant(eps_mean), tf.constant(eps_cov))
    for i in range(BATCH):
        rows = [x[i : i + 1] for x in (mean, scale, old_mean, old_scale)]
        (row_mean, row_scale), _ = project_gaussian(
            *rows, float(bounds[i]), float(eps_mean[i]), float(eps_cov[i]), diagonal=diagonal
        )
        # Python-float bounds go through float32 in tf.cast (min_entropy), arrays do not.
        np.testing.assert_allclose(new_mean[i : i + 1], row_mean, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(new_scale[i : i + 1], row_scale, rtol=1e-6, atol=1e-9)


def test_per_state_entropy_bound_on_a_shared_scale():
    _, scale, _, _ = _gaussian(6, diagonal=False, shared=True)
    bounds = float(gaussian_entropy(scale)) + np.linspace(-0.5, 0.5, BATCH)
    mean = np.zeros((BATCH, 3))
    _, projected = project_gaussian_entropy(mean, scale, bounds)
    assert projected.shape == (BATCH, 3, 3)
    np.testing.assert_allclose(
        gaussian_entropy(projected), np.maximum(bounds, gaussian_entropy(scale)), rtol=1e-12
    )


def test_gaussian_argument_errors():
    mean, scale = np.zeros((2, 2)), np.ones((2, 2))
    with pytest.raises(ValueError, match="must be a scalar.*Received: min_entropy="):
        project_gaussian_entropy(mean, scale, np.array([1.0, 2.0]), diagonal=True, average_over_batch=True)
    with pytest.raises(ValueError, match="must be a scalar.*Received: epsilon_cov="):
        project_gaussian_kl(mean, scale, mean, scale, 0.1, [0.1, 0.2], average_over_batch=True, diagonal=True)
    with pytest.raises(ValueError, match="epsilon_mean must be a finite number > 0. Received: epsilon_mean="):
        project_gaussian_kl(mean, scale, mean, scale, tf.constant(0.0), 0.1, diagonal=True)
    with pytest.raises(ValueError, match="Received: min_entropy=None, epsilon_mean=None"):
        project_gaussian(mean, scale, diagonal=True)
    with pytest.raises(ValueError, match="Received: epsilon_mean=0.1, epsilon_cov=None"):
        project_gaussian(mean, scale, mean, scale, epsilon_mean=0.1, diagonal=True)
    with pytest.raises(ValueError, match="Received: old_mean=None"):
        project_gaussian(mean, scale, epsilon_mean=0.1, epsilon_cov=0.1, diagonal=True)
