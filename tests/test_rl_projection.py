"""rl's policy projections: the library's (``keras_structured.projections``), with rl's numbers.

Seeded random property tests that the constraints hold on every state, and a check that
:meth:`rl.policies.Policy.project` is the library's entropy-then-KL composition and gives
the numbers of rl's own projection before it was replaced (written out below from the
interpolation primitives as a reference).
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from keras_structured.projections import (
    EntropyLowerBound,
    KLTrustRegion,
    entropy,
    gaussian_entropy,
    gaussian_kl_parts,
    interpolation_coefficient,
    kl_divergence,
    mix,
    project_gaussian_entropy,
    project_gaussian_kl,
)
from rl.policies import NO_BOUND, GaussianPolicy, make_policy, preserve_first_layer

SEEDS = range(6)
BATCH = 128
N_ACTIONS = 4
ACTION_DIM = 3


@pytest.fixture(scope="module")
def policies():
    """One policy per family; ``project`` only uses its parameterisation, not its network."""
    box = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,))
    return {
        "categorical": make_policy(2, gym.spaces.Discrete(N_ACTIONS), (4,), "tanh", seed=0),
        "full": make_policy(2, box, (4,), "tanh", seed=0, gaussian="full"),
        "diag": make_policy(2, box, (4,), "tanh", seed=0, gaussian="diag"),
    }


def _stat(values, per_state, reduce_max):
    values = np.asarray(values, np.float64)
    if per_state:
        return values.max() if reduce_max else values.min()
    return values.mean()


def _random_probs(rng, n, temperature):
    logits = rng.normal(size=(BATCH, n)) * temperature
    return tf.nn.softmax(tf.constant(logits, tf.float32))


def _categorical_problem(seed, per_state):
    rng = np.random.default_rng(seed)
    probs = _random_probs(rng, N_ACTIONS, 6.0)  # far from old: both projections active somewhere
    old = _random_probs(rng, N_ACTIONS, 1.5)
    bound = float(rng.uniform(0.2, 1.0)) * _stat(entropy(old), per_state, reduce_max=False)
    return probs, old, bound, float(rng.uniform(0.005, 0.1))


def _gaussian_problem(seed, per_state, diagonal):
    rng = np.random.default_rng(seed)
    d = ACTION_DIM
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
    return (mean, scale), (old_mean, old_scale), bound, float(rng.uniform(0.005, 0.1))


# ------------------------------------------------------------------ the constraints hold


@pytest.mark.parametrize("per_state", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_categorical_projection_constraints(policies, per_state, seed):
    probs, old, bound, eps = _categorical_problem(seed, per_state)
    (projected,), info = policies["categorical"].project((probs,), (old,), tf.constant(bound), eps, per_state)
    kl = _stat(kl_divergence(projected, old), per_state, reduce_max=True)
    ent = _stat(entropy(projected), per_state, reduce_max=False)
    assert kl <= eps * (1 + 1e-5)
    assert ent >= bound - 1e-5
    np.testing.assert_allclose(tf.reduce_sum(projected, -1), 1.0, rtol=1e-5)
    assert float(tf.reduce_max(info.kl_active)) == 1.0


def test_categorical_projection_keeps_feasible_inputs(policies):
    probs = tf.constant([[0.5, 0.2, 0.2, 0.1], [0.4, 0.3, 0.2, 0.1]])
    (projected,), info = policies["categorical"].project(
        (probs,), (probs,), tf.constant(NO_BOUND), 0.01, per_state=True
    )
    np.testing.assert_array_equal(projected, probs)
    assert float(tf.reduce_sum(info.entropy_active + info.kl_active)) == 0.0


@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("per_state", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_gaussian_projection_constraints(policies, diagonal, per_state, seed):
    params, old_params, bound, eps = _gaussian_problem(seed, per_state, diagonal)
    policy = policies["diag" if diagonal else "full"]
    (new_mean, new_scale), info = policy.project(params, old_params, tf.constant(bound), eps, per_state)
    kl_mean, kl_cov = gaussian_kl_parts(new_mean, new_scale, *old_params, diagonal)
    kl = np.broadcast_to(kl_mean + kl_cov, (BATCH,))
    ent = np.broadcast_to(gaussian_entropy(new_scale, diagonal), (BATCH,))
    assert _stat(kl, per_state, reduce_max=True) <= eps * (1 + 1e-5)
    assert _stat(ent, per_state, reduce_max=False) >= bound - 1e-5
    assert float(tf.reduce_max(info.kl_active)) == 1.0
    if not diagonal:
        assert new_scale.shape == (ACTION_DIM, ACTION_DIM)  # the shared factor stays shared


# ------------------------------------------------- the library's projections, rl's numbers


def _reference_categorical(probs, old_probs, bound, eps, per_state):
    """rl's categorical projection before it used the library's constraints."""

    def coefficient(h_x, h_x0):
        if per_state:
            return interpolation_coefficient(h_x, h_x0)
        mean_coefficient = interpolation_coefficient(
            tf.reduce_mean(h_x, keepdims=True), tf.reduce_mean(h_x0, keepdims=True)
        )
        return tf.broadcast_to(mean_coefficient, tf.shape(h_x))

    n = tf.cast(tf.shape(probs)[-1], probs.dtype)
    h_x = bound - entropy(probs)
    t_entropy = coefficient(h_x, tf.fill(tf.shape(h_x), bound - tf.math.log(n)))
    probs = mix(probs, tf.ones_like(probs) / n, t_entropy)
    g_x = kl_divergence(probs, old_probs) - eps
    t_kl = coefficient(g_x, tf.fill(tf.shape(g_x), tf.cast(-eps, probs.dtype)))
    return mix(probs, old_probs, t_kl), t_entropy < 1.0, t_kl < 1.0


def _reference_gaussian(mean, scale, old_mean, old_scale, bound, eps, per_state, diagonal):
    """rl's Gaussian projection before: entropy rescaling, then the KL with eps / 2 per part."""
    _, scale = project_gaussian_entropy(mean, scale, bound, diagonal, average_over_batch=not per_state)
    return project_gaussian_kl(mean, scale, old_mean, old_scale, eps / 2, eps / 2, not per_state, diagonal)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("per_state", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_categorical_project_is_the_library_composition(policies, seed, per_state, graph):
    probs, old, bound, eps = _categorical_problem(seed, per_state)
    project = policies["categorical"].project
    if graph:
        project = tf.function(project)
    (projected,), info = project((probs,), (old,), tf.constant(bound), eps, per_state)

    average = not per_state
    step, _ = EntropyLowerBound(bound).project(probs, average_over_batch=average, return_coefficient=True)
    composed = KLTrustRegion(eps).project(step, reference=old, average_over_batch=average)
    np.testing.assert_array_equal(projected.numpy(), composed.numpy())

    expected, entropy_active, kl_active = _reference_categorical(probs, old, bound, eps, per_state)
    # The library evaluates h at the uniform anchor as bound - H(uniform) instead of
    # bound - log K: the same up to rounding, hence a few ulps.
    np.testing.assert_allclose(projected.numpy(), expected.numpy(), rtol=0, atol=2e-7)
    np.testing.assert_array_equal(info.entropy_active.numpy(), entropy_active.numpy())
    np.testing.assert_array_equal(info.kl_active.numpy(), kl_active.numpy())
    assert info.kl_active.dtype == tf.float32  # rl's masks are floats, for averaging
    assert float(tf.reduce_max(info.entropy_active)) == 1.0 and float(tf.reduce_max(info.kl_active)) == 1.0


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("diagonal", [False, True], ids=["full", "diag"])
@pytest.mark.parametrize("per_state", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_gaussian_project_is_the_library_composition(policies, seed, per_state, diagonal, graph):
    params, old_params, bound, eps = _gaussian_problem(seed, per_state, diagonal)
    project, reference = policies["diag" if diagonal else "full"].project, _reference_gaussian
    if graph:  # both compiled: grappler may fuse ops, and round differently than eager
        project, reference = tf.function(project), tf.function(reference)
    (mean, scale), info = project(params, old_params, tf.constant(bound), eps, per_state)
    expected_mean, expected_scale = reference(
        *params, *old_params, tf.constant(bound), eps, per_state, diagonal
    )
    if not diagonal and expected_scale.shape.rank == 3:
        expected_scale = expected_scale[0]
    np.testing.assert_array_equal(mean.numpy(), expected_mean.numpy())
    np.testing.assert_array_equal(scale.numpy(), expected_scale.numpy())
    assert info.entropy_active.shape == (BATCH,) and info.kl_active.shape == (BATCH,)
    assert float(tf.reduce_max(info.kl_active)) == 1.0


def test_policy_project_is_differentiable_and_feasible():
    """Gradients flow through the projection (the policy loss is optimised through it)."""
    policy = GaussianPolicy(3, 2, (8,), "tanh", seed=0, diagonal=False, init_std=1.0)
    obs = tf.constant(np.random.default_rng(0).normal(size=(16, 3)), tf.float32)
    old = policy.params(obs)
    with tf.GradientTape() as tape:
        params = (policy.params(obs)[0] + 5.0, 3.0 * policy.params(obs)[1])
        projected, info = policy.project(params, old, tf.constant(2.0), 0.02, per_state=False)
        loss = tf.reduce_sum(projected[0]) + tf.reduce_sum(projected[1])
    grads = tape.gradient(loss, policy.variables)
    assert float(tf.reduce_mean(info.kl_active)) == 1.0
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
