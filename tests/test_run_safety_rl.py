"""Issue 40, the RL part: run directories that survive anything.

A crash while ``--resume`` rewrites the log keeps every row, and a row torn by a crash is
dropped when read; one process writes a logdir at a time (a second one is refused with the
holder's pid); nothing is written through a symlink; ``state.json`` is validated against the
checkpoint's name, its arrays and the run's config; options that cannot work are refused when
parsed; a run whose state becomes non-finite stops with a :class:`DivergenceError` and writes
no checkpoint of it; a run whose first iteration failed names its remedy. Faults are simulated
in-process here; the real kills and the real second process are under ``-m slow``.
"""

import csv
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

from keras_structured.divergence import DivergenceError
from keras_structured.run_directory import LOCK_FILE, RunLock, RunLockedError
from rl.algorithms import make_trainer
from rl.algorithms.base import Trainer
from rl.checkpoint import STATE_FILE, CheckpointError, checkpoint_dirs
from rl.cli import build_parser, main
from rl.config import TrainConfig, default_config
from rl.logger import read_progress
from rl.run_dir import check_new_run, last_row, run_files
from tests.test_rl_cli import ROOT

# CartPole batches of 2 x 128 steps, one quick pass per update, a checkpoint after every iteration.
FAST = dict(
    num_envs=2, num_steps=128, minibatch_size=64, update_epochs=1, distill_epochs=1, checkpoint_every=1
)
BATCH = 256
STEPS = 3 * BATCH  # 3 iterations: checkpoints iter_000002 and iter_000003 are kept
CLI_FAST = [
    "--num-envs",
    "2",
    *("--set", "num_steps=128", "--set", "minibatch_size=64", "--set", "update_epochs=1"),
    *("--set", "distill_epochs=1", "--set", "checkpoint_every=1", "--quiet"),
]


class HugeRewards(gym.Env):
    """Rewards of 1e200: the running std of the return overflows to inf, while the scaled rewards
    (0), the losses and the weights stay finite: a silently useless run without the check."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1e200, False, self.t >= 10, {}


gym.register("HugeRewards-v0", HugeRewards)
HUGE_REWARDS = f"{__name__}:HugeRewards-v0"


class SimulatedCrash(BaseException):
    """Stands for the process being killed at that moment: nothing catches it."""


def _config(logdir, **overrides):
    return default_config(
        "CartPole-v1", "projected", logdir=str(logdir), **{**FAST, "total_steps": STEPS, **overrides}
    )


def _train(logdir, **overrides):
    trainer = make_trainer(_config(logdir, **overrides))
    try:
        trainer.train()
    finally:
        trainer.close()


def _trainer_of(logdir, **overrides):
    """A trainer of the run in ``logdir`` (its config.json, then ``overrides``), not restored."""
    config = TrainConfig.load(logdir / "config.json")
    config.logdir = str(logdir)
    for name, value in overrides.items():
        setattr(config, name, value)
    return make_trainer(config)


def _rows(logdir):
    """The rows of progress.csv, read plainly (not by the readers under test)."""
    with (logdir / "progress.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def _iterations(logdir):
    return [int(row["iteration"]) for row in _rows(logdir)]


def _files(logdir):
    """Every file of a run directory but its lock, with its bytes."""
    found = sorted(p for p in logdir.rglob("*") if p.is_file() and p.name != LOCK_FILE)
    return {str(p.relative_to(logdir)): p.read_bytes() for p in found}


def _resume(logdir, iterations=4):
    return ["train", "--resume", "--logdir", str(logdir), "--steps", str(iterations * BATCH), "--quiet"]


def _refused(argv, capsys, code=2):
    """Runs ``python -m rl ARGV`` in-process; returns its error message after checking its status."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == code
    return capsys.readouterr().err


def _edit_state(checkpoint, **changes):
    path = checkpoint / STATE_FILE
    metadata = json.loads(path.read_text())
    metadata["state"].update(changes)
    path.write_text(json.dumps(metadata))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("safety_rl") / "run"
    _train(logdir)
    return logdir


@pytest.fixture
def run(finished, tmp_path):
    logdir = tmp_path / "run"
    shutil.copytree(finished, logdir)
    return logdir


# ------------------------------------------------------------------ 1. whole files, torn rows
def _crash_when_writing(monkeypatch, name):
    """Kills the process (:class:`SimulatedCrash`) the moment it has opened for writing a file
    whose name contains ``name``: a file opened with ``"w"`` is then already truncated."""
    real_open = pathlib.Path.open

    def open_then_crash(self, mode="r", *args, **kwargs):
        handle = real_open(self, mode, *args, **kwargs)
        if name in self.name and any(flag in mode for flag in "wax+"):
            handle.close()
            raise SimulatedCrash(f"killed while writing {self}")
        return handle

    monkeypatch.setattr(pathlib.Path, "open", open_then_crash)


def test_a_crash_while_resume_rewrites_the_log_keeps_every_row(run, monkeypatch):
    before = (run / "progress.csv").read_bytes()
    shutil.rmtree(checkpoint_dirs(run)[-1])  # resume from iteration 2: the log is rewritten without row 3
    trainer = _trainer_of(run)
    trainer.restore(checkpoint_dirs(run)[-1])
    _crash_when_writing(monkeypatch, "progress")
    with pytest.raises(SimulatedCrash):
        trainer.train()
    trainer.close()
    monkeypatch.undo()
    assert (run / "progress.csv").read_bytes() == before
    assert not [p.name for p in run.iterdir() if ".tmp" in p.name]  # no temporary file left
    assert main(_resume(run)) == 0
    assert _iterations(run) == [1, 2, 3, 4]


def test_a_torn_last_row_is_dropped_by_the_readers_and_by_resume(run):
    with (run / "progress.csv").open("ab") as handle:
        handle.write(b"10")  # a 4th row cut short by a crash (it would read as global_step 10)
    assert [row["iteration"] for row in read_progress(run)] == [1, 2, 3]
    assert last_row(run)["global_step"] == STEPS
    assert main(_resume(run)) == 0
    assert _iterations(run) == [1, 2, 3, 4]
    text = (run / "progress.csv").read_text()
    assert text.endswith("\n") and "\n\n" not in text.replace("\r", "")


def test_resume_refuses_a_log_that_lost_rows_and_changes_nothing(run, capsys):
    lines = (run / "progress.csv").read_bytes().splitlines(keepends=True)
    (run / "progress.csv").write_bytes(b"".join(lines[:2]))  # rows 2 and 3 lost
    before = _files(run)
    error = _refused(_resume(run), capsys)
    assert "progress.csv" in error and "iteration" in error
    assert _files(run) == before


@pytest.mark.parametrize("name", ["progress.csv", "config.json"])
def test_resume_writes_nothing_through_a_symlink(run, tmp_path, name, capsys):
    victim = tmp_path / f"victim_{name}"
    (run / name).rename(victim)
    (run / name).symlink_to(victim)
    before = victim.read_bytes()
    error = _refused(_resume(run), capsys)
    assert "symlink" in error and name in error
    assert victim.read_bytes() == before


@pytest.mark.parametrize("command, name", [("export", "policy.keras"), ("plot", "curves.png")])
def test_export_and_plot_refuse_a_symlinked_output(finished, tmp_path, command, name, capsys):
    victim, link = tmp_path / "victim", tmp_path / name
    victim.write_text("precious")
    link.symlink_to(victim)
    source = ["--checkpoint", str(finished)] if command == "export" else [str(finished)]
    error = _refused([command, *source, "--output", str(link)], capsys)
    assert "symlink" in error
    assert victim.read_text() == "precious"


# ------------------------------------------------------------------------------- 2. the lock
def test_train_refuses_a_logdir_another_writer_holds_naming_its_pid(run, tmp_path, capsys):
    before = _files(run)
    empty = tmp_path / "empty"
    with RunLock(run), RunLock(empty):
        for argv in (
            _resume(run),
            ["train", "--logdir", str(run), "--overwrite", "--steps", str(BATCH), *CLI_FAST],
            ["train", "--logdir", str(empty), "--steps", str(BATCH), *CLI_FAST],
        ):
            error = _refused(argv, capsys)
            assert f"pid {os.getpid()}" in error, argv
    assert _files(run) == before
    assert _files(empty) == {}


def test_the_library_trainer_holds_the_lock_while_it_trains(tmp_path, monkeypatch):
    logdir = tmp_path / "run"
    trainer = make_trainer(_config(logdir, total_steps=BATCH))
    collect, checked = trainer._collect, []

    def collect_while_locked():
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            RunLock(logdir).acquire()
        checked.append(trainer.iteration)
        return collect()

    monkeypatch.setattr(trainer, "_collect", collect_while_locked)
    trainer.train()
    trainer.close()
    assert checked == [1]

    other = tmp_path / "other"
    second = make_trainer(_config(other, total_steps=BATCH))
    with RunLock(other), pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
        second.train()
    second.close()
    assert _files(other) == {}  # nothing written
    with RunLock(logdir) as lock:  # released when training ended
        assert lock.held


def test_the_lock_file_is_not_part_of_the_run(run, tmp_path):
    with RunLock(run):
        assert LOCK_FILE not in [path.name for path in run_files(run)]
    assert not (run / LOCK_FILE).exists()  # deleted when the lock is released
    assert main(["train", "--logdir", str(run), "--overwrite", "--steps", str(BATCH), *CLI_FAST]) == 0
    assert not (run / LOCK_FILE).exists() and _iterations(run) == [1]
    only_a_lock = tmp_path / "refused"
    RunLock(only_a_lock).acquire().release()
    check_new_run(only_a_lock, overwrite=False)  # not a run: a new one may start there


# ------------------------------------------------------------------- 3, 4. state.json is data
@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(iteration=2), r"iteration must be 3 .*iter_000003.*Received: iteration=2"),
        (dict(iteration=2, global_step=2 * BATCH), r"iter_000003.*Received: iteration=2"),
        (dict(iteration="3"), r"iteration must be an integer.*Received: iteration='3'"),
        (dict(iteration=3.0), r"Received: iteration=3\.0"),
        (dict(global_step=-BATCH), rf"global_step must be {STEPS}.*Received: global_step=-{BATCH}"),
        (dict(global_step=STEPS + 1), rf"Received: global_step={STEPS + 1}"),
    ],
)
def test_an_edited_state_json_is_refused_and_nothing_is_written(run, changes, message, capsys):
    _edit_state(checkpoint_dirs(run)[-1], **changes)
    before = _files(run)
    error = _refused(_resume(run), capsys)
    assert STATE_FILE in error
    assert re.search(message, error), error
    assert _files(run) == before


def test_a_checkpoint_copied_from_a_run_with_another_seed_is_refused(run, tmp_path, capsys):
    other = tmp_path / "seed1"
    _train(other, seed=1)
    newest = checkpoint_dirs(run)[-1]
    shutil.rmtree(newest)
    shutil.copytree(checkpoint_dirs(other)[-1], newest)
    before = _files(run)
    error = _refused(_resume(run), capsys)
    assert "seed=1" in error and "this run: 0" in error
    assert _files(run) == before


def test_a_state_json_made_consistent_with_a_renamed_checkpoint_is_refused_by_its_arrays(run):
    renamed = checkpoint_dirs(run)[-1].parent / "iter_000005"
    checkpoint_dirs(run)[-1].rename(renamed)
    _edit_state(renamed, iteration=5, global_step=5 * BATCH)
    trainer = _trainer_of(run, total_steps=6 * BATCH)
    message = r"policy_optimizer took 12 steps, those of 3 iterations.*Received: iteration=5"
    with pytest.raises(CheckpointError, match=message):
        trainer.restore(renamed)
    assert trainer.iteration == 0  # nothing restored
    trainer.close()


def test_checkpoints_without_the_recorded_settings_still_resume(run):
    for checkpoint in checkpoint_dirs(run):
        path = checkpoint / STATE_FILE
        metadata = json.loads(path.read_text())
        metadata["state"].pop("settings", None)
        path.write_text(json.dumps(metadata))
    assert main(_resume(run)) == 0
    assert _iterations(run) == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "changes",
    [
        dict(rng=5),
        dict(rng={"bit_generator": "PCG64"}),
        dict(
            rng={"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}, "has_uint32": 0, "uinteger": 0}
        ),
        dict(rng={"bit_generator": "MT19937", "state": {"key": [1, 2], "pos": 0}}),
        dict(schedule={"initial": "x", "start": 5}),
        dict(schedule={"initial": 0.5, "start": [7, 0.4]}),
    ],
    ids=["number", "no-state", "bad-state", "other-generator", "schedule", "schedule-from-the-future"],
)
def test_a_malformed_rng_or_schedule_state_is_a_checkpoint_error(run, changes):
    checkpoint = checkpoint_dirs(run)[-1]
    _edit_state(checkpoint, **changes)
    trainer = _trainer_of(run)
    with pytest.raises(CheckpointError, match=rf"{STATE_FILE}.*{next(iter(changes))}"):
        trainer.restore(checkpoint)
    assert trainer.iteration == 0  # nothing restored
    trainer.close()


# --------------------------------------------------------------- 5. options refused when parsed
@pytest.mark.parametrize(
    "argv, option",
    [
        (["train", "--seed", "-1"], "--seed"),
        (["train", "--steps", "0"], "--steps"),
        (["train", "--steps", "-512"], "--steps"),
        (["train", "--num-envs", "0"], "--num-envs"),
        (["train", "--kl-bound", "inf"], "--kl-bound"),
        (["train", "--kl-bound", "0"], "--kl-bound"),
        (["train", "--entropy-bound", "nan"], "--entropy-bound"),
        (["evaluate", "--checkpoint", "x", "--episodes", "0"], "--episodes"),
        (["evaluate", "--checkpoint", "x", "--seed", "-1"], "--seed"),
    ],
)
def test_options_that_cannot_work_are_refused_when_parsed(argv, option, capsys):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {option}: " in error and "Received: " in error


@pytest.mark.parametrize(
    "setting", ["seed=-1", "hidden_sizes=0", "obs_norm_warmup_steps=-1", "policy_lr=inf", "entropy_decay=nan"]
)
def test_settings_that_cannot_work_are_refused_naming_the_field(tmp_path, setting, capsys):
    field = setting.partition("=")[0]
    error = _refused(["train", "--set", setting, "--logdir", str(tmp_path / "run")], capsys)
    assert f"{field} must be" in error and f"Received: {field}=" in error
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------ 6. divergence
def test_non_finite_weights_stop_with_a_divergence_error_and_no_checkpoint_of_them(tmp_path):
    logdir = tmp_path / "run"
    trainer = make_trainer(_config(logdir, total_steps=BATCH))
    trainer.train()
    kernel = trainer.policy.variables[0]
    kernel.assign(np.full(kernel.shape, np.nan, np.float32))
    trainer.config.total_steps = STEPS
    with pytest.raises(DivergenceError, match=r"iteration 2\b.*iter_000001"):
        trainer.train()
    trainer.close()
    assert [p.name for p in checkpoint_dirs(logdir)] == ["iter_000001"]
    assert _iterations(logdir) == [1]  # the diverged iteration is not logged


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the running variance
def test_non_finite_running_statistics_stop_the_command_line_before_a_checkpoint(tmp_path, capsys):
    logdir = tmp_path / "run"
    argv = ["train", "--env", HUGE_REWARDS, "--logdir", str(logdir), "--steps", str(STEPS), *CLI_FAST]
    error = _refused([*argv, "--set", "normalize_rewards=true"], capsys, code=1)
    assert "diverged" in error and "iteration 1" in error and "reward_scaler" in error
    assert checkpoint_dirs(logdir) == [] and _rows(logdir) == []


# ---------------------------------------------------------------- 7. a failed first iteration
def test_a_failed_first_iteration_leaves_a_run_named_incomplete_with_its_remedy(
    tmp_path, monkeypatch, capsys
):
    logdir = tmp_path / "run"
    argv = ["train", "--logdir", str(logdir), "--steps", str(BATCH), *CLI_FAST]

    def killed(self):
        raise SimulatedCrash("killed during the first iteration")

    monkeypatch.setattr(Trainer, "_collect", killed)
    with pytest.raises(SimulatedCrash):
        main(argv)
    monkeypatch.undo()
    assert (logdir / "config.json").is_file() and checkpoint_dirs(logdir) == []
    for extra in ([], ["--resume"]):
        error = _refused([*argv, *extra], capsys)
        assert "no checkpoint" in error.lower() and "--overwrite" in error, error
        assert "--resume to continue" not in error
    assert main([*argv, "--overwrite"]) == 0
    assert _iterations(logdir) == [1]


# --------------------------------------------------------------- real processes (-m slow)
def _environment():
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}


def _start(*argv):
    return subprocess.Popen(
        [sys.executable, "-m", "rl", *argv],
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(condition, timeout=300.0, poll=0.001):
    """Polls ``condition()`` until it is true (fails after ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(poll)


def _kill_when(process, condition):
    """Kills ``process`` (SIGKILL) as soon as ``condition()`` holds; fails if it ended first."""
    try:
        _wait_for(lambda: condition() or process.poll() is not None)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, process.stderr.read()[-3000:]


def _assert_whole_log(logdir):
    """progress.csv reads, with rows 1..n in order, no blank line, and every checkpoint logged."""
    text = (logdir / "progress.csv").read_text()
    complete = text[: text.rfind("\n") + 1]  # a last row torn by the kill is dropped when read
    assert "\n\n" not in complete.replace("\r", "")
    iterations = [int(row["iteration"]) for row in read_progress(logdir)]
    assert iterations == list(range(1, len(iterations) + 1))
    newest = checkpoint_dirs(logdir)[-1].name
    assert len(iterations) >= int(newest.removeprefix("iter_")), (iterations, newest)


@pytest.mark.slow
def test_two_train_processes_on_one_logdir_one_is_refused_with_the_others_pid(tmp_path):
    logdir = tmp_path / "run"
    argv = ["train", "--logdir", str(logdir), "--steps", str(400 * BATCH), *CLI_FAST]
    first, second = _start(*argv), _start(*argv)  # fresh runs started together
    try:
        _wait_for(lambda: first.poll() is not None or second.poll() is not None)
        loser, winner = (first, second) if first.poll() is not None else (second, first)
        assert loser.wait() == 2 and winner.poll() is None
        assert f"pid {winner.pid}" in loser.stderr.read()
        _wait_for(lambda: (logdir / "progress.csv").is_file() and len(_rows(logdir)) >= 2)
        for extra in (["--resume"], ["--overwrite"]):  # while it trains
            other = _start(*argv, *extra)
            assert other.wait(timeout=300) == 2
            assert f"pid {winner.pid}" in other.stderr.read()
    finally:
        for process in (first, second):
            process.kill()
            process.wait()
    _assert_whole_log(logdir)
    newest = int(checkpoint_dirs(logdir)[-1].name.removeprefix("iter_"))
    after = _start(*_resume(logdir, newest + 1))  # takes over the dead process's lock
    assert after.wait(timeout=300) == 0, after.stderr.read()[-3000:]
    assert _iterations(logdir) == list(range(1, newest + 2))


def _log_replaced(logdir):
    """A condition: progress.csv was replaced (or truncated, or resized) since now."""
    path = logdir / "progress.csv"
    before = path.stat()

    def replaced():
        now = path.stat()
        return (now.st_ino, now.st_size) != (before.st_ino, before.st_size)

    return replaced


def _row_appended(logdir):
    """A condition: progress.csv has more rows than now."""
    rows = len(_rows(logdir))
    return lambda: len(_rows(logdir)) > rows


def _checkpoint_being_written(logdir):
    """A condition: a checkpoint is being written (its temporary directory exists)."""
    return lambda: any(path.name.endswith(".next") for path in (logdir / "checkpoints").iterdir())


@pytest.mark.slow
def test_resumes_killed_at_any_moment_keep_the_log(run):
    budget = 20
    for moment in (_log_replaced, _row_appended, _checkpoint_being_written):
        condition = moment(run)
        _kill_when(_start(*_resume(run, budget)), condition)
        _assert_whole_log(run)
    assert main(_resume(run, budget)) == 0
    assert _iterations(run) == list(range(1, budget + 1))
