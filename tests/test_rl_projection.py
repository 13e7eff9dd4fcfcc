"""Seeded random property tests: the RL projections satisfy their constraints on every state."""

import math

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from keras_structured.projections import entropy, gaussian_entropy, gaussian_kl_parts, kl_divergence
from rl.policies import GaussianPolicy, make_policy, preserve_first_layer
from rl.projection import NO_BOUND, project_categorical, project_gaussian

SEEDS = range(6)
BATCH = 128


def _stat(values, per_state, reduce_max):
    values = np.asarray(values, np.float64)
    if per_state:
        return values.max() if reduce_max else values.min()
    return values.mean()


def _random_probs(rng, n, temperature):
    logits = rng.normal(size=(BATCH, n)) * temperature
    return tf.nn.softmax(tf.constant(logits, tf.float32))


@pytest.mark.parametrize("per_state", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_categorical_projection_constraints(per_state, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    probs = _random_probs(rng, n, 6.0)  # far from old: both projections active somewhere
    old = _random_probs(rng, n, 1.5)
    old_entropy = _stat(entropy(old), per_state, reduce_max=False)
    bound = float(rng.uniform(0.2, 1.0)) * old_entropy
    eps = float(rng.uniform(0.005, 0.1))
    projected, info = project_categorical(probs, old, tf.constant(bound), eps, per_state)
    kl = _stat(kl_divergence(projected, old), per_state, reduce_max=True)
    ent = _stat(entropy(projected), per_state, reduce_max=False)
    assert kl <= eps * (1 + 1e-5)
    assert ent >= bound - 1e-5
    np.testing.assert_allclose(tf.reduce_sum(projected, -1), 1.0, rtol=1e-5)
    assert float(tf.reduce_max(info.kl_active)) == 1.0


def test_categorical_projection_keeps_feasible_inputs():
    probs = tf.constant([[0.5, 0.5], [0.4, 0.6]])
    projected, info = project_categorical(probs, probs, tf.constant(NO_BOUND), 0.01, per_state=True)
    np.testing.assert_array_equal(projected, probs)
    assert float(tf.reduce_sum(info.entropy_active + info.kl_active)) == 0.0


@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("per_state", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_gaussian_projection_constraints(diagonal, per_state, seed):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 5))
    mean = tf.constant(rng.normal(size=(BATCH, d)) * 2.0, tf.float32)
    old_mean = tf.constant(rng.normal(size=(BATCH, d)), tf.float32)
    if diagonal:  # state-dependent standard deviations
        scale = tf.constant(np.exp(rng.normal(size=(BATCH, d)) - 1.5), tf.float32)
        old_scale = tf.constant(np.exp(rng.normal(size=(BATCH, d)) * 0.3), tf.float32)
    else:  # one shared full-covariance Cholesky factor
        a = rng.normal(size=(d, d))
        scale = tf.constant(np.linalg.cholesky(a @ a.T * 0.05 + 0.01 * np.eye(d)), tf.float32)
        b = rng.normal(size=(d, d))
        old_scale = tf.constant(np.linalg.cholesky(b @ b.T + 0.5 * np.eye(d)), tf.float32)
    old_entropy = _stat(np.broadcast_to(gaussian_entropy(old_scale, diagonal), (BATCH,)), per_state, False)
    bound = old_entropy - float(rng.uniform(0.0, 1.0))
    eps = float(rng.uniform(0.005, 0.1))
    (new_mean, new_scale), info = project_gaussian(
        mean, scale, old_mean, old_scale, tf.constant(bound), eps, per_state, diagonal
    )
    kl_mean, kl_cov = gaussian_kl_parts(new_mean, new_scale, old_mean, old_scale, diagonal)
    kl = np.broadcast_to(kl_mean + kl_cov, (BATCH,))
    ent = np.broadcast_to(gaussian_entropy(new_scale, diagonal), (BATCH,))
    assert _stat(kl, per_state, reduce_max=True) <= eps * (1 + 1e-5)
    assert _stat(ent, per_state, reduce_max=False) >= bound - 1e-5
    assert float(tf.reduce_max(info.kl_active)) == 1.0


def test_policy_project_is_differentiable_and_feasible():
    """Gradients flow through the projection (the policy loss is optimised through it)."""
    policy = GaussianPolicy(3, 2, (8,), "tanh", seed=0, diagonal=False, init_std=1.0)
    obs = tf.constant(np.random.default_rng(0).normal(size=(16, 3)), tf.float32)
    old = policy.params(obs)
    with tf.GradientTape() as tape:
        params = (policy.params(obs)[0] + 5.0, 3.0 * policy.params(obs)[1])
        projected, _ = policy.project(params, old, tf.constant(2.0), 0.02, per_state=False)
        loss = tf.reduce_sum(projected[0]) + tf.reduce_sum(projected[1])
    grads = tape.gradient(loss, policy.variables)
    assert all(g is not None and np.all(np.isfinite(g)) for g in grads)
    assert float(tf.reduce_mean(policy.kl(projected, old))) <= 0.02 * (1 + 1e-5)


@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))])
@pytest.mark.parametrize("gaussian", ["full", "diag"])
def test_numpy_actor_matches_network(space, gaussian):
    policy = make_policy(4, space, (16, 16), "tanh", seed=1, gaussian=gaussian)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    params = policy.params(tf.constant(obs))
    actions = policy.act_numpy(policy.numpy_weights(), obs, np.random.default_rng(0), deterministic=True)
    expected = np.argmax(params[0], -1) if isinstance(space, gym.spaces.Discrete) else params[0]
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-6)


def test_preserve_first_layer_keeps_the_function():
    policy = make_policy(3, gym.spaces.Discrete(2), (8,), "tanh", seed=0)
    raw = np.random.default_rng(0).normal(size=(10, 3)) * 4.0 + 1.0
    old_mean, old_std = np.zeros(3), np.ones(3)
    new_mean, new_std = raw.mean(0), raw.std(0)
    before = policy.params(tf.constant((raw - old_mean) / old_std, tf.float32))[0]
    preserve_first_layer(policy.network, old_mean, old_std, new_mean, new_std)
    after = policy.params(tf.constant((raw - new_mean) / new_std, tf.float32))[0]
    np.testing.assert_allclose(after, before, atol=1e-5)


def test_max_entropy():
    assert make_policy(2, gym.spaces.Discrete(4), (4,), "tanh", 0).max_entropy == pytest.approx(math.log(4))
