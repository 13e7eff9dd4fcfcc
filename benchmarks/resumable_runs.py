"""Resumable runs: the machinery that the benchmark runners of ``benchmarks/`` share.

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

How the runners use it. ``bench_parsing.py``, ``bench_tracenorm.py`` and ``bench_nli.py``
plan with a pure function of their options and of what the logdirs hold
(:func:`run_logdirs`); the plan is a :class:`RunPlan` that sorts each run by what is left to
do, and grids are searched with :func:`choose_on_grid`. ``run`` calls :func:`run_rounds`:
re-plan, record the plan, bring every pending run to completion ``--jobs`` at a time
(:func:`run_parallel`) with :func:`execute_run` (train or resume with :func:`run_training`,
go on after a time limit, evaluate), until a round has nothing new to do. ``run --dry-run``
prints the same commands with :func:`print_dry_run`; ``report`` reads the finished runs back
with :func:`finished_runs` and writes ``results.md`` with :func:`write_results`. Their
command lines start from :func:`runner_parser` and :func:`add_run_options`.
``bench_rl.py`` uses the files, subprocess and logging helpers and :func:`run_parallel`.

The runners import this file as a sibling module: run them as ``python benchmarks/NAME.py``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from keras_structured.run_directory import (
    RunLock,
    make_directory,
    open_for_appending,
    read_csv,
    write_json,
    write_text,
)

FINAL_FILE = "final.json"
STATE_FILE = "bench_state.json"
TRAIN_LOG = "bench_train.log"
PLAN_FILE = "bench_plan.json"
RESULTS_FILE = "results.md"

SpecT = TypeVar("SpecT")
OptionsT = TypeVar("OptionsT", bound="RecordedOptions")
PlanT = TypeVar("PlanT", bound="RunPlan")

# ---------------------------------------------------------------------------------------------- files


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in a JSON file, or ``None`` when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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
    """``progress.csv`` as float columns; empty or non-numeric cells become NaN, and a last
    row cut short by a crash is left out (:func:`keras_structured.run_directory.read_csv`)."""
    names, rows = read_csv(path)
    return {
        name: np.array([to_float(row[i] if i < len(row) else None) for row in rows])
        for i, name in enumerate(names)
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


# ----------------------------------------------------------------------------------------- the suite


@dataclasses.dataclass
class RunPlan(Generic[SpecT]):
    """The runs of a suite as far as they are decided, sorted by what is left to do.

    ``runs`` are in plan order; ``waiting`` holds what waits for a choice (a grid's best
    value) before its runs can be planned. :meth:`add` puts each run in one of ``done``
    (finished and evaluated), ``evaluate`` (finished, not evaluated), ``resume`` (a
    checkpoint) and ``start`` (nothing usable). A runner's plan subclasses it with its
    options and choices.
    """

    runs: list[SpecT] = dataclasses.field(default_factory=list)
    waiting: list[Any] = dataclasses.field(default_factory=list)
    done: list[SpecT] = dataclasses.field(default_factory=list)
    evaluate: list[SpecT] = dataclasses.field(default_factory=list)
    resume: list[SpecT] = dataclasses.field(default_factory=list)
    start: list[SpecT] = dataclasses.field(default_factory=list)

    def add(self, spec: SpecT, *, finished: bool, evaluated: bool, resumable: bool) -> None:
        """File ``spec`` (a run of :attr:`runs`) under what is left to do for it.

        Args:
            spec: the run.
            finished: its training finished (``final.json``).
            evaluated: every evaluation it needs is there.
            resumable: it can resume from a checkpoint.
        """
        if finished:
            (self.done if evaluated else self.evaluate).append(spec)
        else:
            (self.resume if resumable else self.start).append(spec)

    @property
    def pending(self) -> list[SpecT]:
        """Runs with something left to do: those to evaluate or resume first, then plan order."""
        todo = {*self.evaluate, *self.resume, *self.start}
        return sorted((spec for spec in self.runs if spec in todo), key=lambda spec: spec in self.start)


@dataclasses.dataclass(frozen=True)
class GridChoice(Generic[SpecT]):
    """What :func:`choose_on_grid` found: the best value, or the runs it waits for.

    ``scores`` maps every value whose runs have all finished to their mean score; ``value`` is
    None while ``missing`` (the unfinished runs of the grid) is not empty; ``widened`` counts
    the widenings of the grid so far.
    """

    value: float | None
    scores: dict[float, float]
    missing: tuple[SpecT, ...] = ()
    widened: int = 0

    def at_edge(self) -> bool:
        """Whether the choice is an end of its (possibly widened) grid of several values."""
        grid = sorted(self.scores)
        return len(grid) > 1 and self.value in (grid[0], grid[-1])


def choose_on_grid(
    grid: Sequence[float],
    runs_at: Callable[[float], Sequence[SpecT]],
    scores: Mapping[SpecT, float],
    max_widenings: int,
    factor: float = 2.0,
) -> GridChoice[SpecT]:
    """The value of ``grid`` whose runs have the best mean score, widening the grid at its ends.

    As in the SparseMAP paper's protocol, a best value at an end of a grid of three values or
    more widens the grid by ``factor`` beyond it (at most ``max_widenings`` times); the
    choice then waits for the runs at the new value. Ties go to the smaller value, NaN scores
    rank last. A grid of one value is chosen without any run.

    Args:
        grid: the values (written to logdir names with ``:g``, see :func:`logdir_value`).
        runs_at: the runs that score a value.
        scores: the score of every finished run (a run absent from it is unfinished).
        max_widenings: how many times the grid may be widened.
        factor: the ratio between a new value and the end of the grid it extends.

    Returns:
        A :class:`GridChoice`.

    Example:
        >>> scores = {("lr", 0.001): 80.0, ("lr", 0.002): 82.0}
        >>> choose_on_grid([0.001, 0.002], lambda v: [("lr", v)], scores, 2).value
        0.002
    """
    values = sorted(logdir_value(v) for v in grid)
    if len(values) == 1:
        return GridChoice(values[0], {})
    widened = 0
    while True:
        found, missing = {}, []
        for value in values:
            runs = runs_at(value)
            absent = [run for run in runs if run not in scores]
            missing += absent
            if not absent:
                found[value] = float(np.mean([scores[run] for run in runs]))
        if missing:
            return GridChoice(None, found, tuple(missing), widened)
        best = max(values, key=lambda v: (-math.inf if math.isnan(found[v]) else found[v], -v))
        if len(grid) < 3 or widened == max_widenings or best not in (values[0], values[-1]):
            return GridChoice(best, found, (), widened)
        values = (
            [logdir_value(best / factor), *values]
            if best == values[0]
            else [*values, logdir_value(best * factor)]
        )
        widened += 1


class RecordedOptions:
    """A frozen dataclass of plain values and tuples, recorded in ``bench_plan.json``."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able form (tuples as lists)."""
        return {
            field.name: list(value) if isinstance(value := getattr(self, field.name), tuple) else value
            for field in dataclasses.fields(self)
        }

    @classmethod
    def from_json(cls: type[OptionsT], data: Mapping[str, Any]) -> OptionsT:
        """Inverse of :meth:`to_json`; unknown keys are ignored."""
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names})

    @classmethod
    def recorded(cls: type[OptionsT], root: Path, key: str) -> OptionsT:
        """The options that the last ``run`` recorded under ``key`` in ``{root}/bench_plan.json``.

        Args:
            root: the suite's root.
            key: their key in the file.

        Returns:
            The options; the defaults when nothing is recorded.
        """
        data = read_json(root / PLAN_FILE)
        return cls.from_json(data[key]) if data and key in data else cls()


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


def run_rounds(
    root: Path, replan: Callable[[], PlanT], execute: Callable[[Any], bool], jobs: int, waiting: str
) -> tuple[PlanT, bool]:
    """Run a suite in rounds until a round has nothing new to do, holding the suite's lock.

    A second runner on the same ``root`` is refused (:class:`RunLockedError`, naming the pid
    of the first) before it plans anything.

    Each round re-plans from the logdirs (``replan``, which also records the plan in
    ``bench_plan.json``) and runs what is pending, ``jobs`` at a time: the choices that the
    finished runs allow then plan the next round. A run that fails is not retried in the same
    session; what depends on it keeps waiting.

    Args:
        root: the suite's root directory (locked with :class:`RunLock`).
        replan: the plan of the logdirs as they are now, recorded.
        execute: brings one run to completion; True on success.
        jobs: runs at a time.
        waiting: what ``plan.waiting`` counts, for the progress line of a round
            (``"waiting for C"``).

    Returns:
        The last plan, and whether every run is finished and evaluated (none failed, none is
        pending or waiting).
    """
    attempted = set()
    ok = True
    with RunLock(root):
        while True:
            plan = replan()
            todo = [spec for spec in plan.pending if spec not in attempted]
            if not todo:
                return plan, ok and not plan.pending and not plan.waiting
            attempted.update(todo)
            log_progress(f"round: {len(todo)} runs ({len(plan.done)} done, {len(plan.waiting)} {waiting})")
            ok = all(run_parallel(execute, todo, jobs)) and ok


def write_plan(root: Path, data: dict[str, Any]) -> None:
    """Record a round's options and choices in ``{root}/bench_plan.json``."""
    make_directory(root)
    write_json(root / PLAN_FILE, data)


# ------------------------------------------------------------------------------------------ the disk


def run_logdirs(
    root: Path, pattern: str, parse_logdir: Callable[[Path, Path], SpecT | None]
) -> Iterator[tuple[SpecT, Path]]:
    """The run directories under ``root``, sorted, with their runs.

    Args:
        root: the suite's root.
        pattern: the glob of its logdirs (``*/lr*/seed*``).
        parse_logdir: ``(root, logdir) -> run``, None for a folder that is not a run's.

    Returns:
        An iterator of ``(run, logdir)``.
    """
    for logdir in sorted(root.glob(pattern)):
        spec = parse_logdir(root, logdir)
        if spec is not None and logdir.is_dir():
            yield spec, logdir


@dataclasses.dataclass
class FinishedRun:
    """A finished run (``final.json``) as read back from its logdir; runners add their files."""

    spec: Any
    final: dict[str, Any]
    state: dict[str, Any]
    config: dict[str, Any]
    progress: dict[str, np.ndarray]

    def column(self, name: str) -> np.ndarray:
        """A ``progress.csv`` column as floats (empty when absent)."""
        return self.progress.get(name, np.array([]))


def finished_runs(
    root: Path, pattern: str, parse_logdir: Callable[[Path, Path], Any]
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every finished run (``final.json`` readable) under ``root``, as :class:`FinishedRun` fields.

    Args:
        root: the suite's root.
        pattern: the glob of its logdirs.
        parse_logdir: as for :func:`run_logdirs`.

    Returns:
        An iterator of ``(logdir, fields)``: ``fields`` are the keyword arguments of
        :class:`FinishedRun` (``config.json``, ``bench_state.json``, ``progress.csv`` are
        empty when missing).
    """
    for spec, logdir in run_logdirs(root, pattern, parse_logdir):
        final = read_json(logdir / FINAL_FILE)
        if final is None:
            continue
        progress = read_progress(logdir / "progress.csv") if (logdir / "progress.csv").is_file() else {}
        yield (
            logdir,
            {
                "spec": spec,
                "final": final,
                "state": read_json(logdir / STATE_FILE) or {},
                "config": read_json(logdir / "config.json") or {},
                "progress": progress,
            },
        )


# ----------------------------------------------------------------------------------- command line


def runner_parser(
    description: str,
    run_help: str,
    roots: tuple[Path, Path],
    data: Path,
    data_help: str,
) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``run`` / ``report`` command line of a runner, with ``--root`` and ``run --data``.

    The runner adds its options to ``run``, then :func:`add_run_options`.

    Args:
        description: the runner's description (its module docstring).
        run_help: the help of ``run``.
        roots: the default root and the one of ``--quick``.
        data: the default ``--data``.
        data_help: its help, before ``(default ...)``.

    Returns:
        The parser and its ``run`` subparser.
    """
    default_root, quick_root = roots
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help=run_help)
    run.add_argument(
        "--root",
        type=Path,
        default=None,
        help=f"directory of the runs (default {default_root}, {quick_root} with --quick)",
    )
    run.add_argument("--data", type=Path, default=data, help=f"{data_help} (default %(default)s)")
    report = sub.add_parser("report", help="write results.md and figures/ from the finished runs")
    report.add_argument(
        "--root", type=Path, default=default_root, help="directory of the runs (default %(default)s)"
    )
    return parser, run


def add_run_options(run: argparse.ArgumentParser, quick_help: str) -> None:
    """Add ``--jobs``, ``--threads-per-job``, ``--quick`` and ``--dry-run`` to ``run``.

    Args:
        run: the ``run`` subparser of :func:`runner_parser`.
        quick_help: what ``--quick`` does.
    """
    run.add_argument("--jobs", type=int, default=1, help="training processes at a time (default 1)")
    run.add_argument(
        "--threads-per-job", type=int, default=None, help="CPU threads per job (default cores / jobs)"
    )
    run.add_argument("--quick", action="store_true", help=quick_help)
    run.add_argument("--dry-run", action="store_true", help="print the pending commands and exit")


def add_grid_options(
    run: argparse.ArgumentParser,
    learning_rates: Sequence[float],
    quick_learning_rate: float,
    seeds: Sequence[int],
) -> None:
    """Add ``--learning-rates`` (the grid a suite tunes on) and ``--seeds`` to ``run``.

    Args:
        run: the ``run`` subparser of :func:`runner_parser`.
        learning_rates: the default grid.
        quick_learning_rate: the one rate of ``--quick``.
        seeds: the default seeds (``--quick``: 0).
    """
    run.add_argument(
        "--learning-rates",
        nargs="+",
        type=float,
        default=None,
        help=f"the grid (default {' '.join(f'{lr:g}' for lr in learning_rates)}; "
        f"{quick_learning_rate:g} with --quick)",
    )
    run.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=None,
        help=f"(default {' '.join(map(str, seeds))}; 0 with --quick)",
    )


def print_dry_run(
    specs: Iterable[SpecT],
    steps: Callable[[SpecT], Sequence[tuple[str, list[str]]]],
    notes: Iterable[str],
) -> None:
    """Print the command lines that ``run`` would start, shell-quoted, then ``notes`` as comments.

    Args:
        specs: the pending runs, in the order ``run`` takes them.
        steps: a run's ``[(kind, argv), ...]`` left to do.
        notes: lines printed after ``# `` (the choices, what waits for them).
    """
    for spec in specs:
        for _, argv in steps(spec):
            print(shlex.join(argv))
    for note in notes:
        print(f"# {note}")


# ----------------------------------------------------------------------------------------- report


def fmt(value: float, digits: int = 1) -> str:
    """Fixed-point with ``digits`` decimals, ``n/a`` for NaN / inf."""
    return "n/a" if not math.isfinite(value) else f"{value:.{digits}f}"


def mean_and_spread(values: Sequence[float]) -> tuple[float, float, int]:
    """``(mean, (max - min) / 2, count)`` of the finite values; NaNs for none."""
    finite = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if finite.size == 0:
        return math.nan, math.nan, 0
    return float(finite.mean()), float(finite.max() - finite.min()) / 2, int(finite.size)


def missing_run_lines(plan: RunPlan, evaluations: Callable[[Any], str], waiting: Iterable[str]) -> list[str]:
    """The Markdown list of the planned runs not finished and evaluated, for ``results.md``.

    Args:
        plan: the plan.
        evaluations: the evaluations a run needs, in words (``"dev and test"``).
        waiting: one line per entry of ``plan.waiting``.

    Returns:
        The lines, or one saying that nothing is missing.
    """
    lines = [f"- `{spec.name}`: trained, not evaluated on {evaluations(spec)}" for spec in plan.evaluate]
    lines += [f"- `{spec.name}`: partial (checkpoint), to resume" for spec in plan.resume]
    lines += [f"- `{spec.name}`: not started (or failed before a checkpoint)" for spec in plan.start]
    lines += waiting
    return lines or ["None: every planned run is finished and evaluated."]


def write_results(root: Path, sections: Sequence[str]) -> Path:
    """Write the Markdown ``sections`` to ``{root}/results.md``; return its path."""
    make_directory(root)
    path = root / RESULTS_FILE
    write_text(path, "\n\n".join(sections) + "\n")
    return path
