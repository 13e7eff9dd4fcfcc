"""Run directories of the trace-norm parser that survive anything (issue 40).

``examples/tracenorm_parser.py`` and :class:`~keras_structured.applications.parsing.tracenorm.HazanTrainer`:
a rerun is checked against the run's ``config.json`` before anything is written; one writer
at a time (``RunLock``); no write follows a symlink planted in the run directory, and no file
is truncated then rewritten; a first step that fails leaves a run that the same command starts
again (and that ``evaluate`` names as incomplete); options that cannot work are refused when
parsed; a non-finite objective or weight stops training with a ``DivergenceError`` naming the
step. Faults are simulated in-process; the real kill, lock and symlink scenarios run under
``-m slow``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest

import keras_structured.applications.parsing.tracenorm.frobenius as frobenius_module
import keras_structured.applications.parsing.tracenorm.hazan as hazan_module
from keras_structured.applications.parsing import tracenorm as tn
from keras_structured.applications.parsing.bilinear_features import featurize
from keras_structured.applications.parsing.conllu_reader import read_conllu
from keras_structured.divergence import DivergenceError
from keras_structured.run_directory import RunLock
from tests.test_tracenorm import CLI, ROOT, SAMPLE, cli_module, write_tiny_treebank

#: The small settings of ``train`` (options given after them override them).
TRAIN = ["--steps", "3", "--dim", "16", "--loss", "hinge", "--C", "2"]
#: The small settings of ``frobenius``.
FROBENIUS = ["--steps", "2", "--dim", "8"]


class Killed(BaseException):
    """A process killed at this point, simulated in-process (no ``except Exception`` catches it)."""


@pytest.fixture(scope="module")
def cli():
    return cli_module()


@pytest.fixture
def treebank(tmp_path):
    return write_tiny_treebank(tmp_path / "treebank")


@pytest.fixture
def precious(tmp_path):
    """A file outside the run directory that a planted symlink points to."""
    target = tmp_path / "precious.txt"
    target.write_text("precious")
    return target


def _train(cli, treebank: pathlib.Path, logdir: pathlib.Path, *options: str) -> int:
    """``train`` with the small settings (``options`` override them)."""
    return cli.main(["train", "--treebank", str(treebank), *TRAIN, "--logdir", str(logdir), *options])


def _steps(logdir: pathlib.Path) -> list[int]:
    """The steps recorded in ``progress.csv``."""
    with open(logdir / "progress.csv", newline="") as handle:
        return [int(row["step"]) for row in csv.DictReader(handle)]


# ---------------------------------------------------------------------------------------
# 1. A rerun is checked against the stored config before anything is written


def test_refused_rerun_leaves_the_config_as_it_was(cli, treebank, tmp_path):
    logdir = tmp_path / "run"
    assert _train(cli, treebank, logdir) == 0
    stored = (logdir / "config.json").read_bytes()
    with pytest.raises(SystemExit) as refused:
        _train(cli, treebank, logdir, "--C", "3", "--dim", "32")
    message = str(refused.value)
    assert "'C': (2.0, 3.0)" in message and "'dim': (16, 32)" in message and "stored, given" in message
    assert (logdir / "config.json").read_bytes() == stored


@pytest.mark.parametrize(
    "options, name",
    [
        (["--treebank", "OTHER"], "treebank"),
        (["--max-train-sentences", "10"], "max_train_sentences"),
        (["--max-dev-sentences", "3"], "max_dev_sentences"),
        (["--lam", "0.5"], "lam"),
        (["--seed", "1"], "seed"),
        (["--steps", "2"], "steps"),  # fewer than the run has taken
    ],
)
def test_rerun_on_other_data_or_settings_is_refused(cli, treebank, tmp_path, options, name):
    logdir = tmp_path / "run"
    assert _train(cli, treebank, logdir) == 0
    other = shutil.copytree(treebank, tmp_path / "other")  # the same sentences, another treebank
    options = [str(other) if option == "OTHER" else option for option in options]
    stored = (logdir / "config.json").read_bytes()
    with pytest.raises(SystemExit, match=f"'{name}': "):
        _train(cli, treebank, logdir, *options)
    assert (logdir / "config.json").read_bytes() == stored
    assert _steps(logdir) == [1, 2, 3]


def test_more_steps_extend_the_run_and_drop_its_stale_results(cli, treebank, tmp_path):
    logdir = tmp_path / "run"
    assert _train(cli, treebank, logdir) == 0
    assert cli.main(["evaluate", "--logdir", str(logdir), "--split", "test"]) == 0
    assert _train(cli, treebank, logdir, "--steps", "5", "--eval-every", "5") == 0
    config = json.loads((logdir / "config.json").read_text())
    assert config["hazan"]["steps"] == 5 and config["hazan"]["eval_every"] == 5
    assert json.loads((logdir / "final.json").read_text())["steps"] == 5
    assert _steps(logdir) == [1, 2, 3, 4, 5]
    assert not (logdir / "eval_test.json").exists()  # it scored the model of step 3


def test_a_frobenius_logdir_is_not_continued_by_train(cli, treebank, tmp_path):
    logdir = tmp_path / "run"
    argv = ["frobenius", "--treebank", str(treebank), *FROBENIUS, "--logdir", str(logdir)]
    assert cli.main(argv) == 0
    stored = (logdir / "config.json").read_bytes()
    with pytest.raises(SystemExit, match="'trainer': \\('frobenius', 'hazan'\\)"):
        _train(cli, treebank, logdir, "--dim", "8")
    with pytest.raises(SystemExit, match="'mu': "):
        cli.main([*argv, "--mu", "0.5"])
    assert (logdir / "config.json").read_bytes() == stored


# ---------------------------------------------------------------------------------------
# 2. One writer at a time


@pytest.mark.parametrize("command", ["train", "evaluate", "frobenius", "sweep"])
def test_a_second_writer_is_refused_with_the_holders_pid(cli, treebank, tmp_path, command):
    logdir = tmp_path / "run"
    if command == "evaluate":
        assert _train(cli, treebank, logdir) == 0
    argv = {
        "train": ["train", "--treebank", str(treebank), *TRAIN, "--logdir", str(logdir)],
        "evaluate": ["evaluate", "--logdir", str(logdir)],
        "frobenius": ["frobenius", "--treebank", str(treebank), *FROBENIUS],
        "sweep": ["sweep", "--treebank", str(treebank), *TRAIN[:-2], "--Cs", "1,2"],
    }[command]
    if command in ("frobenius", "sweep"):
        argv += ["--logdir", str(logdir)]
    locked = logdir / "C_2" if command == "sweep" else logdir
    before = sorted(path.name for path in locked.iterdir()) if locked.exists() else []
    with RunLock(locked):
        with pytest.raises(SystemExit, match=f"pid {os.getpid()}"):
            cli.main(argv)
        assert sorted(path.name for path in locked.iterdir()) == sorted({*before, ".lock"})


# ---------------------------------------------------------------------------------------
# 3. No write through a planted symlink, no file truncated then rewritten


@pytest.mark.parametrize(
    "command, name",
    [
        ("train", "config.json"),
        ("train", "progress.csv"),
        ("train", "final.json"),
        ("train", "rank.png"),
        ("evaluate", "eval_dev.json"),
        ("frobenius", "eval_test.json"),
        ("frobenius", "progress.csv"),
        ("sweep", "sweep.csv"),
    ],
)
def test_no_write_follows_a_planted_symlink(cli, treebank, tmp_path, precious, command, name):
    logdir = tmp_path / "run"
    if command == "evaluate":
        assert _train(cli, treebank, logdir) == 0
    logdir.mkdir(exist_ok=True)
    (logdir / name).symlink_to(precious)
    argv = {
        "train": ["train", "--treebank", str(treebank), *TRAIN],
        "evaluate": ["evaluate"],
        "frobenius": ["frobenius", "--treebank", str(treebank), *FROBENIUS],
        "sweep": ["sweep", "--treebank", str(treebank), *TRAIN[:-2], "--Cs", "2"],
    }[command]
    with pytest.raises(SystemExit, match=name):
        cli.main([*argv, "--logdir", str(logdir)])
    assert precious.read_bytes() == b"precious"


def test_checkpoint_is_not_written_through_a_planted_temporary_name(cli, treebank, tmp_path, precious):
    logdir = tmp_path / "run"
    logdir.mkdir()
    (logdir / "checkpoint.npz.tmp").symlink_to(precious)  # the name of the former temporary file
    assert _train(cli, treebank, logdir) == 0
    assert precious.read_bytes() == b"precious"
    assert tn.load_checkpoint(logdir / tn.CHECKPOINT_NAME)[1] == 3


class _KilledCSVWriter:
    """A ``csv.writer`` killed (:class:`Killed`) when it is given the rows (after the header)."""

    def __init__(self, writer):
        self._writer = writer

    def writerow(self, row):
        return self._writer.writerow(row)

    def writerows(self, rows):
        raise Killed


def test_a_crash_while_progress_csv_is_rewritten_keeps_its_rows(cli, treebank, tmp_path, monkeypatch):
    logdir = tmp_path / "run"
    assert _train(cli, treebank, logdir) == 0
    original = csv.writer
    with monkeypatch.context() as patch:  # killed in the first write of the log of the resumed run
        patch.setattr(csv, "writer", lambda *args, **kwargs: _KilledCSVWriter(original(*args, **kwargs)))
        with pytest.raises(Killed):
            _train(cli, treebank, logdir, "--steps", "5")
    assert _steps(logdir) == [1, 2, 3]
    assert _train(cli, treebank, logdir, "--steps", "5") == 0
    assert _steps(logdir) == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------------------------------
# 4. A failed first step leaves no dead run directory


def test_a_killed_first_step_leaves_a_run_that_the_same_command_starts_again(
    cli, treebank, tmp_path, monkeypatch, capsys
):
    logdir = tmp_path / "run"

    def killed(trainer):
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(tn.HazanTrainer, "step", killed)
        with pytest.raises(Killed):
            _train(cli, treebank, logdir)
    assert (logdir / "config.json").is_file() and not (logdir / tn.CHECKPOINT_NAME).exists()
    with pytest.raises(SystemExit, match=r"incomplete run.*rm -r"):
        cli.main(["evaluate", "--logdir", str(logdir)])
    with pytest.raises(SystemExit, match=r"incomplete run.*'C': \(2.0, 3.0\).*rm -r"):
        _train(cli, treebank, logdir, "--C", "3")
    assert _train(cli, treebank, logdir) == 0
    assert "starting it again" in capsys.readouterr().err
    assert _steps(logdir) == [1, 2, 3]
    assert json.loads((logdir / "final.json").read_text())["steps"] == 3


# ---------------------------------------------------------------------------------------
# Gold trees are checked by the CoNLL-U reader, before a run is started


def test_gold_heads_that_are_not_a_tree_are_refused_before_anything_is_written(cli, treebank, tmp_path):
    train = next(treebank.glob("*-ud-train.conllu"))
    lines = train.read_text().split("\n")
    first = next(number for number, line in enumerate(lines) if line[:1].isdigit())
    columns = lines[first].split("\t")
    columns[6] = columns[0]  # the first word heads itself
    lines[first] = "\t".join(columns)
    train.write_text("\n".join(lines))
    logdir = tmp_path / "run"
    with pytest.raises(ValueError, match=f"{train}:{first + 1}.*not form a dependency tree"):
        _train(cli, treebank, logdir)
    assert not logdir.exists()  # nothing written; the lock took its folder away with it


# ---------------------------------------------------------------------------------------
# 5. Options that cannot work are refused when parsed


@pytest.mark.parametrize(
    "command, option, value",
    [
        ("train", "--C", "inf"),
        ("train", "--C", "nan"),
        ("train", "--C", "0"),
        ("train", "--lam", "-1"),
        ("train", "--steps", "0"),
        ("train", "--dim", "0"),
        ("train", "--seed", "-1"),
        ("train", "--batch-size", "0"),
        ("train", "--max-train-sentences", "-3"),
        ("train", "--max-dev-sentences", "0"),
        ("train", "--checkpoint-every", "0"),
        ("train", "--eval-every", "-1"),
        ("train", "--compress-every", "-1"),
        ("train", "--svd-tol", "nan"),
        ("train", "--time-limit", "inf"),
        ("train", "--time-limit", "-1"),
        ("sweep", "--Cs", "1,inf"),
        ("sweep", "--Cs", "0,1"),
        ("sweep", "--Cs", "1,1.0000001"),  # both would be trained into C_1
        ("frobenius", "--mu", "inf"),
        ("frobenius", "--mu", "-1"),
        ("frobenius", "--learning-rate", "inf"),
        ("frobenius", "--learning-rate", "0"),
        ("frobenius", "--steps", "0"),
        ("frobenius", "--dim", "0"),
        ("frobenius", "--seed", "-1"),
        ("frobenius", "--batch-size", "0"),
        ("frobenius", "--max-train-sentences", "-1"),
    ],
)
def test_options_that_cannot_work_are_refused_when_parsed(cli, tmp_path, capsys, command, option, value):
    logdir = tmp_path / "run"
    with pytest.raises(SystemExit) as refused:
        cli.main([command, "--treebank", str(tmp_path / "missing"), "--logdir", str(logdir), option, value])
    assert refused.value.code == 2
    assert f"argument {option}: " in capsys.readouterr().err
    assert not logdir.exists()


# ---------------------------------------------------------------------------------------
# 6. Divergence is an error, and the run is not finished


@pytest.fixture(scope="module")
def small():
    return featurize(read_conllu(SAMPLE)[:8], dim=10)


def _poison(monkeypatch, module, name: str, call: int, replace: Callable):
    """Make the ``call``-th call (from 1) of ``module.name`` return ``replace(result)``."""
    original, calls = getattr(module, name), []

    def poisoned(*args, **kwargs):
        result = original(*args, **kwargs)
        calls.append(call)
        return replace(result) if len(calls) == call else result

    monkeypatch.setattr(module, name, poisoned)


def _nan_atom_at_step(monkeypatch, step: int) -> None:
    """The linear step of Frank-Wolfe step ``step`` gets NaN distance weights: the weights become NaN."""
    nan_weights = lambda atom: dataclasses.replace(  # noqa: E731
        atom, distance_weights=np.full_like(atom.distance_weights, np.nan)
    )
    _poison(monkeypatch, hazan_module, "linear_minimizer", step, nan_weights)


def test_non_finite_weights_stop_training_at_their_step(small, tmp_path, monkeypatch):
    _nan_atom_at_step(monkeypatch, 3)
    trainer = tn.HazanTrainer(small, tn.HazanConfig(C=2.0, steps=5, checkpoint_every=1), logdir=tmp_path)
    with pytest.raises(DivergenceError, match=r"step 3.*last good checkpoint, step 2"):
        trainer.train()
    assert tn.load_checkpoint(tmp_path / tn.CHECKPOINT_NAME)[1] == 2
    assert len(trainer.history) == 2 and _steps(tmp_path) == [1, 2]


def test_cli_divergence_exits_with_an_error_and_no_final_json(cli, treebank, tmp_path, monkeypatch, capsys):
    _nan_atom_at_step(monkeypatch, 3)
    logdir = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        _train(cli, treebank, logdir, "--checkpoint-every", "1")
    assert stopped.value.code == 1
    assert "Training stopped" in (err := capsys.readouterr().err) and "step 3" in err
    assert not (logdir / "final.json").exists()
    assert _steps(logdir) == [1, 2] and tn.load_checkpoint(logdir / tn.CHECKPOINT_NAME)[1] == 2


def _nan_gradient_at_step(monkeypatch, step: int) -> None:
    nan_gradient = lambda result: dataclasses.replace(  # noqa: E731
        result, grad_distance_weights=np.full_like(result.grad_distance_weights, np.nan)
    )
    _poison(monkeypatch, frobenius_module, "objective_gradient", step, nan_gradient)


def test_frobenius_divergence_is_an_error_not_a_result(cli, treebank, small, tmp_path, monkeypatch, capsys):
    _nan_gradient_at_step(monkeypatch, 2)  # the last step: the loop ends with NaN weights
    with pytest.raises(DivergenceError, match="after step 2"):
        tn.train_frobenius(small, tn.FrobeniusConfig(steps=2))
    _nan_gradient_at_step(monkeypatch, 2)
    logdir = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        cli.main(["frobenius", "--treebank", str(treebank), *FROBENIUS, "--logdir", str(logdir)])
    assert stopped.value.code == 1 and "step 2" in capsys.readouterr().err
    assert not any((logdir / name).exists() for name in ("final.json", "eval_dev.json", "eval_test.json"))


# ---------------------------------------------------------------------------------------
# Real processes: kill -9, a second writer, a planted symlink


def _command(*argv: str) -> list[str]:
    return [sys.executable, str(CLI), *argv]


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(_command(*argv), cwd=ROOT, capture_output=True, text=True, timeout=300)


def _wait_for_steps(logdir: pathlib.Path, process: subprocess.Popen, steps: int) -> None:
    """Wait until ``progress.csv`` records ``steps`` steps (the process still running)."""
    deadline = time.monotonic() + 240
    while not ((logdir / "progress.csv").is_file() and len(_steps(logdir)) >= steps):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.2)


def _long_train(treebank: pathlib.Path, logdir: pathlib.Path) -> list[str]:
    """A ``train`` that runs until it is killed (or after 3 minutes)."""
    settings = ["--dim", "16", "--C", "2", "--steps", "100000"]
    return ["train", "--treebank", str(treebank), *settings, "--logdir", str(logdir)]


@pytest.mark.slow
def test_real_second_writer_is_refused_and_a_killed_writers_lock_is_taken_over(treebank, tmp_path):
    logdir = tmp_path / "run"
    argv = _long_train(treebank, logdir)
    first = subprocess.Popen(_command(*argv, "--time-limit", "3"), cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        _wait_for_steps(logdir, first, 2)
        second = _run(*argv, "--time-limit", "0.01")
        assert second.returncode != 0 and f"pid {first.pid}" in second.stderr, second.stderr
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    third = _run(*argv, "--time-limit", "0.01")  # takes the dead writer's lock over and resumes
    assert third.returncode == 0, third.stderr
    assert f"pid {first.pid}" in third.stderr
    steps = _steps(logdir)
    assert steps == list(range(1, len(steps) + 1))
    assert tn.load_checkpoint(logdir / tn.CHECKPOINT_NAME)[1] == len(steps)


@pytest.mark.slow
def test_real_kill_before_the_first_checkpoint_leaves_a_run_that_restarts(treebank, tmp_path):
    logdir = tmp_path / "run"
    argv = [*_long_train(treebank, logdir), "--checkpoint-every", "100000"]
    first = subprocess.Popen(_command(*argv, "--time-limit", "3"), cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        _wait_for_steps(logdir, first, 2)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert not (logdir / tn.CHECKPOINT_NAME).exists()
    evaluate = _run("evaluate", "--logdir", str(logdir))
    assert evaluate.returncode != 0 and "incomplete run" in evaluate.stderr and "rm -r" in evaluate.stderr
    again = _run(*argv, "--time-limit", "0.01")
    assert again.returncode == 0, again.stderr
    assert "starting it again" in again.stderr
    steps = _steps(logdir)
    assert steps == list(range(1, len(steps) + 1))
    assert tn.load_checkpoint(logdir / tn.CHECKPOINT_NAME)[1] == len(steps)


@pytest.mark.slow
def test_real_evaluate_refuses_a_planted_symlink(cli, treebank, tmp_path, precious):
    logdir = tmp_path / "run"
    assert _train(cli, treebank, logdir) == 0
    (logdir / "eval_dev.json").symlink_to(precious)
    evaluate = _run("evaluate", "--logdir", str(logdir))
    assert evaluate.returncode != 0 and "symlink" in evaluate.stderr
    assert precious.read_bytes() == b"precious"
