"""``python -m rl``: train (CartPole, Pendulum), evaluate, plot, resume, errors.

The resume of a run (``train --resume``) and ``--help`` run in subprocesses, as a user runs
them; the other commands call the same ``main`` in this process (TensorFlow is imported
already, and ``python -m rl`` exits with ``main``'s status)."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl.cli import main
from rl.logger import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--set", "update_epochs=2", "--set", "distill_epochs=2", "--quiet"]


def _run(*args, check=True):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-m", "rl", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def _rows(logdir):
    with (Path(logdir) / "progress.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """CartPole and Pendulum runs trained by ``main`` (``test_plot_and_resume`` resumes CartPole's
    in a subprocess)."""
    root = tmp_path_factory.mktemp("cli")
    logdirs = {}
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        logdirs[env_id] = root / f"{env_id}__projected__s0"
        arguments = ["train", "--env", env_id, "--steps", "2000", "--logdir", str(logdirs[env_id])]
        assert main([*arguments, *FAST]) == 0
    return logdirs


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_train_writes_the_contract(runs, env_id):
    logdir = runs[env_id]
    rows = _rows(logdir)
    assert rows and set(COLUMNS) <= set(rows[0])
    assert int(rows[-1]["global_step"]) >= 2000
    assert [int(r["iteration"]) for r in rows] == list(range(1, len(rows) + 1))
    assert (logdir / "config.json").is_file()
    assert any(p.name.startswith("events.out.tfevents") for p in logdir.iterdir())
    assert (logdir / "checkpoints").is_dir()


# Pendulum under -m slow: tests/test_rl_checkpoint_safety.py loads and runs Gaussian policies.
@pytest.mark.parametrize("env_id", ["CartPole-v1", pytest.param("Pendulum-v1", marks=pytest.mark.slow)])
def test_evaluate_json(runs, env_id, capsys):
    assert main(["evaluate", "--checkpoint", str(runs[env_id]), "--episodes", "2", "--json"]) == 0
    values = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(values) == {"deterministic_mean", "deterministic_std", "stochastic_mean", "stochastic_std"}


def test_plot_and_resume(runs, tmp_path):
    output = tmp_path / "curves.png"
    assert main(["plot", str(runs["CartPole-v1"]), str(runs["Pendulum-v1"]), "--output", str(output)]) == 0
    assert output.stat().st_size > 1000
    logdir = runs["CartPole-v1"]
    before = len(_rows(logdir))
    result = _run("train", "--resume", "--logdir", str(logdir), "--steps", "3000", "--quiet")
    assert len(_rows(logdir)) > before
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["global_step"] == 3072  # rounded up to whole batches of 512
    assert json.loads((logdir / "config.json").read_text())["total_steps"] == 3000  # the budget is recorded


@pytest.mark.slow  # ~25 s; tests/test_rl_vector.py covers async and sync resume in the default suite
def test_any_env_async_then_resumed_sync(tmp_path):
    logdir = tmp_path / "mountain_car"
    result = _run(
        "train",
        "--env",
        "MountainCar-v0",
        "--steps",
        "1024",
        "--vector",
        "async",
        "--logdir",
        str(logdir),
        *FAST,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1])["global_step"] == 1024
    assert json.loads((logdir / "config.json").read_text())["vector"] == "async"
    result = _run(
        "train", "--resume", "--logdir", str(logdir), "--steps", "1536", "--vector", "sync", "--quiet"
    )
    assert json.loads(result.stdout.strip().splitlines()[-1])["global_step"] == 1536
    assert [int(r["iteration"]) for r in _rows(logdir)] == [1, 2, 3]


def test_errors_exit_before_training(tmp_path, capsys):
    """Exit status 2 and the message (``python -m rl`` exits with ``main``'s status)."""
    with pytest.raises(SystemExit) as stop:
        main(["train", "--env", "MountainCarContinuous-v9", "--logdir", str(tmp_path / "x")])
    stderr = capsys.readouterr().err
    assert stop.value.code == 2 and "MountainCarContinuous-v9" in stderr and "doesn't exist" in stderr
    with pytest.raises(SystemExit) as stop:
        main(["train", "--env", "CartPole-v1", "--kl-bound", "-1", "--logdir", str(tmp_path / "x")])
    stderr = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --kl-bound: must be a finite number > 0" in stderr
    assert not (tmp_path / "x").exists()
    assert _run("--help").returncode == 0
