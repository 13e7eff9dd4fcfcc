"""Dependency-parsing benchmark: the SparseMAP paper's Table 1 and Figures 3-4, through the parser's CLI.

Five losses (``sparsemap``, ``margin_sparsemap``, ``crf``, ``hinge``, ``perceptron``) train the
Kiperwasser & Goldberg BiLSTM parser on five UD treebanks (en, vi, ja, zh, ro). The benchmark
only drives ``python -m keras_structured.applications.parsing`` and reads the files it writes
(``config.json``, ``progress.csv``, ``sparsity_dev.jsonl``, ``final.json``, ``eval_{split}.json``),
never its Python internals.

Two protocols (``run --protocol``, :data:`PROTOCOLS`), each a table of its own in its own root:

* ``sparsemap-paper`` (the default): the SparseMAP authors' parser settings, the parser's
  ``--preset sparsemap-paper`` (1 BiLSTM layer, batch 16, Adam without learning-rate decay, no
  dropout besides word dropout, UPOS tags, lowercase and numbers collapsed, a fixed 20 epochs
  keeping the best dev UAS, the loss summed over the batch, cost 1 per wrong head, a learned
  root vector, a random arc-scorer bias); no ``--min-epochs`` is passed, the preset fixes the
  epochs. Grid ``{0.5, 1, 2, 4, 8} x 1e-3`` as in the paper; root
  ``benchmarks/results/bench_parsing_paper``.
* ``tuned``: this repository's configuration (:data:`PARSER_ARGS`: 2 BiLSTM layers, batch 32,
  XPOS tags, dropout 0.33, learning rate x 0.9 after each epoch without a better dev UAS) with
  ``--min-epochs 30`` (all 30 epochs, keeping the best dev UAS). Grid ``{2, 4, 8} x 1e-3``, the
  grid its recorded suite was tuned on; root ``benchmarks/results/bench_parsing``.

``run --labels`` adds the parser's ``--labels`` (a joint arc-label classifier): the report
then shows LAS beside UAS.

Subcommands:

* ``run``: brings every run of the plan to completion, ``--jobs`` at a time. A run is one
  ``python -m keras_structured.applications.parsing train ... --quiet`` subprocess with logdir
  ``{root}/{lang}/{loss}/lr{lr}/seed{S}`` (output in ``bench_train.log`` there): a run with
  ``final.json`` is finished and skipped, one with a ``checkpoint/`` is resumed with
  ``--resume``, any other is started afresh. Finished runs are evaluated with
  ``evaluate --split dev --json`` and ``--split test --json`` (skipped when
  ``eval_{split}.json`` exists). Wall times accumulate in ``bench_state.json`` over sessions.
  Ends with ``report``.
* ``report``: writes ``{root}/results.md`` and ``{root}/figures/*.png`` from the finished runs
  (the protocol is the one recorded in ``{root}/bench_plan.json``). When the other protocol's
  root (its default folder name, beside ``root``) holds finished runs too, the report compares
  the two protocols per language and loss.

The plan (:func:`plan_suite`, a pure function of the options and of what the logdirs hold).
The paper tunes the Adam learning rate per language on ``{0.5, 1, 2, 4, 8} x 1e-3``. By
default both protocols make a reduction: every loss is tuned on en and vi (seed 0); each of
them takes its own best rate, as in the paper, and the other languages (ja, zh, ro) the rate
with the best mean dev UAS over en and vi. Seeds 0, 1 and 2 run at the chosen rate on en and
vi (``--seed-languages``), seed 0 on the others. A loss's other-language runs therefore start
once its tuning runs have finished (``run`` proceeds in rounds). A best rate at an end of the
grid widens it by a factor of 2 (at most :data:`MAX_WIDENINGS` times).
``--tune-languages`` names other tuning languages; ``--per-language-tuning`` tunes every
language on itself instead. ``--quick`` is a smoke test of minutes: vi only, 200 training
sentences, 3 epochs, the five losses at learning rate 2e-3, one seed.

The report judges the SparseMAP losses against CRF and hinge per language, beyond the seed
spread (:func:`compare_seeds`, :func:`sparsemap_verdict`), and checks the epochs each run
trained against its ``config.json`` (:func:`epoch_flag`).

The run, round and report machinery is the runner core (:mod:`benchmarks.runner_core`): run
this script from the repository root as ``python benchmarks/bench_parsing.py`` or
``python -m benchmarks.bench_parsing``.

Example:
    python benchmarks/bench_parsing.py run --quick
    python benchmarks/bench_parsing.py run --protocol sparsemap-paper --jobs 2 --dry-run
    python benchmarks/bench_parsing.py run --protocol sparsemap-paper --jobs 2
    python benchmarks/bench_parsing.py run --protocol tuned --jobs 2
    python benchmarks/bench_parsing.py run --languages en vi --losses sparsemap crf --jobs 2
    python benchmarks/bench_parsing.py report --root benchmarks/results/bench_parsing_paper
    python benchmarks/bench_parsing.py report --root benchmarks/results/bench_parsing
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
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
    PLAN_FILE,
    execute_run,
    logdir_value,
    read_json,
    run_parallel,
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
from benchmarks.runner_core import Runner, SuiteRun

#: Language code -> treebank folder under the data directory.
LANGUAGES = {
    "en": "en_ewt-2.0",
    "vi": "vi_vtb-2.0",
    "ja": "ja_gsd-2.9",
    "zh": "zh_gsd-1.4",
    "ro": "ro_rrt-1.2",
}
# Languages by the size of their training treebank (ro_rrt 1.2 is the smallest).
TRAINING_SIZE_RANK = ("ro", "vi", "zh", "ja", "en")
LOSSES = ("sparsemap", "margin_sparsemap", "crf", "hinge", "perceptron")
SPARSEMAP_LOSSES = ("sparsemap", "margin_sparsemap")
#: The losses the SparseMAP ones are judged against (the paper's CRF and structured SVM).
BASELINES = ("crf", "hinge")
#: The paper's learning-rate grid (the ``sparsemap-paper`` protocol's).
LEARNING_RATES = (0.5e-3, 1e-3, 2e-3, 4e-3, 8e-3)
#: The grid the ``tuned`` protocol's suite was tuned on (the upper three of the paper's).
TUNED_LEARNING_RATES = (2e-3, 4e-3, 8e-3)
TUNE_LANGUAGES = ("en", "vi")
#: The languages that get every seed (at the chosen learning rate) besides the tuning languages.
SEED_LANGUAGES = ("en", "vi")
SEEDS = (0, 1, 2)
SPLITS = ("dev", "test")
QUICK_TRAIN_ARGS = ("--max-train-sentences", "200", "--epochs", "3")
QUICK_LEARNING_RATE = 2e-3
#: Target of the throughput check: SparseMAP training at most this many times slower than CRF per sentence.
THROUGHPUT_TARGET = 1.5
#: The losses whose training steps are timed side by side (``time``) on each language, the
#: timed steps per loss, and the file the timings go to, ``{root}/{language}/step_timing.json``.
TIMED_LOSSES = ("sparsemap", "margin_sparsemap", "crf")
TIMING_STEPS = 30
TIMING_FILE = "step_timing.json"
#: Timed runs whose checkpoints are gone are timed through replicas trained this many epochs,
#: under ``{root}/timing_replicas`` (see :func:`time_runs`).
REPLICA_EPOCHS = 5
REPLICA_DIR = "timing_replicas"
DEFAULT_DATA = shared_data("ud")
# How many times a learning-rate grid may be widened by a factor of 2 (see choose_learning_rate).
MAX_WIDENINGS = 2
#: Epochs every run of the ``tuned`` protocol trains before early stopping may end it: all of the
#: parser's 30, keeping the epoch with the best dev UAS (the paper's parser trains a fixed number
#: of epochs). The structured hinge and perceptron losses sit on a plateau (all arc scores nearly
#: equal) for 10-20 epochs first: en hinge at lr 8e-3 was leaving it (loss 32.46 -> 25.67 over
#: epochs 13-20) when a 20-epoch minimum stopped it.
MIN_EPOCHS = 30
#: The parser's options in every run of the ``tuned`` protocol, beyond the paper's:
#: Kiperwasser & Goldberg's word normalisation (lowercase, numbers as one word) and tags (the
#: treebank's own, XPOS, which their parser reads from CoNLL-U), dropout 0.33 after the
#: embeddings and each BiLSTM layer, and the learning rate times 0.9 after each epoch without a
#: better dev UAS. They were chosen on en and vi dev UAS with the margin SparseMAP loss and are
#: used for every loss.
PARSER_ARGS = (
    "--lowercase",
    "--collapse-numbers",
    "--tag-column",
    "xpos",
    "--dropout",
    "0.33",
    "--learning-rate-decay",
    "0.9",
)
#: The parser's preset of the SparseMAP authors' settings, and the epochs it trains (all of
#: them: its ``min_epochs`` equals its ``epochs``).
PAPER_PRESET = "sparsemap-paper"
PRESET_EPOCHS = 20
#: The parser's option of a joint arc-label classifier (``run --labels``): LAS besides UAS.
LABELS_ARG = "--labels"


@dataclasses.dataclass(frozen=True)
class Protocol:
    """A training configuration of the suite: the options its runs pass to the parser, the epochs
    they train, its default grid and where its runs live.

    Attributes:
        name: the value of ``run --protocol``.
        parser_args: the parser options of every run.
        min_epochs: the ``--min-epochs`` every run passes; None: none is passed.
        epochs: the ``(min_epochs, epochs)`` that a run's ``config.json`` should hold (no
            ``train_args``); the report names the runs whose ``config.json`` differs.
        learning_rates: the default grid.
        root: the default ``--root``.
        quick_root: the default ``--root`` with ``--quick``.
        summary: what the protocol is, in a sentence of the report.
    """

    name: str
    parser_args: tuple[str, ...]
    min_epochs: int | None
    epochs: tuple[int, int]
    learning_rates: tuple[float, ...]
    root: Path
    quick_root: Path
    summary: str


PAPER = Protocol(
    name=PAPER_PRESET,
    parser_args=("--preset", PAPER_PRESET),
    min_epochs=None,
    epochs=(PRESET_EPOCHS, PRESET_EPOCHS),
    learning_rates=LEARNING_RATES,
    root=Path("benchmarks/results/bench_parsing_paper"),
    quick_root=Path("runs/bench_parsing_paper_quick"),
    summary="the SparseMAP authors' parser settings (the parser's `--preset sparsemap-paper`: 1 BiLSTM "
    "layer, batch 16, Adam without learning-rate decay, no dropout besides word dropout, UPOS tags, "
    "lowercase and numbers collapsed, the loss summed over the batch, cost 1 per wrong head, a learned "
    f"root vector, a random arc-scorer bias), a fixed {PRESET_EPOCHS} epochs keeping the best dev UAS "
    "(no `--min-epochs` passed)",
)
TUNED = Protocol(
    name="tuned",
    parser_args=PARSER_ARGS,
    min_epochs=MIN_EPOCHS,
    epochs=(MIN_EPOCHS, MIN_EPOCHS),
    learning_rates=TUNED_LEARNING_RATES,
    root=Path("benchmarks/results/bench_parsing"),
    quick_root=Path("runs/bench_parsing_quick"),
    summary="this repository's tuned configuration (2 BiLSTM layers, batch 32, XPOS tags, lowercase and "
    "numbers collapsed, dropout 0.33, learning rate x 0.9 after each epoch without a better dev UAS), "
    f"all {MIN_EPOCHS} epochs keeping the best dev UAS (`--min-epochs {MIN_EPOCHS}`)",
)
#: The protocols by name, the default first.
PROTOCOLS = {protocol.name: protocol for protocol in (PAPER, TUNED)}
DEFAULT_PROTOCOL = PAPER.name
CHECKPOINT_DIR = "checkpoint"
#: The logdirs under the root, and the file of a checkpoint that can be resumed.
LOGDIRS = "*/*/lr*/seed*"
CHECKPOINT = f"{CHECKPOINT_DIR}/state.json"
CLI = ("-m", "keras_structured.applications.parsing")
TREEBANK_NOTES = {
    "en": "UD 2.0 (CoNLL 2017), as in the paper.",
    "vi": "UD 2.0 (CoNLL 2017), as in the paper.",
    "ja": "UD 2.9, not the paper's 2.0 (no UD 2.0 training file could be obtained); the training "
    "file is decoded from spaCy's binary copy (its original sentence ids and MISC fields other than "
    "SpaceAfter are lost).",
    "zh": "UD 1.4 (then called UD_Chinese), not the paper's 2.0; UD v1 labels.",
    "ro": "UD 1.2, UD v1 labels, and much smaller than the treebank the paper used: 481 training, "
    "76 dev and 76 test sentences (UD 2.x has 752 dev and 729 test sentences); its scores are noisy.",
}


@dataclasses.dataclass(frozen=True)
class RunSpec(NamedRun):
    """One training run: a treebank, a loss, a learning rate and a seed; evaluated on dev and test."""

    language: str
    loss: str
    learning_rate: float
    seed: int

    splits: ClassVar[tuple[str, ...]] = SPLITS

    @property
    def parts(self) -> tuple[str, ...]:
        """``(language, loss, lr{learning_rate:g}, seed{seed})``."""
        return self.language, self.loss, f"lr{self.learning_rate:g}", f"seed{self.seed}"

    @classmethod
    def from_parts(cls, parts: tuple[str, ...]) -> RunSpec | None:
        """The run of ``{lang}/{loss}/lr{lr}/seed{S}``, or None for any other folder."""
        language, loss, lr, seed = parts
        if loss in LOSSES and lr.startswith("lr") and seed.startswith("seed"):
            return cls(language, loss, logdir_value(float(lr[2:])), int(seed[4:]))
        return None


@dataclasses.dataclass(frozen=True)
class SuiteConfig(TunedOptions):
    """The options of a suite, as given to ``run`` and recorded in ``{root}/bench_plan.json``.

    ``protocol`` names the training configuration (:data:`PROTOCOLS`); ``learning_rates`` and
    ``parser_args`` left None take the protocol's. ``tune_languages`` are the languages the
    learning rate is tuned on (every loss, every learning rate, the first seed): each of them
    takes its own best rate, as in the paper, and the other languages the rate with the best
    mean dev UAS over all of them. They and ``seed_languages`` get every seed, the others the
    first seed, at the chosen learning rate. With ``per_language`` every language is tuned on
    itself and gets every seed. With one learning rate nothing is tuned.
    """

    protocol: str = DEFAULT_PROTOCOL
    languages: tuple[str, ...] = tuple(LANGUAGES)
    losses: tuple[str, ...] = LOSSES
    learning_rates: tuple[float, ...] | None = None
    seeds: tuple[int, ...] = SEEDS
    tune_languages: tuple[str, ...] = TUNE_LANGUAGES
    seed_languages: tuple[str, ...] = SEED_LANGUAGES
    per_language: bool = False
    parser_args: tuple[str, ...] | None = None
    train_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(
                f"protocol must be one of {', '.join(PROTOCOLS)}. Received: protocol={self.protocol!r}"
            )
        for name in ("learning_rates", "parser_args"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(PROTOCOLS[self.protocol], name))
        tuned = () if self.per_language else ("tune_languages",)
        self.require("languages", "losses", "learning_rates", "seeds", *tuned)
        super().__post_init__()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SuiteConfig:
        """Inverse of :meth:`to_json`; a plan recorded before there were protocols (no
        ``protocol``) is the ``tuned`` protocol's."""
        return super().from_json({"protocol": TUNED.name, **data})

    @property
    def min_epochs(self) -> int | None:
        """The ``--min-epochs`` of every training command (None: not passed)."""
        return PROTOCOLS[self.protocol].min_epochs

    @property
    def labels(self) -> bool:
        """Whether the runs train the joint arc-label classifier (LAS)."""
        return LABELS_ARG in self.parser_args

    def tuned_on(self, language: str) -> tuple[str, ...]:
        """The languages whose dev UAS picks ``language``'s learning rates: itself when it is
        tuned (a tuning language, or every language with ``per_language``), else the tuning
        languages (the reduction)."""
        tuned = self.per_language or language in self.tune_languages or not self.tuning
        return (language,) if tuned else self.tune_languages

    @property
    def all_languages(self) -> tuple[str, ...]:
        """``languages`` plus the tuning languages (they are trained anyway), in ``LANGUAGES`` order."""
        extra = self.tune_languages if self.tuning and not self.per_language else ()
        wanted = set(self.languages) | set(extra)
        order = {code: i for i, code in enumerate(LANGUAGES)}
        return tuple(sorted(wanted, key=lambda code: (order.get(code, len(order)), code)))

    def seeds_for(self, language: str) -> tuple[int, ...]:
        """Every seed for tuning and seed languages (every language without the reduction), else the first."""
        every = (
            self.per_language
            or language in self.tune_languages
            or language in self.seed_languages
            or not self.tuning
        )
        return self.seeds if every else self.seeds[:1]

    @property
    def reduced(self) -> bool:
        """Whether the learning-rate reduction (tuning on ``tune_languages`` only) is made."""
        return self.tuning and not self.per_language


def choose_learning_rate(
    loss: str,
    tuned_on: Sequence[str],
    learning_rates: Sequence[float],
    seed: int,
    statuses: Mapping[RunSpec, RunStatus],
) -> GridChoice[RunSpec]:
    """Pick ``loss``'s learning rate: the best mean dev UAS over ``tuned_on`` at ``seed``.

    The paper's protocol (:func:`benchmarks.run_plans.choose_on_grid`): a best rate at an end
    of the grid widens it by a factor of 2, at most :data:`MAX_WIDENINGS` times. Ties go to
    the smaller learning rate, NaN scores rank last.

    Args:
        loss: the loss.
        tuned_on: the tuning languages (the score of a rate is the mean over them).
        learning_rates: the grid.
        seed: the seed of the tuning runs.
        statuses: what each logdir holds.

    Returns:
        A :class:`benchmarks.run_plans.GridChoice` of the mean best dev UAS, waiting
        (``value`` None) for ``missing``.

    Example:
        >>> done = lambda uas: RunStatus(finished=True, score=uas)
        >>> statuses = {RunSpec("en", "crf", 0.001, 0): done(80.0)}
        >>> statuses[RunSpec("en", "crf", 0.002, 0)] = done(82.0)
        >>> choose_learning_rate("crf", ["en"], [0.001, 0.002], 0, statuses).value
        0.002
    """
    return choose_on_grid(
        learning_rates,
        lambda lr: [RunSpec(language, loss, lr, seed) for language in tuned_on],
        statuses,
        MAX_WIDENINGS,
    )


@dataclasses.dataclass(kw_only=True)
class Plan(RunPlan[RunSpec]):
    """The runs a suite needs as far as they are decided, split by what is left to do.

    ``runs`` holds the tuning runs and, for every (language, loss) whose learning rate is
    chosen, its runs at that rate; ``waiting`` the (language, loss) pairs still waiting for
    their tuning runs. ``done`` runs are finished and evaluated on dev and test,
    ``evaluate`` ones finished but not evaluated, ``resume`` ones have a checkpoint, ``start``
    ones nothing.
    """

    config: SuiteConfig
    choices: dict[tuple[tuple[str, ...], str], GridChoice[RunSpec]]
    chosen: dict[tuple[str, str], float]

    @property
    def pending(self) -> list[RunSpec]:
        """Runs with something left to do: runs to resume or evaluate first, then the smallest
        treebanks first (results arrive sooner), in plan order otherwise."""
        return sorted(
            super().pending, key=lambda spec: (spec in self.start, TRAINING_SIZE_RANK.index(spec.language))
        )

    def choice(self, language: str, loss: str) -> GridChoice[RunSpec]:
        """The learning-rate choice that applies to ``language`` and ``loss``."""
        return self.choices[self.config.tuned_on(language), loss]


def plan_suite(config: SuiteConfig, statuses: Mapping[RunSpec, RunStatus]) -> Plan:
    """The runs of ``config`` given what the logdirs hold: pure, so that it can be tested and re-planned.

    Tuning runs come first (every tuning language, loss and learning rate at the first
    seed), then for each language and loss whose learning rate is chosen, its seeds
    (:meth:`SuiteConfig.seeds_for`) at that rate; a tuning run at the chosen rate is not
    repeated.

    Args:
        config: the suite's options.
        statuses: what each logdir holds (:data:`LAYOUT`); absent runs are not started.

    Returns:
        A :class:`Plan`.

    Example:
        >>> config = SuiteConfig(languages=("vi",), losses=("crf",), learning_rates=(2e-3,), seeds=(0,))
        >>> [spec.name for spec in plan_suite(config, {}).start]
        ['vi/crf/lr0.002/seed0']
    """
    runs: dict[RunSpec, None] = {}  # an ordered set
    choices: dict[tuple[tuple[str, ...], str], GridChoice[RunSpec]] = {}
    seed = config.seeds[0]
    for loss in config.losses:
        for language in config.all_languages:
            group = config.tuned_on(language)
            if (group, loss) in choices:
                continue
            choice = choose_learning_rate(loss, group, config.learning_rates, seed, statuses)
            choices[group, loss] = choice
            if config.tuning:
                runs.update((RunSpec(t, loss, lr, seed), None) for t in group for lr in choice.grid)
    chosen, waiting = {}, []
    for language in config.all_languages:
        for loss in config.losses:
            lr = choices[config.tuned_on(language), loss].value
            if lr is None:
                waiting.append((language, loss))
                continue
            chosen[language, loss] = lr
            runs.update((RunSpec(language, loss, lr, s), None) for s in config.seeds_for(language))
    plan = Plan(runs=list(runs), waiting=waiting, config=config, choices=choices, chosen=chosen)
    plan.file_runs(statuses)
    return plan


# ---------------------------------------------------------------------------------------------- disk


def needs_extension(config: Mapping[str, Any] | None, final: Mapping[str, Any] | None) -> bool:
    """Whether a finished run stopped early before :data:`MIN_EPOCHS` (or its own ``epochs``,
    when fewer) under a smaller ``min_epochs``: resuming it with ``--min-epochs`` extends it into
    the run the ``tuned`` protocol wants. A run of the preset (``min_epochs`` = ``epochs``)
    never stops early.

    Example:
        >>> needs_extension({"min_epochs": 1}, {"stopped_early": True, "epochs_run": 12})
        True
        >>> needs_extension({"min_epochs": MIN_EPOCHS}, {"stopped_early": True, "epochs_run": 12})
        False
    """
    if final is None or not final.get("stopped_early", False):
        return False
    config = config or {}
    target = min(MIN_EPOCHS, config.get("epochs", MIN_EPOCHS))
    return config.get("min_epochs", 1) < target and final.get("epochs_run", 0) < target


#: The logdirs: ``final.json`` (its ``dev_uas`` tunes the learning rate), ``checkpoint/state.json``,
#: ``eval_{dev,test}.json``; a run that :func:`needs_extension` counts as unfinished (its
#: checkpoint resumes it).
LAYOUT = RunLayout(
    pattern=LOGDIRS,
    spec=RunSpec.from_parts,
    checkpoint=CHECKPOINT,
    splits=SPLITS,
    score=lambda final: final.get("dev_uas"),
    accepts=lambda logdir, final: not needs_extension(read_json(logdir / "config.json"), final),
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
    """``python -m keras_structured.applications.parsing train ... --quiet`` argv of ``spec``: the
    protocol's ``--min-epochs`` (if any) and parser options, then the suite's training options."""
    argv = [python, *CLI, "train", "--treebank", str(data / LANGUAGES[spec.language]), "--loss", spec.loss]
    argv += ["--learning-rate", f"{spec.learning_rate:g}", "--seed", str(spec.seed)]
    argv += ["--logdir", str(spec.logdir(root))]
    if config.min_epochs is not None:
        argv += ["--min-epochs", str(config.min_epochs)]
    argv += [*config.parser_args, *config.train_args, "--quiet"]
    return argv + ["--resume"] if resume else argv


def eval_command(logdir: Path, split: str, python: str = sys.executable) -> list[str]:
    """``python -m keras_structured.applications.parsing evaluate --logdir ... --split ... --json`` argv."""
    return [python, *CLI, "evaluate", "--logdir", str(logdir), "--split", split, "--json"]


def run_commands(
    spec: RunSpec, status: RunStatus, run: SuiteRun[SuiteConfig], python: str = sys.executable
) -> list[Step]:
    """The steps left to finish ``spec``: training (with ``--resume`` when it can), then evaluations.

    Args:
        spec: the run.
        status: what its logdir holds.
        run: the suite's options (for ``train_args``), the folder of the treebank folders and
            the runs' root directory.
        python: the interpreter of the subprocesses.

    Returns:
        ``[("train" | "eval", argv), ...]``: nothing for a run finished and evaluated, the
        missing evaluations for a finished one, otherwise training then both evaluations.

    Example:
        >>> spec = RunSpec("vi", "crf", 0.002, 0)
        >>> done = RunStatus(finished=True, evaluated=frozenset({"dev"}))
        >>> steps = run_commands(spec, done, SuiteRun(SuiteConfig(), Path("ud"), Path("runs")))
        >>> [(kind, argv[-3:]) for kind, argv in steps]
        [('eval', ['--split', 'test', '--json'])]
    """
    return run_steps(
        spec,
        status,
        lambda resume: train_command(spec, run.options, run.data, run.root, resume, python),
        lambda split: eval_command(spec.logdir(run.root), split, python),
    )


def describe_choices(plan: Plan) -> list[str]:
    """One line per learning-rate choice (and the reduction made), for the terminal and ``results.md``."""
    config = plan.config
    if not config.tuning:
        return [f"One learning rate ({config.learning_rates[0]:g}) for every run: nothing tuned."]
    lines = []
    if config.reduced:
        tuned = " and ".join(config.tune_languages)
        seeded = " and ".join(dict.fromkeys((*config.tune_languages, *config.seed_languages)))
        reuse = (
            f"each of {tuned} takes its own best rate, as in the paper, and the rate with the best mean "
            f"dev UAS over {tuned} is used for every other language"
            if len(config.tune_languages) > 1
            else f"the rate with the best dev UAS on {tuned} is used for every other language"
        )
        seeds = ", ".join(map(str, config.seeds))
        lines.append(
            f"Learning-rate reduction made: every loss is tuned on {tuned} only (seed {config.seeds[0]}, "
            f"grid {', '.join(f'{lr:g}' for lr in config.learning_rates)}); {reuse}; seeds {seeds} at "
            f"the chosen rates on {seeded}, seed {config.seeds[0]} on the other languages. The paper "
            f"tunes every language on the grid {', '.join(f'{lr:g}' for lr in LEARNING_RATES)}. As in "
            f"the paper, a best rate at an end of the grid widens it by a factor of 2 (at most "
            f"{MAX_WIDENINGS} times)."
        )
    else:
        lines.append(
            "Every language is tuned on itself (no reduction); a best rate at an end of the grid "
            f"widens it by a factor of 2 (at most {MAX_WIDENINGS} times)."
        )
    for (group, loss), choice in plan.choices.items():
        where = "+".join(group)
        if choice.value is None:
            lines.append(f"{loss} on {where}: not chosen yet ({len(choice.missing)} tuning runs unfinished)")
        else:
            edge = " (at an end of the widened grid)" if choice.at_edge() else ""
            score = choice.scores[choice.value]
            lines.append(f"{loss} on {where}: lr {choice.value:g}{edge}, mean dev UAS {fmt(score, 2)}")
    return lines


def recorded_choices(plan: Plan) -> list[dict[str, Any]]:
    """The learning-rate choices, for ``bench_plan.json``."""
    return [
        {"tuned_on": list(group), "loss": loss, "learning_rate": choice.value, "scores": choice.scores}
        for (group, loss), choice in plan.choices.items()
    ]


def waiting_notes(plan: Plan) -> list[str]:
    """The languages of each loss that wait for its learning rate, for the dry run."""
    waiting: dict[str, list[str]] = {}
    for language, loss in plan.waiting:
        waiting.setdefault(loss, []).append(language)
    return [
        f"{loss}: {', '.join(languages)} wait for the learning-rate tuning runs"
        for loss, languages in waiting.items()
    ]


def timed_runs(plan: Plan, root: Path, language: str) -> list[RunSpec]:
    """The runs of ``language`` to time side by side: the first seed's runs of
    :data:`TIMED_LOSSES` at their chosen rates, once all of them (the SparseMAP and CRF
    losses among them) are finished; else none."""
    specs = [
        RunSpec(language, loss, plan.chosen[language, loss], plan.config.seeds[0])
        for loss in TIMED_LOSSES
        if loss in plan.config.losses and (language, loss) in plan.chosen
    ]
    losses = {spec.loss for spec in specs}
    finished = all((spec.logdir(root) / FINAL_FILE).is_file() for spec in specs)
    return specs if {"sparsemap", "crf"} <= losses and finished else []


def train_replica(spec: RunSpec, run: SuiteRun[SuiteConfig]) -> bool:
    """Train the stand-in of a timed run whose checkpoint is gone: the run's own command for
    :data:`REPLICA_EPOCHS` epochs, into ``spec.logdir(root / REPLICA_DIR)`` (kept when it is
    finished already). Training is deterministic, so it is the run as it was after those epochs."""
    root = run.root / REPLICA_DIR
    logdir = spec.logdir(root)
    if (logdir / FINAL_FILE).is_file() and (logdir / CHECKPOINT).is_file():
        return True
    argv = train_command(spec, run.options, run.data, root) + ["--epochs", str(REPLICA_EPOCHS)]
    return execute_run(
        f"{spec.name} (timing replica, {REPLICA_EPOCHS} epochs)",
        logdir,
        [("train", argv)],
        run.env,
        fresh=True,
        resume_argv=[*argv, "--resume"],
        checkpoint=CHECKPOINT,
        eval_key="uas",
        train_args=run.time_limit_args,
    )


def time_runs(plan: Plan, run: SuiteRun[SuiteConfig]) -> bool:
    """Time the training steps of each language's :func:`timed_runs` side by side, in one
    ``python -m keras_structured.applications.parsing time`` process per language (skipped when its
    ``step_timing.json`` holds exactly those runs, or their replicas).

    Checkpoints are not kept across machines (``benchmarks/results/.gitignore``): when one of a
    language's timed runs has lost its checkpoint, all of them are timed through replicas
    (:func:`train_replica`, ``jobs`` at a time), so that the losses are compared at the same
    stage of training. Returns True when nothing failed.
    """
    root = run.root
    ok = True
    for language in plan.config.all_languages:
        specs = timed_runs(plan, root, language)
        if not specs:
            continue
        output = root / language / TIMING_FILE
        logdirs = [spec.logdir(root) for spec in specs]
        replicas = [spec.logdir(root / REPLICA_DIR) for spec in specs]
        timing = read_json(output)
        if timing is not None and set(timing) in ({str(d) for d in logdirs}, {str(d) for d in replicas}):
            continue
        if not all((logdir / CHECKPOINT).is_file() for logdir in logdirs):
            if not all(run_parallel(functools.partial(train_replica, run=run), specs, run.jobs)):
                ok = False
                continue
            logdirs = replicas
        argv = time_command(CLI, logdirs, TIMING_STEPS, output)
        what = f"{language} ({', '.join(spec.loss for spec in specs)})"
        ok = time_side_by_side(argv, logdirs, output, what, run.env) and ok
    return ok


# ---------------------------------------------------------------------------------------------- report


@dataclasses.dataclass
class RunResult(FinishedRun):
    """A finished run (``final.json``) as read back from its logdir, with its evaluations and
    the sparsity of its dev parses during training."""

    spec: RunSpec

    def uas(self, split: str, key: str = "uas") -> float:
        """``eval_{split}.json``'s ``key`` (NaN when not evaluated)."""
        return to_float(self.evals.get(split, {}).get(key))

    @functools.cached_property
    def sparsity(self) -> list[tuple[int, list[int]]]:
        """``(epoch, trees per dev sentence)`` of each epoch in ``sparsity_dev.jsonl``."""
        return _read_sparsity(self.logdir / "sparsity_dev.jsonl")


def _read_sparsity(path: Path) -> list[tuple[int, list[int]]]:
    """``(epoch, trees per dev sentence)`` of each readable line of ``sparsity_dev.jsonl``."""
    rows = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            data = json.loads(line)
            rows.append((int(data["epoch"]), [int(c) for c in data["trees_per_sentence"]]))
        except (ValueError, KeyError, TypeError):
            continue
    return rows


#: The paper's claim about its Table 1 that the verdict is held against: the SparseMAP losses
#: ahead of the structured SVM (hinge) and the CRF on 4 of its 5 languages.
PAPER_CLAIM = (4, len(LANGUAGES))
#: A baseline whose mean test UAS lies more than this many points below the better SparseMAP
#: loss's has failed to train (the structured hinge on its plateau scores 7-35 UAS where the
#: other losses score 70-93): the comparison is reported as ``collapsed``, never as a win. The
#: largest gap between losses that all train, in the paper's Table 1 and in this suite, is
#: below 5 points.
COLLAPSE_POINTS = 20.0


@dataclasses.dataclass(frozen=True)
class SeedComparison:
    """One loss against another on one language, over seeds (:func:`compare_seeds`).

    Attributes:
        outcome: ``"ahead"``, ``"tie"`` or ``"behind"``; :func:`sparsemap_verdict` marks a
            baseline more than :data:`COLLAPSE_POINTS` behind ``"collapsed"``.
        difference: the difference of the mean test scores, ours - theirs.
        spread: the sum of the two half ranges ``(max - min) / 2`` over seeds: a difference
            no larger is a tie.
        seeds: how many seeds have a score, ours and theirs.
    """

    outcome: str
    difference: float
    spread: float
    seeds: tuple[int, int]

    @property
    def single_seed(self) -> bool:
        """Whether both sides have one seed: their seed-to-seed variation is unknown."""
        return self.seeds == (1, 1)

    def describe(self) -> str:
        """``ahead (+0.46, spread 0.21, seeds 2/2)``; ``one seed each`` when there is no spread."""
        spread = "one seed each: no spread" if self.single_seed else f"spread {self.spread:.2f}"
        seeds = "" if self.single_seed else f", seeds {self.seeds[0]}/{self.seeds[1]}"
        return f"{self.outcome} ({self.difference:+.2f}, {spread}{seeds})"


def compare_seeds(ours: Sequence[float], theirs: Sequence[float]) -> SeedComparison | None:
    """Whether ``ours`` is ahead of, tied with or behind ``theirs``, beyond the seed spread.

    The rule: with ``d = mean(ours) - mean(theirs)`` and ``h`` the half range
    ``(max - min) / 2`` of each side's seeds (the ``±`` of the report's tables), it is a tie
    when ``|d| <= h(ours) + h(theirs)``, that is when the intervals ``mean ± h`` overlap; ahead
    when ``d`` is larger, behind when it is smaller. A side with one seed has ``h = 0``: with
    one seed on both sides any difference decides (:attr:`SeedComparison.single_seed` says so).
    With three seeds the half range is a rough, but not a small, measure of the spread; a
    Welch test would have 2-4 degrees of freedom and little power at these sizes.

    Args:
        ours: our test scores, one per seed (NaNs do not count).
        theirs: theirs.

    Returns:
        A :class:`SeedComparison`, or None when a side has no score.

    Example:
        >>> compare_seeds([87.0, 87.4], [86.5, 86.7]).describe()
        'ahead (+0.60, spread 0.30, seeds 2/2)'
        >>> compare_seeds([87.0, 87.4], [86.9, 87.1]).outcome
        'tie'
    """
    mine, other = mean_and_spread(ours), mean_and_spread(theirs)
    if not (mine[2] and other[2]):
        return None
    difference, spread = mine[0] - other[0], mine[1] + other[1]
    # A tie within rounding too: two equal means computed in different orders.
    outcome = "tie" if abs(difference) <= spread + 1e-9 else ("ahead" if difference > 0 else "behind")
    return SeedComparison(outcome, difference, spread, (mine[2], other[2]))


def _better_sparsemap(scores: Mapping[tuple[str, str], Sequence[float]], language: str) -> str | None:
    """The SparseMAP loss with the better mean test score on ``language`` (None: neither has one)."""
    means = {loss: mean_and_spread(scores.get((language, loss), []))[0] for loss in SPARSEMAP_LOSSES}
    finite = [loss for loss in SPARSEMAP_LOSSES if math.isfinite(means[loss])]
    return max(finite, key=lambda loss: means[loss]) if finite else None


def sparsemap_verdict(
    scores: Mapping[tuple[str, str], Sequence[float]], languages: Sequence[str]
) -> list[str]:
    """How the SparseMAP losses compare with CRF and with hinge per language, and with the paper's claim.

    Per language, the better SparseMAP loss (sparsemap or margin_sparsemap, by mean test UAS,
    as the paper's claim reads its table) is compared with CRF and with hinge separately by
    :func:`compare_seeds`. The summary holds the paper's claim ("outperform the SVM and CRF
    losses on 4 out of 5 languages") against the languages where it is ahead of both; it makes
    no claim while one of the paper's five languages lacks a result.

    Args:
        scores: ``(language, loss) -> test UAS per seed`` (missing or NaN entries do not count).
        languages: the languages, in table order.

    Returns:
        The Markdown lines: a table, then the summary (starting ``Reproduced:``, ``Not
        reproduced:``, ``Not decided:`` when a baseline collapsed on a language, or ``No
        claim:``).

    Example:
        >>> uas = {("en", "sparsemap"): [87.0, 87.4], ("en", "crf"): [86.0], ("en", "hinge"): [87.1]}
        >>> lines = sparsemap_verdict(uas, ["en"])
        >>> lines[2].split(" | ")[2:]
        ['ahead (+1.20, spread 0.20, seeds 2/1)', 'tie (+0.10, spread 0.20, seeds 2/1) |']
        >>> lines[-1][:9]
        'No claim:'
    """
    lines = [
        f"| language | better SparseMAP loss (test UAS) | {' | '.join(f'vs {b}' for b in BASELINES)} |",
        "|---" * (len(BASELINES) + 2) + "|",
    ]
    outcomes: dict[str, dict[str, SeedComparison]] = {}
    for language in languages:
        loss = _better_sparsemap(scores, language)
        if loss is None:
            lines.append(f"| {language} | missing |" + " |" * len(BASELINES))
            continue
        ours = scores[language, loss]
        cells = []
        for baseline in BASELINES:
            comparison = compare_seeds(ours, scores.get((language, baseline), []))
            if comparison is not None and comparison.difference > COLLAPSE_POINTS:
                comparison = dataclasses.replace(comparison, outcome="collapsed")
            cells.append("missing" if comparison is None else comparison.describe())
            if comparison is not None:
                outcomes.setdefault(language, {})[baseline] = comparison
        lines.append(f"| {language} | {loss} {seed_cell(ours, 1)} | {' | '.join(cells)} |")
    complete = [language for language in languages if len(outcomes.get(language, {})) == len(BASELINES)]
    ahead = [
        language
        for language in complete
        if all(comparison.outcome == "ahead" for comparison in outcomes[language].values())
    ]
    single = [language for language in ahead if any(c.single_seed for c in outcomes[language].values())]
    counts = "; ".join(
        f"against {baseline}: "
        + ", ".join(
            f"{sum(outcomes[language][baseline].outcome == outcome for language in complete)} {outcome}"
            for outcome in ("ahead", "tie", "behind", "collapsed")
        )
        for baseline in BASELINES
    )
    needed, total = PAPER_CLAIM
    paper = (
        f"the paper's claim, the SparseMAP losses ahead of the SVM (hinge) and CRF losses on {needed} of "
        f"{total} languages"
    )
    single_note = f" ({', '.join(single)} from one seed, without a spread)" if single else ""
    missing = [language for language in LANGUAGES if language not in complete]
    collapsed = {
        baseline: [language for language in complete if outcomes[language][baseline].outcome == "collapsed"]
        for baseline in BASELINES
    }
    failed = [f"{baseline} on {', '.join(where)}" for baseline, where in collapsed.items() if where]
    if failed and not missing:
        summary = (
            f"Not decided: {paper}, needs baselines that train. Collapsed (mean test UAS more than "
            f"{COLLAPSE_POINTS:g} points below the better SparseMAP loss): {'; '.join(failed)}. A failed "
            f"baseline is a finding to explain, not a win; {counts}."
        )
    elif missing:
        summary = (
            f"No claim: {paper}, needs results on {', '.join(LANGUAGES)}; missing on {', '.join(missing)}. "
            f"So far ahead of both on {len(ahead)} of the {len(complete)} languages with results: "
            f"{', '.join(ahead) or 'none'}{single_note}."
        )
    else:
        verdict = "Reproduced" if len(ahead) >= needed else "Not reproduced"
        summary = (
            f"{verdict}: {paper}. Here the better SparseMAP loss is ahead of both on {len(ahead)} of "
            f"{len(complete)}: {', '.join(ahead) or 'none'}{single_note}; {counts}."
        )
    rule = (
        "Rule: the difference of the mean test UAS, better SparseMAP loss - baseline, is a tie when it "
        "is no larger than the sum of the two half ranges over seeds (the intervals mean ± half range "
        "overlap); ahead or behind otherwise. With one seed on both sides any difference decides. A "
        f"baseline more than {COLLAPSE_POINTS:g} points behind has collapsed: it counts as no comparison."
    )
    return [*lines, "", rule, "", summary]


def _sparsity(counts: Sequence[int]) -> tuple[float, float, int]:
    """``(mean trees per sentence, fraction with one tree, max)``; counts below 1 (no tree) are skipped."""
    array = np.asarray([c for c in counts if c >= 1])
    if array.size == 0:
        return math.nan, math.nan, 0
    return float(array.mean()), float(np.mean(array == 1)), int(array.max())


def _grouped(runs: list[RunResult], plan: Plan) -> dict[tuple[str, str], list[RunResult]]:
    """Finished runs at the chosen learning rate, by ``(language, loss)``, seeds sorted."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for run in sorted(runs, key=lambda r: r.spec.seed):
        key = (run.spec.language, run.spec.loss)
        if plan.chosen.get(key) == run.spec.learning_rate:
            groups.setdefault(key, []).append(run)
    return groups


#: The test scores of the report's tables: ``eval_test.json``'s key and the table's title.
#: The LAS ones appear when a run holds them (``run --labels``).
UAS_KEYS = (
    ("uas", "Test UAS (%), punctuation included"),
    ("uas_no_punct", "Test UAS (%), without punctuation"),
)
LAS_KEYS = (
    ("las", "Test LAS (%), punctuation included"),
    ("las_no_punct", "Test LAS (%), without punctuation"),
)


def has_las(runs: Iterable[RunResult]) -> bool:
    """Whether one of ``runs`` has a LAS in its ``eval_test.json`` (a labelled run)."""
    return any("las" in run.evals.get("test", {}) for run in runs)


def _test_scores(
    groups: Mapping[tuple[str, str], list[RunResult]], key: str = "uas"
) -> dict[tuple[str, str], list[float]]:
    """``(language, loss) -> eval_test.json's key per seed`` at the chosen learning rates."""
    return {pair: [run.uas("test", key) for run in group] for pair, group in groups.items()}


def _uas_tables(plan: Plan, groups: dict[tuple[str, str], list[RunResult]]) -> list[str]:
    """Markdown tables of test UAS (with and without punctuation), and of test LAS when the runs have it."""
    config = plan.config
    losses = config.losses
    lines = []
    keys = UAS_KEYS + (LAS_KEYS if has_las(run for group in groups.values() for run in group) else ())
    for key, title in keys:
        lines += [
            f"**{title}**",
            "",
            f"| language | {' | '.join(losses)} |",
            "|---" * (len(losses) + 1) + "|",
        ]
        scores = _test_scores(groups, key)
        for language in config.all_languages:
            values = {loss: scores.get((language, loss), []) for loss in losses}
            row_means = {loss: mean_and_spread(v)[0] for loss, v in values.items()}
            top = max((m for m in row_means.values() if math.isfinite(m)), default=math.nan)
            cells = []
            for loss in losses:
                if (language, loss) in plan.waiting:
                    cells.append("missing (lr not chosen)")
                    continue
                expected = len(config.seeds_for(language))
                cells.append(seed_cell(values[loss], expected, bold=row_means[loss] == top))
            lines.append(f"| {language} | {' | '.join(cells)} |")
        lines.append("")
    return lines[:-1]


def _tuning_table(plan: Plan, runs: list[RunResult]) -> list[str]:
    """Best dev UAS (``final.json``) of every finished run at the first seed, by learning rate."""
    config = plan.config
    seed = config.seeds[0]
    rates = sorted({*config.learning_rates, *(r.spec.learning_rate for r in runs)})
    dev = {
        (r.spec.language, r.spec.loss, r.spec.learning_rate): to_float(r.final.get("dev_uas"))
        for r in runs
        if r.spec.seed == seed
    }
    pairs = sorted(
        {(language, loss) for language, loss, _ in dev}, key=lambda p: (_order(p[0]), LOSSES.index(p[1]))
    )
    rows = {pair: {lr: dev[(*pair, lr)] for lr in rates if (*pair, lr) in dev} for pair in pairs}
    return [
        f"Best dev UAS (%) of each finished run at seed {seed} (`final.json`); the chosen rate in bold.",
        "",
        *rate_table(("language", "loss"), rates, rows, plan.chosen),
    ]


def _order(language: str) -> int:
    return list(LANGUAGES).index(language) if language in LANGUAGES else len(LANGUAGES)


def _sparsity_table(plan: Plan, groups: dict[tuple[str, str], list[RunResult]]) -> list[str]:
    """SparseMAP sparsity on dev and test (from ``eval_{split}.json``), mean over seeds."""
    lines = [
        "Trees with nonzero weight per sentence, from `eval_{split}.json` at the chosen learning rate; "
        "mean over seeds of each seed's mean, fraction of sentences with exactly one tree, largest count.",
        "",
        "| language | loss | seeds | dev trees/sentence | dev one tree | dev max | test trees/sentence "
        "| test one tree | test max |",
        "|---" * 9 + "|",
    ]
    for language in plan.config.all_languages:
        for loss in SPARSEMAP_LOSSES:
            group = groups.get((language, loss), [])
            if loss not in plan.config.losses:
                continue
            if not group:
                lines.append(f"| {language} | {loss} | 0 | missing | | | | | |")
                continue
            cells = []
            for split in SPLITS:
                stats = [_sparsity(r.evals.get(split, {}).get("trees_per_sentence", [])) for r in group]
                mean = mean_and_spread([s[0] for s in stats])[0]
                one = mean_and_spread([s[1] for s in stats])[0]
                largest = max((s[2] for s in stats), default=0)
                cells += [
                    fmt(mean, 2),
                    "n/a" if math.isnan(one) else f"{100 * one:.1f}%",
                    str(largest or "n/a"),
                ]
            lines.append(f"| {language} | {loss} | {len(group)} | {' | '.join(cells)} |")
    return lines


def _throughput_table(plan: Plan, runs: list[RunResult]) -> list[str]:
    """Median training sentences/s per language and loss, and SparseMAP's time per sentence against CRF."""
    losses = plan.config.losses
    lines = [
        "Median of the `sentences_per_s` rows of `progress.csv` over every finished run of the loss (all "
        f"learning rates and seeds); CPU threads per job: {threads_per_job(runs)}. "
        f"Ratio = time per sentence of sparsemap / crf = crf sentences/s / sparsemap sentences/s, target "
        f"<= {THROUGHPUT_TARGET:g}; comparable only when the runs shared the machine alike.",
        "",
        f"| language | {' | '.join(losses)} | sparsemap / crf | <= {THROUGHPUT_TARGET:g} |",
        "|---" * (len(losses) + 3) + "|",
    ]
    for language in plan.config.all_languages:
        median = {}
        for loss in losses:
            rows = [
                r.column("sentences_per_s")
                for r in runs
                if (r.spec.language, r.spec.loss) == (language, loss)
            ]
            median[loss] = finite_median(np.concatenate(rows) if rows else np.array([]))
        crf, sparsemap = median.get("crf", math.nan), median.get("sparsemap", math.nan)
        ratio = crf / sparsemap if sparsemap > 0 else math.nan
        met = "n/a" if not math.isfinite(ratio) else ("yes" if ratio <= THROUGHPUT_TARGET else "**no**")
        cells = " | ".join(fmt(median[loss], 1) for loss in losses)
        lines.append(f"| {language} | {cells} | {fmt(ratio, 2)} | {met} |")
    return lines


def _same_process_throughput_table(plan: Plan, root: Path) -> list[str]:
    """Sentences/s of the runs timed side by side (``{root}/{language}/step_timing.json``)."""
    lines = [
        f"The first seed's runs at the chosen rates, timed in one process on the same {TIMING_STEPS} "
        "batches, taking training steps in turn "
        "(`python -m keras_structured.applications.parsing time`): the "
        "measurement that a shared machine cannot bias. Ratio = median step time of sparsemap / crf. "
        "Timed models: the runs' last checkpoints, or, where those were gone (checkpoints stay on "
        f"the machine that trained them), replicas of the runs trained {REPLICA_EPOCHS} epochs with "
        "the same command and seed.",
        "",
        f"| language | timed models | {' | '.join(TIMED_LOSSES)} | sparsemap / crf "
        f"| <= {THROUGHPUT_TARGET:g} |",
        "|---" * (len(TIMED_LOSSES) + 4) + "|",
    ]
    for language in plan.config.all_languages:
        timing = read_json(root / language / TIMING_FILE)
        if not timing:
            lines.append(f"| {language} |" + " n/a |" * (len(TIMED_LOSSES) + 3))
            continue
        replicas = any(REPLICA_DIR in Path(logdir).parts for logdir in timing)
        models = f"replicas, {REPLICA_EPOCHS} epochs" if replicas else "last checkpoints"
        by_loss = {run["loss"]: run for run in timing.values()}
        cells = " | ".join(
            fmt(to_float(by_loss[loss]["sentences_per_s"]), 1) if loss in by_loss else "n/a"
            for loss in TIMED_LOSSES
        )
        ratio = to_float(by_loss["sparsemap"]["median_step_s"]) / to_float(by_loss["crf"]["median_step_s"])
        met = "yes" if ratio <= THROUGHPUT_TARGET else "**no**"
        lines.append(f"| {language} | {models} | {cells} | {fmt(ratio, 2)} | {met} |")
    return lines


def _epoch_budget(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(min_epochs, epochs)`` of a run's ``config.json``; None when it lacks one of them."""
    budget = config.get("min_epochs"), config.get("epochs")
    return None if None in budget else (int(budget[0]), int(budget[1]))


def _trained_outside(budget: tuple[int, int], final: Mapping[str, Any]) -> str | None:
    """Why the epochs of ``final.json`` are not what ``(min_epochs, epochs)`` trains; None when they are."""
    least, most = budget
    trained, stopped = int(final["epochs_run"]), bool(final.get("stopped_early", False))
    if trained > most:
        return f"trained {trained} epochs, more than epochs {most}"
    if stopped and trained < min(least, most):
        return f"stopped early after {trained} epochs, before min_epochs {least}"
    if not stopped and trained != most:
        return f"trained {trained} of {most} epochs without stopping early"
    return None


def epoch_flag(
    config: Mapping[str, Any], final: Mapping[str, Any], expected: tuple[int, int] | None = None
) -> str | None:
    """Why a finished run's trained epochs differ from what it should train; None when they do not.

    A run should train between its ``config.json``'s ``min_epochs`` and ``epochs``: all
    ``epochs`` unless early stopping ended it, and not before ``min_epochs``. With
    ``expected``, the protocol's ``(min_epochs, epochs)``, a ``config.json`` that holds others is
    flagged only when the epochs trained are not what the protocol's would train (a run of
    ``min_epochs`` 20 that trained all 30 of 30 epochs without stopping early is the run that
    ``min_epochs`` 30 gives).

    Args:
        config: the run's ``config.json``.
        final: its ``final.json`` (``epochs_run``, ``stopped_early``).
        expected: the protocol's ``(min_epochs, epochs)``; None: not checked.

    Returns:
        The reason, or None (also when ``config.json`` or ``final.json`` lacks the numbers).

    Example:
        >>> epoch_flag({"min_epochs": 20, "epochs": 30}, {"epochs_run": 30}, (30, 30)) is None
        True
        >>> stopped = {"epochs_run": 22, "stopped_early": True}
        >>> epoch_flag({"min_epochs": 20, "epochs": 30}, stopped, (30, 30)).split(": ")[1]
        'stopped early after 22 epochs, before min_epochs 30'
    """
    budget = _epoch_budget(config)
    if budget is None or final.get("epochs_run") is None:
        return None
    reason = _trained_outside(budget, final)
    if reason is not None:
        return f"{reason} (config.json: min_epochs {budget[0]}, epochs {budget[1]})"
    if expected is None or budget == expected:
        return None
    reason = _trained_outside(expected, final)
    if reason is None:
        return None
    return (
        f"config.json min_epochs {budget[0]}, epochs {budget[1]}, not the protocol's {expected[0]}, "
        f"{expected[1]}: {reason}"
    )


def _expected_epochs(config: SuiteConfig) -> tuple[int, int] | None:
    """The protocol's ``(min_epochs, epochs)``; None for a suite of other training options (``--quick``)."""
    return None if config.train_args else PROTOCOLS[config.protocol].epochs


def _sorted_runs(runs: Iterable[RunResult]) -> list[RunResult]:
    return sorted(
        runs,
        key=lambda r: (
            _order(r.spec.language),
            r.spec.language,
            LOSSES.index(r.spec.loss),
            r.spec.learning_rate,
            r.spec.seed,
        ),
    )


def _epoch_lines(config: SuiteConfig, runs: list[RunResult]) -> list[str]:
    """How many epochs the runs trained, the runs flagged by :func:`epoch_flag`, and those whose
    ``config.json`` holds other epochs than the protocol's but trained as its runs do."""
    expected = _expected_epochs(config)
    trained: dict[int, int] = {}
    for run in runs:
        epochs = run.final.get("epochs_run")
        key = -1 if epochs is None else int(epochs)
        trained[key] = trained.get(key, 0) + 1
    counts = ", ".join(
        f"{'unknown' if epochs < 0 else epochs} ({n} runs)" for epochs, n in sorted(trained.items())
    )
    rule = (
        f"the protocol's runs train min_epochs {expected[0]}, epochs {expected[1]}"
        if expected
        else "the suite's training options set the epochs"
    )
    lines = [
        f"Epochs trained (`final.json`'s `epochs_run`): {counts or 'no finished run'}. A run should train "
        "between its `config.json`'s `min_epochs` and `epochs` (all of them unless early stopping ended it); "
        f"{rule}."
    ]
    flagged = [(run, epoch_flag(run.config, run.final, expected)) for run in _sorted_runs(runs)]
    flagged = [(run, reason) for run, reason in flagged if reason]
    if flagged:
        header = f"**{len(flagged)} runs trained other epochs than they should** (marked ! below):"
        lines.append("\n".join([header, *(f"- `{run.spec.name}`: {reason}" for run, reason in flagged)]))
    else:
        lines.append("No run trained other epochs than its `config.json` and the protocol say.")
    other = [
        run
        for run, reason in ((run, epoch_flag(run.config, run.final, expected)) for run in _sorted_runs(runs))
        if reason is None and expected and _epoch_budget(run.config) not in (None, expected)
    ]
    if other:
        budgets = sorted({_epoch_budget(run.config) for run in other})
        lines.append(
            f"{len(other)} runs' `config.json` holds other epochs than the protocol's "
            f"({'; '.join(f'min_epochs {a}, epochs {b}' for a, b in budgets)}) but they trained what the "
            "protocol's runs train (all epochs, not stopped early), so they count as its runs: "
            + ", ".join(f"`{run.spec.name}`" for run in other)
            + "."
        )
    return lines


def _runs_table(config: SuiteConfig, runs: list[RunResult]) -> list[str]:
    """Every finished run: epochs (trained and of its ``config.json``), dev and test scores,
    throughput and wall time; LAS columns when a run has them."""
    expected = _expected_epochs(config)
    las = has_las(runs)
    las_headers = " | dev LAS | test LAS | test LAS no punct" if las else ""
    columns = 13 if las else 10
    lines = [
        "Epochs: trained (`final.json`), ! where they differ from what the run should train; config epochs: "
        "the epochs `config.json` allows, `min_epochs`-`epochs` (one number: a fixed count). Train wall: "
        "`bench_state.json` (every session of the benchmark, start-up included); train s: `final.json`'s "
        "`train_seconds`.",
        "",
        "| run | epochs | config epochs | best epoch | stopped early | dev UAS | test UAS | test UAS no punct"
        f"{las_headers} | sentences/s | train wall (min) | train s |",
        "|---" * (columns + 1) + "|",
    ]
    for run in _sorted_runs(runs):
        f = run.final
        budget = _epoch_budget(run.config)
        flag = " !" if epoch_flag(run.config, f, expected) else ""
        if budget is None:
            budget_cell = "n/a"
        else:  # min_epochs >= epochs: a fixed count of epochs
            budget_cell = f"{budget[0]}-{budget[1]}" if budget[0] < budget[1] else str(budget[1])
        las_cells = (
            f" | {fmt(to_float(f.get('dev_las')), 2)} | {fmt(run.uas('test', 'las'), 2)} "
            f"| {fmt(run.uas('test', 'las_no_punct'), 2)}"
            if las
            else ""
        )
        lines.append(
            f"| {run.spec.name} | {f.get('epochs_run', 'n/a')}{flag} | {budget_cell} "
            f"| {f.get('best_epoch', 'n/a')} "
            f"| {'yes' if f.get('stopped_early') else 'no'} | {fmt(to_float(f.get('dev_uas')), 2)} "
            f"| {fmt(run.uas('test'), 2)} | {fmt(run.uas('test', 'uas_no_punct'), 2)}{las_cells} "
            f"| {fmt(finite_median(run.column('sentences_per_s')), 1)} "
            f"| {fmt(to_float(run.state.get('train_wall_s')) / 60, 1)} "
            f"| {fmt(to_float(f.get('train_seconds')), 0)} |"
        )
    return lines


def _missing_lines(plan: Plan) -> list[str]:
    """The planned runs not finished and evaluated, and the pairs still waiting for their learning rate."""
    waiting = [
        f"- `{language}/{loss}`: learning rate not chosen, {len(plan.choice(language, loss).missing)} "
        f"tuning runs on {'+'.join(plan.config.tuned_on(language))} unfinished"
        for language, loss in plan.waiting
    ]
    return missing_run_lines(plan, lambda spec: "dev and test", waiting)


def _treebank_lines(plan: Plan, runs: list[RunResult]) -> list[str]:
    used: dict[str, set[str]] = {}
    for run in runs:
        if run.config.get("treebank"):
            used.setdefault(run.spec.language, set()).add(Path(run.config["treebank"]).name)
    lines = ["| language | treebank | used by the runs | note |", "|---|---|---|---|"]
    for language, folder in LANGUAGES.items():
        lines.append(
            f"| {language} | {folder} | {', '.join(sorted(used.get(language, []))) or 'no finished run'} "
            f"| {TREEBANK_NOTES.get(language, '')} |"
        )
    return lines


def _plot_figures(plan: Plan, groups: dict[tuple[str, str], list[RunResult]], out: Path) -> list[Path]:
    """Sparsity histograms and sparsity over training of the sparsemap loss, learning curves; per language."""
    from keras_structured.applications.parsing import figures

    paths = []
    test_series = {}
    for language in plan.config.all_languages:
        sparse = groups.get((language, "sparsemap"), [])
        lr = plan.chosen.get((language, "sparsemap"))
        if sparse:
            run = sparse[0]
            series = {
                split: [c for c in run.evals[split].get("trees_per_sentence", []) if c >= 1]
                for split in SPLITS
                if split in run.evals
            }
            series = {split: counts for split, counts in series.items() if counts}
            if series:
                paths.append(out / f"sparsity_{language}.png")
                figures.plot_sparsity(
                    series, paths[-1], title=f"{language}: sparsemap, lr {lr:g}, seed {run.spec.seed}"
                )
            if "test" in series:
                test_series[language] = series["test"]
            epochs = [(e, [c for c in counts if c >= 1]) for e, counts in run.sparsity]
            epochs = [(e, counts) for e, counts in epochs if counts]
            if epochs:
                paths.append(out / f"sparsity_training_{language}.png")
                figures.plot_sparsity_over_training(
                    [e for e, _ in epochs],
                    [c for _, c in epochs],
                    paths[-1],
                    title=f"{language}: sparsemap on dev during training (lr {lr:g}, seed {run.spec.seed})",
                )
        curves = {}
        for loss in plan.config.losses:
            for run in groups.get((language, loss), [])[:1]:
                epochs, dev = run.column("epoch"), run.column("dev_uas")
                if epochs.size and epochs.size == dev.size:
                    label = f"{loss} (lr {run.spec.learning_rate:g}, seed {run.spec.seed})"
                    curves[label] = (epochs.tolist(), dev.tolist())
        if curves:
            paths.append(out / f"learning_curves_{language}.png")
            figures.plot_learning_curves(
                curves, paths[-1], title=f"{language}: dev UAS at the chosen learning rates"
            )
    if len(test_series) > 1:
        paths.append(out / "sparsity_test.png")
        figures.plot_sparsity(test_series, paths[-1], title="sparsemap on test, per language")
    return paths


def other_protocol_roots(root: Path, protocol: str) -> list[tuple[Protocol, Path]]:
    """The roots of the other protocols beside ``root``: their default folder names in ``root``'s
    parent, where a ``run`` of that protocol recorded its plan."""
    found = []
    for other in PROTOCOLS.values():
        path = root.parent / other.root.name
        if other.name == protocol or path.resolve() == root.resolve():
            continue
        if (path / PLAN_FILE).is_file() and SuiteConfig.recorded(path, "config").protocol == other.name:
            found.append((other, path))
    return found


@dataclasses.dataclass
class ProtocolResults:
    """A protocol's suite as the report reads it back: its plan, and its finished runs at the
    chosen learning rates by ``(language, loss)``."""

    root: Path
    plan: Plan
    groups: dict[tuple[str, str], list[RunResult]]

    @classmethod
    def read(cls, root: Path) -> ProtocolResults:
        """The suite recorded in ``{root}/bench_plan.json``, planned from its logdirs."""
        plan = plan_suite(SuiteConfig.recorded(root, "config"), LAYOUT.scan(root))
        return cls(root, plan, _grouped(LAYOUT.finished_runs(root, RunResult), plan))


def _protocol_table(suites: Sequence[ProtocolResults]) -> list[str]:
    """Test UAS (and LAS) per language and loss of each protocol at its chosen rates, side by side,
    and how the first compares with the second (:func:`compare_seeds`)."""
    first, second = suites
    names = [suite.plan.config.protocol for suite in suites]
    las = has_las(run for suite in suites for group in suite.groups.values() for run in group)
    keys = ["uas", *(["las"] if las else [])]
    headers = [f"{name} {label}" for name in names for label in ("lr", *(f"test {k.upper()}" for k in keys))]
    lines = [
        f"Test scores of each protocol at its own chosen learning rate (the best dev UAS of its tuning; "
        f"`{first.root}` and `{second.root}`; mean ± half the range over seeds), the better protocol's UAS "
        f"in bold where both have one; last column: {names[0]} against {names[1]} by the rule above.",
        "",
        f"| language | loss | {' | '.join(headers)} | {names[0]} vs {names[1]} (UAS) |",
        "|---" * (len(headers) + 3) + "|",
    ]
    languages = sorted({language for suite in suites for language, _ in suite.groups}, key=_order)
    for language in languages:
        for loss in LOSSES:
            if not any((language, loss) in suite.groups for suite in suites):
                continue
            scores = [_test_scores(suite.groups).get((language, loss), []) for suite in suites]
            means = [mean_and_spread(values)[0] for values in scores]
            # the better protocol in bold, when both have a result
            top = max(means) if all(math.isfinite(m) for m in means) else math.nan
            cells = []
            for suite, values, mean in zip(suites, scores, means, strict=True):
                lr = suite.plan.chosen.get((language, loss))
                cells.append("n/a" if lr is None else f"{lr:g}")
                cells.append(seed_cell(values, 1, bold=mean == top))
                if las:
                    group = suite.groups.get((language, loss), [])
                    cells.append(seed_cell([run.uas("test", "las") for run in group], 1))
            comparison = compare_seeds(*scores)
            cells.append("n/a" if comparison is None else comparison.describe())
            lines.append(f"| {language} | {loss} | {' | '.join(cells)} |")
    return lines


def report_sections(plan: Plan, runs: list[RunResult], root: Path) -> list[str]:
    """The sections of ``{root}/results.md``, and the figures in ``{root}/figures/``.

    Example:
        >>> import tempfile
        >>> config = SuiteConfig(languages=("vi",), losses=("crf",), learning_rates=(2e-3,), seeds=(0,))
        >>> path = RUNNER.write_report(Path(tempfile.mkdtemp()), config)
        >>> "`vi/crf/lr0.002/seed0`: not started" in path.read_text()
        True
    """
    config = plan.config
    protocol = PROTOCOLS[config.protocol]
    groups = _grouped(runs, plan)
    subset = (
        f"training options `{' '.join(config.train_args)}` (a quick subset, not the full protocol)"
        if config.train_args
        else "full training data and epochs"
    )
    sections = [
        "# Dependency parsing: SparseMAP, CRF, hinge and perceptron losses (SparseMAP paper, Table 1)",
        f"{finished_line(runs, root)}; {subset}; "
        f"parser options `{' '.join(config.parser_args) or 'none'}`. "
        'Only finished runs count; runs not finished are listed under "Missing runs".',
        f"Protocol `{protocol.name}`: {protocol.summary}.",
        "## Learning rates",
        "\n".join(f"- {line}" for line in describe_choices(plan)),
        "## Test UAS and LAS" if has_las(runs) else "## Test UAS",
        "Cells: mean ± half the range (max - min) / 2 over seeds, when there are several; the best mean of "
        "each row in bold. Runs at the chosen learning rate only.",
        "\n".join(_uas_tables(plan, groups)),
        "## SparseMAP against CRF and hinge",
        "\n".join(sparsemap_verdict(_test_scores(groups), config.all_languages)),
    ]
    others = [ProtocolResults.read(path) for _, path in other_protocol_roots(root, config.protocol)]
    others = [other for other in others if other.groups]
    if groups and others:
        here = ProtocolResults(root, plan, groups)
        for other in others:
            suites = sorted(
                (here, other), key=lambda suite: list(PROTOCOLS).index(suite.plan.config.protocol)
            )
            sections += ["## The two protocols compared", "\n".join(_protocol_table(suites))]
    sections += [
        "## Dev UAS of the tuning runs",
        "\n".join(_tuning_table(plan, runs)),
        "## SparseMAP sparsity",
        "\n".join(_sparsity_table(plan, groups)),
        "## Training throughput",
        "\n".join(_same_process_throughput_table(plan, root)),
        "Across the runs, as their own processes measured it:",
        "\n".join(_throughput_table(plan, runs)),
        "## Epochs",
        "\n\n".join(_epoch_lines(config, runs)),
        "## All finished runs",
        "\n".join(_runs_table(config, runs)),
        "## Missing runs",
        "\n".join(_missing_lines(plan)),
        "## Treebanks",
        "\n".join(_treebank_lines(plan, runs)),
    ]
    figure_paths = _plot_figures(plan, groups, root / "figures") if groups else []
    if figure_paths:
        sections += ["## Figures", *(f"![{p.stem}](figures/{p.name})" for p in figure_paths)]
    return sections


# ---------------------------------------------------------------------------------------------- CLI


def add_options(run: argparse.ArgumentParser) -> None:
    """The options of ``run``: the protocol, the languages, losses, grid, seeds and the reduction."""
    run.add_argument(
        "--protocol",
        choices=list(PROTOCOLS),
        default=DEFAULT_PROTOCOL,
        help="the training configuration: "
        + "; ".join(
            f"{p.name} = parser options `{' '.join(p.parser_args)}`"
            + (f" --min-epochs {p.min_epochs}" if p.min_epochs else "")
            + f", grid {' '.join(f'{lr:g}' for lr in p.learning_rates)}, default --root {p.root}"
            for p in PROTOCOLS.values()
        )
        + " (default %(default)s)",
    )
    run.add_argument(
        "--labels",
        action="store_true",
        help=f"pass the parser's {LABELS_ARG} (a joint arc-label classifier): the report adds LAS",
    )
    run.add_argument(
        "--languages",
        nargs="+",
        choices=list(LANGUAGES),
        default=None,
        help=f"treebanks: {', '.join(f'{k} = {v}' for k, v in LANGUAGES.items())} "
        "(default all; vi with --quick)",
    )
    run.add_argument("--losses", nargs="+", choices=LOSSES, default=list(LOSSES), help="(default all)")
    run.add_argument(
        "--learning-rates",
        nargs="+",
        type=float,
        default=None,
        help="the grid (default: the protocol's, "
        + "; ".join(f"{p.name} {' '.join(f'{lr:g}' for lr in p.learning_rates)}" for p in PROTOCOLS.values())
        + f"; {QUICK_LEARNING_RATE:g} with --quick)",
    )
    run.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=None,
        help=f"(default {' '.join(map(str, SEEDS))}; 0 with --quick)",
    )
    for option, default, help in (
        (
            "--tune-languages",
            TUNE_LANGUAGES,
            "the languages the learning rate is tuned on; they get every seed",
        ),
        ("--seed-languages", SEED_LANGUAGES, "the other languages that get every seed, at the chosen rate"),
    ):
        run.add_argument(
            option,
            nargs="+",
            choices=list(LANGUAGES),
            default=list(default),
            help=f"{help} (default {' '.join(default)})",
        )
    run.add_argument(
        "--per-language-tuning",
        action="store_true",
        help="no reduction: tune every language on itself, every seed on every language",
    )


def config_from_args(args: argparse.Namespace) -> SuiteConfig:
    """The :class:`SuiteConfig` of ``run``'s options (``--protocol`` and ``--quick`` fill the options
    not given: the protocol's grid, ``--quick``'s language, rate and seed)."""
    quick = args.quick
    protocol = PROTOCOLS[args.protocol]
    rates = args.learning_rates or ([QUICK_LEARNING_RATE] if quick else protocol.learning_rates)
    return SuiteConfig(
        protocol=protocol.name,
        languages=tuple(args.languages or (["vi"] if quick else LANGUAGES)),
        losses=tuple(args.losses),
        learning_rates=tuple(rates),
        seeds=tuple(args.seeds if args.seeds is not None else ([0] if quick else SEEDS)),
        tune_languages=tuple(args.tune_languages),
        seed_languages=tuple(args.seed_languages),
        per_language=args.per_language_tuning,
        parser_args=(*protocol.parser_args, *((LABELS_ARG,) if args.labels else ())),
        train_args=QUICK_TRAIN_ARGS if quick else (),
    )


def refusal(recorded: Mapping[str, Any], config: SuiteConfig) -> str | None:
    """Why a root whose runs were trained with another protocol, or other parser or training
    options, is refused (a plan recorded before there were protocols is the ``tuned`` one's)."""
    fixed = {name: tuple(recorded.get(name, ())) for name in ("parser_args", "train_args")}
    wanted = {name: getattr(config, name) for name in fixed}
    protocol = recorded.get("protocol", TUNED.name)
    if protocol != config.protocol:
        return f"of the {protocol} protocol, not {config.protocol}"
    return None if fixed == wanted else f"trained with other options ({fixed})"


def missing_data(config: SuiteConfig, data: Path) -> str | None:
    """The treebank folders of the suite's languages missing under ``data``."""
    missing = [
        LANGUAGES[language] for language in config.all_languages if not (data / LANGUAGES[language]).is_dir()
    ]
    return f"treebank folders missing under {data}: {', '.join(missing)}" if missing else None


RUNNER = Runner(
    layout=LAYOUT,
    options_type=SuiteConfig,
    plan=plan_suite,
    describe_choices=describe_choices,
    recorded_choices=recorded_choices,
    waiting="language/loss pairs waiting for their learning rate",
    waiting_notes=waiting_notes,
    commands=run_commands,
    eval_key="uas",
    inspect=time_runs,
    result_type=RunResult,
    sections=report_sections,
    description=__doc__,
    run_help="train and evaluate the suite (resumable), then report",
    default_root=PROTOCOLS[DEFAULT_PROTOCOL].root,
    quick_root=PROTOCOLS[DEFAULT_PROTOCOL].quick_root,
    default_data=DEFAULT_DATA,
    data_help="folder of the treebank folders",
    quick_help=f"smoke test of minutes: vi, {' '.join(QUICK_TRAIN_ARGS)}, lr {QUICK_LEARNING_RATE:g}, seed 0",
    add_options=add_options,
    options_from_args=config_from_args,
    refusal=refusal,
    missing_data=missing_data,
)


def runner_for(protocol: str) -> Runner:
    """:data:`RUNNER` with the default roots of ``protocol``."""
    return dataclasses.replace(
        RUNNER, default_root=PROTOCOLS[protocol].root, quick_root=PROTOCOLS[protocol].quick_root
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point (:meth:`benchmarks.runner_core.Runner.main`): the exit status. ``run`` defaults
    ``--root`` to its ``--protocol``'s root; ``report`` reads the protocol its root recorded."""
    args = RUNNER.parse_args(argv)
    return runner_for(getattr(args, "protocol", DEFAULT_PROTOCOL)).main(argv)


if __name__ == "__main__":
    sys.exit(main())
