"""End-to-end properties of short training runs (classic control only, a few seconds each)."""

import math
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_structured.divergence import DivergenceError
from rl.algorithms import make_trainer
from rl.checkpoint import checkpoint_dirs
from rl.config import default_config
from rl.logger import read_progress
from tests.cli_runs import scalar_events

FAST = dict(num_envs=2, num_steps=128, minibatch_size=64, update_epochs=2, distill_epochs=2)


def _config(tmp_path, name, env_id="CartPole-v1", algo="projected", **overrides):
    values = {**FAST, "total_steps": 2000, "logdir": str(tmp_path / name), **overrides}
    return default_config(env_id, algo, **values)


def _returns(logdir):
    return [row["charts/episodic_return"] for row in read_progress(logdir)]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """An uninterrupted 2,048-step CartPole run with checkpoints at iterations 4 and 8."""
    tmp_path = tmp_path_factory.mktemp("reference")
    trainer = make_trainer(_config(tmp_path, "run", checkpoint_every=4))
    trainer.train()
    return trainer


def _assert_same_weights(a, b):
    for x, y in zip(
        a.policy.variables + a.value.variables, b.policy.variables + b.value.variables, strict=True
    ):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_same_seed_same_returns(reference_run, tmp_path):
    again = make_trainer(_config(tmp_path, "again", checkpoint_every=4))
    again.train()
    returns = _returns(reference_run.config.logdir)
    assert len(returns) == 8 and not all(math.isnan(r) for r in returns)
    np.testing.assert_array_equal(returns, _returns(again.config.logdir))
    _assert_same_weights(reference_run, again)


def test_resume_continues_identically(reference_run, tmp_path):
    logdir = tmp_path / "resumed"
    shutil.copytree(reference_run.config.logdir, logdir)
    shutil.rmtree(logdir / "checkpoints" / "iter_000008")
    trainer = make_trainer(_config(tmp_path, "resumed", checkpoint_every=4))
    trainer.restore(checkpoint_dirs(logdir)[-1])
    assert trainer.iteration == 4
    trainer.train()
    rows, expected = read_progress(logdir), read_progress(reference_run.config.logdir)
    assert [r["iteration"] for r in rows] == list(range(1, 9))
    for key in ("charts/episodic_return", "losses/policy_loss", "constraints/kl", "constraints/entropy"):
        np.testing.assert_array_equal([r[key] for r in rows], [r[key] for r in expected])
    _assert_same_weights(reference_run, trainer)
    # TensorBoard shows each step once (not the crashed iterations 5-8 next to the resumed ones)
    events = scalar_events(logdir)
    assert len(events) == len(set((tag, step) for tag, step, _ in events))
    expected = scalar_events(reference_run.config.logdir)
    untimed = [sorted(e for e in found if e[0] != "time/sps") for found in (events, expected)]
    assert untimed[0] == untimed[1]


def _assert_executed_constraints(logdir, per_state):
    rows = read_progress(logdir)
    assert rows
    for row in rows:
        eps = row["constraints/eps"]
        assert row["constraints/kl"] <= eps * (1 + 1e-5), row
        assert row["constraints/kl"] == (
            row["constraints/kl_max"] if per_state else row["constraints/kl_mean"]
        )
        bound = row["constraints/entropy_bound"]
        if not math.isnan(bound):
            assert row["constraints/entropy"] >= bound - 1e-5, row
            assert row["constraints/entropy"] == (
                row["constraints/entropy_min"] if per_state else row["constraints/entropy_mean"]
            )
    return rows


@pytest.mark.parametrize(
    "env_id, overrides",
    [
        ("CartPole-v1", dict(per_state=True, entropy_bound=0.6, entropy_decay=0.01, policy_lr=3e-3)),
        ("Pendulum-v1", dict(per_state=False, entropy_activation_fraction=1.0, entropy_decay=0.05)),
        ("Pendulum-v1", dict(per_state=True, gaussian="diag", entropy_activation_fraction=1, kl_bound=0.005)),
        ("Pendulum-v1", dict(per_state=False, entropy_activation_fraction=1.0, trust_region_coef=10.0)),
    ],
)
def test_executed_policies_satisfy_the_constraints_every_update(tmp_path, env_id, overrides):
    trainer = make_trainer(_config(tmp_path, "run", env_id, total_steps=1500, **overrides))
    trainer.train()
    rows = _assert_executed_constraints(trainer.config.logdir, overrides["per_state"])
    assert any(not math.isnan(r["constraints/entropy_bound"]) for r in rows)  # the bound was active
    assert any(r["constraints/kl_projection_active"] > 0 for r in rows)  # and so was the trust region


def test_trust_region_term_is_the_kl_from_the_fixed_projection(tmp_path):
    plain = make_trainer(_config(tmp_path, "plain", "Pendulum-v1", trust_region_coef=0.0))
    weighted = make_trainer(_config(tmp_path, "weighted", "Pendulum-v1", trust_region_coef=3.0))
    rng = np.random.default_rng(0)
    obs = tf.constant(rng.normal(size=(64, 3)), tf.float32)
    actions = tf.constant(rng.normal(size=(64, 1)), tf.float32)
    advantages = tf.constant(rng.normal(size=64), tf.float32)
    policy = plain.policy
    old = policy.params(obs)
    # Move the mean far from the old policy, so the KL projection is active.
    params = (old[0] + 2.0, old[1])
    old_log_prob = policy.log_prob(old, actions)
    bound = tf.constant(-1e9)
    args = (old, actions, old_log_prob, advantages, bound)
    projected, info = policy.project(params, old, bound, plain.config.kl_bound, False)
    assert float(tf.reduce_mean(info.kl_active)) == 1.0
    expected_kl = float(tf.reduce_mean(policy.kl(projected, params)))
    assert expected_kl > 0.1
    difference = weighted._policy_loss(params, *args) - plain._policy_loss(params, *args)
    np.testing.assert_allclose(float(difference), 3.0 * expected_kl, rtol=1e-5)
    # The projection is held fixed: the term's gradient only pulls the network towards it.
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(params[0])
        term = weighted._policy_loss(params, *args) - plain._policy_loss(params, *args)
        kl_to_fixed = 3.0 * tf.reduce_mean(policy.kl(projected, params))
    gradient, expected = tape.gradient(term, params[0]), tape.gradient(kl_to_fixed, params[0])
    np.testing.assert_allclose(gradient, expected, rtol=1e-4, atol=1e-9)
    # A feasible network is its own projection: the term vanishes.
    feasible = weighted._policy_loss(old, *args) - plain._policy_loss(old, *args)
    assert abs(float(feasible)) < 1e-6


def test_ppo_logs_the_same_columns(tmp_path):
    trainer = make_trainer(_config(tmp_path, "ppo", algo="ppo", total_steps=512))
    trainer.train()
    row = read_progress(trainer.config.logdir)[-1]
    assert math.isnan(row["constraints/eps"]) and row["constraints/kl"] >= 0


def test_nan_stops_with_message_and_keeps_checkpoint(tmp_path):
    trainer = make_trainer(_config(tmp_path, "nan", total_steps=512, checkpoint_every=1))
    trainer.train()
    kernel = trainer.value.variables[0]
    kernel.assign(np.full(kernel.shape, np.nan, np.float32))
    trainer.config.total_steps = 2000
    with pytest.raises(DivergenceError, match=r"iteration 3.*iter_000002"):
        trainer.train()
    kept = checkpoint_dirs(trainer.config.logdir)
    assert [p.name for p in kept] == ["iter_000001", "iter_000002"]
    fresh = make_trainer(_config(tmp_path, "nan", total_steps=512, checkpoint_every=1))  # the run's config
    fresh.restore(kept[-1])
    assert fresh.iteration == 2
    assert all(np.all(np.isfinite(v.numpy())) for v in fresh.value.variables)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(env_id="Nope-v0"), "gymnasium cannot make the environment.*Received: env_id=.Nope-v0."),
        (dict(kl_bound=0.0), "kl_bound must be a finite number > 0"),
        (dict(kl_bound=-1.0), "kl_bound"),
        (dict(entropy_bound=math.log(2) + 0.1), "entropy_bound must be below the maximum entropy"),
        (dict(entropy_bound=float("nan")), "entropy_bound must be finite"),
        (dict(minibatch_size=10_000), "minibatch_size"),
        (dict(trust_region_coef=-1.0), "trust_region_coef must be a finite number >= 0"),
    ],
)
def test_bad_inputs_raise_before_training(tmp_path, overrides, message):
    env_id = overrides.pop("env_id", "CartPole-v1")
    with pytest.raises(ValueError, match=message):
        make_trainer(_config(tmp_path, "bad", env_id, **overrides))
    assert not (tmp_path / "bad").exists()
