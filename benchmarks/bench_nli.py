"""NLI benchmark: the SparseMAP paper's Table 2 and Figure 5 on SICK, through the NLI command line.

ESIM with three attentions (``softmax``, ``sequence``: sequential SparseMAP, ``matching``:
matching SparseMAP) is trained on SICK by SGD. The benchmark only drives
``python -m keras_structured.applications.nli`` and reads the files it writes (``config.json``,
``progress.csv``, ``final.json``, ``eval_test.json``, the ``align`` and ``time`` JSON), never
its Python internals.

Subcommands:

* ``run``: brings every run of the plan to completion, ``--jobs`` at a time. A run is one
  ``python -m keras_structured.applications.nli train ... --quiet`` subprocess with logdir
  ``{root}/{attention}/lr{lr}/seed{S}`` (output in ``bench_train.log`` there): a run with
  ``final.json`` is finished and skipped, one with a ``checkpoint/`` is resumed with
  ``--resume``, any other is started afresh. Each process starts no new epoch after
  :data:`benchmarks.runner_core.TIME_LIMIT_MINUTES` minutes; the run then goes on in a fresh
  process. Finished runs are evaluated with ``evaluate --split test --json`` (skipped when
  ``eval_test.json`` exists). Once the seed-0 run of every attention at its chosen rate is finished, its
  attention on the Figure 5 pairs is read with ``align`` (``alignments_test.json``), and the
  three checkpoints take training steps in turn on the same batches in one ``time`` process
  (``{root}/step_timing.json``): the step-cost ratio SparseMAP / softmax measured in the
  same run. Ends with ``report``.
* ``report``: writes ``{root}/results.md`` and ``{root}/figures/*.png`` from the finished runs.

The plan (:func:`plan_suite`, a pure function of the options and of what the logdirs hold): as in
the paper, the learning rate of each attention is tuned on the trial accuracy over
``{2^-6, ..., 2^-3}`` (seed 0); when the best rate is at an end of the grid, the grid is
widened by a factor of 2 beyond it (at most :data:`MAX_WIDENINGS` times). The other seeds
then run at the chosen rate. ``--quick`` is a smoke test of minutes: 1,000 training pairs,
100 trial pairs, 2 epochs, one rate (2^-3), seed 0, test accuracy on 300 test pairs.

The run, round and report machinery is the runner core (:mod:`benchmarks.runner_core`): run
this script from the repository root as ``python benchmarks/bench_nli.py`` or
``python -m benchmarks.bench_nli``.

Example:
    python benchmarks/bench_nli.py run --quick
    python benchmarks/bench_nli.py run --jobs 2 --dry-run
    python benchmarks/bench_nli.py run --attentions softmax sequence --seeds 0 1 2
    python benchmarks/bench_nli.py report --root benchmarks/results/bench_nli
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

if not __package__:  # run as a script: import the package `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np

from benchmarks.report_tables import (
    finished_line,
    finite_median,
    fmt,
    mean_and_spread,
    missing_run_lines,
    rate_table,
    seed_cell,
    threads_per_job,
)
from benchmarks.resumable_runs import (
    FINAL_FILE,
    log_progress,
    logdir_value,
    read_json,
    shared_data,
    time_command,
    time_side_by_side,
    to_float,
)
from benchmarks.run_plans import (
    FinishedRun,
    GridChoice,
    NamedRun,
    RunLayout,
    RunPlan,
    RunStatus,
    Step,
    TunedOptions,
    choose_on_grid,
    run_steps,
)
from benchmarks.runner_core import Runner, SuiteRun, add_grid_options
from keras_structured.run_directory import write_text

ATTENTIONS = ("softmax", "sequence", "matching")
SPARSEMAP_ATTENTIONS = ("sequence", "matching")
LEARNING_RATES = (2.0**-6, 2.0**-5, 2.0**-4, 2.0**-3)
SEEDS = (0, 1, 2)
QUICK_TRAIN_ARGS = ("--max-train-pairs", "1000", "--max-trial-pairs", "100", "--epochs", "2")
QUICK_EVAL_ARGS = ("--max-pairs", "300")
QUICK_LEARNING_RATE = 2.0**-3
QUICK_TIMING_STEPS = 10
TIMING_STEPS = 50
#: The claims of the issue: accuracy within this many points of the softmax ...
ACCURACY_MARGIN = 2.0
#: ... and a SparseMAP training step at most this many times a softmax step.
STEP_COST_TARGET = 1.5
DEFAULT_DATA = shared_data("nli", "sick.tsv")
DEFAULT_ROOT, QUICK_ROOT = Path("benchmarks/results/bench_nli"), Path("runs/bench_nli_quick")
ALIGN_FILE = "alignments_test.json"
TIMING_FILE = "step_timing.json"
CHECKPOINT_DIR = "checkpoint"
#: The logdirs under the root, and the file of a checkpoint that can be resumed.
LOGDIRS = "*/lr*/seed*"
CHECKPOINT = f"{CHECKPOINT_DIR}/state.json"
# How many times a learning-rate grid may be widened by a factor of 2 (see choose_learning_rate).
MAX_WIDENINGS = 2
CLI = ("-m", "keras_structured.applications.nli")


@dataclasses.dataclass(frozen=True)
class RunSpec(NamedRun):
    """One training run: an attention, a learning rate and a seed; evaluated on test."""

    attention: str
    learning_rate: float
    seed: int

    splits: ClassVar[tuple[str, ...]] = ("test",)

    @property
    def parts(self) -> tuple[str, ...]:
        """``(attention, lr{learning_rate:g}, seed{seed})``."""
        return self.attention, f"lr{self.learning_rate:g}", f"seed{self.seed}"

    @classmethod
    def from_parts(cls, parts: tuple[str, ...]) -> RunSpec | None:
        """The run of ``{attention}/lr{lr}/seed{S}``, or None for any other folder."""
        attention, lr, seed = parts
        if attention in ATTENTIONS and lr.startswith("lr") and seed.startswith("seed"):
            return cls(attention, logdir_value(float(lr[2:])), int(seed[4:]))
        return None


@dataclasses.dataclass(frozen=True)
class SuiteConfig(TunedOptions):
    """The options of a suite, as given to ``run`` and recorded in ``{root}/bench_plan.json``.

    Every attention is tuned on ``learning_rates`` at the first seed; all ``seeds`` run at the
    chosen rate. ``train_args`` and ``eval_args`` are passed to every ``train`` and ``evaluate``
    (``--quick`` subsets), ``timing_steps`` to the ``time`` process.
    """

    attentions: tuple[str, ...] = ATTENTIONS
    learning_rates: tuple[float, ...] = LEARNING_RATES
    seeds: tuple[int, ...] = SEEDS
    train_args: tuple[str, ...] = ()
    eval_args: tuple[str, ...] = ()
    timing_steps: int = TIMING_STEPS

    def __post_init__(self) -> None:
        self.require("attentions", "learning_rates", "seeds")
        unknown = [a for a in self.attentions if a not in ATTENTIONS]
        if unknown:
            raise ValueError(f"attentions must be among {ATTENTIONS}. Received: {unknown}")
        super().__post_init__()


def choose_learning_rate(
    attention: str, learning_rates: Sequence[float], seed: int, statuses: Mapping[RunSpec, RunStatus]
) -> GridChoice[RunSpec]:
    """Pick ``attention``'s learning rate: the best trial accuracy at ``seed``.

    The paper's protocol (:func:`benchmarks.run_plans.choose_on_grid`): a best rate at an end
    of the grid widens it by a factor of 2, at most :data:`MAX_WIDENINGS` times. Ties go to
    the smaller learning rate, NaN scores rank last.

    Args:
        attention: the attention.
        learning_rates: the grid.
        seed: the seed of the tuning runs.
        statuses: what each logdir holds.

    Returns:
        A :class:`benchmarks.run_plans.GridChoice` of the best trial accuracy, waiting
        (``value`` None) for ``missing``.

    Example:
        >>> done = lambda accuracy: RunStatus(finished=True, score=accuracy)
        >>> statuses = {RunSpec("softmax", 0.25, 0): done(60.0), RunSpec("softmax", 0.5, 0): done(62.0)}
        >>> choose_learning_rate("softmax", [0.25, 0.5], 0, statuses).value
        0.5
    """
    return choose_on_grid(learning_rates, lambda lr: [RunSpec(attention, lr, seed)], statuses, MAX_WIDENINGS)


@dataclasses.dataclass(kw_only=True)
class Plan(RunPlan[RunSpec]):
    """The runs a suite needs as far as they are decided, split by what is left to do.

    ``runs`` holds the tuning runs and, for every attention whose learning rate is chosen,
    its seeds at that rate; ``waiting`` the attentions still waiting for their tuning runs.
    ``done`` runs are finished and evaluated, ``evaluate`` ones finished but not evaluated,
    ``resume`` ones have a checkpoint, ``start`` ones nothing.
    """

    config: SuiteConfig
    choices: dict[str, GridChoice[RunSpec]]
    chosen: dict[str, float]

    def figure_runs(self) -> dict[str, RunSpec]:
        """The first-seed run at the chosen rate of every attention whose rate is chosen."""
        seed = self.config.seeds[0]
        return {attention: RunSpec(attention, lr, seed) for attention, lr in self.chosen.items()}


def plan_suite(config: SuiteConfig, statuses: Mapping[RunSpec, RunStatus]) -> Plan:
    """The runs of ``config`` given what the logdirs hold: pure, so that it can be tested and re-planned.

    Args:
        config: the suite's options.
        statuses: what each logdir holds (:data:`LAYOUT`); absent runs are not started.

    Returns:
        A :class:`Plan`.

    Example:
        >>> config = SuiteConfig(attentions=("matching",), learning_rates=(0.0625,), seeds=(0,))
        >>> [spec.name for spec in plan_suite(config, {}).start]
        ['matching/lr0.0625/seed0']
    """
    runs: dict[RunSpec, None] = {}  # an ordered set
    choices, chosen, waiting = {}, {}, []
    seed = config.seeds[0]
    for attention in config.attentions:
        choice = choose_learning_rate(attention, config.learning_rates, seed, statuses)
        choices[attention] = choice
        if config.tuning:
            runs.update((RunSpec(attention, lr, seed), None) for lr in choice.grid)
    for attention in config.attentions:
        lr = choices[attention].value
        if lr is None:
            waiting.append(attention)
            continue
        chosen[attention] = lr
        runs.update((RunSpec(attention, lr, s), None) for s in config.seeds)
    plan = Plan(runs=list(runs), waiting=waiting, config=config, choices=choices, chosen=chosen)
    plan.file_runs(statuses)
    return plan


# ---------------------------------------------------------------------------------------------- disk

#: The logdirs: ``final.json`` (its ``trial_accuracy`` tunes the learning rate),
#: ``checkpoint/state.json``, ``eval_test.json``.
LAYOUT = RunLayout(
    pattern=LOGDIRS,
    spec=RunSpec.from_parts,
    checkpoint=CHECKPOINT,
    splits=RunSpec.splits,
    score=lambda final: final.get("trial_accuracy"),
)


# ------------------------------------------------------------------------------------------ commands


def train_command(
    spec: RunSpec,
    config: SuiteConfig,
    data: Path,
    root: Path,
    resume: bool = False,
    python: str = sys.executable,
) -> list[str]:
    """``python -m keras_structured.applications.nli train ... --quiet`` argv of ``spec``."""
    argv = [python, *CLI, "train", "--data", str(data), "--attention", spec.attention]
    argv += ["--learning-rate", f"{spec.learning_rate:g}", "--seed", str(spec.seed)]
    argv += ["--logdir", str(spec.logdir(root)), *config.train_args, "--quiet"]
    return argv + ["--resume"] if resume else argv


def eval_command(logdir: Path, config: SuiteConfig, python: str = sys.executable) -> list[str]:
    """``python -m keras_structured.applications.nli evaluate --logdir ... --split test --json`` argv."""
    return [python, *CLI, "evaluate", "--logdir", str(logdir), "--split", "test", *config.eval_args, "--json"]


def align_command(logdir: Path, python: str = sys.executable) -> list[str]:
    """``python -m keras_structured.applications.nli align`` argv writing
    ``{logdir}/alignments_test.json``."""
    return [
        python,
        *CLI,
        "align",
        "--logdir",
        str(logdir),
        "--split",
        "test",
        "--output",
        str(logdir / ALIGN_FILE),
    ]


def run_commands(
    spec: RunSpec, status: RunStatus, run: SuiteRun[SuiteConfig], python: str = sys.executable
) -> list[Step]:
    """The steps left to finish ``spec``: training (with ``--resume`` when it can), then the evaluation.

    Example:
        >>> spec = RunSpec("sequence", 0.0625, 0)
        >>> done = RunStatus(finished=True)
        >>> steps = run_commands(spec, done, SuiteRun(SuiteConfig(), Path("sick.tsv"), Path("runs")))
        >>> [(kind, argv[-3:]) for kind, argv in steps]
        [('eval', ['--split', 'test', '--json'])]
    """
    return run_steps(
        spec,
        status,
        lambda resume: train_command(spec, run.options, run.data, run.root, resume, python),
        lambda split: eval_command(spec.logdir(run.root), run.options, python),
    )


def _ready(plan: Plan, root: Path) -> dict[str, Path]:
    """The logdirs of :meth:`Plan.figure_runs` that are finished (``final.json``)."""
    return {
        attention: spec.logdir(root)
        for attention, spec in plan.figure_runs().items()
        if (spec.logdir(root) / FINAL_FILE).is_file()
    }


def inspect_runs(plan: Plan, run: SuiteRun[SuiteConfig]) -> bool:
    """Read the Figure 5 alignments of each figure run and time the steps of all of them together.

    ``align`` is skipped when ``alignments_test.json`` exists; ``time`` runs once every attention
    of the suite has its figure run finished, and is skipped when ``{root}/step_timing.json``
    holds exactly those runs. Returns True when nothing failed.
    """
    root, env = run.root, run.env
    ok = True
    ready = _ready(plan, root)
    for attention, logdir in ready.items():
        if (logdir / ALIGN_FILE).is_file():
            continue
        log_progress(f"align {attention} ({logdir})")
        proc = subprocess.run(align_command(logdir), capture_output=True, text=True, env=env)
        write_text(logdir / "bench_align.log", proc.stdout + proc.stderr)
        if not (logdir / ALIGN_FILE).is_file():
            log_progress(f"FAILED align {attention} (exit {proc.returncode})")
            ok = False
    if set(ready) != set(plan.config.attentions):
        return ok
    logdirs = [ready[attention] for attention in plan.config.attentions]
    argv = time_command(CLI, logdirs, plan.config.timing_steps, root / TIMING_FILE)
    return time_side_by_side(argv, logdirs, root / TIMING_FILE, ", ".join(plan.config.attentions), env) and ok


def describe_choices(plan: Plan) -> list[str]:
    """One line per learning-rate choice, for the terminal and ``results.md``."""
    config = plan.config
    if not config.tuning:
        return [f"One learning rate ({config.learning_rates[0]:g}) for every run: nothing tuned."]
    grid = ", ".join(f"{lr:g}" for lr in config.learning_rates)
    lines = [
        f"Tuned per attention on the best trial accuracy at seed {config.seeds[0]} over {grid}; a best "
        f"rate at an end of the grid widens it by a factor of 2 (at most {MAX_WIDENINGS} times), as in "
        "the paper."
    ]
    for attention, choice in plan.choices.items():
        if choice.value is None:
            lines.append(f"{attention}: not chosen yet ({len(choice.missing)} tuning runs unfinished)")
        else:
            edge = " (at an end of the widened grid)" if choice.at_edge() else ""
            score = choice.scores.get(choice.value, math.nan)
            lines.append(f"{attention}: lr {choice.value:g}{edge}, trial accuracy {fmt(score, 2)}")
    return lines


def recorded_choices(plan: Plan) -> list[dict[str, Any]]:
    """The learning-rate choices, for ``bench_plan.json``."""
    return [
        {"attention": attention, "learning_rate": choice.value, "scores": choice.scores}
        for attention, choice in plan.choices.items()
    ]


# ---------------------------------------------------------------------------------------------- report


@dataclasses.dataclass
class RunResult(FinishedRun):
    """A finished run (``final.json``) as read back from its logdir, with its test evaluation."""

    spec: RunSpec

    @property
    def evaluation(self) -> dict[str, Any]:
        """``eval_test.json`` (empty when not evaluated)."""
        return self.evals.get("test", {})

    def column(self, name: str) -> np.ndarray:
        """The finite values of a ``progress.csv`` column (empty when absent)."""
        values = super().column(name)
        return values[np.isfinite(values)]

    def test(self, key: str) -> float:
        """``eval_test.json``'s ``key`` (NaN when not evaluated)."""
        return to_float(self.evaluation.get(key))


def _grouped(runs: list[RunResult], plan: Plan) -> dict[str, list[RunResult]]:
    """Finished runs at the chosen learning rate, by attention, seeds sorted."""
    groups: dict[str, list[RunResult]] = {}
    for run in sorted(runs, key=lambda r: r.spec.seed):
        if (
            plan.chosen.get(run.spec.attention) == run.spec.learning_rate
            and run.spec.seed in plan.config.seeds
        ):
            groups.setdefault(run.spec.attention, []).append(run)
    return groups


def step_cost_ratios(timing: Mapping[str, Mapping[str, Any]] | None) -> dict[str, float]:
    """Median step seconds of each SparseMAP attention over the softmax's, from ``step_timing.json``.

    Example:
        >>> timing = {"a": {"attention": "softmax", "median_step_s": 0.2},
        ...           "b": {"attention": "sequence", "median_step_s": 0.25}}
        >>> step_cost_ratios(timing)
        {'sequence': 1.25}
    """
    by_attention = {
        entry.get("attention"): to_float(entry.get("median_step_s")) for entry in (timing or {}).values()
    }
    softmax = by_attention.get("softmax", math.nan)
    return {
        attention: by_attention[attention] / softmax if softmax > 0 else math.nan
        for attention in SPARSEMAP_ATTENTIONS
        if attention in by_attention
    }


def _median(runs: Sequence[RunResult], column: str) -> float:
    """The median of a ``progress.csv`` column over ``runs``."""
    return finite_median(np.concatenate([run.column(column) for run in runs]) if runs else np.array([]))


def _main_table(plan: Plan, groups: dict[str, list[RunResult]], ratios: dict[str, float]) -> list[str]:
    """Table 2: test accuracy, sparsity, structures, epoch time and step cost per attention."""
    expected = len(plan.config.seeds)
    lines = [
        "| attention | lr | test accuracy (%) | nonzero attention (%) | one-structure floor (%) | structures "
        "per pair | s / epoch | train steps / s | step cost / softmax (same process) | step cost / softmax "
        "(runs' steps/s) |",
        "|---" * 10 + "|",
    ]
    softmax_speed = _median(groups.get("softmax", []), "train_steps_per_s")
    for attention in plan.config.attentions:
        group = groups.get(attention, [])
        if attention in plan.waiting:
            lines.append(f"| {attention} | not chosen | missing | | | | | | | |")
            continue
        speed = _median(group, "train_steps_per_s")
        runs_ratio = softmax_speed / speed if attention != "softmax" and speed > 0 else math.nan
        cells = [
            attention,
            f"{plan.chosen[attention]:g}",
            seed_cell([r.test("accuracy") for r in group], expected),
            seed_cell([r.test("alignment_nonzero_percent") for r in group], expected, 1),
            fmt(mean_and_spread([r.test("one_structure_nonzero_percent") for r in group])[0], 1),
            seed_cell([r.test("mean_structures") for r in group], expected)
            if attention != "softmax"
            else "n/a",
            seed_cell([_median([run], "epoch_seconds") for run in group], expected, 1),
            fmt(speed, 2),
            "1" if attention == "softmax" else fmt(ratios.get(attention, math.nan), 2),
            "1" if attention == "softmax" else fmt(runs_ratio, 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def claim_lines(groups: dict[str, list[RunResult]], ratios: dict[str, float]) -> list[str]:
    """The issue's three claims, judged from the mean test results and the step timing.

    Example:
        >>> claim_lines({}, {})[0]
        '- Accuracy within 2 points of softmax: not decided (missing results).'
    """

    def mean(attention: str, key: str) -> float:
        return mean_and_spread([r.test(key) for r in groups.get(attention, [])])[0]

    softmax_accuracy, softmax_nonzero = (
        mean("softmax", "accuracy"),
        mean("softmax", "alignment_nonzero_percent"),
    )
    accuracy, sparsity, cost = [], [], []
    for attention in SPARSEMAP_ATTENTIONS:
        gap = mean(attention, "accuracy") - softmax_accuracy
        if math.isfinite(gap):
            accuracy.append(f"{attention} {gap:+.2f} ({'yes' if gap >= -ACCURACY_MARGIN else 'no'})")
        factor = softmax_nonzero / mean(attention, "alignment_nonzero_percent")
        if math.isfinite(factor):
            sparsity.append(
                f"{attention} {factor:.1f}x fewer nonzero weights ({math.log10(factor):.1f} orders)"
            )
        ratio = ratios.get(attention, math.nan)
        if math.isfinite(ratio):
            cost.append(f"{attention} {ratio:.2f}x ({'yes' if ratio <= STEP_COST_TARGET else 'no'})")

    def line(claim: str, parts: list[str]) -> str:
        return f"- {claim}: {'; '.join(parts) if parts else 'not decided (missing results)'}."

    return [
        line(f"Accuracy within {ACCURACY_MARGIN:g} points of softmax", accuracy),
        line("Orders of magnitude sparser than softmax", sparsity),
        line(f"A SparseMAP training step costs <= {STEP_COST_TARGET:g}x a softmax step", cost),
    ]


def _tuning_table(plan: Plan, runs: list[RunResult]) -> list[str]:
    """Best trial accuracy (``final.json``) of every finished run at the first seed, by learning rate."""
    seed = plan.config.seeds[0]
    rates = sorted({*plan.config.learning_rates, *(r.spec.learning_rate for r in runs)})
    trial = {
        (r.spec.attention, r.spec.learning_rate): to_float(r.final.get("trial_accuracy"))
        for r in runs
        if r.spec.seed == seed
    }
    rows = {
        (attention,): {lr: trial[attention, lr] for lr in rates if (attention, lr) in trial}
        for attention in plan.config.attentions
    }
    chosen = {(attention,): lr for attention, lr in plan.chosen.items()}
    return [
        f"Best trial accuracy (%) of each finished run at seed {seed}; the chosen rate in bold.",
        "",
        *rate_table(("attention",), rates, rows, chosen),
    ]


def _runs_table(runs: list[RunResult]) -> list[str]:
    """Every finished run: epochs, trial and test accuracy, sparsity, throughput and wall time."""
    lines = [
        "| run | epochs | best epoch | trial acc. | test acc. | nonzero (%) | structures / pair | unfinished "
        "SparseMAP (test) | s / epoch | train wall (min) |",
        "|---" * 10 + "|",
    ]
    order = {attention: i for i, attention in enumerate(ATTENTIONS)}
    for run in sorted(runs, key=lambda r: (order[r.spec.attention], r.spec.learning_rate, r.spec.seed)):
        f = run.final
        lines.append(
            f"| {run.spec.name} | {f.get('epochs_run', 'n/a')} | {f.get('best_epoch', 'n/a')} "
            f"| {fmt(to_float(f.get('trial_accuracy')), 2)} | {fmt(run.test('accuracy'), 2)} "
            f"| {fmt(run.test('alignment_nonzero_percent'), 1)} | {fmt(run.test('mean_structures'), 2)} "
            f"| {run.evaluation.get('sparsemap_unfinished', 'n/a')} "
            f"| {fmt(_median([run], 'epoch_seconds'), 1)} "
            f"| {fmt(to_float(run.state.get('train_wall_s')) / 60, 1)} |"
        )
    return lines


def _missing_lines(plan: Plan) -> list[str]:
    """The planned runs not finished and evaluated, and the attentions waiting for their rate."""
    waiting = [
        f"- `{attention}`: learning rate not chosen, "
        f"{len(plan.choices[attention].missing)} tuning runs unfinished"
        for attention in plan.waiting
    ]
    return missing_run_lines(plan, lambda spec: "test", waiting)


def _plot_figure5(plan: Plan, root: Path, out: Path) -> list[Path]:
    """One PNG per Figure 5 pair: the attention of every attention's figure run on that pair."""
    from keras_structured.applications.nli.figures import plot_alignments

    read = {
        attention: read_json(spec.logdir(root) / ALIGN_FILE)
        for attention, spec in plan.figure_runs().items()
        if (spec.logdir(root) / ALIGN_FILE).is_file()
    }
    read = {attention: data for attention, data in read.items() if data and data.get("pairs")}
    if not read:
        return []
    paths = []
    first = next(iter(read.values()))
    for k, pair in enumerate(first["pairs"]):
        models, predictions = {}, []
        for attention in plan.config.attentions:
            entry = next(
                (p for p in read.get(attention, {}).get("pairs", []) if p["pair_id"] == pair["pair_id"]), None
            )
            if entry is not None:
                models[attention] = (entry["p2h"], entry["h2p"])
                predictions.append(f"{attention}: {entry['predicted']}")
        path = out / f"figure5_{k}_{pair['label']}_pair{pair['pair_id']}.png"
        title = f"SICK test pair {pair['pair_id']} ({pair['label']}); predicted {', '.join(predictions)}"
        paths.append(plot_alignments(pair["premise"], pair["hypothesis"], models, path, title))
    return paths


def report_sections(plan: Plan, runs: list[RunResult], root: Path) -> list[str]:
    """The sections of ``{root}/results.md``, and the Figure 5 plots in ``{root}/figures/``.

    Example:
        >>> import tempfile
        >>> config = SuiteConfig(attentions=("softmax",), learning_rates=(0.0625,), seeds=(0,))
        >>> path = RUNNER.write_report(Path(tempfile.mkdtemp()), config)
        >>> "`softmax/lr0.0625/seed0`: not started" in path.read_text()
        True
    """
    config = plan.config
    groups = _grouped(runs, plan)
    timing = read_json(root / TIMING_FILE)
    ratios = step_cost_ratios(timing)
    subset = (
        f"training options `{' '.join(config.train_args)}`, evaluation options "
        f"`{' '.join(config.eval_args)}` (a quick subset, not the full protocol)"
        if config.train_args or config.eval_args
        else "the full SICK splits"
    )
    timing_note = (
        f"{next(iter(timing.values())).get('steps', 'n/a')} steps per model" if timing else "not measured yet"
    )
    sections = [
        "# NLI: ESIM with softmax, sequential and matching SparseMAP attention (SparseMAP paper, Table 2)",
        f"{finished_line(runs, root)}; {subset}; CPU threads per job: {threads_per_job(runs)}.",
        "Data: SICK (train 4,439 / trial 495 / test 4,906 pairs, CC BY-NC-SA 3.0), not the paper's SNLI "
        "and MultiNLI, which are not available here; no pretrained embeddings either: the embeddings are "
        "learned. The trial split plays the paper's validation set (early stopping, learning-rate decay, "
        "tuning).",
        "## Learning rates",
        "\n".join(f"- {line}" for line in describe_choices(plan)),
        "## Table 2",
        "Runs at the chosen learning rate; cells: mean ± half the range (max - min) / 2 over seeds. "
        "Nonzero attention: the percentage of nonzero weights among all real word pairs of the test "
        "pairs, both directions (the paper's sparsity); one-structure floor: that percentage if every "
        "SparseMAP problem kept a single structure (short SICK sentences bound how sparse an alignment "
        "can get). Structures per pair: structures with nonzero weight per SparseMAP problem (two "
        "problems a pair for the sequence, one for the matching). s / epoch: each run's median epoch "
        "time, over seeds; train steps / s: the median over the runs' epochs; both come from separate "
        "processes that shared the machine with other runs, so they move with its load. Step cost "
        f"(same process): `{TIMING_FILE}`, the median training-step time of the seed-{config.seeds[0]} "
        "checkpoints taking steps in turn on the same batches "
        f"({timing_note}); step cost (runs' steps/s): softmax steps/s over the attention's, from separate "
        "processes.",
        "\n".join(_main_table(plan, groups, ratios)),
        "## Claims",
        "\n".join(claim_lines(groups, ratios)),
        "## Trial accuracy of the tuning runs",
        "\n".join(_tuning_table(plan, runs)),
        "## All finished runs",
        "\n".join(_runs_table(runs)),
        "## Missing runs",
        "\n".join(_missing_lines(plan)),
    ]
    figure_paths = _plot_figure5(plan, root, root / "figures")
    if figure_paths:
        sections += [
            "## Figure 5",
            "Attention of the seed-0 runs on the same test pairs (rows: premise words; columns: hypothesis "
            "words; left P2H, right H2P transposed).",
            *(f"![{p.stem}](figures/{p.name})" for p in figure_paths),
        ]
    return sections


# ---------------------------------------------------------------------------------------------- CLI


def add_options(run: argparse.ArgumentParser) -> None:
    """The options of ``run``: the attentions, the grid and the seeds."""
    run.add_argument(
        "--attentions", nargs="+", choices=ATTENTIONS, default=list(ATTENTIONS), help="(default all)"
    )
    add_grid_options(run, LEARNING_RATES, QUICK_LEARNING_RATE, SEEDS)


def config_from_args(args: argparse.Namespace) -> SuiteConfig:
    """The :class:`SuiteConfig` of ``run``'s options (``--quick`` fills the options not given)."""
    quick = args.quick
    return SuiteConfig(
        attentions=tuple(args.attentions),
        learning_rates=tuple(args.learning_rates or ([QUICK_LEARNING_RATE] if quick else LEARNING_RATES)),
        seeds=tuple(args.seeds if args.seeds is not None else ([0] if quick else SEEDS)),
        train_args=QUICK_TRAIN_ARGS if quick else (),
        eval_args=QUICK_EVAL_ARGS if quick else (),
        timing_steps=QUICK_TIMING_STEPS if quick else TIMING_STEPS,
    )


def refusal(recorded: Mapping[str, Any], config: SuiteConfig) -> str | None:
    """Why a root whose runs were trained or evaluated with other options is refused."""
    train_args, eval_args = recorded.get("train_args"), recorded.get("eval_args")
    if (tuple(train_args or ()), tuple(eval_args or ())) == (config.train_args, config.eval_args):
        return None
    return f"trained or evaluated with other options ({train_args}, {eval_args})"


def missing_data(config: SuiteConfig, data: Path) -> str | None:
    """Says that the SICK file is missing."""
    return (
        None if data.is_file() else f"SICK file missing: {data} (it is not distributed with the repository)"
    )


RUNNER = Runner(
    layout=LAYOUT,
    options_type=SuiteConfig,
    plan=plan_suite,
    describe_choices=describe_choices,
    recorded_choices=recorded_choices,
    waiting="attentions waiting",
    waiting_notes=lambda plan: [
        f"{attention} waits for its learning-rate tuning runs" for attention in plan.waiting
    ],
    commands=run_commands,
    eval_key="accuracy",
    inspect=inspect_runs,
    eval_wall_by_split=False,
    result_type=RunResult,
    sections=report_sections,
    description=__doc__,
    run_help="train, evaluate and inspect the suite (resumable), then report",
    default_root=DEFAULT_ROOT,
    quick_root=QUICK_ROOT,
    default_data=DEFAULT_DATA,
    data_help="the SICK .tsv file",
    quick_help=f"smoke test of minutes: {' '.join(QUICK_TRAIN_ARGS)}, lr {QUICK_LEARNING_RATE:g}, seed 0, "
    f"test on {QUICK_EVAL_ARGS[-1]} pairs",
    add_options=add_options,
    options_from_args=config_from_args,
    refusal=refusal,
    missing_data=missing_data,
)


def main(argv: list[str] | None = None) -> int:
    """Entry point (:meth:`benchmarks.runner_core.Runner.main`): the exit status."""
    return RUNNER.main(argv)


if __name__ == "__main__":
    sys.exit(main())
