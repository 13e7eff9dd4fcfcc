"""gymnasium vector envs: same-step autoreset at episode boundaries, the same steps as the plain
list of envs they replaced, sync = async, exact resume."""

import shutil

import numpy as np
import pytest
from gymnasium.vector.utils import batch_space

from rl.algorithms import make_trainer
from rl.checkpoint import checkpoint_dirs
from rl.config import default_config
from rl.env_kind import make_env
from rl.envs import VectorEnvs
from rl.logger import read_progress
from tests.rl_envs import TERMINAL_STEP, TIME_LIMIT

COUNTING = "tests.rl_envs:Counting-v0"
# Counting-v0's observations from reset: a terminated episode, a truncated one, a terminated one.
OBS = [*range(TERMINAL_STEP), *range(TIME_LIMIT), *range(TERMINAL_STEP)]
TERMINATED_AT = (TERMINAL_STEP - 1, len(OBS) - 1)
TRUNCATED_AT = (TERMINAL_STEP + TIME_LIMIT - 1,)


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_same_step_autoreset_returns_the_true_final_observation(vector):
    envs = VectorEnvs(COUNTING, 2, seed=0, vector=vector)
    seen = []
    for _ in OBS:
        obs = envs.obs[:, 0].copy()
        next_obs, rewards, terminated, truncated, final_obs, finished = envs.step(np.zeros(2, np.int64))
        seen.append((obs, rewards, terminated, truncated, final_obs[:, 0], next_obs[:, 0], finished))
    envs.close()
    obs, rewards, terminated, truncated, final_obs, next_obs, finished = (
        list(x) for x in zip(*seen, strict=True)
    )
    np.testing.assert_array_equal(np.array(obs)[:, 0], OBS)  # never a final observation: no fake step
    np.testing.assert_array_equal(np.array(final_obs)[:, 0], np.add(OBS, 1))
    np.testing.assert_array_equal(np.array(rewards)[:, 0], np.add(OBS, 1))
    assert [t for t in range(len(OBS)) if terminated[t][0]] == list(TERMINATED_AT)
    assert [t for t in range(len(OBS)) if truncated[t][0]] == list(TRUNCATED_AT)
    for t in (*TERMINATED_AT, *TRUNCATED_AT):
        assert next_obs[t][0] == 0  # already reset
        assert finished[t] == [(float(sum(range(1, int(final_obs[t][0]) + 1))), int(final_obs[t][0]))] * 2


def test_gae_bootstraps_truncation_from_the_final_observation_and_not_termination(tmp_path):
    config = default_config(
        COUNTING,
        "ppo",
        num_envs=1,
        num_steps=len(OBS),
        minibatch_size=len(OBS),
        normalize_advantages=False,
        logdir=str(tmp_path / "counting"),
    )
    assert not config.normalize_obs and not config.normalize_rewards
    trainer = make_trainer(config)
    rollout = trainer._collect()
    np.testing.assert_array_equal(rollout.obs[:, 0, 0], OBS)
    np.testing.assert_array_equal(rollout.next_obs[:, 0, 0], np.add(OBS, 1))
    batch = trainer._prepare(rollout)

    def value(x):
        return float(trainer.value(np.array([[x]], np.float32))[0])

    gamma, lam = config.gamma, config.gae_lambda
    deltas = []
    for t, x in enumerate(OBS):
        bootstrap = 0.0 if t in TERMINATED_AT else gamma * value(x + 1)  # the true next state
        deltas.append(x + 1 + bootstrap - value(x))
    expected, trace = np.zeros(len(OBS)), 0.0
    for t in reversed(range(len(OBS))):
        ended = t in TERMINATED_AT or t in TRUNCATED_AT or t == len(OBS) - 1
        trace = deltas[t] + (0.0 if ended else gamma * lam * trace)
        expected[t] = trace
    np.testing.assert_allclose(batch.advantages.numpy(), expected, rtol=1e-5, atol=1e-5)
    # at the truncation: r + gamma V(final obs) - V(obs); at the termination: r - V(obs)
    last = TIME_LIMIT
    truncation = last + gamma * value(last) - value(last - 1)
    np.testing.assert_allclose(batch.advantages[TRUNCATED_AT[0]], truncation, rtol=1e-5)
    np.testing.assert_allclose(
        batch.advantages[TERMINATED_AT[0]], TERMINAL_STEP - value(TERMINAL_STEP - 1), rtol=1e-5
    )
    trainer.close()


def _plain_list_steps(env_id, num_envs, seed, actions):
    """The stepping that the vector envs replaced: a list of envs reset by hand when done."""
    envs = [make_env(env_id) for _ in range(num_envs)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    returns, lengths = np.zeros(num_envs), np.zeros(num_envs, np.int64)
    for action in actions:
        final_obs, rewards, terminated, truncated, finished = obs.copy(), [], [], [], []
        for i, env in enumerate(envs):
            final_obs[i], reward, term, trunc, _ = env.step(action[i])
            obs[i] = final_obs[i]
            returns[i] += reward
            lengths[i] += 1
            if term or trunc:
                finished.append((float(returns[i]), int(lengths[i])))
                returns[i], lengths[i] = 0.0, 0
                obs[i] = env.reset()[0]
            rewards.append(reward)
            terminated.append(term)
            truncated.append(trunc)
        yield obs.copy(), np.array(rewards), np.array(terminated), np.array(truncated), final_obs, finished
    for env in envs:
        env.close()


@pytest.mark.parametrize("env_id, steps", [("CartPole-v1", 300), ("Pendulum-v1", 450), ("Hopper-v5", 300)])
def test_sync_vector_envs_step_exactly_like_the_plain_list_they_replaced(env_id, steps):
    envs = VectorEnvs(env_id, 3, seed=7)
    space = batch_space(envs.single_action_space, 3)
    space.seed(0)
    actions = [space.sample() for _ in range(steps)]
    episodes = 0
    for action, expected in zip(actions, _plain_list_steps(env_id, 3, 7, actions), strict=True):
        got = envs.step(action)
        for value, reference in zip(got[:5], expected[:5], strict=True):
            np.testing.assert_array_equal(value, reference)
        assert got[5] == expected[5]
        episodes += len(got[5])
    envs.close()
    assert episodes >= 3  # episode ends (terminations or truncations) were crossed


FAST = dict(num_envs=2, num_steps=128, minibatch_size=64, update_epochs=2, distill_epochs=2)
KEYS = (
    "charts/episodic_return",
    "charts/episodes",
    "losses/policy_loss",
    "losses/value_loss",
    "constraints/kl",
)


def _train(tmp_path, name, vector, restore_from=None):
    config = default_config(
        "CartPole-v1",
        total_steps=1024,
        checkpoint_every=2,
        vector=vector,
        logdir=str(tmp_path / name),
        **FAST,
    )
    trainer = make_trainer(config)
    if restore_from is not None:
        trainer.restore(restore_from)
    trainer.train()
    trainer.close()
    return read_progress(tmp_path / name)


def test_async_gives_the_sync_results_and_resumes_a_sync_checkpoint_exactly(tmp_path):
    sync = _train(tmp_path, "sync", "sync")
    assert len(sync) == 4 and sum(r["charts/episodes"] for r in sync) > 0
    asynchronous = _train(tmp_path, "async", "async")
    shutil.copytree(tmp_path / "sync", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "iter_000004")
    resumed = _train(tmp_path, "resumed", "async", restore_from=checkpoint_dirs(tmp_path / "resumed")[-1])
    for key in KEYS:
        expected = [r[key] for r in sync]
        np.testing.assert_array_equal([r[key] for r in asynchronous], expected, err_msg=key)
        np.testing.assert_array_equal([r[key] for r in resumed], expected, err_msg=key)
