"""Issue 21: checkpoints that are safe to share.

``evaluate``, ``export``, ``plot`` and :func:`rl.evaluation.load_policy` never unpickle, so a
planted pickle cannot run; ``--resume`` unpickles only a file whose SHA-256 matches the one
recorded when it was written, and names the file otherwise; exported ``.keras`` policies load
with ``safe_mode=True`` and act like the checkpointed policy.
"""

import hashlib
import json
import os
import pickle
import shutil

import gymnasium as gym
import keras
import numpy as np
import pytest

from rl.algorithms import make_trainer
from rl.checkpoint import (
    LEGACY_FILE,
    RESUME_FILE,
    STATE_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    checkpoint_dirs,
    read_arrays,
    read_resume_state,
    read_state,
    unflatten_arrays,
)
from rl.cli import main
from rl.config import TrainConfig, default_config
from rl.evaluation import evaluate, load_policy
from tests.test_rl_cli import _rows

# 2 iterations of 2 x 128 steps, a checkpoint after each; observation normalisation on, so
# that the export's normalisation layer is exercised.
FAST = dict(
    num_envs=2,
    num_steps=128,
    minibatch_size=64,
    update_epochs=2,
    distill_epochs=2,
    total_steps=512,
    checkpoint_every=1,
    normalize_obs=True,
)
RUNS = {
    "CartPole-v1": ("CartPole-v1", "projected", {}),
    "Pendulum-v1": ("Pendulum-v1", "projected", {}),
    "Pendulum-v1-diag": ("Pendulum-v1", "ppo", {"gaussian": "diag"}),
}


class _Payload:
    """Unpickling it creates the directory ``marker``, as an attacker's pickle could run anything."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    logdirs = {}
    for name, (env_id, algo, overrides) in RUNS.items():
        logdirs[name] = root / name
        make_trainer(default_config(env_id, algo, logdir=str(logdirs[name]), **FAST, **overrides)).train()
    return logdirs


@pytest.fixture
def copy_of_cartpole(runs, tmp_path):
    logdir = tmp_path / "copy"
    shutil.copytree(runs["CartPole-v1"], logdir)
    return logdir


def _plant(checkpoint, marker, rehash):
    """Replaces the resume state by :class:`_Payload`; ``rehash``: also records its SHA-256, as
    someone who edits the whole run directory can."""
    payload = pickle.dumps(_Payload(marker))
    (checkpoint / RESUME_FILE).write_bytes(payload)
    if rehash:
        metadata = json.loads((checkpoint / STATE_FILE).read_text())
        metadata["sha256"][RESUME_FILE] = hashlib.sha256(payload).hexdigest()
        (checkpoint / STATE_FILE).write_text(json.dumps(metadata))


def _resume(logdir):
    """A trainer of the run in ``logdir`` (its config.json) restored from its newest checkpoint."""
    config = TrainConfig.load(logdir / "config.json")
    config.logdir = str(logdir)
    make_trainer(config).restore(checkpoint_dirs(logdir)[-1])


def test_evaluate_export_and_plot_never_unpickle(runs, copy_of_cartpole, tmp_path, capsys):
    marker = tmp_path / "marker"
    for checkpoint in checkpoint_dirs(copy_of_cartpole):
        _plant(checkpoint, marker, rehash=True)
    expected = evaluate(runs["CartPole-v1"], episodes=2)

    assert evaluate(copy_of_cartpole, episodes=2) == expected
    assert main(["evaluate", "--checkpoint", str(copy_of_cartpole), "--episodes", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == expected
    _, policy, obs_rms = load_policy(copy_of_cartpole)
    _, clean_policy, clean_obs_rms = load_policy(runs["CartPole-v1"])
    for ours, theirs in zip(policy.numpy_weights(), clean_policy.numpy_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(obs_rms.mean, clean_obs_rms.mean)
    (tmp_path / "disk").mkdir()  # the outputs go through a symlinked folder, which is followed
    (tmp_path / "out").symlink_to(tmp_path / "disk", target_is_directory=True)
    out = tmp_path / "out"
    assert main(["export", "--checkpoint", str(copy_of_cartpole), "--output", str(out / "p.keras")]) == 0
    assert main(["plot", str(copy_of_cartpole), "--output", str(out / "curves.png")]) == 0
    assert {path.name for path in (tmp_path / "disk").iterdir()} == {"p.keras", "curves.png"}
    assert not marker.exists()

    read_resume_state(checkpoint_dirs(copy_of_cartpole)[-1])  # the payload is live: resume runs it
    assert marker.is_dir()


def test_old_format_is_refused_without_unpickling(runs, tmp_path, capsys):
    logdir, marker = tmp_path / "old", tmp_path / "marker"
    checkpoint = logdir / "checkpoints" / "iter_000002"
    checkpoint.mkdir(parents=True)
    shutil.copy(runs["CartPole-v1"] / "config.json", logdir)
    shutil.copy(checkpoint_dirs(runs["CartPole-v1"])[-1] / WEIGHTS_FILE, checkpoint)
    (checkpoint / LEGACY_FILE).write_bytes(pickle.dumps(_Payload(marker)))

    with pytest.raises(CheckpointError, match="old format.*upgrade-checkpoint"):
        load_policy(logdir)
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--checkpoint", str(logdir), "--episodes", "1"])
    assert stop.value.code == 2
    assert "old format" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="old format"):
        _resume(logdir)
    assert not marker.exists()


def test_truncated_resume_state_is_refused_naming_the_file(copy_of_cartpole, capsys):
    path = checkpoint_dirs(copy_of_cartpole)[-1] / RESUME_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    rows = _rows(copy_of_cartpole)
    with pytest.raises(SystemExit) as stop:
        main(["train", "--resume", "--logdir", str(copy_of_cartpole), "--steps", "1024", "--quiet"])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert str(path) in error and "does not match the SHA-256" in error and "truncated" in error
    assert _rows(copy_of_cartpole) == rows  # nothing trained


def test_swapped_resume_state_is_refused_before_unpickling(copy_of_cartpole, tmp_path):
    marker = tmp_path / "marker"
    checkpoint = checkpoint_dirs(copy_of_cartpole)[-1]
    _plant(checkpoint, marker, rehash=False)  # a valid pickle of other content
    with pytest.raises(CheckpointError, match="does not match the SHA-256") as error:
        _resume(copy_of_cartpole)
    assert str(checkpoint / RESUME_FILE) in str(error.value)
    assert not marker.exists()


def test_other_format_version_and_corrupted_weights_are_refused(copy_of_cartpole):
    old, new = checkpoint_dirs(copy_of_cartpole)
    metadata = json.loads((new / STATE_FILE).read_text())
    (new / STATE_FILE).write_text(json.dumps({**metadata, "format_version": 99}))
    with pytest.raises(CheckpointError, match="format_version=99"):
        read_arrays(new)
    weights = old / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match=f"{weights}.*does not match the SHA-256"):
        load_policy(old)


def _downgrade(checkpoint):
    """Rewrites a checkpoint in the old format: variable groups in weights.npz, all else in state.pkl."""
    arrays = read_arrays(checkpoint)
    old_state = {**read_state(checkpoint), **read_resume_state(checkpoint)}
    for name in ("obs_rms", "reward_scaler"):
        old_state[name] = unflatten_arrays(arrays, name)
    variables = {
        key: value for key, value in arrays.items() if not key.startswith(("obs_rms/", "reward_scaler/"))
    }
    np.savez(checkpoint / WEIGHTS_FILE, **variables)
    (checkpoint / LEGACY_FILE).write_bytes(pickle.dumps(old_state))
    for name in (STATE_FILE, RESUME_FILE):
        (checkpoint / name).unlink()


def _assert_same(ours, theirs):
    """Nested dicts, lists, arrays and plain values are equal."""
    if isinstance(ours, dict):
        assert sorted(ours) == sorted(theirs)
        for key in ours:
            _assert_same(ours[key], theirs[key])
    elif isinstance(ours, list | tuple):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _assert_same(a, b)
    elif isinstance(ours, np.ndarray):
        np.testing.assert_array_equal(ours, theirs)
    else:
        assert ours == theirs


def test_upgrade_checkpoint_restores_the_same_contents(runs, copy_of_cartpole, capsys):
    checkpoints = checkpoint_dirs(copy_of_cartpole)
    for checkpoint in checkpoints:
        _downgrade(checkpoint)
    assert main(["upgrade-checkpoint", str(copy_of_cartpole)]) == 0
    assert "upgraded 2 checkpoint(s)" in capsys.readouterr().out
    for checkpoint, original in zip(checkpoints, checkpoint_dirs(runs["CartPole-v1"]), strict=True):
        assert not (checkpoint / LEGACY_FILE).exists()
        for read in (read_arrays, read_state, read_resume_state):
            _assert_same(read(checkpoint), read(original))
    assert main(["upgrade-checkpoint", str(copy_of_cartpole)]) == 0  # nothing left to convert
    assert "upgraded 0 checkpoint(s)" in capsys.readouterr().out


def _observations(env_id, count=64):
    """Observations of ``env_id`` under uniformly random actions."""
    env = gym.make(env_id)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    found = []
    for _ in range(count):
        found.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.asarray(found, np.float32)


@pytest.mark.parametrize("name", list(RUNS))
def test_exported_model_acts_like_the_policy(runs, name, tmp_path):
    output = tmp_path / "policy.keras"
    assert main(["export", "--checkpoint", str(runs[name]), "--output", str(output)]) == 0
    model = keras.models.load_model(output, safe_mode=True)
    assert all(type(layer).__module__.startswith("keras.") for layer in model.layers)  # no rl classes

    config, policy, obs_rms = load_policy(runs[name])
    obs = _observations(config.env_id)
    expected = policy.act_numpy(policy.numpy_weights(), obs_rms.normalize(obs), None, deterministic=True)
    outputs = np.asarray(model(obs))
    if name == "CartPole-v1":
        assert outputs.shape == (len(obs), 2)
        np.testing.assert_array_equal(np.argmax(outputs, axis=-1), expected)
    else:
        assert outputs.shape == (len(obs), 1)
        np.testing.assert_allclose(outputs, expected, atol=1e-5)


def test_export_needs_a_keras_file_name(runs, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["export", "--checkpoint", str(runs["CartPole-v1"]), "--output", str(tmp_path / "p.h5")])
    assert stop.value.code == 2
    assert "must end in .keras" in capsys.readouterr().err


def test_help_says_where_pickle_is_read(capsys):
    for command in ("train", "evaluate", "export", "upgrade-checkpoint"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "use it only on run directories you created" in text  # --resume
    assert "never a pickle" in text and "Never unpickles" in text  # evaluate, export
    assert "raw observations" in text and "argmax" in text  # what the exported model maps


def test_upgrading_a_damaged_old_checkpoint_is_refused_naming_it(tmp_path, capsys):
    legacy = tmp_path / "checkpoints" / "iter_000001" / "state.pkl"
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(pickle.dumps({"envs": None})[:5])  # cut short
    with pytest.raises(SystemExit) as stop:
        main(["upgrade-checkpoint", str(tmp_path)])
    assert stop.value.code == 2 and f"Cannot unpickle '{legacy}'" in capsys.readouterr().err
