"""Trace-norm parser benchmark (issue 16): the runs and tables that the issue asks for, through the CLI.

The convex trace-norm bilinear parser (:mod:`keras_structured.applications.parsing.tracenorm`, Frank-Wolfe /
Hazan on ``||A||_* + lam ||b||_2 <= C``) is trained and evaluated only through
``python examples/tracenorm_parser.py train / evaluate / frobenius``; the benchmark reads the
files those write (``config.json``, ``progress.csv``, ``checkpoint.npz``, ``final.json``,
``eval_{split}.json``), never the library's internals.

The plan (:func:`plan_suite`, a pure function of the protocol and of what the logdirs hold).
Every number is a module constant below, gathered in :class:`Protocol`:

1. **UAS against C** (kind ``sparsemap``): vi_vtb 2.0, full treebank, SparseMAP loss,
   full-batch Frank-Wolfe with the step ``2/(k+2)``, ``d =`` :data:`DIM`, ``lam =`` :data:`LAM`,
   :data:`STEPS` steps with dev UAS every :data:`EVAL_EVERY` steps, for each C of :data:`CS`
   (a log2 grid around the first run of docs/results.md at C = 20); dev UAS at the end (``final.json``)
   and test UAS (``evaluate --split test``). The C of best final dev UAS is chosen (ties:
   the smaller C); a best C at an end of the grid widens it by a factor of 2, at most
   :data:`MAX_WIDENINGS` times, and the choice waits for the new run.
2. **Loss and step rule** at the chosen C on vi: the structured hinge (kind ``hinge``,
   :data:`STEPS` steps) and the line search (kind ``line_search``, :data:`LINE_SEARCH_STEPS`
   steps: a step costs 3-4 of the standard ones).
3. **The Frobenius baseline** (kind ``frobenius``): the same features and loss, a dense
   ``A`` with the penalty ``mu (||A||_F^2 + ||b||^2)`` trained by Adam
   (:data:`FROBENIUS_LEARNING_RATE`, :data:`FROBENIUS_STEPS` full-batch steps) for each mu
   of :data:`FROBENIUS_MUS`; the mu of best dev UAS is the baseline, and a best mu at an end
   of the grid widens it by :data:`FROBENIUS_MU_FACTOR` (at most :data:`MAX_WIDENINGS`
   times). It stores ``d^2 + 15`` parameters.
4. **Time per iteration and peak memory against d** (kind ``dim``): vi, :data:`DIM_STEPS`
   steps at ``C =`` :data:`DIM_C` for each d of :data:`DIMS`; time per step from
   ``progress.csv``, the process's peak resident memory from ``final.json``.
5. **en_ewt 2.0** (kind ``stochastic``): the full treebank (12,543 sentences) with the
   minibatch variant (:data:`STOCHASTIC_BATCH_SIZE` random sentences per step,
   :data:`STOCHASTIC_STEPS` steps, dev UAS every :data:`EVAL_EVERY` steps) at the chosen C
   times each of :data:`EN_C_FACTORS`: UAS against C on en too.

Why ``d = 2**12`` (the features' default) and not ``2**14``: the Frobenius baseline holds
``d^2`` floats in four arrays (the matrix, Adam's two moments, the gradient), 0.5 GiB at
``2**12`` but 8 GiB at ``2**14``, and the comparison needs the same features; part 4 shows
what d costs the trace-norm parser.

Estimated wall times on 2 cores shared with another job (from short probes: 0.5-2 s per
full-batch vi step, slower at small C where SparseMAP spreads over many trees; 6 s per
Frobenius step; every process spends about 20 s importing and featurising):

====================  =====  ==================================  ===========
part                  runs   per run                             total
====================  =====  ==================================  ===========
C sweep (vi)          5      5-15 min (300 steps, 12 dev evals)  45-60 min
hinge (vi)            1      3 min (a step is cheap)             3 min
line search (vi)      1      15-30 min (200 steps)               15-30 min
Frobenius (vi)        3-5    8-15 min (100 Adam steps)           25-60 min
time/memory vs d      7      1 min (10 steps)                    7 min
stochastic (en)       3      20 min (200 steps, 8 dev evals)     60 min
====================  =====  ==================================  ===========

about 3-3.5 hours in all; no run approaches an hour, and every training process stops
after :data:`benchmarks.runner_core.TIME_LIMIT_MINUTES` minutes anyway (``train --time-limit``:
a checkpoint, no ``final.json``), to be resumed by the next process.

Subcommands:

* ``run``: brings every run of the plan to completion, ``--jobs`` at a time, in rounds (the
  C sweep, the d runs and the Frobenius runs first; the runs at the chosen C once it is
  chosen). A run is one ``python examples/tracenorm_parser.py train ... --time-limit M``
  subprocess (``frobenius ...`` for the baseline) in its logdir
  ``{root}/{language}/{kind}/{C|mu|d}{value}`` (output appended to ``bench_train.log``
  there): a run with ``final.json`` is finished and skipped, one with ``checkpoint.npz`` is
  resumed (``train`` resumes from the checkpoint of its logdir), any other is started afresh
  (its folder emptied). Finished runs are evaluated with ``evaluate --split test`` (skipped
  when ``eval_test.json`` exists; the dev UAS is ``final.json``'s, the same sentences that
  ``evaluate --split dev`` would parse). Wall times accumulate in ``bench_state.json`` over
  sessions. Ends with ``report``.
* ``report``: writes ``{root}/results.md`` and ``{root}/figures/*.png`` from the finished runs.

``--quick`` is a smoke test of a few minutes into its own root: vi with 200 training and 100
dev sentences, 10 steps (5 with the line search), C in {10, 40}, ``d = 2**10``, one mu, d in
{2**8, 2**10} (3 steps), en with 200 training and 100 dev sentences in minibatches of 50 (test
sets are whole).

The run, round and report machinery is the runner core (:mod:`benchmarks.runner_core`); the
figures are drawn by ``examples/tracenorm_parser.py``'s plot functions. Run this script from
the repository root as ``python benchmarks/bench_tracenorm.py`` or
``python -m benchmarks.bench_tracenorm``.

Example:
    python benchmarks/bench_tracenorm.py run --quick
    python benchmarks/bench_tracenorm.py run --dry-run
    python benchmarks/bench_tracenorm.py run --jobs 1
    python benchmarks/bench_tracenorm.py report --root benchmarks/results/bench_tracenorm
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: import the package `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np

from benchmarks.report_tables import finished_line, finite_median, fmt, missing_run_lines, threads_per_job
from benchmarks.resumable_runs import PLAN_FILE, logdir_value, shared_data, to_float
from benchmarks.run_plans import (
    FinishedRun,
    GridChoice,
    NamedRun,
    RecordedOptions,
    RunLayout,
    RunPlan,
    RunStatus,
    Step,
    choose_on_grid,
    run_steps,
)
from benchmarks.runner_core import TIME_LIMIT_MINUTES, Runner, SuiteRun
from keras_structured.run_directory import make_directory

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "tracenorm_parser.py"
#: Language code -> treebank folder under the data directory.
LANGUAGES = {"vi": "vi_vtb-2.0", "en": "en_ewt-2.0"}
#: The kinds of run, in plan order (see the module docstring).
KINDS = ("sparsemap", "hinge", "line_search", "frobenius", "dim", "stochastic")
KIND_LABELS = {
    "sparsemap": "trace norm, SparseMAP loss, step 2/(k+2)",
    "hinge": "trace norm, structured hinge, step 2/(k+2)",
    "line_search": "trace norm, SparseMAP loss, line search",
    "frobenius": "Frobenius penalty (dense A), SparseMAP loss, Adam",
    "dim": "trace norm, SparseMAP loss, step 2/(k+2) (time and memory against d)",
    "stochastic": "trace norm, SparseMAP loss, minibatch step 2/(k+2)",
}
#: The runs that wait for the chosen C: (language, kind).
AT_CHOSEN_C = (("vi", "hinge"), ("vi", "line_search"), ("en", "stochastic"))

#: Hashing dimension d of the token features (all runs but the d sweep).
DIM = 2**12
#: Weight of ||b||_2 in the ball (as in the first run of docs/results.md).
LAM = 5.0
#: The radii C of the sweep: a log2 grid around the first run of docs/results.md (C = 20).
CS = (5.0, 10.0, 20.0, 40.0, 80.0)
#: How many times the C grid may be widened by a factor of 2 (see :func:`choose`).
MAX_WIDENINGS = 2
#: Frank-Wolfe steps of the sweep and of the hinge run.
STEPS = 300
#: Steps of the line-search run (each evaluates the objective up to 10 times).
LINE_SEARCH_STEPS = 200
#: Dev UAS every this many steps (progress.csv), and checkpoints as often.
EVAL_EVERY = 25
CHECKPOINT_EVERY = 25
#: The Frobenius baseline's penalty weights (the best dev UAS is kept), Adam step and steps.
FROBENIUS_MUS = (1e-5, 1e-4, 1e-3)
#: A best mu at an end of its grid widens it by this factor (at most :data:`MAX_WIDENINGS` times).
FROBENIUS_MU_FACTOR = 10.0
FROBENIUS_LEARNING_RATE = 1e-2
FROBENIUS_STEPS = 100
#: The feature dimensions of the time and memory runs, their steps and radius.
DIMS = tuple(2**k for k in range(10, 17))
DIM_STEPS = 10
DIM_C = 20.0
#: The en minibatch variant: sentences per step and steps.
STOCHASTIC_BATCH_SIZE = 1000
STOCHASTIC_STEPS = 200
#: The en minibatch runs are at these multiples of the C chosen on vi: UAS against C on en.
EN_C_FACTORS = (0.5, 1.0, 2.0)
SEED = 0
#: A gap curve is fitted on log axes from this step on (see :func:`gap_slope`).
SLOPE_FROM_STEP = 10

DEFAULT_DATA = shared_data("ud")
DEFAULT_ROOT, QUICK_ROOT = Path("benchmarks/results/bench_tracenorm"), Path("runs/bench_tracenorm_quick")
CHECKPOINT_FILE = "checkpoint.npz"
#: The logdirs under the root: ``{language}/{kind}/{label}``.
LOGDIRS = "*/*/*"
SPLITS = ("dev", "test")
TREEBANK_SIZES = {"vi": "1,400 / 800 / 800", "en": "12,543 / 2,002 / 2,077"}


@dataclasses.dataclass(frozen=True)
class Protocol(RecordedOptions):
    """Every number of the plan (the defaults are the module constants; :data:`QUICK` is the smoke test).

    ``{language}_train_sentences`` / ``{language}_dev_sentences`` keep the first N sentences
    of a split (None: all); test sets are always whole.
    """

    Cs: tuple[float, ...] = CS
    lam: float = LAM
    dim: int = DIM
    steps: int = STEPS
    line_search_steps: int = LINE_SEARCH_STEPS
    eval_every: int = EVAL_EVERY
    checkpoint_every: int = CHECKPOINT_EVERY
    frobenius_mus: tuple[float, ...] = FROBENIUS_MUS
    frobenius_learning_rate: float = FROBENIUS_LEARNING_RATE
    frobenius_steps: int = FROBENIUS_STEPS
    dims: tuple[int, ...] = DIMS
    dim_steps: int = DIM_STEPS
    dim_C: float = DIM_C
    stochastic_batch_size: int = STOCHASTIC_BATCH_SIZE
    stochastic_steps: int = STOCHASTIC_STEPS
    vi_train_sentences: int | None = None
    vi_dev_sentences: int | None = None
    en_train_sentences: int | None = None
    en_dev_sentences: int | None = None
    seed: int = SEED

    def __post_init__(self) -> None:
        self.require("Cs", "frobenius_mus", "dims")
        object.__setattr__(self, "Cs", tuple(sorted({logdir_value(C) for C in self.Cs})))
        object.__setattr__(
            self, "frobenius_mus", tuple(sorted({logdir_value(mu) for mu in self.frobenius_mus}))
        )
        object.__setattr__(self, "dims", tuple(sorted({int(d) for d in self.dims})))

    def limits(self, language: str) -> tuple[int | None, int | None]:
        """``(training, dev)`` sentence limits of ``language``."""
        return getattr(self, f"{language}_train_sentences"), getattr(self, f"{language}_dev_sentences")

    def steps_of(self, kind: str) -> int:
        """The steps of a run of ``kind``."""
        return {
            "line_search": self.line_search_steps,
            "frobenius": self.frobenius_steps,
            "dim": self.dim_steps,
            "stochastic": self.stochastic_steps,
        }.get(kind, self.steps)


FULL = Protocol()
QUICK = Protocol(
    Cs=(10.0, 40.0),
    dim=2**10,
    steps=10,
    line_search_steps=5,
    eval_every=5,
    checkpoint_every=5,
    frobenius_mus=(1e-4,),
    frobenius_steps=10,
    dims=(2**8, 2**10),
    dim_steps=3,
    stochastic_batch_size=50,
    stochastic_steps=10,
    vi_train_sentences=200,
    vi_dev_sentences=100,
    en_train_sentences=200,
    en_dev_sentences=100,
)


@dataclasses.dataclass(frozen=True)
class RunSpec(NamedRun):
    """One run: a kind (:data:`KINDS`), a treebank, and its C (mu for ``frobenius``, d for ``dim``)."""

    kind: str
    language: str
    value: float

    @classmethod
    def from_parts(cls, parts: tuple[str, ...]) -> RunSpec | None:
        """The run of ``{language}/{kind}/{label}``, or None for any other folder."""
        language, kind, label = parts
        prefix = cls(kind, language, 0.0).prefix
        if language in LANGUAGES and kind in KINDS and label.startswith(prefix):
            return cls(kind, language, logdir_value(float(label[len(prefix) :])))
        return None

    @property
    def prefix(self) -> str:
        """``mu``, ``d`` or ``C``: what :attr:`value` is."""
        return {"frobenius": "mu", "dim": "d"}.get(self.kind, "C")

    @property
    def label(self) -> str:
        """``C20``, ``mu0.0001`` or ``d4096``."""
        return f"{self.prefix}{int(self.value) if self.kind == 'dim' else self.value:g}"

    @property
    def parts(self) -> tuple[str, ...]:
        """``(language, kind, label)``."""
        return self.language, self.kind, self.label

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits to evaluate once trained (dev is in ``final.json``): test, but nothing for the
        d runs, nor for the Frobenius baseline, whose ``frobenius`` command evaluates dev and test
        itself (it keeps no model) before it writes ``final.json``."""
        return () if self.kind in ("dim", "frobenius") else ("test",)

    @property
    def resumable(self) -> bool:
        """Whether the CLI checkpoints this kind (all but the Frobenius baseline)."""
        return self.kind != "frobenius"


def choose(
    kind: str,
    language: str,
    grid: Sequence[float],
    statuses: Mapping[RunSpec, RunStatus],
    max_widenings: int = 0,
    factor: float = 2.0,
) -> GridChoice[RunSpec]:
    """The value of ``grid`` whose ``kind`` run on ``language`` has the best final dev UAS.

    A best value at an end of the grid widens it by ``factor``, at most ``max_widenings``
    times (:func:`benchmarks.run_plans.choose_on_grid`).

    Args:
        kind: the kind of the grid's runs (``sparsemap`` for C, ``frobenius`` for mu).
        language: their treebank.
        grid: the values.
        statuses: what each logdir holds.
        max_widenings: how many times the grid may be widened.
        factor: the ratio between a new value and the end of the grid it extends.

    Returns:
        A :class:`benchmarks.run_plans.GridChoice` of the dev UAS, waiting (``value`` None) for
        ``missing``.

    Example:
        >>> done = lambda uas: RunStatus(finished=True, score=uas)
        >>> statuses = {RunSpec("sparsemap", "vi", 10.0): done(60.0)}
        >>> statuses[RunSpec("sparsemap", "vi", 20.0)] = done(62.0)
        >>> choose("sparsemap", "vi", [10, 20], statuses).value
        20.0
    """
    return choose_on_grid(
        grid, lambda value: [RunSpec(kind, language, value)], statuses, max_widenings, factor
    )


@dataclasses.dataclass(kw_only=True)
class Plan(RunPlan[RunSpec]):
    """The runs of the protocol as far as they are decided, split by what is left to do.

    ``runs`` holds the C sweep (widened as :attr:`C` decides), the d runs, the Frobenius
    runs and, once C is chosen, the runs at that C; ``waiting`` the (language, kind) pairs
    still waiting for it. ``done`` runs are finished and evaluated, ``evaluate`` ones
    finished but not evaluated, ``resume`` ones have a checkpoint, ``start`` ones nothing.
    """

    protocol: Protocol
    C: GridChoice[RunSpec]
    mu: GridChoice[RunSpec]


def plan_suite(protocol: Protocol, statuses: Mapping[RunSpec, RunStatus]) -> Plan:
    """The runs of ``protocol`` given what the logdirs hold: pure, so that it can be tested and re-planned.

    Args:
        protocol: the numbers of the plan.
        statuses: what each logdir holds (:data:`LAYOUT`).

    Returns:
        The :class:`Plan`.

    Example:
        >>> plan = plan_suite(QUICK, {})
        >>> [spec.name for spec in plan.start][:3], plan.waiting[0]
        (['vi/sparsemap/C10', 'vi/sparsemap/C40', 'vi/dim/d256'], ('vi', 'hinge'))
    """
    runs: dict[RunSpec, None] = {}  # an ordered set
    C = choose("sparsemap", "vi", protocol.Cs, statuses, MAX_WIDENINGS)
    runs.update((RunSpec("sparsemap", "vi", value), None) for value in C.grid)
    runs.update((RunSpec("dim", "vi", float(d)), None) for d in protocol.dims)
    mu = choose("frobenius", "vi", protocol.frobenius_mus, statuses, MAX_WIDENINGS, FROBENIUS_MU_FACTOR)
    runs.update((RunSpec("frobenius", "vi", value), None) for value in mu.grid)
    waiting = []
    for language, kind in AT_CHOSEN_C:
        if C.value is None:
            waiting.append((language, kind))
        else:
            factors = EN_C_FACTORS if language == "en" else (1.0,)
            runs.update((RunSpec(kind, language, logdir_value(C.value * f)), None) for f in factors)
    plan = Plan(runs=list(runs), waiting=waiting, protocol=protocol, C=C, mu=mu)
    plan.file_runs(statuses)
    return plan


# ---------------------------------------------------------------------------------------------- disk

#: The logdirs: ``final.json`` (its dev UAS chooses C and mu), ``checkpoint.npz``, ``eval_*.json``.
LAYOUT = RunLayout(
    pattern=LOGDIRS,
    spec=RunSpec.from_parts,
    checkpoint=CHECKPOINT_FILE,
    splits=SPLITS,
    score=lambda final: (final.get("dev") or {}).get("uas"),
)


# ------------------------------------------------------------------------------------------ commands


def train_command(
    spec: RunSpec,
    protocol: Protocol,
    data: Path,
    root: Path,
    time_limit: float = TIME_LIMIT_MINUTES,
    python: str = sys.executable,
) -> list[str]:
    """The ``train`` (``frobenius`` for the baseline) argv of ``spec``.

    Example:
        >>> spec = RunSpec("stochastic", "en", 20.0)
        >>> argv = train_command(spec, FULL, Path("ud"), Path("runs"), python="py")
        >>> " ".join(argv[2:])  # doctest: +NORMALIZE_WHITESPACE
        'train --treebank ud/en_ewt-2.0 --C 20 --lam 5 --steps 200 --loss sparsemap --step-rule standard
        --dim 4096 --seed 0 --eval-every 25 --checkpoint-every 25 --batch-size 1000 --logdir
        runs/en/stochastic/C20 --time-limit 40'
    """
    p = protocol
    argv = [python, str(EXAMPLE)]
    treebank = str(data / LANGUAGES[spec.language])
    steps = str(p.steps_of(spec.kind))
    if spec.kind == "frobenius":
        argv += ["frobenius", "--treebank", treebank, "--mu", f"{spec.value:g}"]
        argv += ["--learning-rate", f"{p.frobenius_learning_rate:g}", "--steps", steps]
        argv += ["--dim", str(p.dim), "--seed", str(p.seed)]
    else:
        C = p.dim_C if spec.kind == "dim" else spec.value
        argv += ["train", "--treebank", treebank, "--C", f"{C:g}", "--lam", f"{p.lam:g}", "--steps", steps]
        argv += ["--loss", "hinge" if spec.kind == "hinge" else "sparsemap"]
        argv += ["--step-rule", "line_search" if spec.kind == "line_search" else "standard"]
        argv += ["--dim", str(int(spec.value) if spec.kind == "dim" else p.dim), "--seed", str(p.seed)]
        argv += ["--eval-every", "0" if spec.kind == "dim" else str(p.eval_every)]
        argv += ["--checkpoint-every", str(p.checkpoint_every)]
        if spec.kind == "stochastic":
            argv += ["--batch-size", str(p.stochastic_batch_size)]
    train_limit, dev_limit = p.limits(spec.language)
    if train_limit is not None:
        argv += ["--max-train-sentences", str(train_limit)]
    if dev_limit is not None:
        argv += ["--max-dev-sentences", str(dev_limit)]
    argv += ["--logdir", str(spec.logdir(root))]
    if spec.resumable and time_limit > 0:
        argv += ["--time-limit", f"{time_limit:g}"]
    return argv


def eval_command(logdir: Path, split: str, python: str = sys.executable) -> list[str]:
    """``python examples/tracenorm_parser.py evaluate --logdir ... --split ...`` argv."""
    return [python, str(EXAMPLE), "evaluate", "--logdir", str(logdir), "--split", split]


def run_commands(
    spec: RunSpec, status: RunStatus, run: SuiteRun[Protocol], python: str = sys.executable
) -> list[Step]:
    """The steps left to finish ``spec``: training (which resumes from a checkpoint), then evaluations.

    Args:
        spec: the run.
        status: what its logdir holds.
        run: the protocol, the folder of the treebank folders, the runs' root directory and
            the time limit of a training process.
        python: the interpreter of the subprocesses.

    Returns:
        ``[("train" | "eval", argv), ...]``: nothing for a run finished and evaluated, the
        missing evaluations for a finished one, otherwise training then the evaluations.
    """
    return run_steps(
        spec,
        status,
        lambda resume: train_command(spec, run.options, run.data, run.root, run.time_limit, python),
        lambda split: eval_command(spec.logdir(run.root), split, python),
    )


def describe_choices(plan: Plan) -> list[str]:
    """One line for the choice of C and one for mu, for the terminal and ``results.md``."""
    lines = []
    for choice, what, grid in (
        (plan.C, "C (vi, SparseMAP loss, by final dev UAS)", plan.protocol.Cs),
        (plan.mu, "mu of the Frobenius baseline (vi, by dev UAS)", plan.protocol.frobenius_mus),
    ):
        values = ", ".join(f"{v:g}" for v in grid)
        if choice.value is None:
            lines.append(
                f"{what}: not chosen yet ({len(choice.missing)} runs of the grid {values} unfinished)"
            )
        elif not choice.scores:
            lines.append(f"{what}: {choice.value:g}, the only value (nothing tuned)")
        else:
            factor = 2 if choice is plan.C else FROBENIUS_MU_FACTOR
            widened = (
                f", grid widened {choice.widened} time(s) by a factor of {factor:g}" if choice.widened else ""
            )
            edge = "; at an end of the grid" if choice.at_edge() else ""
            lines.append(
                f"{what}: {choice.value:g} (dev UAS {fmt(choice.scores[choice.value], 2)}; grid {values}"
                f"{widened}{edge})"
            )
    return lines


def recorded_choices(plan: Plan) -> dict[str, dict[str, Any]]:
    """The choices of C and mu, for ``bench_plan.json``."""
    return {
        name: {"value": choice.value, "scores": {f"{k:g}": v for k, v in choice.scores.items()}}
        for name, choice in (("C", plan.C), ("mu", plan.mu))
    }


# ---------------------------------------------------------------------------------------------- report


@dataclasses.dataclass
class RunResult(FinishedRun):
    """A finished run (``final.json``) as read back from its logdir, with its evaluations."""

    spec: RunSpec

    def uas(self, split: str) -> float:
        """``final.json``'s dev UAS, or ``eval_{split}.json``'s UAS (NaN when not evaluated)."""
        if split == "dev" and "dev" in self.final:
            return to_float((self.final.get("dev") or {}).get("uas"))
        return to_float(self.evals.get(split, {}).get("uas"))

    @property
    def step_seconds(self) -> np.ndarray:
        """The time of each step (the differences of the cumulative ``time`` column)."""
        times = self.column("time")
        return np.diff(np.concatenate([[0.0], times])) if times.size else times

    @property
    def C(self) -> float:
        """The radius the run was trained with (NaN for the baseline)."""
        return to_float(self.config.get("hazan", {}).get("C"))

    @property
    def wall_minutes(self) -> float:
        """Training wall time over every session (``bench_state.json``), in minutes."""
        return to_float(self.state.get("train_wall_s")) / 60


def gap_slope(steps: np.ndarray, gaps: np.ndarray, start: int = SLOPE_FROM_STEP) -> float:
    """The least-squares slope of ``log(running min of the gap)`` against ``log(step)`` from ``start`` on.

    The Frank-Wolfe gap of an iterate oscillates; its running minimum (the best certificate
    so far) is what the ``O(1/k)`` bound speaks of (Jaggi 2013, Theorem 2): a slope of about
    -1 or steeper. NaN with fewer than 3 positive points.

    Example:
        >>> k = np.arange(1.0, 101.0)
        >>> round(gap_slope(k, 3.0 / k), 6)
        -1.0
    """
    steps, gaps = np.asarray(steps, dtype=float), np.asarray(gaps, dtype=float)
    best = np.fmin.accumulate(np.where(np.isfinite(gaps), gaps, np.inf)) if gaps.size else gaps
    keep = (steps >= start) & (best > 0) & np.isfinite(best)
    if keep.sum() < 3:
        return math.nan
    return float(np.polyfit(np.log(steps[keep]), np.log(best[keep]), 1)[0])


def _int(value: Any) -> str:
    number = to_float(value)
    return "n/a" if not math.isfinite(number) else f"{int(number):,}"


def _sci(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.3g}"


def _by_kind(runs: list[RunResult], kind: str, language: str = "vi") -> list[RunResult]:
    return sorted(
        (r for r in runs if (r.spec.kind, r.spec.language) == (kind, language)), key=lambda r: r.spec.value
    )


def _uas_row(run: RunResult) -> dict:
    """A point of the UAS-against-C plot."""
    return {"C": run.spec.value, "dev_uas": run.uas("dev"), "test_uas": run.uas("test")}


def _sweep_table(plan: Plan, runs: list[RunResult]) -> tuple[list[str], list[dict]]:
    """UAS against C (vi, SparseMAP loss): one row per finished sweep run; the rows for the plot."""
    lines = [
        f"vi_vtb 2.0, SparseMAP loss, full-batch step 2/(k+2), d = {plan.protocol.dim}, lam = "
        f"{plan.protocol.lam:g}. Dev UAS after the last step (`final.json`), test UAS of the same model "
        "(`evaluate --split test`); objective and gap of the last step's iterate (mean training loss and "
        "its Frank-Wolfe gap); stored parameters = rank (2 d + 1) + 15. The chosen C in bold.",
        "",
        "| C | steps | dev UAS | test UAS | objective | gap | rank | stored parameters | s/step (median) "
        "| train wall (min) |",
        "|---" * 10 + "|",
    ]
    rows = []
    for run in _by_kind(runs, "sparsemap"):
        f = run.final
        C = f"**{run.spec.value:g}**" if run.spec.value == plan.C.value else f"{run.spec.value:g}"
        lines.append(
            f"| {C} | {_int(f.get('steps'))} | {fmt(run.uas('dev'), 2)} | {fmt(run.uas('test'), 2)} "
            f"| {_sci(to_float(f.get('objective')))} | {_sci(to_float(f.get('gap')))} "
            f"| {_int(f.get('rank'))} | {_int(f.get('num_parameters'))} "
            f"| {fmt(finite_median(run.step_seconds), 2)} | {fmt(run.wall_minutes, 1)} |"
        )
        rows.append(_uas_row(run))
    if not rows:
        lines.append("| missing | | | | | | | | | |")
    return lines, rows


def _comparison_table(plan: Plan, runs: list[RunResult]) -> list[str]:
    """Trace norm (SparseMAP, hinge, line search) at the chosen C against the Frobenius runs."""
    lines = [
        "vi_vtb 2.0, d = "
        f"{plan.protocol.dim}. Train loss: the mean training loss of the last step (the hinge is another "
        "loss: not comparable); gap: the Frank-Wolfe gap there (the baseline has none). Stored parameters: "
        "rank (2 d + 1) + 15 for the factored A, d^2 + 15 for the dense one. The baseline's mu with the best "
        "dev UAS in bold.",
        "",
        "| method | setting | steps | dev UAS | test UAS | stored parameters | rank | train loss | gap "
        "| s/step (median) | train wall (min) |",
        "|---" * 11 + "|",
    ]
    wanted = [("sparsemap", plan.C.value), ("hinge", plan.C.value), ("line_search", plan.C.value)]
    wanted += [("frobenius", mu) for mu in sorted({*plan.protocol.frobenius_mus, *plan.mu.scores})]
    index = {(r.spec.kind, r.spec.value): r for r in runs if r.spec.language == "vi"}
    for kind, value in wanted:
        label = KIND_LABELS[kind]
        setting = "C not chosen" if value is None else f"{'mu' if kind == 'frobenius' else 'C'} = {value:g}"
        if kind == "frobenius" and value == plan.mu.value and len(plan.protocol.frobenius_mus) > 1:
            setting = f"**{setting}**"
        run = index.get((kind, value))
        if run is None:
            lines.append(f"| {label} | {setting} | missing | | | | | | | | |")
            continue
        f = run.final
        dense = kind == "frobenius"
        loss = f.get("loss") if dense else f.get("objective")
        lines.append(
            f"| {label} | {setting} | {_int(f.get('steps'))} | {fmt(run.uas('dev'), 2)} "
            f"| {fmt(run.uas('test'), 2)} "
            f"| {_int(f.get('num_parameters'))} | {'dense' if dense else _int(f.get('rank'))} "
            f"| {_sci(to_float(loss))} | {'n/a' if dense else _sci(to_float(f.get('gap')))} "
            f"| {fmt(finite_median(run.step_seconds), 2)} | {fmt(run.wall_minutes, 1)} |"
        )
    return lines


def _stochastic_table(plan: Plan, runs: list[RunResult]) -> list[str]:
    p = plan.protocol
    train_limit, dev_limit = p.limits("en")
    subset = (
        f"the first {train_limit} training sentences"
        if train_limit
        else "the full training set (12,543 sentences)"
    )
    lines = [
        f"en_ewt 2.0, {subset}, minibatches of {p.stochastic_batch_size} random sentences per step, step "
        f"2/(k+2), d = {p.dim}, lam = {p.lam:g}, at the C chosen on vi and its neighbours (x 1/2, x 2)"
        f"{f', dev limited to its first {dev_limit} sentences' if dev_limit else ''}. Objective and gap are "
        "the last minibatch's (a constant batch size does not converge to the minimiser).",
        "",
        "| C | batch | steps | dev UAS | test UAS | rank | stored parameters | minibatch objective "
        "| minibatch gap | s/step (median) | train wall (min) |",
        "|---" * 11 + "|",
    ]
    found = _by_kind(runs, "stochastic", "en")
    for run in found:
        f = run.final
        lines.append(
            f"| {run.spec.value:g} | {p.stochastic_batch_size} | {_int(f.get('steps'))} "
            f"| {fmt(run.uas('dev'), 2)} | {fmt(run.uas('test'), 2)} | {_int(f.get('rank'))} "
            f"| {_int(f.get('num_parameters'))} "
            f"| {_sci(to_float(f.get('objective')))} | {_sci(to_float(f.get('gap')))} "
            f"| {fmt(finite_median(run.step_seconds), 2)} | {fmt(run.wall_minutes, 1)} |"
        )
    if not found:
        lines.append("| missing | | | | | | | | | | |")
    return lines


def _dim_table(plan: Plan, runs: list[RunResult]) -> tuple[list[str], list[dict]]:
    """Time per step and peak memory against d; the rows for the plot."""
    p = plan.protocol
    lines = [
        f"vi_vtb 2.0, SparseMAP loss, full batch, C = {p.dim_C:g}, {p.dim_steps} steps per d. Time per step: "
        "median (and mean) of the steps' times in `progress.csv` (scores, SparseMAP, gradient operator, top "
        "singular pair, update; not the dev parsing). Peak memory: the training process's peak resident "
        "memory (`final.json`, the imports and the data included). A: the factors the model stores; a dense "
        "A would take 8 d^2 bytes.",
        "",
        "| d | steps | s/step (median) | s/step (mean) | peak memory (MiB) | A stored (MiB) | dense A (MiB) "
        "| dev UAS |",
        "|---" * 8 + "|",
    ]
    rows = []
    for run in _by_kind(runs, "dim"):
        d = int(run.spec.value)
        f = run.final
        seconds = run.step_seconds
        stored = to_float(f.get("num_parameters")) * 8 / 2**20
        row = {
            "d": d,
            "median": finite_median(seconds),
            "mean": float(np.nanmean(seconds)) if np.isfinite(seconds).any() else math.nan,
            "peak": to_float(f.get("peak_memory_mib")),
            "stored": stored,
            "dense": 8 * d**2 / 2**20,
        }
        rows.append(row)
        lines.append(
            f"| {d} | {_int(f.get('steps'))} | {fmt(row['median'], 3)} | {fmt(row['mean'], 3)} "
            f"| {fmt(row['peak'], 0)} | {_sci(stored)} | {row['dense']:,.1f} "
            f"| {fmt(run.uas('dev'), 2)} |"
        )
    if not rows:
        lines.append("| missing | | | | | | | |")
    return lines, rows


def _claims_table(runs: list[RunResult]) -> list[str]:
    """The notes' claims checked on every finished trace-norm run's log."""
    lines = [
        "From every step of each finished trace-norm run (`progress.csv`): the largest rank / step "
        "(Hazan: at most k factors after k steps, so at most 1), the largest `norm_bound / C` (every "
        "iterate feasible: at most 1), and the slope of the running minimum of the Frank-Wolfe gap "
        f"against the step on log axes from step {SLOPE_FROM_STEP} on (O(1/k): about -1 or steeper; "
        "for the minibatch run, the gap of a different minibatch at each step).",
        "",
        "| run | steps | max rank / step | max norm_bound / C | gap slope | first gap | last gap |",
        "|---" * 7 + "|",
    ]
    checked = [r for r in runs if r.spec.kind != "frobenius" and r.column("step").size]
    order = {kind: i for i, kind in enumerate(KINDS)}
    for run in sorted(checked, key=lambda r: (order[r.spec.kind], r.spec.language, r.spec.value)):
        steps, gaps = run.column("step"), run.column("gap")
        ratio = float(np.nanmax(run.column("rank") / steps))
        feasible = float(np.nanmax(run.column("norm_bound"))) / run.C if math.isfinite(run.C) else math.nan
        lines.append(
            f"| {run.spec.name} | {int(steps[-1])} | {fmt(ratio, 3)} | {fmt(feasible, 6)} "
            f"| {fmt(gap_slope(steps, gaps), 2)} | {_sci(gaps[0])} | {_sci(gaps[-1])} |"
        )
    if not checked:
        lines.append("| none finished | | | | | | |")
    return lines


def _protocol_lines(protocol: Protocol) -> list[str]:
    """The protocol's numbers as a two-column table (None: the whole split)."""
    lines = ["| setting | value |", "|---|---|"]
    for name, value in protocol.to_json().items():
        text = (
            "all"
            if value is None
            else ", ".join(f"{v:g}" for v in value)
            if isinstance(value, list)
            else value
        )
        lines.append(f"| `{name}` | {text} |")
    return lines


def _missing_lines(plan: Plan) -> list[str]:
    """The planned runs not finished and evaluated, and those waiting for the choice of C."""
    waiting = [
        f"- `{language}/{kind}`: waits for the choice of C ({len(plan.C.missing)} sweep runs unfinished)"
        for language, kind in plan.waiting
    ]
    return missing_run_lines(plan, lambda spec: ", ".join(spec.splits), waiting)


def _example_module():
    """``examples/tracenorm_parser.py`` as a module (for its plot functions; no heavy import)."""
    if "tracenorm_parser" in sys.modules:
        return sys.modules["tracenorm_parser"]
    spec = importlib.util.spec_from_file_location("tracenorm_parser", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tracenorm_parser"] = module
    spec.loader.exec_module(module)
    return module


def _history(run: RunResult) -> list[dict]:
    """``progress.csv`` as the records ``plot_progress`` takes."""
    names = ("step", "rank", "objective", "gap")
    if not all(run.column(name).size for name in names):
        return []
    columns = [run.column(name) for name in names]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _curves_figure(groups: Mapping[str, RunResult], path: Path, title: str) -> None:
    """Rank, objective, Frank-Wolfe gap (log axes) and dev UAS against the step, one line per run."""
    example = _example_module()
    figure = example._figure(11.0, 7.5)
    axes = figure.subplots(2, 2).ravel()
    for label, run in groups.items():
        steps = run.column("step")
        axes[0].plot(steps, run.column("rank"), label=label)
        for ax, key in ((axes[1], "objective"), (axes[2], "gap")):
            values = run.column(key)
            keep = (values > 0) & np.isfinite(values)
            ax.plot(steps[keep], values[keep], label=label)
        dev = run.column("dev_uas")
        keep = np.isfinite(dev) if dev.size == steps.size else np.zeros(steps.size, bool)
        axes[3].plot(steps[keep], dev[keep], "o-", markersize=3, label=label)
    axes[0].set(xlabel="Frank-Wolfe step", ylabel="rank (factors of A)", title="Rank")
    axes[1].set(xscale="log", yscale="log", xlabel="Frank-Wolfe step", title="Objective (mean training loss)")
    axes[2].set(xscale="log", yscale="log", xlabel="Frank-Wolfe step", title="Frank-Wolfe gap")
    axes[3].set(xlabel="Frank-Wolfe step", ylabel="UAS (%)", title="Dev UAS")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path)


def _dim_figure(rows: list[dict], path: Path) -> None:
    example = _example_module()
    figure = example._figure(10.0, 3.8)
    left, right = figure.subplots(1, 2)
    d = [row["d"] for row in rows]
    left.plot(d, [row["median"] for row in rows], "o-", label="median")
    left.plot(d, [row["mean"] for row in rows], "s--", label="mean")
    left.set(xscale="log", xlabel="d", ylabel="seconds per step", title="Time per Frank-Wolfe step")
    left.set_xscale("log", base=2)
    right.plot(d, [row["peak"] for row in rows], "o-", label="peak memory of the process")
    right.plot(d, [row["stored"] for row in rows], "s-", label="A as stored (factors)")
    right.plot(d, [row["dense"] for row in rows], "k:", label="a dense A (8 d^2 bytes)")
    right.set(yscale="log", xlabel="d", ylabel="MiB", title="Memory")
    right.set_xscale("log", base=2)
    for ax in (left, right):
        ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path)


def _plot_figures(
    plan: Plan, runs: list[RunResult], sweep_rows: list[dict], dim_rows: list[dict], root: Path
) -> list[tuple[str, Path]]:
    """The figures of the report (``{root}/figures/``, and the runs' own): ``[(caption, path)]``."""
    out = make_directory(root / "figures")
    example = _example_module()
    figures = []
    en_runs = _by_kind(runs, "stochastic", "en")
    if sweep_rows:
        series = {"vi (full batch)": sweep_rows}
        if en_runs:
            series["en (minibatch)"] = [_uas_row(run) for run in en_runs]
        example.plot_sweep(series, out / "uas_vs_C.png")
        figures.append(("UAS against C (vi; en with minibatches)", out / "uas_vs_C.png"))
    sweep = {f"C = {r.spec.value:g}": r for r in _by_kind(runs, "sparsemap") if r.column("step").size}
    if sweep:
        _curves_figure(sweep, out / "sweep_curves.png", "vi, SparseMAP loss, step 2/(k+2): one line per C")
        figures.append(
            ("Rank, objective, gap and dev UAS against the step, per C (vi)", out / "sweep_curves.png")
        )
    minibatch = {f"C = {r.spec.value:g}": r for r in en_runs if r.column("step").size}
    if minibatch:
        _curves_figure(minibatch, out / "en_curves.png", "en, minibatch step 2/(k+2): one line per C")
        figures.append(
            ("Rank, minibatch objective and gap, dev UAS against the step, per C (en)", out / "en_curves.png")
        )
    compared = {}
    for kind in ("sparsemap", "hinge", "line_search"):
        for run in _by_kind(runs, kind):
            if run.spec.value == plan.C.value and run.column("step").size:
                compared[KIND_LABELS[kind]] = run
    if len(compared) > 1:
        _curves_figure(compared, out / "comparison_curves.png", f"vi at C = {plan.C.value:g}")
        figures.append(
            ("SparseMAP, hinge and line search at the chosen C (vi)", out / "comparison_curves.png")
        )
    if dim_rows:
        _dim_figure(dim_rows, out / "time_memory_vs_d.png")
        figures.append(("Time per step and memory against d (vi)", out / "time_memory_vs_d.png"))
    # Each run at the chosen C: the rank.png and objective_gap.png that train wrote in its logdir
    # (plot_progress over the whole history, resumed sessions included), plotted here when missing.
    for run in runs:
        if run.spec.kind in ("frobenius", "dim") or run.spec.value != plan.C.value:
            continue
        folder = run.spec.logdir(root)
        names = ("rank", "objective_gap")
        if not all((folder / f"{name}.png").is_file() for name in names):
            history = _history(run)
            if not history:
                continue
            folder = make_directory(out / f"{run.spec.language}-{run.spec.kind}-{run.spec.label}")
            example.plot_progress(history, folder)
        for name in names:
            figures.append((f"{run.spec.name}: {name.replace('_', ' and ')}", folder / f"{name}.png"))
    return figures


def report_sections(plan: Plan, runs: list[RunResult], root: Path) -> list[str]:
    """The sections of ``{root}/results.md``, and the figures in ``{root}/figures/``.

    Example:
        >>> import tempfile
        >>> path = RUNNER.write_report(Path(tempfile.mkdtemp()), QUICK)
        >>> "`vi/sparsemap/C10`: not started" in path.read_text()
        True
    """
    protocol = plan.protocol
    sweep_lines, sweep_rows = _sweep_table(plan, runs)
    dim_lines, dim_rows = _dim_table(plan, runs)
    quick = protocol != FULL
    subsets = [
        f"{language}: first {train} training / {dev or 'all'} dev sentences"
        for language in LANGUAGES
        for train, dev in [protocol.limits(language)]
        if train or dev
    ]
    scope = (
        f"a reduced protocol ({'; '.join(subsets) or 'other numbers'}; test sets whole), not the full one"
        if quick
        else "the full protocol (full treebanks)"
    )
    sections = [
        "# Trace-norm bilinear parser (Hazan's algorithm): UAS against C, curves, cost against d, baselines",
        f"{finished_line(runs, root)}, {scope}; "
        f"CPU threads per job: {threads_per_job(runs)}. Only finished runs count; "
        'the others are listed under "Missing runs". Treebanks (train / dev / test sentences): '
        + "; ".join(f"{LANGUAGES[k]} {v}" for k, v in TREEBANK_SIZES.items())
        + ".",
        "## Choices",
        "\n".join(f"- {line}" for line in describe_choices(plan)),
        "## UAS against C (vi)",
        "\n".join(sweep_lines),
        "## Comparison at the chosen C (vi)",
        "\n".join(_comparison_table(plan, runs)),
        "## en_ewt: the minibatch variant",
        "\n".join(_stochastic_table(plan, runs)),
        "## Time per step and memory against d",
        "\n".join(dim_lines),
        "## The notes' claims on the logs",
        "\n".join(_claims_table(runs)),
        "## Missing runs",
        "\n".join(_missing_lines(plan)),
        "## Protocol",
        "\n".join(_protocol_lines(protocol)),
    ]
    figures = _plot_figures(plan, runs, sweep_rows, dim_rows, root) if runs else []
    if figures:
        sections += [
            "## Figures",
            *(f"![{caption}]({path.relative_to(root).as_posix()})" for caption, path in figures),
        ]
    return sections


# ---------------------------------------------------------------------------------------------- CLI


def add_options(run: argparse.ArgumentParser) -> None:
    """The option of ``run``: the time limit of a training process."""
    run.add_argument(
        "--time-limit",
        type=float,
        default=TIME_LIMIT_MINUTES,
        help="minutes after which a training process takes no new step; the next one resumes "
        "(default %(default)s)",
    )


def missing_data(protocol: Protocol, data: Path) -> str | None:
    """The treebank folders missing under ``data``."""
    missing = [folder for folder in LANGUAGES.values() if not (data / folder).is_dir()]
    return f"treebank folders missing under {data}: {', '.join(missing)}" if missing else None


RUNNER = Runner(
    layout=LAYOUT,
    options_type=Protocol,
    options_key="protocol",
    plan=plan_suite,
    describe_choices=describe_choices,
    recorded_choices=recorded_choices,
    waiting="waiting for C",
    waiting_notes=lambda plan: [
        f"{language}/{kind} waits for the choice of C" for language, kind in plan.waiting
    ],
    commands=run_commands,
    eval_key="uas",
    appends_time_limit=False,
    result_type=RunResult,
    sections=report_sections,
    description=__doc__,
    run_help="train and evaluate the plan (resumable), then report",
    default_root=DEFAULT_ROOT,
    quick_root=QUICK_ROOT,
    default_data=DEFAULT_DATA,
    data_help="folder of the treebank folders",
    quick_help="smoke test of a few minutes (see the description)",
    add_options=add_options,
    options_from_args=lambda args: QUICK if args.quick else FULL,
    refusal=lambda recorded, protocol: (
        None if Protocol.from_json(recorded) == protocol else f"of another protocol (see {PLAN_FILE})"
    ),
    missing_data=missing_data,
)


def main(argv: list[str] | None = None) -> int:
    """Entry point (:meth:`benchmarks.runner_core.Runner.main`): the exit status."""
    return RUNNER.main(argv)


if __name__ == "__main__":
    sys.exit(main())
