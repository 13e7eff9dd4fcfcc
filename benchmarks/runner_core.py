"""The core of the resumable benchmark runners: one command line and one run loop for all of them.

``bench_parsing.py``, ``bench_nli.py`` and ``bench_tracenorm.py`` each describe their suite
with a :class:`Runner`: the grid (their runs, options and plan), the commands (the argv of
each step of a run) and the table (the sections of ``results.md``). This module does the
rest, alike for every runner:

* ``run`` re-plans from the logdirs, records the plan in ``bench_plan.json`` and brings every
  pending run to completion ``--jobs`` at a time (:func:`run_rounds`,
  :func:`benchmarks.resumable_runs.execute_run`), in rounds until a round has nothing new to
  do, then writes the report. A root whose recorded options differ is refused, and so is a
  second runner on the same root (:class:`keras_structured.run_directory.RunLock`).
* ``run --dry-run`` prints the commands of the pending runs and the choices, writing nothing.
* ``report`` writes ``{root}/results.md`` (and the runner's figures) from the finished runs.

Run a runner as a script (``python benchmarks/bench_parsing.py``) or as a module
(``python -m benchmarks.bench_parsing``) from the repository root.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from benchmarks.report_tables import write_results
from benchmarks.resumable_runs import (
    PLAN_FILE,
    check_writable,
    execute_run,
    jobs_env,
    log_progress,
    read_json,
    run_parallel,
)
from benchmarks.run_plans import FinishedRun, NamedRun, RecordedOptions, RunLayout, RunPlan, RunStatus, Step
from keras_structured.command_line import add_debug_option, exit_on_error
from keras_structured.run_directory import RunLock, make_directory, write_json

SpecT = TypeVar("SpecT", bound=NamedRun)
OptionsT = TypeVar("OptionsT", bound=RecordedOptions)
PlanT = TypeVar("PlanT", bound=RunPlan)

#: Minutes after which a training process starts no new epoch or step (a checkpoint, no
#: ``final.json``): a long run goes on in fresh processes, each well under an hour.
TIME_LIMIT_MINUTES = 40.0


@dataclasses.dataclass(frozen=True)
class SuiteRun(Generic[OptionsT]):
    """What one ``run`` of a suite works with.

    Attributes:
        options: the suite's options (recorded in ``bench_plan.json``).
        data: the data the runs train on (a file or a folder).
        root: the suite's root directory.
        env: the environment of the subprocesses (threads, log level).
        jobs: training processes at a time.
        time_limit: minutes after which a training process stops; the next one resumes.
    """

    options: OptionsT
    data: Path
    root: Path
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    jobs: int = 1
    time_limit: float = TIME_LIMIT_MINUTES

    @property
    def time_limit_args(self) -> tuple[str, str]:
        """``("--time-limit", minutes)``, the option of the training command lines."""
        return "--time-limit", f"{self.time_limit:g}"


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


def add_grid_options(
    run: argparse.ArgumentParser,
    learning_rates: Sequence[float],
    quick_learning_rate: float,
    seeds: Sequence[int],
) -> None:
    """Add ``--learning-rates`` (the grid a suite tunes on) and ``--seeds`` to ``run``.

    Args:
        run: the ``run`` subparser (:attr:`Runner.add_options` gets it).
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


@dataclasses.dataclass(frozen=True)
class Runner(Generic[SpecT, OptionsT, PlanT]):
    """A resumable benchmark runner: its grid, its commands and its table, and the command line
    that drives them (:meth:`main`).

    Attributes:
        layout: where the runs live under the root and what their logdirs hold.
        options_type: the suite's options (:meth:`read_options` reads them back).
        plan: the plan of the options given what the logdirs hold (pure).
        describe_choices: one line per choice of the plan, for the terminal and ``results.md``.
        recorded_choices: the plan's choices as JSON, for ``bench_plan.json``.
        waiting: what ``plan.waiting`` counts, for the progress line of a round.
        waiting_notes: the dry run's lines about what waits for a choice.
        commands: the steps left to a run given its status (:func:`benchmarks.run_plans.run_steps`).
        eval_key: a key of the JSON line an evaluation prints.
        result_type: a finished run as the report reads it back.
        sections: the Markdown sections of ``results.md`` from the plan, the finished runs
            and the root (the figures are written there).
        description: the command line's description (the runner's module docstring).
        run_help: the help of ``run``.
        default_root: the default ``--root``.
        quick_root: the default ``--root`` with ``--quick``.
        default_data: the default ``--data``.
        data_help: the help of ``--data``, before its default.
        quick_help: what ``--quick`` does.
        add_options: adds the runner's own options to the ``run`` subparser.
        options_from_args: the suite's options from ``run``'s arguments.
        refusal: why runs recorded with other options (``bench_plan.json``'s entry) forbid a
            ``run`` with these (``"of another protocol"``); None when they do not.
        missing_data: what is missing of the data, in a sentence; None when nothing is.
        options_key: the options' key in ``bench_plan.json``.
        inspect: what a ``run`` does once the rounds are over (timings, alignments); True
            when nothing failed.
        eval_wall_by_split: ``bench_state.json`` records the evaluation wall time per split
            (else as one number).
        appends_time_limit: ``--time-limit`` is appended to every training command line
            (the dry run does not print it); False when :attr:`commands` hold it.
    """

    layout: RunLayout[SpecT]
    options_type: type[OptionsT]
    plan: Callable[[OptionsT, Mapping[SpecT, RunStatus]], PlanT]
    describe_choices: Callable[[PlanT], list[str]]
    recorded_choices: Callable[[PlanT], Any]
    waiting: str
    waiting_notes: Callable[[PlanT], Iterable[str]]
    commands: Callable[[SpecT, RunStatus, SuiteRun[OptionsT]], list[Step]]
    eval_key: str
    result_type: type[FinishedRun]
    sections: Callable[[PlanT, list[Any], Path], list[str]]
    description: str
    run_help: str
    default_root: Path
    quick_root: Path
    default_data: Path
    data_help: str
    quick_help: str
    add_options: Callable[[argparse.ArgumentParser], None]
    options_from_args: Callable[[argparse.Namespace], OptionsT]
    refusal: Callable[[Mapping[str, Any], OptionsT], str | None]
    missing_data: Callable[[OptionsT, Path], str | None]
    options_key: str = "config"
    inspect: Callable[[PlanT, SuiteRun[OptionsT]], bool] | None = None
    eval_wall_by_split: bool = True
    appends_time_limit: bool = True

    # ----------------------------------------------------------------------------------- the suite

    def read_options(self, root: Path) -> OptionsT:
        """The options recorded by the last ``run`` in ``{root}/bench_plan.json`` (defaults without)."""
        return self.options_type.recorded(root, self.options_key)

    def replan(self, options: OptionsT, root: Path) -> PlanT:
        """The plan of the logdirs as they are now, recorded in ``{root}/bench_plan.json``."""
        plan = self.plan(options, self.layout.scan(root))
        make_directory(root)
        write_json(
            root / PLAN_FILE, {self.options_key: options.to_json(), "choices": self.recorded_choices(plan)}
        )
        return plan

    def execute(self, spec: SpecT, run: SuiteRun[OptionsT]) -> bool:
        """Bring one run to completion (train or resume, then evaluate); ``True`` on success.

        A training process stopped by its time limit (a checkpoint, no ``final.json``) is
        followed by another, until the run finishes; it resumes with the training step of an
        unfinished run with a checkpoint. Training output is appended to ``bench_train.log``,
        evaluation output written to ``bench_eval_{split}.log``; ``bench_state.json``
        accumulates the wall times over sessions (also over a fresh restart of a partial run
        without a checkpoint, whose other files are removed).
        """
        logdir = spec.logdir(run.root)
        status = self.layout.read_status(logdir)
        resume = self.commands(spec, RunStatus(resumable=True), run)[0][1] if spec.resumable else None
        return execute_run(
            spec.name,
            logdir,
            self.commands(spec, status, run),
            run.env,
            fresh=not (status.resumable and spec.resumable),
            resume_argv=resume,
            checkpoint=self.layout.checkpoint,
            eval_key=self.eval_key,
            train_args=run.time_limit_args if self.appends_time_limit else (),
            eval_wall_by_split=self.eval_wall_by_split,
        )

    def run_suite(self, run: SuiteRun[OptionsT]) -> bool:
        """Run the plan in rounds until nothing is left (:func:`run_rounds`), then :attr:`inspect`.

        Returns:
            True when every planned run is finished and evaluated and nothing failed.
        """
        plan, ok = run_rounds(
            run.root,
            lambda: self.replan(run.options, run.root),
            lambda spec: self.execute(spec, run),
            run.jobs,
            self.waiting,
        )
        if self.inspect is not None:
            ok = self.inspect(plan, run) and ok
        for line in self.describe_choices(plan):
            log_progress(line)
        return ok

    def print_dry_run(self, run: SuiteRun[OptionsT]) -> None:
        """Print the commands that ``run`` would start, shell-quoted, then the choices as comments."""
        statuses = self.layout.scan(run.root)
        plan = self.plan(run.options, statuses)
        for spec in plan.pending:
            for _, argv in self.commands(spec, statuses.get(spec, RunStatus()), run):
                print(shlex.join(argv))
        for note in [*self.describe_choices(plan), *self.waiting_notes(plan)]:
            print(f"# {note}")

    def write_report(self, root: Path, options: OptionsT | None = None) -> Path:
        """Write ``{root}/results.md`` (and the figures) from the finished runs; return the md path.

        Only finished runs (``final.json``) count, at the choices the plan makes from them;
        the planned runs not finished and evaluated are listed as missing.

        Args:
            root: the runs' root directory.
            options: the suite's options; by default those recorded in ``{root}/bench_plan.json``.

        Returns:
            The path of ``results.md``.

        Raises:
            PermissionError: ``root`` cannot be written: refused before the report is made.
        """
        check_writable(root, "report writes results.md and figures/ into the root")
        options = options or self.read_options(root)
        plan = self.plan(options, self.layout.scan(root))
        runs = self.layout.finished_runs(root, self.result_type)
        return write_results(root, self.sections(plan, runs, root))

    # ------------------------------------------------------------------------------ command line

    def parse_args(self, argv: list[str] | None = None) -> argparse.Namespace:
        """Parse the ``run`` / ``report`` command line."""
        return self.argument_parser().parse_args(argv)

    def argument_parser(self) -> argparse.ArgumentParser:
        """The ``run`` / ``report`` command line, each command with ``--debug``."""
        parser = argparse.ArgumentParser(
            description=self.description, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        add_debug_option(parser)
        sub = parser.add_subparsers(dest="command", required=True)
        run = sub.add_parser("run", help=self.run_help)
        run.add_argument(
            "--root",
            type=Path,
            default=None,
            help=f"directory of the runs (default {self.default_root}, {self.quick_root} with --quick)",
        )
        run.add_argument(
            "--data", type=Path, default=self.default_data, help=f"{self.data_help} (default %(default)s)"
        )
        report = sub.add_parser("report", help="write results.md and figures/ from the finished runs")
        report.add_argument(
            "--root", type=Path, default=self.default_root, help="directory of the runs (default %(default)s)"
        )
        self.add_options(run)
        run.add_argument("--jobs", type=int, default=1, help="training processes at a time (default 1)")
        run.add_argument(
            "--threads-per-job", type=int, default=None, help="CPU threads per job (default cores / jobs)"
        )
        run.add_argument("--quick", action="store_true", help=self.quick_help)
        run.add_argument("--dry-run", action="store_true", help="print the pending commands and exit")
        for command in (run, report):
            add_debug_option(command, subcommand=True)
        return parser

    def main(self, argv: list[str] | None = None) -> int:
        """Entry point; returns the exit status (1 when some run failed or is still missing, 2 on a
        root of other options or missing data, or on a user error such as a root that cannot be
        written: :func:`keras_structured.command_line.exit_on_error`)."""
        parser = self.argument_parser()
        args = parser.parse_args(argv)
        try:
            return self._main(args)
        except Exception as error:
            exit_on_error(parser, args, error)

    def _main(self, args: argparse.Namespace) -> int:
        if args.command == "report":
            print(self.write_report(args.root))
            return 0
        options = self.options_from_args(args)
        root = args.root or (self.quick_root if args.quick else self.default_root)
        recorded = read_json(root / PLAN_FILE)
        reason = self.refusal(recorded.get(self.options_key, {}), options) if recorded else None
        if reason:
            print(f"{root} holds runs {reason}; use another --root", file=sys.stderr)
            return 2
        run = SuiteRun(
            options,
            args.data,
            root,
            jobs_env(args.jobs, args.threads_per_job),
            args.jobs,
            # A runner whose commands hold the time limit offers --time-limit.
            getattr(args, "time_limit", TIME_LIMIT_MINUTES),
        )
        if args.dry_run:
            self.print_dry_run(run)
            return 0
        missing = self.missing_data(options, args.data)
        if missing:
            print(missing, file=sys.stderr)
            return 2
        start = time.perf_counter()
        ok = self.run_suite(run)
        minutes = (time.perf_counter() - start) / 60
        log_progress(f"report: {self.write_report(root, options)} (run wall time {minutes:.1f} min)")
        return 0 if ok else 1
