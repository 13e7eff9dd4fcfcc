"""What a suite's logdirs hold and what is left to do: the planning half of the runner core.

A runner names each run of its suite with a :class:`NamedRun` (a frozen dataclass whose
:attr:`~NamedRun.parts` are the folders of its logdir under the suite's root) and describes
its logdirs with a :class:`RunLayout`: their glob, the checkpoint that makes a run resumable,
the evaluations they may hold and the score that tunes a grid. The layout reads a logdir
into a :class:`RunStatus`, and the finished ones back into :class:`FinishedRun` records for
the report.

A runner's plan is a pure function of its options and of those statuses: a
:class:`RunPlan` that files every decided run under what is left to do for it
(:meth:`RunPlan.file_runs`). Grids are searched with :func:`choose_on_grid`, the steps left
to one run come from :func:`run_steps`, and the options a plan was made with are a
:class:`RecordedOptions` written to ``bench_plan.json``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from benchmarks.resumable_runs import (
    FINAL_FILE,
    PLAN_FILE,
    STATE_FILE,
    logdir_value,
    read_evaluations,
    read_json,
    read_progress,
    to_float,
)

SpecT = TypeVar("SpecT", bound="NamedRun")
ResultT = TypeVar("ResultT", bound="FinishedRun")
OptionsT = TypeVar("OptionsT", bound="RecordedOptions")
#: One thing left to do for a run: ``("train" | "eval", argv)``.
Step = tuple[str, list[str]]


class NamedRun:
    """Base of a suite's runs: a frozen dataclass known by the folders of its logdir.

    Subclasses define :attr:`parts`; they may override :attr:`splits` and :attr:`resumable`
    (with class attributes, or properties when they depend on the run).
    """

    #: The evaluations a finished run needs (``eval_{split}.json``).
    splits: ClassVar[tuple[str, ...]] = ()
    #: Whether the command line can resume the run from a checkpoint.
    resumable: ClassVar[bool] = True

    @property
    def parts(self) -> tuple[str, ...]:
        """The folders of the run's logdir under the suite's root."""
        raise NotImplementedError

    def logdir(self, root: Path) -> Path:
        """``{root}/{parts[0]}/{parts[1]}/...``."""
        return root.joinpath(*self.parts)

    @property
    def name(self) -> str:
        """The parts joined by ``/``, for messages."""
        return "/".join(self.parts)


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """What a logdir holds: ``final.json`` (finished, with the run's score), a checkpoint, evaluations.

    ``score`` is what a grid is tuned on (:attr:`RunLayout.score`), NaN while unfinished.
    """

    finished: bool = False
    resumable: bool = False
    evaluated: frozenset[str] = frozenset()
    score: float = math.nan


@dataclasses.dataclass
class FinishedRun:
    """A finished run (``final.json``) as read back from its logdir; runners add their accessors."""

    spec: Any
    logdir: Path
    final: dict[str, Any]
    state: dict[str, Any]
    config: dict[str, Any]
    progress: dict[str, np.ndarray]
    evals: dict[str, dict[str, Any]]

    def column(self, name: str) -> np.ndarray:
        """A ``progress.csv`` column as floats (empty when absent)."""
        return self.progress.get(name, np.array([]))


def _accept_every_final(logdir: Path, final: Mapping[str, Any]) -> bool:
    """The default of :attr:`RunLayout.accepts`: every ``final.json`` finishes its run."""
    return True


@dataclasses.dataclass(frozen=True)
class RunLayout(Generic[SpecT]):
    """Where a suite's runs live under its root and what their logdirs hold.

    Attributes:
        pattern: the glob of the logdirs under the root (``*/lr*/seed*``).
        spec: the run of a logdir from its folders under the root (:attr:`NamedRun.parts`);
            None, or a ``ValueError``, for a folder that is not a run's.
        checkpoint: the file, relative to a logdir, whose presence makes the run resumable.
        splits: the evaluations (``eval_{split}.json``) a logdir may hold.
        score: a finished run's score, from its ``final.json``.
        accepts: whether a ``final.json`` finishes its run (a run the suite wants longer is
            resumed instead); every one by default.
    """

    pattern: str
    spec: Callable[[tuple[str, ...]], SpecT | None]
    checkpoint: str
    splits: tuple[str, ...]
    score: Callable[[Mapping[str, Any]], Any]
    accepts: Callable[[Path, Mapping[str, Any]], bool] = _accept_every_final

    def runs(self, root: Path) -> Iterator[tuple[SpecT, Path]]:
        """The run directories under ``root``, sorted, with their runs: ``(run, logdir)``."""
        for logdir in sorted(root.glob(self.pattern)):
            try:
                spec = self.spec(logdir.relative_to(root).parts)
            except ValueError:
                continue
            if spec is not None and logdir.is_dir():
                yield spec, logdir

    def read_status(self, logdir: Path) -> RunStatus:
        """Inspect a logdir (missing is fine): ``final.json``, the checkpoint, ``eval_*.json``."""
        final = read_json(logdir / FINAL_FILE)
        if final is not None and not self.accepts(logdir, final):
            final = None
        return RunStatus(
            finished=final is not None,
            resumable=(logdir / self.checkpoint).is_file(),
            evaluated=frozenset(split for split in self.splits if (logdir / f"eval_{split}.json").is_file()),
            score=to_float(self.score(final or {})),
        )

    def scan(self, root: Path) -> dict[SpecT, RunStatus]:
        """The status of every run directory under ``root``."""
        return {spec: self.read_status(logdir) for spec, logdir in self.runs(root)}

    def finished_runs(self, root: Path, result: type[ResultT]) -> list[ResultT]:
        """Every finished run (``final.json`` readable) under ``root``, as a ``result``.

        ``config.json``, ``bench_state.json``, ``progress.csv`` and the evaluations are empty
        when missing.
        """
        runs = []
        for spec, logdir in self.runs(root):
            final = read_json(logdir / FINAL_FILE)
            if final is None:
                continue
            progress = read_progress(logdir / "progress.csv") if (logdir / "progress.csv").is_file() else {}
            runs.append(
                result(
                    spec=spec,
                    logdir=logdir,
                    final=final,
                    state=read_json(logdir / STATE_FILE) or {},
                    config=read_json(logdir / "config.json") or {},
                    progress=progress,
                    evals=read_evaluations(logdir, self.splits),
                )
            )
        return runs


def run_steps(
    spec: NamedRun,
    status: RunStatus,
    train: Callable[[bool], list[str]],
    evaluate: Callable[[str], list[str]],
) -> list[Step]:
    """The steps left to finish ``spec``: training unless it is finished, then its missing evaluations.

    Args:
        spec: the run.
        status: what its logdir holds.
        train: the training command line; its argument says whether the run resumes from
            its checkpoint.
        evaluate: the evaluation command line of a split (of :attr:`NamedRun.splits`).

    Returns:
        ``[("train" | "eval", argv), ...]``: nothing for a run finished and evaluated, the
        missing evaluations for a finished one, otherwise training then every evaluation.
    """
    steps = [] if status.finished else [("train", train(status.resumable))]
    done = status.evaluated if status.finished else frozenset()
    return steps + [("eval", evaluate(split)) for split in spec.splits if split not in done]


@dataclasses.dataclass
class RunPlan(Generic[SpecT]):
    """The runs of a suite as far as they are decided, sorted by what is left to do.

    ``runs`` are in plan order; ``waiting`` holds what waits for a choice (a grid's best
    value) before its runs can be planned. :meth:`file_runs` puts each run in one of
    ``done`` (finished and evaluated), ``evaluate`` (finished, not evaluated), ``resume`` (a
    checkpoint) and ``start`` (nothing usable). A runner's plan subclasses it with its
    options and choices.
    """

    runs: list[SpecT] = dataclasses.field(default_factory=list)
    waiting: list[Any] = dataclasses.field(default_factory=list)
    done: list[SpecT] = dataclasses.field(default_factory=list)
    evaluate: list[SpecT] = dataclasses.field(default_factory=list)
    resume: list[SpecT] = dataclasses.field(default_factory=list)
    start: list[SpecT] = dataclasses.field(default_factory=list)

    def file_runs(self, statuses: Mapping[SpecT, RunStatus]) -> None:
        """File every run of :attr:`runs` under what is left to do for it.

        Args:
            statuses: what each logdir holds; an absent run is not started. A run is
                evaluated when it has every split it needs (:attr:`NamedRun.splits`), and
                resumable when it has a checkpoint and can resume (:attr:`NamedRun.resumable`).
        """
        for spec in self.runs:
            status = statuses.get(spec, RunStatus())
            if status.finished:
                (self.done if status.evaluated >= set(spec.splits) else self.evaluate).append(spec)
            else:
                (self.resume if status.resumable and spec.resumable else self.start).append(spec)

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
    the widenings of the grid so far, and ``grid`` holds its values, sorted, widenings
    included: every one of them has its runs finished (in ``scores``) or in ``missing``.
    """

    value: float | None
    scores: dict[float, float]
    missing: tuple[SpecT, ...] = ()
    widened: int = 0
    grid: tuple[float, ...] = ()

    def at_edge(self) -> bool:
        """Whether the choice is an end of its (possibly widened) grid of several values."""
        grid = sorted(self.scores)
        return len(grid) > 1 and self.value in (grid[0], grid[-1])


def choose_on_grid(
    grid: Sequence[float],
    runs_at: Callable[[float], Sequence[SpecT]],
    statuses: Mapping[SpecT, RunStatus],
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
        statuses: what each logdir holds; a run scores once finished (:attr:`RunStatus.score`).
        max_widenings: how many times the grid may be widened.
        factor: the ratio between a new value and the end of the grid it extends.

    Returns:
        A :class:`GridChoice`.

    Example:
        >>> statuses = {("lr", 0.001): RunStatus(True, score=80.0)}
        >>> statuses[("lr", 0.002)] = RunStatus(True, score=82.0)
        >>> choose_on_grid([0.001, 0.002], lambda v: [("lr", v)], statuses, 2).value
        0.002
    """
    scores = {spec: status.score for spec, status in statuses.items() if status.finished}
    values = sorted(logdir_value(v) for v in grid)
    if len(values) == 1:
        return GridChoice(values[0], {}, grid=tuple(values))
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
            return GridChoice(None, found, tuple(missing), widened, tuple(values))
        best = max(values, key=lambda v: (-math.inf if math.isnan(found[v]) else found[v], -v))
        if len(grid) < 3 or widened == max_widenings or best not in (values[0], values[-1]):
            return GridChoice(best, found, (), widened, tuple(values))
        values = (
            [logdir_value(best / factor), *values]
            if best == values[0]
            else [*values, logdir_value(best * factor)]
        )
        widened += 1


class RecordedOptions:
    """A frozen dataclass of plain values and tuples, recorded in ``bench_plan.json``."""

    def require(self, *names: str) -> None:
        """Raise a ``ValueError`` for the first of the fields ``names`` that is empty."""
        for name in names:
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty. Received: {name}={getattr(self, name)!r}")

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


class TunedOptions(RecordedOptions):
    """Recorded options whose learning rate is tuned on the grid ``learning_rates`` (a field).

    Subclasses call ``super().__post_init__()``, which writes the grid as it reads back from
    logdir names (:func:`logdir_value`), without repeats.
    """

    learning_rates: tuple[float, ...]

    def __post_init__(self) -> None:
        rates = tuple(dict.fromkeys(logdir_value(lr) for lr in self.learning_rates))
        object.__setattr__(self, "learning_rates", rates)

    @property
    def tuning(self) -> bool:
        """Whether there is a learning rate to choose (more than one on the grid)."""
        return len(self.learning_rates) > 1
