"""Resumable runs: the files and processes of one run, the executing half of the runner core.

A *resumable run* is one training job of a benchmark suite (one loss, learning rate and
seed; one radius C; one RL seed), driven only through a command line and known by its
logdir. Everything a runner knows about a run is in that folder, so a suite can be stopped
at any moment (Ctrl-C, a reboot, a training process's ``--time-limit``) and the next
``run`` goes on from where the files say it stands:

=========================  ==================================================================
in a run's logdir          meaning
=========================  ==================================================================
``final.json``             written by the CLI at the end of training: the run is finished
a checkpoint               the CLI can resume the run (its name is the runner's)
``eval_{split}.json``      the run's evaluation on ``split`` (the CLI's, or its JSON line)
``bench_state.json``       the runner's record: training wall time and processes (sessions)
                           over every session, exit status and threads of the last process,
                           evaluation wall times
``bench_train.log``        the output of every training process, appended
``bench_eval_{split}.log`` the output of the last evaluation on ``split``
=========================  ==================================================================

and in the suite's root ``bench_plan.json`` (the options and choices of the last round) and
the ``results.md`` of ``report``.

How the runners use it. :func:`execute_run` brings one run to completion: train or resume
(:func:`run_training`, one process a session, appended to ``bench_train.log``), go on after
a time limit, evaluate (writing ``eval_{split}.json`` from the CLI's JSON line when it did
not); :func:`run_parallel` runs several ``--jobs`` at a time, and :func:`time_side_by_side`
times finished runs in one process. The planning half of the core is
:mod:`benchmarks.run_plans`, the command line and its rounds :mod:`benchmarks.runner_core`,
the report's tables :mod:`benchmarks.report_tables`. ``bench_rl.py`` uses the files,
subprocess and logging helpers here and :func:`run_parallel`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from keras_structured.progress_log import PROGRESS_FILE, read_numbers
from keras_structured.run_directory import (
    make_directory,
    open_for_appending,
    write_json,
    write_text,
)
from keras_structured.run_settings import read_json_object

FINAL_FILE = "final.json"
STATE_FILE = "bench_state.json"
TRAIN_LOG = "bench_train.log"
PLAN_FILE = "bench_plan.json"

#: The ``progress.csv`` columns that hold text (the trace-norm parser's kind of atom), read as NaN.
TEXT_COLUMNS = ("atom",)

SpecT = TypeVar("SpecT")

# ---------------------------------------------------------------------------------------------- files


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in a JSON file, or ``None`` when it is missing.

    Raises:
        ValueError: the file is damaged or was edited into something else than a JSON object
            (:func:`keras_structured.run_settings.read_json_object`: the file and the place
            named), rather than read as a run with no results.
    """
    try:
        return read_json_object(path)
    except FileNotFoundError:
        return None


def check_writable(folder: Path, purpose: str) -> None:
    """Refuse a folder that cannot be written (read-only, another user's) before any work
    whose result would be written there is done; the folder is created if missing.

    Args:
        folder: the folder.
        purpose: what is written there, for the message (``"report writes results.md"``).

    Raises:
        PermissionError: the folder cannot be written (named, with the reason).
    """
    make_directory(folder)
    try:
        handle, probe = tempfile.mkstemp(prefix=".writable.", dir=folder)
    except OSError as error:
        raise PermissionError(
            f"{purpose}, and {str(folder)!r} cannot be written ({error.strerror}): give a folder that "
            f"can be, or copy the runs into one. Received: {str(folder)!r}"
        ) from None
    os.close(handle)
    os.unlink(probe)


def shared_data(*parts: str) -> Path:
    """``../shared/data/{parts}`` beside the repository, relative to the working directory.

    The runs record their data paths in ``config.json``, which is committed with their
    results (``benchmarks/results/``): a relative path names no machine, and a fresh clone
    in the same layout resumes and compares configurations alike. Falls back to the
    absolute path when no relative one exists (another drive).
    """
    path = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve().joinpath(*parts)
    try:
        return Path(os.path.relpath(path))
    except ValueError:
        return path


def to_float(value: Any) -> float:
    """``float(value)``, NaN for None, an empty CSV cell or junk."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def read_progress(path: Path) -> dict[str, np.ndarray]:
    """``progress.csv`` as float columns (those of text, :data:`TEXT_COLUMNS`, as NaN); empty
    cells become NaN, and a last row cut short by a crash is left out.

    Raises:
        ValueError: a cell of a number column that is not one, or a file that cannot be read
            (:func:`keras_structured.progress_log.read_numbers`: the file, row and value named).
    """
    if path.name != PROGRESS_FILE:
        raise ValueError(f"A run's progress log is its {PROGRESS_FILE}. Received: path={str(path)!r}")
    rows = read_numbers(path.parent, text_columns=TEXT_COLUMNS)
    return {
        name: np.array([to_float(row[name]) for row in rows])
        for name in dict.fromkeys(k for r in rows for k in r)
    }


def logdir_value(value: float) -> float:
    """A number as it reads back from a logdir name written with ``:g`` (``lr0.002``, ``C20``)."""
    return float(f"{float(value):g}")


def read_evaluations(logdir: Path, splits: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The readable ``eval_{split}.json`` of ``logdir``, by split."""
    return {split: data for split in splits if (data := read_json(logdir / f"eval_{split}.json")) is not None}


# ------------------------------------------------------------------------------------ subprocesses

_PRINT_LOCK = threading.Lock()


def log_progress(message: str) -> None:
    """Print a time-stamped progress line (thread-safe)."""
    with _PRINT_LOCK:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def subprocess_env(threads: int) -> dict[str, str]:
    """Environment of the training jobs: ``threads`` CPU threads for TensorFlow/OpenMP, quiet TF logs."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        env[name] = str(threads)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def jobs_env(jobs: int, threads_per_job: int | None) -> dict[str, str]:
    """:func:`subprocess_env` for ``jobs`` jobs at a time.

    Args:
        jobs: training processes at a time.
        threads_per_job: CPU threads per process; None shares the cores among the jobs (at least 1).

    Returns:
        The environment of the subprocesses.
    """
    return subprocess_env(threads_per_job or max(1, (os.cpu_count() or 1) // jobs))


def run_session(argv: list[str], logdir: Path, state: dict[str, Any], env: dict[str, str]) -> int:
    """Run one training process, its output appended to ``{logdir}/bench_train.log``, and count it.

    Args:
        argv: the command line.
        logdir: the run's logdir (it must exist).
        state: the run's ``bench_state.json`` record; its ``train_wall_s`` grows by the wall time
            of the process and its ``sessions`` by one. The caller writes it.
        env: the environment of the process.

    Returns:
        The exit status of the process.
    """
    start = time.perf_counter()
    with open_for_appending(logdir / TRAIN_LOG) as output:
        code = subprocess.run(argv, stdout=output, stderr=subprocess.STDOUT, env=env).returncode
    state.update(
        train_wall_s=state["train_wall_s"] + time.perf_counter() - start,
        sessions=state["sessions"] + 1,
    )
    return code


def run_training(
    argv: list[str], logdir: Path, state: dict[str, Any], env: dict[str, str], fresh: bool
) -> int:
    """Run one training process of a run (:func:`run_session`) and write its ``bench_state.json``.

    Evaluations in ``logdir`` belong to an earlier model and are removed first. ``state``
    also records the exit status (``last_exit``) and the threads (``threads``) of the process.

    Args:
        argv: the command line.
        logdir: the run's logdir (created when missing).
        state: the run's ``bench_state.json`` record, with ``train_wall_s`` and ``sessions``.
        env: the environment of the process.
        fresh: the run starts afresh (a partial run without a checkpoint): its logdir is
            emptied first.

    Returns:
        The exit status of the process.
    """
    if fresh and logdir.exists():
        shutil.rmtree(logdir)
    make_directory(logdir)
    for stale in logdir.glob("eval_*.json"):
        stale.unlink()
    code = run_session(argv, logdir, state, env)
    state.update(last_exit=code, threads=int(env.get("OMP_NUM_THREADS", 0)))
    write_json(logdir / STATE_FILE, state)
    return code


def parse_eval_output(stdout: str, key: str = "deterministic_mean") -> dict[str, Any]:
    """The last JSON line of an ``evaluate`` command's output holding ``key``.

    Args:
        stdout: the output.
        key: a key the evaluation's JSON object has (by default that of ``rl evaluate --json``).

    Returns:
        The object.

    Raises:
        ValueError: when no line is such an object.
    """
    for line in reversed(stdout.splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and key in data:
            return data
    raise ValueError(f"no JSON line with {key!r} in the evaluation output")


# ------------------------------------------------------------------------------------------- one run


def execute_run(
    name: str,
    logdir: Path,
    steps: Sequence[tuple[str, list[str]]],
    env: dict[str, str],
    *,
    fresh: bool,
    resume_argv: list[str] | None,
    checkpoint: str,
    eval_key: str,
    train_args: Sequence[str] = (),
    eval_wall_by_split: bool = True,
) -> bool:
    """Bring one run to completion: train (or resume), then evaluate; ``True`` on success.

    A training process stopped by its time limit (exit 0, a checkpoint, no ``final.json``) is
    followed by another (``resume_argv``) until the run finishes. Training output is appended
    to ``bench_train.log``, evaluation output written to ``bench_eval_{split}.log``;
    ``bench_state.json`` accumulates the wall times over sessions (also over a fresh restart
    of a partial run without a checkpoint, whose other files are removed).

    Args:
        name: the run's name in progress messages.
        logdir: the run's logdir.
        steps: what is left to do, ``[("train" | "eval", argv), ...]`` (at most one training
            first); an evaluation's argv holds ``--split SPLIT``, and the CLI writes
            ``eval_{SPLIT}.json`` or prints it as its last JSON line.
        env: the environment of the subprocesses.
        fresh: the training starts afresh rather than from a checkpoint.
        resume_argv: the command line that resumes the run after a time limit; None for a
            run that cannot resume.
        checkpoint: the file, relative to ``logdir``, whose presence makes the run resumable.
        eval_key: a key of the evaluation's JSON line.
        train_args: appended to every training command line (a ``--time-limit`` that the
            runner's dry run does not print).
        eval_wall_by_split: record the evaluation wall time per split
            (``"eval_wall_s": {split: seconds}``) or as one number (``"eval_wall_s": seconds``).

    Returns:
        Whether the run is finished and evaluated.
    """
    state = {"train_wall_s": 0.0, "sessions": 0, **({"eval_wall_s": {}} if eval_wall_by_split else {})}
    state.update(read_json(logdir / STATE_FILE) or {})
    run = _Session(name, logdir, env, state)
    for kind, argv in steps:
        if kind == "train":
            resume = None if resume_argv is None else [*resume_argv, *train_args]
            ok = run.train([*argv, *train_args], fresh, resume, checkpoint)
        else:
            ok = run.evaluate(argv, eval_key, eval_wall_by_split)
        if not ok:
            return False
    log_progress(f"done {name} (train {state['train_wall_s'] / 60:.1f} min)")
    return True


def time_command(
    cli: Sequence[str], logdirs: Sequence[Path], steps: int, output: Path, python: str = sys.executable
) -> list[str]:
    """``python {cli} time --logdir ... --steps N --output FILE`` argv over ``logdirs``."""
    argv = [python, *cli, "time"]
    for logdir in logdirs:
        argv += ["--logdir", str(logdir)]
    return argv + ["--steps", str(steps), "--output", str(output)]


def time_side_by_side(
    argv: list[str], logdirs: Sequence[Path], output: Path, what: str, env: dict[str, str]
) -> bool:
    """Run a ``time`` command (:func:`time_command`) unless ``output`` holds exactly ``logdirs`` already.

    The command lets the runs' checkpoints take training steps in turn on the same batches
    and writes their step times into ``output``; its output goes to ``bench_time.log`` next
    to ``output``.

    Args:
        argv: the ``time`` command.
        logdirs: the runs it times.
        output: the JSON file it writes.
        what: the runs in words, for the progress line.
        env: the subprocess's environment.

    Returns:
        False when the command failed or wrote nothing, else True.
    """
    timing = read_json(output)
    if timing is not None and set(timing) == {str(logdir) for logdir in logdirs}:
        return True
    log_progress(f"time training steps of {what} side by side")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    log = output.parent / "bench_time.log"
    write_text(log, proc.stdout + proc.stderr)
    if proc.returncode != 0 or read_json(output) is None:
        log_progress(f"FAILED timing (exit {proc.returncode}, see {log})")
        return False
    return True


@dataclasses.dataclass
class _Session:
    """A run that :func:`execute_run` is bringing to completion, with its ``bench_state.json``."""

    name: str
    logdir: Path
    env: dict[str, str]
    state: dict[str, Any]

    def train(self, argv: list[str], fresh: bool, resume_argv: list[str] | None, checkpoint: str) -> bool:
        """One training process, then more after time limits; True once ``final.json`` is there."""
        log_progress(f"{'train' if fresh else 'resume'} {self.name}")
        code = run_training(argv, self.logdir, self.state, self.env, fresh)
        # Each process stops after its time limit (a checkpoint, no final.json): a long run goes
        # on in fresh processes, each well under an hour.
        while (
            code == 0
            and resume_argv is not None
            and not (self.logdir / FINAL_FILE).is_file()
            and (self.logdir / checkpoint).is_file()
        ):
            log_progress(f"resume {self.name} (time limit of the last process)")
            code = run_training(resume_argv, self.logdir, self.state, self.env, fresh=False)
        if code != 0 or not (self.logdir / FINAL_FILE).is_file():
            log_progress(f"FAILED training {self.name} (exit {code}, see {self.logdir / TRAIN_LOG})")
            return False
        return True

    def evaluate(self, argv: list[str], key: str, by_split: bool) -> bool:
        """One evaluation: ``eval_{split}.json`` and its wall time; True when the file is there."""
        split = argv[argv.index("--split") + 1]
        log_progress(f"evaluate {self.name} on {split}")
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env)
        write_text(self.logdir / f"bench_eval_{split}.log", proc.stdout + proc.stderr)
        target = self.logdir / f"eval_{split}.json"
        if not target.is_file():  # the CLI writes it; fall back on its JSON line
            try:
                write_json(target, parse_eval_output(proc.stdout, key=key))
            except ValueError:
                log_progress(f"FAILED evaluating {self.name} on {split} (exit {proc.returncode})")
                return False
        seconds = round(time.perf_counter() - start, 3)
        self.state["eval_wall_s"] = {**self.state["eval_wall_s"], split: seconds} if by_split else seconds
        write_json(self.logdir / STATE_FILE, self.state)
        return True


def run_parallel(execute: Callable[[SpecT], bool], specs: Sequence[SpecT], jobs: int) -> list[bool]:
    """``execute`` every run of ``specs``, ``jobs`` at a time in a thread pool.

    Args:
        execute: brings one run to completion (its subprocesses do the work); True on success.
        specs: the runs.
        jobs: runs at a time.

    Returns:
        The results, in the order of ``specs``. On Ctrl-C (which the running jobs got too)
        no new run starts.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(execute, spec) for spec in specs]
        try:
            return [future.result() for future in futures]
        except KeyboardInterrupt:  # the running jobs got the signal too; start no new ones
            pool.shutdown(wait=False, cancel_futures=True)
            raise
