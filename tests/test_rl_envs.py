"""Any gymnasium environment: defaults chosen by the env's kind, flattened observations, errors,
and short training runs on environments outside the six tuned ones."""

import math

import gymnasium as gym
import numpy as np
import pytest

import tests.rl_envs  # noqa: F401  (registers the test environments)
from rl.algorithms import make_trainer
from rl.config import TUNED_ENVS, default_config, env_family
from rl.env_kind import check_action_space, env_kind, make_env
from tests.test_rl_training import _assert_executed_constraints

# The tuned values behind the benchmark results (the per-family defaults before any env could be
# used); they must not change.
TUNED = {
    "classic_discrete": dict(
        num_envs=4,
        num_steps=128,
        gamma=0.99,
        update_epochs=10,
        minibatch_size=128,
        policy_lr=1e-3,
        value_lr=1e-3,
        kl_bound=0.02,
        entropy_decay=0.005,
        ent_coef=0.01,
        normalize_obs=False,
        normalize_rewards=False,
        obs_norm_warmup_steps=0,
    ),
    "classic_continuous": dict(
        num_envs=4,
        num_steps=512,
        gamma=0.9,
        update_epochs=10,
        minibatch_size=64,
        policy_lr=1e-3,
        value_lr=1e-3,
        kl_bound=0.03,
        entropy_decay=0.02,
        ent_coef=0.0,
        normalize_obs=False,
        normalize_rewards=True,
        obs_norm_warmup_steps=0,
    ),
    "mujoco": dict(
        num_envs=1,
        num_steps=2048,
        gamma=0.99,
        update_epochs=10,
        minibatch_size=64,
        policy_lr=3e-4,
        value_lr=3e-4,
        kl_bound=0.05,
        entropy_decay=0.02,
        ent_coef=0.0,
        normalize_obs=True,
        normalize_rewards=True,
        obs_norm_warmup_steps=1000,
    ),
}
FAMILY_OF_TUNED = {
    "CartPole-v1": "classic_discrete",
    "Acrobot-v1": "classic_discrete",
    "Pendulum-v1": "classic_continuous",
    "InvertedPendulum-v5": "mujoco",
    "Hopper-v5": "mujoco",
    "HalfCheetah-v5": "mujoco",
}


@pytest.mark.parametrize("env_id", TUNED_ENVS)
def test_tuned_envs_keep_their_family_and_tuned_defaults(env_id):
    family = FAMILY_OF_TUNED[env_id]
    assert env_family(env_id) == family
    for algo in ("projected", "ppo"):
        config = default_config(env_id, algo)
        assert {name: getattr(config, name) for name in TUNED[family]} == TUNED[family]
        assert config.vector == "sync"


@pytest.mark.parametrize(
    "env_id, family, gamma",
    [
        ("MountainCar-v0", "classic_discrete", 0.99),
        ("FrozenLake-v1", "classic_discrete", 0.99),
        ("MountainCarContinuous-v0", "classic_continuous", 0.99),  # 999 steps: not Pendulum's 0.9
        ("Reacher-v5", "mujoco", 0.99),
        ("Swimmer-v5", "mujoco", 0.99),
        ("Walker2d-v5", "mujoco", 0.99),
    ],
)
def test_other_envs_get_the_defaults_of_their_kind(env_id, family, gamma):
    assert env_family(env_id) == family
    config = default_config(env_id)
    expected = {**TUNED[family], "gamma": gamma}
    assert {name: getattr(config, name) for name in expected} == expected


def test_kind_reads_the_action_space_mujoco_and_the_time_limit():
    assert env_kind("MountainCarContinuous-v0").max_episode_steps == 999
    assert not env_kind("MountainCarContinuous-v0").discrete
    assert env_kind("Swimmer-v5").mujoco and env_kind("InvertedPendulum-v5").mujoco
    assert env_kind("MountainCar-v0").discrete and not env_kind("MountainCar-v0").mujoco
    assert env_kind("tests.rl_envs:DictObservation-v0").max_episode_steps is None
    short = default_config("Pendulum-v1")
    assert env_kind("Pendulum-v1").max_episode_steps == 200 and short.gamma == 0.9


def test_observations_are_flattened_to_a_vector():
    env = make_env("FrozenLake-v1")  # Discrete(16) observations: one-hot
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (16,) and obs.sum() == 1 and obs[0] == 1
    env = make_env("tests.rl_envs:DictObservation-v0")  # Dict(Box(2, 2), Discrete(3))
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (7,) and obs.shape == (7,) and obs[4:].sum() == 1


@pytest.mark.parametrize(
    "env_id, message",
    [
        (
            "tests.rl_envs:TextObservation-v0",
            r"Unsupported observation space.*Received: observation_space=Text",
        ),
        ("tests.rl_envs:MultiDiscreteAction-v0", r"Unsupported action space.*action_space=MultiDiscrete"),
        (
            "Nope-v0",
            r"gymnasium cannot make the environment: Environment `Nope` doesn't exist.*env_id='Nope-v0'",
        ),
        ("CartPole-v9", r"Environment version `v9` for environment `CartPole` doesn't exist.*'CartPole-v9'"),
    ],
)
def test_unsupported_spaces_and_unknown_ids_raise_naming_them(env_id, message):
    with pytest.raises(ValueError, match=message):
        default_config(env_id)


def test_unsupported_action_space_raises():
    with pytest.raises(ValueError, match="Unsupported action space"):
        check_action_space(gym.spaces.MultiDiscrete([2, 3]))
    with pytest.raises(ValueError, match="Unsupported action space"):
        check_action_space(gym.spaces.Box(-np.inf, np.inf, (2,)))


FAST = dict(update_epochs=2, distill_epochs=2)
# An entropy bound active from the start. For the 3-action categorical policy it starts at the
# initial, nearly maximal entropy, within the distillation margin of log 3: the tightened target
# bound must stay below log 3 (it used to reach it, and the projection failed).


@pytest.mark.parametrize(
    "env_id, overrides",
    [
        # 4 x 128: episodes of 200 steps end
        ("MountainCar-v0", dict(total_steps=2048, entropy_activation_fraction=1.0)),
        pytest.param(  # 999-step episodes; 5 s, and Swimmer-v5 covers continuous actions
            "MountainCarContinuous-v0",
            dict(total_steps=4096, num_steps=256, entropy_activation_fraction=1.0),
            marks=pytest.mark.slow,
        ),
        (
            "Swimmer-v5",
            dict(
                total_steps=3072, num_steps=1024, obs_norm_warmup_steps=200, entropy_activation_fraction=1.0
            ),
        ),
    ],
)
def test_training_on_envs_outside_the_tuned_ones(tmp_path, env_id, overrides):
    trainer = make_trainer(default_config(env_id, logdir=str(tmp_path / "run"), **FAST, **overrides))
    row = trainer.train()
    trainer.close()
    assert row["global_step"] == overrides["total_steps"]
    rows = _assert_executed_constraints(trainer.config.logdir, per_state=False)
    assert any(not math.isnan(r["constraints/entropy_bound"]) for r in rows)  # the bound was active
    assert sum(r["charts/episodes"] for r in rows) > 0 and math.isfinite(rows[-1]["losses/value_loss"])
