"""Plan, resume logic and report of ``benchmarks/bench_parsing.py`` on synthetic run directories.

No parser is trained: runs are fake ``config.json`` / ``progress.csv`` / ``final.json`` /
``eval_{split}.json`` files following the contract of ``python -m keras_structured.applications.parsing``,
and the runner's subprocess calls are replaced by a stub that writes them.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_parsing as bench
from benchmarks import resumable_runs
from benchmarks.run_plans import RunStatus
from benchmarks.runner_core import SuiteRun, run_rounds
from keras_structured.run_directory import RunLock, RunLockedError
from tests.bench_fixtures import FakeCLI, arg_value
from tests.cli_runs import make_read_only

COLUMNS = (
    "epoch,loss,dev_uas,dev_uas_no_punct,sentences_per_s,trees_per_sentence,one_tree_fraction,epoch_seconds"
)


def fake_run(
    root: Path,
    language: str,
    loss: str,
    lr: float,
    seed: int,
    *,
    dev: float = 80.0,
    test: float | None = None,
    test_no_punct: float | None = None,
    trees: tuple[list[int], list[int]] = ([1, 1, 1, 2], [1, 3]),
    sps: float = 100.0,
    evaluated: tuple[str, ...] = ("dev", "test"),
    finished: bool = True,
    wall: float = 120.0,
    epochs: int = bench.PRESET_EPOCHS,
    budget: tuple[int, int] | None = (bench.PRESET_EPOCHS, bench.PRESET_EPOCHS),
    stopped_early: bool = False,
    las: float | None = None,
) -> Path:
    """A run directory as ``train`` (and ``evaluate``) would leave it: ``epochs`` trained (the last
    three in ``progress.csv`` and ``sparsity_dev.jsonl``) of the ``budget`` ``(min_epochs, epochs)``
    in ``config.json`` (None: not recorded), the preset's by default; with ``las``, a labelled run
    (test LAS ``las``, dev LAS ``las`` too)."""
    spec = bench.RunSpec(language, loss, lr, seed)
    logdir = spec.logdir(root)
    (logdir / "checkpoint").mkdir(parents=True)
    (logdir / "checkpoint" / "state.json").write_text("{}")
    config = {
        "treebank": f"/data/ud/{bench.LANGUAGES[language]}",
        "loss": loss,
        "learning_rate": lr,
        "seed": seed,
    }
    if budget is not None:
        config.update(min_epochs=budget[0], epochs=budget[1])
    (logdir / "config.json").write_text(json.dumps(config))
    with open(logdir / "progress.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(COLUMNS.split(","))
        for i in range(1, 4):
            uas = dev - (3 - i)
            writer.writerow(
                [epochs - 3 + i, 1.0 / i, uas, uas + 1, sps * (0.9 + 0.1 * i), 4 - i, 0.3 * i, 10]
            )
    sparsity = [{"epoch": epochs - 3 + i, "trees_per_sentence": [max(1, 4 - i), 1, 2]} for i in range(1, 4)]
    (logdir / "sparsity_dev.jsonl").write_text("".join(json.dumps(row) + "\n" for row in sparsity))
    (logdir / "bench_state.json").write_text(json.dumps({"train_wall_s": wall, "sessions": 1, "threads": 2}))
    if not finished:
        return logdir
    final = {
        "best_epoch": epochs,
        "dev_uas": dev,
        "dev_uas_no_punct": dev + 1,
        "train_seconds": wall - 10,
        "epochs_run": epochs,
        "stopped_early": stopped_early,
    }
    if las is not None:
        final["dev_las"] = las
    (logdir / "final.json").write_text(json.dumps(final))
    test = dev if test is None else test
    scores = {"dev": (dev, dev + 1), "test": (test, test + 1 if test_no_punct is None else test_no_punct)}
    for split, counts in zip(("dev", "test"), trees, strict=True):
        if split in evaluated:
            uas, no_punct = scores[split]
            result = {
                "split": split,
                "uas": uas,
                "uas_no_punct": no_punct,
                "tokens": 100,
                "sentences": len(counts),
                "trees_per_sentence": counts,
                "long_sentences": 0,
            }
            if las is not None:
                result.update(las=las, las_no_punct=las + 1)
            (logdir / f"eval_{split}.json").write_text(json.dumps(result))
    return logdir


def done(dev: float) -> RunStatus:
    return RunStatus(finished=True, evaluated=frozenset(bench.SPLITS), score=dev)


# ------------------------------------------------------------------------------------------------ plan


def test_choose_learning_rate_best_mean_dev_ties_nan_and_missing():
    statuses = {
        bench.RunSpec(language, "crf", lr, 0): done(dev)
        for language, lr, dev in [
            ("en", 0.001, 80.0),
            ("vi", 0.001, 60.0),  # mean 70
            ("en", 0.002, 79.0),
            ("vi", 0.002, 64.0),  # mean 71.5: best although en alone prefers 0.001
            ("en", 0.004, 81.0),
            ("vi", 0.004, float("nan")),  # a diverged run ranks last
        ]
    }
    choice = bench.choose_learning_rate("crf", ("en", "vi"), [0.001, 0.002, 0.004], 0, statuses)
    assert choice.value == 0.002 and choice.missing == ()
    assert choice.scores[0.001] == 70.0 and math.isnan(choice.scores[0.004])
    assert not choice.at_edge()  # inside the grid
    assert bench.choose_learning_rate("crf", ("en", "vi"), [0.002, 0.004], 0, statuses).at_edge()

    statuses[bench.RunSpec("vi", "crf", 0.001, 0)] = done(63.0)  # mean 71.5: tie, the smaller rate wins
    assert bench.choose_learning_rate("crf", ("en", "vi"), [0.002, 0.001], 0, statuses).value == 0.001

    partial = bench.choose_learning_rate("crf", ("en", "vi"), [0.001, 0.008], 0, statuses)
    assert partial.value is None
    assert partial.missing == (bench.RunSpec("en", "crf", 0.008, 0), bench.RunSpec("vi", "crf", 0.008, 0))
    assert set(partial.scores) == {0.001}
    unfinished = {**statuses, bench.RunSpec("en", "crf", 0.008, 0): RunStatus(resumable=True)}
    assert bench.choose_learning_rate("crf", ("en",), [0.001, 0.008], 0, unfinished).value is None
    assert bench.choose_learning_rate("crf", ("en", "vi"), [0.008], 0, {}).value == 0.008


def test_plan_reduced_tunes_on_en_vi_then_runs_the_rest():
    config = bench.SuiteConfig(
        languages=("ro", "en"),  # vi joins: it is a tuning language
        losses=("sparsemap", "crf"),
        learning_rates=(1e-3, 2e-3),
        seeds=(0, 1),
        tune_languages=("en", "vi"),
    )
    assert config.all_languages == ("en", "vi", "ro")
    R = bench.RunSpec
    statuses = {
        R("en", "sparsemap", 0.001, 0): done(85.0),
        R("vi", "sparsemap", 0.001, 0): done(65.0),
        R("en", "sparsemap", 0.002, 0): done(86.0),
        R("vi", "sparsemap", 0.002, 0): RunStatus(finished=True, evaluated=frozenset({"dev"}), score=66.0),
        R("en", "crf", 0.001, 0): done(84.0),
        R("vi", "crf", 0.001, 0): RunStatus(resumable=True),  # crf tuning unfinished
        R("vi", "sparsemap", 0.002, 1): RunStatus(resumable=True),
        R("ro", "sparsemap", 0.001, 0): done(90.0),  # not planned: never at the chosen rate
    }
    plan = bench.plan_suite(config, statuses)
    assert plan.chosen == {("en", "sparsemap"): 0.002, ("vi", "sparsemap"): 0.002, ("ro", "sparsemap"): 0.002}
    assert plan.waiting == [("en", "crf"), ("vi", "crf"), ("ro", "crf")]
    tuning = [
        R(t, loss, lr, 0) for loss in ("sparsemap", "crf") for t in ("en", "vi") for lr in (0.001, 0.002)
    ]
    assert plan.runs[:8] == tuning
    assert plan.runs[8:] == [
        R("en", "sparsemap", 0.002, 1),
        R("vi", "sparsemap", 0.002, 1),
        R("ro", "sparsemap", 0.002, 0),
    ]
    assert R("ro", "sparsemap", 0.002, 1) not in plan.runs  # extra seeds on en and vi only
    assert plan.done == [
        R("en", "sparsemap", 0.001, 0),
        R("en", "sparsemap", 0.002, 0),
        R("vi", "sparsemap", 0.001, 0),
        R("en", "crf", 0.001, 0),
    ]
    assert plan.evaluate == [R("vi", "sparsemap", 0.002, 0)]
    assert plan.resume == [R("vi", "crf", 0.001, 0), R("vi", "sparsemap", 0.002, 1)]
    assert plan.start == [
        R("en", "crf", 0.002, 0),
        R("vi", "crf", 0.002, 0),
        R("en", "sparsemap", 0.002, 1),
        R("ro", "sparsemap", 0.002, 0),
    ]
    # Runs under way first, then new runs from the smallest treebank to the largest.
    assert plan.pending == [
        R("vi", "sparsemap", 0.002, 0),
        R("vi", "crf", 0.001, 0),
        R("vi", "sparsemap", 0.002, 1),
        R("ro", "sparsemap", 0.002, 0),
        R("vi", "crf", 0.002, 0),
        R("en", "crf", 0.002, 0),
        R("en", "sparsemap", 0.002, 1),
    ]
    lines = bench.describe_choices(plan)
    assert lines[0].startswith("Learning-rate reduction made: every loss is tuned on en and vi only")
    assert "sparsemap on en+vi: lr 0.002 (at an end of the widened grid), mean dev UAS 76.00" in lines
    assert "crf on en+vi: not chosen yet (3 tuning runs unfinished)" in lines


def test_tuning_languages_take_their_own_rate_the_others_the_mean_choice():
    R = bench.RunSpec
    grid = (0.002, 0.004, 0.008)
    config = bench.SuiteConfig(
        languages=("en", "vi", "ro"),
        losses=("crf",),
        learning_rates=grid,
        seeds=(0, 1),
        tune_languages=("en", "vi"),
    )
    en = dict(zip(grid, (86.0, 87.0, 85.0), strict=True))  # en: 0.004
    vi = dict(zip(grid, (66.0, 68.0, 69.0), strict=True))  # vi: 0.008, at the end: widened to 0.016
    statuses = {R("en", "crf", lr, 0): done(uas) for lr, uas in en.items()}
    statuses |= {R("vi", "crf", lr, 0): done(uas) for lr, uas in vi.items()}
    plan = bench.plan_suite(config, statuses)
    assert plan.chosen == {("en", "crf"): 0.004, ("ro", "crf"): 0.004}  # mean: 76.0, 77.5, 77.0
    assert plan.waiting == [("vi", "crf")] and R("vi", "crf", 0.016, 0) in plan.start
    assert R("en", "crf", 0.004, 1) in plan.start and R("ro", "crf", 0.004, 0) in plan.start
    statuses[R("vi", "crf", 0.016, 0)] = done(68.5)
    plan = bench.plan_suite(config, statuses)
    assert plan.chosen == {("en", "crf"): 0.004, ("vi", "crf"): 0.008, ("ro", "crf"): 0.004}
    assert R("vi", "crf", 0.008, 1) in plan.start and R("vi", "crf", 0.004, 1) not in plan.runs
    lines = bench.describe_choices(plan)
    assert "each of en and vi takes its own best rate" in lines[0]
    assert {"crf on en: lr 0.004, mean dev UAS 87.00", "crf on vi: lr 0.008, mean dev UAS 69.00"} <= set(
        lines
    )
    assert "crf on en+vi: lr 0.004, mean dev UAS 77.50" in lines


def test_plan_default_tunes_on_en_and_vi_and_seeds_them_three_times():
    R = bench.RunSpec
    config = bench.SuiteConfig(languages=("en", "ro"), losses=("crf",), learning_rates=(1e-3, 2e-3))
    assert config.protocol == "sparsemap-paper" and config.seeds == (0, 1, 2)
    assert config.all_languages == ("en", "vi", "ro")  # vi joins: it is a tuning language
    statuses = {
        R(language, "crf", lr, 0): done(60.0 + 1000 * lr) for language in ("en", "vi") for lr in (1e-3, 2e-3)
    }
    plan = bench.plan_suite(config, statuses)
    assert plan.chosen == {(language, "crf"): 0.002 for language in ("en", "vi", "ro")}
    assert plan.start == [
        R("en", "crf", 0.002, 1),
        R("en", "crf", 0.002, 2),
        R("vi", "crf", 0.002, 1),
        R("vi", "crf", 0.002, 2),
        R("ro", "crf", 0.002, 0),
    ]
    assert "tuned on en and vi only" in bench.describe_choices(plan)[0]
    assert "seeds 0, 1, 2 at the chosen rates on en and vi, seed 0 on" in bench.describe_choices(plan)[0]


def test_plan_vi_only_tuning_seeds_en_and_vi():
    R = bench.RunSpec
    config = bench.SuiteConfig(
        languages=("en", "ro"),
        losses=("crf",),
        learning_rates=(1e-3, 2e-3),
        seeds=(0, 1),
        tune_languages=("vi",),
    )
    statuses = {R("vi", "crf", 0.001, 0): done(60.0), R("vi", "crf", 0.002, 0): done(65.0)}
    plan = bench.plan_suite(config, statuses)
    assert plan.chosen == {(language, "crf"): 0.002 for language in ("en", "vi", "ro")}
    assert plan.start == [
        R("en", "crf", 0.002, 0),
        R("en", "crf", 0.002, 1),
        R("vi", "crf", 0.002, 1),
        R("ro", "crf", 0.002, 0),
    ]
    assert "tuned on vi only" in bench.describe_choices(plan)[0]


def test_plan_per_language_and_single_rate():
    R = bench.RunSpec
    per_language = bench.SuiteConfig(
        languages=("ro",), losses=("hinge",), learning_rates=(1e-3, 2e-3), seeds=(0, 1), per_language=True
    )
    statuses = {R("ro", "hinge", 0.001, 0): done(70.0), R("ro", "hinge", 0.002, 0): done(69.0)}
    plan = bench.plan_suite(per_language, statuses)
    assert per_language.all_languages == ("ro",) and plan.chosen == {("ro", "hinge"): 0.001}
    assert plan.start == [R("ro", "hinge", 0.001, 1)]
    assert bench.describe_choices(plan)[0].startswith("Every language is tuned on itself")

    single = bench.SuiteConfig(languages=("ja", "zh"), losses=("crf",), learning_rates=(0.002,), seeds=(0, 1))
    plan = bench.plan_suite(single, {})
    assert single.all_languages == ("ja", "zh") and not plan.waiting
    assert plan.start == [R(language, "crf", 0.002, s) for language in ("ja", "zh") for s in (0, 1)]


def test_run_commands_fresh_resume_and_evaluation_only(tmp_path):
    config = bench.SuiteConfig(protocol="tuned", train_args=bench.QUICK_TRAIN_ARGS)
    spec = bench.RunSpec("vi", "margin_sparsemap", 0.0005, 1)
    logdir = str(tmp_path / "vi" / "margin_sparsemap" / "lr0.0005" / "seed1")
    train = ["py", "-m", "keras_structured.applications.parsing", "train"]
    train += ["--treebank", str(Path("/ud") / "vi_vtb-2.0")]
    train += ["--loss", "margin_sparsemap", "--learning-rate", "0.0005", "--seed", "1", "--logdir", logdir]
    train += ["--min-epochs", str(bench.MIN_EPOCHS), *bench.PARSER_ARGS]
    train += ["--max-train-sentences", "200", "--epochs", "3"]
    train += ["--quiet"]
    evaluate = [
        (
            "eval",
            [
                "py",
                "-m",
                "keras_structured.applications.parsing",
                "evaluate",
                "--logdir",
                logdir,
                "--split",
                split,
                "--json",
            ],
        )
        for split in ("dev", "test")
    ]
    run = SuiteRun(config, Path("/ud"), tmp_path)
    assert bench.run_commands(spec, RunStatus(), run, "py") == [("train", train), *evaluate]
    resumed = bench.run_commands(spec, RunStatus(resumable=True), run, "py")
    assert resumed == [("train", [*train, "--resume"]), *evaluate]
    finished = RunStatus(finished=True, resumable=True, evaluated=frozenset({"dev"}))
    assert bench.run_commands(spec, finished, run, "py") == evaluate[1:]
    assert bench.run_commands(spec, done(1.0), run, "py") == []


def test_a_preset_run_passes_the_preset_and_no_min_epochs(tmp_path):
    spec = bench.RunSpec("en", "hinge", 0.004, 2)
    logdir = str(tmp_path / "en" / "hinge" / "lr0.004" / "seed2")
    train = ["py", "-m", "keras_structured.applications.parsing", "train"]
    train += ["--treebank", str(Path("/ud") / "en_ewt-2.0"), "--loss", "hinge", "--learning-rate", "0.004"]
    train += ["--seed", "2", "--logdir", logdir, "--preset", "sparsemap-paper", "--quiet"]
    run = SuiteRun(bench.SuiteConfig(), Path("/ud"), tmp_path)
    assert bench.run_commands(spec, RunStatus(), run, "py")[0] == ("train", train)
    labelled = bench.SuiteConfig(parser_args=("--preset", "sparsemap-paper", "--labels"))
    argv = bench.train_command(spec, labelled, Path("/ud"), tmp_path, python="py")
    assert argv[-3:] == ["sparsemap-paper", "--labels", "--quiet"] and labelled.labels
    with pytest.raises(ValueError, match="protocol must be one of sparsemap-paper, tuned"):
        bench.SuiteConfig(protocol="paper")


def test_a_run_stopped_early_before_min_epochs_is_extended(tmp_path):
    logdir = fake_run(tmp_path, "vi", "crf", 0.002, 0, budget=(1, bench.MIN_EPOCHS))
    assert bench.LAYOUT.read_status(logdir).finished  # ran all its epochs
    final = json.loads((logdir / "final.json").read_text())
    (logdir / "final.json").write_text(json.dumps({**final, "stopped_early": True}))
    status = bench.LAYOUT.read_status(logdir)
    assert not status.finished and status.resumable
    run = SuiteRun(bench.SuiteConfig(protocol="tuned"), Path("/ud"), tmp_path)
    steps = bench.run_commands(bench.RunSpec("vi", "crf", 0.002, 0), status, run)
    assert [kind for kind, _ in steps] == ["train", "eval", "eval"]
    assert "--resume" in steps[0][1] and "--min-epochs" in steps[0][1]
    config = json.loads((logdir / "config.json").read_text())
    (logdir / "config.json").write_text(json.dumps({**config, "min_epochs": bench.MIN_EPOCHS}))
    assert bench.LAYOUT.read_status(logdir).finished  # already trained under the suite's rule
    preset = {**config, "min_epochs": bench.PRESET_EPOCHS, "epochs": bench.PRESET_EPOCHS}
    (logdir / "config.json").write_text(json.dumps(preset))
    assert bench.LAYOUT.read_status(logdir).finished  # not beyond its own epochs


def test_scan_statuses_reads_the_logdirs(tmp_path):
    fake_run(tmp_path, "en", "crf", 0.002, 0, dev=81.5, evaluated=("dev",))
    fake_run(tmp_path, "vi", "hinge", 0.0005, 1, finished=False)
    (tmp_path / "vi" / "hinge" / "lr0.001" / "seed0").mkdir(parents=True)  # empty: a fresh start
    (tmp_path / "figures").mkdir()  # not a run
    statuses = bench.LAYOUT.scan(tmp_path)
    assert set(statuses) == {
        bench.RunSpec("en", "crf", 0.002, 0),
        bench.RunSpec("vi", "hinge", 0.0005, 1),
        bench.RunSpec("vi", "hinge", 0.001, 0),
    }
    assert statuses[bench.RunSpec("en", "crf", 0.002, 0)] == RunStatus(True, True, frozenset({"dev"}), 81.5)
    partial = statuses[bench.RunSpec("vi", "hinge", 0.0005, 1)]
    assert partial.resumable and not partial.finished and not partial.evaluated and math.isnan(partial.score)
    empty = statuses[bench.RunSpec("vi", "hinge", 0.001, 0)]
    assert not empty.finished and not empty.resumable


# --------------------------------------------------------------------------------------------- dry run


def test_dry_run_prints_pending_commands(tmp_path, capsys):
    root = tmp_path / "quick"
    argv = ["run", "--quick", "--protocol", "tuned", "--root", str(root), "--data", "/ud"]
    argv += ["--losses", "sparsemap", "crf", "--dry-run"]
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    py = sys.executable
    logdir = f"{root}/vi/sparsemap/lr0.002/seed0"
    assert lines[0] == (
        f"{py} -m keras_structured.applications.parsing train --treebank /ud/vi_vtb-2.0 --loss sparsemap "
        f"--learning-rate 0.002 --seed 0 --logdir {logdir} --min-epochs {bench.MIN_EPOCHS} "
        "--lowercase --collapse-numbers --tag-column xpos --dropout 0.33 --learning-rate-decay 0.9 "
        "--max-train-sentences 200 --epochs 3 --quiet"
    )
    evaluate = f"{py} -m keras_structured.applications.parsing evaluate --logdir {logdir}"
    assert lines[1] == f"{evaluate} --split dev --json"
    assert lines[2].endswith("--split test --json") and "--loss crf" in lines[3]
    assert lines[6:] == ["# One learning rate (0.002) for every run: nothing tuned."]
    assert not root.exists()  # a dry run writes nothing

    fake_run(root, "vi", "sparsemap", 0.002, 0, evaluated=("dev",))
    fake_run(root, "vi", "crf", 0.002, 0, finished=False)
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5
    evaluate = f"{py} -m keras_structured.applications.parsing evaluate --logdir {logdir}"
    assert lines[0] == f"{evaluate} --split test --json"
    assert lines[1].startswith(f"{py} -m keras_structured.applications.parsing train") and lines[1].endswith(
        "--quiet --resume"
    )


def dry_run_trains(argv: list[str], capsys) -> tuple[list[str], list[str]]:
    """The training command lines of ``run ... --dry-run``, and its comment lines."""
    assert bench.main([*argv, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line for line in lines if " train " in line], [line for line in lines if line.startswith("#")]


def test_dry_run_of_the_paper_protocol_tunes_on_en_and_vi_first(tmp_path, capsys):
    trains, notes = dry_run_trains(["run", "--root", str(tmp_path), "--losses", "crf", "hinge"], capsys)
    assert len(trains) == 2 * 2 * 5  # en and vi, two losses, the paper's five rates, seed 0
    assert all("--seed 0" in line and "--preset sparsemap-paper --quiet" in line for line in trains)
    assert not any("--min-epochs" in line for line in trains)  # the preset fixes its 20 epochs
    rates = {line.split("--learning-rate ")[1].split()[0] for line in trains}
    assert rates == {"0.0005", "0.001", "0.002", "0.004", "0.008"}
    assert {line.split("--treebank ")[1].split()[0].split("/")[-1] for line in trains} == {
        "en_ewt-2.0",
        "vi_vtb-2.0",
    }
    assert "# crf: en, vi, ja, zh, ro wait for the learning-rate tuning runs" in notes


def test_paper_protocol_plans_three_seeds_on_en_vi_after_tuning():
    config = bench.config_from_args(bench.RUNNER.parse_args(["run"]))
    assert config == bench.SuiteConfig()
    assert config.learning_rates == bench.LEARNING_RATES and config.parser_args == (
        "--preset",
        "sparsemap-paper",
    )
    R = bench.RunSpec
    # every loss prefers 2e-3 (inside the grid): no widening
    statuses = {
        R(language, loss, lr, 0): done(80.0 - abs(math.log2(lr / 0.002)))
        for language in ("en", "vi")
        for loss in bench.LOSSES
        for lr in bench.LEARNING_RATES
    }
    plan = bench.plan_suite(config, statuses)
    assert not plan.waiting and set(plan.chosen.values()) == {0.002}
    assert len(plan.done) == 50 and len(plan.start) == 35 and len(plan.runs) == 85
    assert {(s.language, s.seed) for s in plan.start} == {
        ("en", 1),
        ("en", 2),
        ("vi", 1),
        ("vi", 2),
        ("ja", 0),
        ("zh", 0),
        ("ro", 0),
    }
    statuses[R("en", "hinge", 0.008, 0)] = done(90.0)  # best at the end of the grid: widened to 0.016
    plan = bench.plan_suite(config, statuses)
    assert R("en", "hinge", 0.016, 0) in plan.start and R("vi", "hinge", 0.016, 0) in plan.start
    assert ("ja", "hinge") in plan.waiting and ("vi", "hinge") in plan.chosen  # vi: its own rate


RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "bench_parsing"


def test_tuned_protocol_keeps_the_recorded_suite_and_adds_seed_2():
    recorded = bench.RUNNER.read_options(RECORDED)
    # Recorded with seeds 0 and 1 before there were protocols; the runner recorded seed 2 when it
    # started those runs.
    assert recorded.protocol == "tuned" and recorded.seeds == (0, 1, 2)
    config = bench.config_from_args(bench.RUNNER.parse_args(["run", "--protocol", "tuned"]))
    assert (
        bench.refusal(json.loads((RECORDED / resumable_runs.PLAN_FILE).read_text())["config"], config) is None
    )
    assert config.learning_rates == recorded.learning_rates and config.parser_args == recorded.parser_args
    assert config.seeds == (0, 1, 2) and config.tune_languages == recorded.tune_languages
    plan = bench.plan_suite(config, bench.LAYOUT.scan(RECORDED))
    earlier = [spec for spec in plan.runs if spec.seed < 2]
    new = [spec for spec in plan.runs if spec.seed == 2]
    assert len(earlier) == 64 and set(earlier) <= set(plan.done)  # every recorded run is finished
    assert not plan.waiting and len(new) == 10  # five losses on en and vi, at their chosen rates
    assert {(spec.language, spec.loss, spec.learning_rate) for spec in new} == {
        (language, loss, plan.chosen[language, loss]) for language in ("en", "vi") for loss in bench.LOSSES
    }
    assert set(plan.pending) == set(new) - set(plan.done)


def test_each_protocol_has_its_own_root(tmp_path, capsys):
    assert bench.runner_for("tuned").default_root == Path("benchmarks/results/bench_parsing")
    assert bench.runner_for("sparsemap-paper").default_root == Path("benchmarks/results/bench_parsing_paper")
    assert bench.RUNNER.default_root == bench.runner_for(bench.DEFAULT_PROTOCOL).default_root
    assert bench.runner_for("tuned").quick_root != bench.runner_for("sparsemap-paper").quick_root
    help = bench.RUNNER.parse_args
    with pytest.raises(SystemExit):
        help(["run", "--help"])
    text = capsys.readouterr().out
    assert (
        "--protocol {sparsemap-paper,tuned}" in text and "bench_parsing_paper" in text and "--labels" in text
    )


def test_run_refuses_a_root_of_other_training_options(tmp_path, capsys):
    (tmp_path / resumable_runs.PLAN_FILE).write_text(
        json.dumps({"config": {"protocol": "sparsemap-paper", "train_args": list(bench.QUICK_TRAIN_ARGS)}})
    )
    assert bench.main(["run", "--root", str(tmp_path), "--dry-run"]) == 2
    assert "other options" in capsys.readouterr().err
    # a suite of the parser's earlier configuration (no parser options recorded) is refused too
    (tmp_path / resumable_runs.PLAN_FILE).write_text(json.dumps({"config": {"train_args": []}}))
    assert bench.main(["run", "--root", str(tmp_path), "--protocol", "tuned", "--dry-run"]) == 2
    assert "parser_args" in capsys.readouterr().err
    # a plan recorded before there were protocols is the tuned one's
    tuned = {k: v for k, v in bench.SuiteConfig(protocol="tuned").to_json().items() if k != "protocol"}
    (tmp_path / resumable_runs.PLAN_FILE).write_text(json.dumps({"config": tuned}))
    assert bench.main(["run", "--root", str(tmp_path), "--dry-run"]) == 2
    assert "of the tuned protocol, not sparsemap-paper" in capsys.readouterr().err
    assert bench.main(["run", "--root", str(tmp_path), "--protocol", "tuned", "--dry-run"]) == 0
    assert bench.main(["run", "--root", str(tmp_path), "--protocol", "tuned", "--labels", "--dry-run"]) == 2
    capsys.readouterr()
    (tmp_path / resumable_runs.PLAN_FILE).write_text(json.dumps({"config": bench.SuiteConfig().to_json()}))
    assert bench.main(["run", "--root", str(tmp_path), "--dry-run"]) == 0


# ---------------------------------------------------------------------------------------------- report


def build_suite(root: Path) -> bench.SuiteConfig:
    """en and vi tuned at 0.001 / 0.002 (0.002 wins everywhere), seeds 0 and 1; ro at seed 0."""
    config = bench.SuiteConfig(
        languages=("en", "vi", "ro"),
        losses=("sparsemap", "margin_sparsemap", "crf", "hinge"),
        learning_rates=(0.001, 0.002),
        seeds=(0, 1),
        tune_languages=("en", "vi"),
    )
    test = {  # (language, loss) -> test UAS per seed at the chosen rate 0.002
        ("en", "sparsemap"): [87.0, 87.4],
        ("en", "margin_sparsemap"): [86.9, 87.1],
        ("en", "crf"): [86.0],  # seed 1 missing
        ("en", "hinge"): [86.5, 86.7],
        ("vi", "sparsemap"): [70.0, 70.2],
        ("vi", "margin_sparsemap"): [69.0, 69.0],
        ("vi", "crf"): [71.0, 71.2],
        ("vi", "hinge"): [69.0, 69.0],
        ("ro", "sparsemap"): [88.0],
        ("ro", "margin_sparsemap"): [87.5],
        ("ro", "crf"): [87.0],  # ro hinge missing: ro is not compared
    }
    trees = {"sparsemap": ([1, 1, 2, 4], [1, 2, 3]), "margin_sparsemap": ([1, 1, 1, 1], [1, 1])}
    for (language, loss), scores in test.items():
        for seed, score in enumerate(scores):
            sps = 80.0 if loss == "sparsemap" else 100.0
            fake_run(
                root,
                language,
                loss,
                0.002,
                seed,
                dev=80.0,
                test=score,
                trees=trees.get(loss, ([1], [1])),
                sps=sps,
            )
    for language in ("en", "vi"):
        for loss in config.losses:
            sps = 80.0 if loss == "sparsemap" else 100.0
            fake_run(root, language, loss, 0.001, 0, dev=75.0, test=10.0, sps=sps)  # tuning runs that lost
    fake_run(root, "en", "hinge", 0.002, 2, test=10.0)  # a seed outside the suite still counts
    return config


def table_rows(section: str) -> dict[str, list[str]]:
    """The cells of a Markdown table's rows by their first cell."""
    return {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in section.splitlines()
        if line.startswith("| ") and "---" not in line
    }


def test_report_tables_missing_verdict_and_figures(tmp_path):
    config = build_suite(tmp_path)
    text = bench.RUNNER.write_report(tmp_path, config).read_text()

    assert "Protocol `sparsemap-paper`: the SparseMAP authors' parser settings" in text
    with_punct = text.split("**Test UAS (%), punctuation included**")[1].split("**Test UAS")[0]
    rows = table_rows(with_punct)
    assert rows["language"] == ["sparsemap", "margin_sparsemap", "crf", "hinge"]
    assert rows["en"] == [
        "**87.20 ± 0.20** (2 seeds)",
        "87.00 ± 0.10 (2 seeds)",
        "86.00 (1 of 2 seeds)",
        "61.07 ± 38.35 (3 seeds)",
    ]
    assert rows["vi"] == [
        "70.10 ± 0.10 (2 seeds)",
        "69.00 ± 0.00 (2 seeds)",
        "**71.10 ± 0.10** (2 seeds)",
        "69.00 ± 0.00 (2 seeds)",
    ]
    assert rows["ro"] == ["**88.00**", "87.50", "87.00", "missing"]
    no_punct = text.split("**Test UAS (%), without punctuation**")[1].split("##")[0]
    assert "| ro | **89.00** | 88.50 | 88.00 | missing |" in no_punct  # fake no-punct = UAS + 1
    assert "LAS" not in text  # no labelled run: no LAS table or column

    verdict = table_rows(text.split("## SparseMAP against CRF and hinge")[1].split("##")[0])
    assert verdict["en"] == [
        "sparsemap 87.20 ± 0.20 (2 seeds)",
        "ahead (+1.20, spread 0.20, seeds 2/1)",
        "collapsed (+26.13, spread 38.55, seeds 2/3)",  # the seed-2 hinge run's 10.00: > 20 points behind
    ]
    assert verdict["vi"][1:] == [
        "behind (-1.00, spread 0.20, seeds 2/2)",
        "ahead (+1.10, spread 0.10, seeds 2/2)",
    ]
    assert verdict["ro"] == ["sparsemap 88.00", "ahead (+1.00, one seed each: no spread)", "missing"]
    assert (
        "No claim: the paper's claim, the SparseMAP losses ahead of the SVM (hinge) and CRF losses on 4 of 5"
        in text
    )
    assert "missing on ja, zh, ro. So far ahead of both on 0 of the 2 languages with results: none." in text

    assert "- sparsemap on en+vi: lr 0.002 (at an end of the widened grid), mean dev UAS 80.00" in text
    assert "Learning-rate reduction made" in text
    assert "| en | crf | 75.00 | **80.00** |" in text  # the tuning grid, chosen rate in bold

    missing = text.split("## Missing runs")[1].split("##")[0]
    assert "`en/crf/lr0.002/seed1`: not started" in missing
    assert "`ro/hinge/lr0.002/seed0`: not started" in missing
    assert "ro/sparsemap/lr0.002/seed1" not in missing  # the reduction runs one seed on ro

    sparsity = text.split("## SparseMAP sparsity")[1].split("##")[0]
    assert "| en | sparsemap | 2 | 2.00 | 50.0% | 4 | 2.00 | 33.3% | 3 |" in sparsity
    assert "| ro | margin_sparsemap | 1 | 1.00 | 100.0% | 1 | 1.00 | 100.0% | 1 |" in sparsity

    throughput = text.split("## Training throughput")[1].split("##")[0]
    assert "CPU threads per job: 2" in throughput
    assert "| vi | 88.0 | 110.0 | 110.0 | 110.0 | 1.25 | yes |" in throughput  # medians of 0.9x..1.2x sps

    assert (
        "| en/hinge/lr0.002/seed2 | 20 | 20 | 20 | no | 80.00 | 10.00 | 11.00 | 110.0 | 2.0 | 110 |" in text
    )
    assert "Epochs trained (`final.json`'s `epochs_run`): 20 (27 runs)" in text
    assert "No run trained other epochs than its `config.json` and the protocol say." in text
    assert "## The two protocols compared" not in text  # no other protocol's root beside it
    assert "ro_rrt-1.2" in text and "much smaller than the treebank the paper used" in text
    assert text.count("UD v1 labels") == 2

    for name in ("sparsity_en", "sparsity_training_vi", "learning_curves_ro", "sparsity_test"):
        data = (tmp_path / "figures" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
        assert f"![{name}](figures/{name}.png)" in text


def test_report_reads_the_recorded_plan(tmp_path):
    config = build_suite(tmp_path)
    fake_run(tmp_path, "ro", "hinge", 0.002, 0, test=87.9)
    (tmp_path / resumable_runs.PLAN_FILE).write_text(json.dumps({"config": config.to_json()}))
    text = bench.RUNNER.write_report(tmp_path).read_text()
    verdict = table_rows(text.split("## SparseMAP against CRF and hinge")[1].split("##")[0])
    assert verdict["ro"][2] == "ahead (+0.10, one seed each: no spread)"
    assert "ro/hinge" not in text.split("## Missing runs")[1].split("##")[0]


def test_compare_seeds_ahead_tie_behind():
    compare = bench.compare_seeds
    assert compare([80.0, 81.0, 82.0], [79.0, 79.2]).outcome == "ahead"  # +1.9 > 1.0 + 0.1
    tie = compare([80.0, 81.0, 82.0], [79.5, 80.3])  # +1.1 <= 1.0 + 0.4: the intervals overlap
    assert (tie.outcome, tie.seeds) == ("tie", (3, 2)) and tie.spread == pytest.approx(1.4)
    assert compare([80.0, 80.4], [80.6, 80.8]).outcome == "behind"  # -0.5 beyond 0.2 + 0.1
    assert compare([80.0, 80.4], [80.4, 80.6]).outcome == "tie"  # -0.3, no larger than 0.2 + 0.1
    single = compare([80.1], [80.0])
    assert single.outcome == "ahead" and single.single_seed
    assert single.describe() == "ahead (+0.10, one seed each: no spread)"
    assert compare([80.0], [80.0]).outcome == "tie"
    assert compare([80.0, math.nan], [79.0]).seeds == (1, 1)  # NaN seeds do not count
    assert compare([], [79.0]) is None and compare([80.0], [math.nan]) is None


def test_sparsemap_verdict_claim_rules():
    def scores(sparse: float, crf: float, hinge: float, seeds: int = 3) -> dict:
        spread = [-0.1, 0.0, 0.1][:seeds]
        return {
            "margin_sparsemap": [sparse + d for d in spread],
            "crf": [crf + d for d in spread],
            "hinge": [hinge],
        }

    table = {
        "en": scores(87.0, 86.0, 85.0),
        "vi": scores(72.0, 71.0, 70.0),
        "ja": scores(93.1, 93.0, 90.0, 1),
    }
    table |= {"zh": scores(82.0, 81.9, 80.0), "ro": scores(70.0, 68.0, 66.0, 1)}
    uas = {(language, loss): values for language, row in table.items() for loss, values in row.items()}
    lines = bench.sparsemap_verdict(uas, list(bench.LANGUAGES))
    rows = table_rows("\n".join(lines))
    assert rows["zh"][1] == "tie (+0.10, spread 0.20, seeds 3/3)"  # the tie does not count as ahead
    assert rows["ja"][1] == "ahead (+0.10, one seed each: no spread)"
    assert lines[-1].startswith("Reproduced: the paper's claim")
    assert "ahead of both on 4 of 5: en, vi, ja, ro (ja, ro from one seed, without a spread)" in lines[-1]
    assert "against crf: 4 ahead, 1 tie, 0 behind, 0 collapsed; against hinge: 5 ahead" in lines[-1]

    collapsed = dict(uas) | {("en", "hinge"): [66.9]}  # 20.1 points behind: a failed baseline
    lines = bench.sparsemap_verdict(collapsed, list(bench.LANGUAGES))
    assert table_rows("\n".join(lines))["en"][2] == "collapsed (+20.10, spread 0.10, seeds 3/1)"
    assert lines[-1].startswith("Not decided:") and "Collapsed" in lines[-1] and "hinge on en." in lines[-1]
    assert "against hinge: 4 ahead, 0 tie, 0 behind, 1 collapsed." in lines[-1]

    uas["vi", "crf"] = [72.5, 72.5, 72.5]  # vi: behind CRF now, 3 of 5 left
    lines = bench.sparsemap_verdict(uas, list(bench.LANGUAGES))
    assert lines[-1].startswith("Not reproduced:") and "ahead of both on 3 of 5: en, ja, ro" in lines[-1]
    uas["vi", "sparsemap"] = [73.0, 73.0, 73.0]  # the better SparseMAP loss is taken
    assert (
        table_rows("\n".join(bench.sparsemap_verdict(uas, ["vi"])))["vi"][0]
        == "sparsemap 73.00 ± 0.00 (3 seeds)"
    )

    del uas["ro", "hinge"]  # a result missing: no claim
    lines = bench.sparsemap_verdict(uas, list(bench.LANGUAGES))
    assert lines[-1].startswith("No claim:") and "missing on ro." in lines[-1]
    assert table_rows("\n".join(lines))["ro"][2] == "missing"
    assert bench.sparsemap_verdict({}, ["en"])[-1].startswith("No claim:")
    assert table_rows("\n".join(bench.sparsemap_verdict({}, ["en"])))["en"] == ["missing", "", ""]


def finished_plan(root: Path, config: bench.SuiteConfig) -> tuple[bench.Plan, list[bench.RunResult]]:
    plan = bench.plan_suite(config, bench.LAYOUT.scan(root))
    return plan, bench.LAYOUT.finished_runs(root, bench.RunResult)


def test_las_columns_only_for_labelled_runs(tmp_path):
    config = bench.SuiteConfig(
        languages=("vi",), losses=("sparsemap", "crf"), learning_rates=(0.002,), seeds=(0, 1)
    )
    for seed in (0, 1):
        fake_run(tmp_path, "vi", "sparsemap", 0.002, seed, test=70.0 + seed, las=60.0 + seed)
        fake_run(tmp_path, "vi", "crf", 0.002, seed, test=69.0, las=58.0)
    plan, runs = finished_plan(tmp_path, config)
    groups = bench._grouped(runs, plan)
    tables = "\n".join(bench._uas_tables(plan, groups))
    las = tables.split("**Test LAS (%), punctuation included**")[1].split("**Test LAS")[0]
    assert table_rows(las)["vi"] == ["**60.50 ± 0.50** (2 seeds)", "58.00 ± 0.00 (2 seeds)"]
    assert "| vi | **61.50 ± 0.50** (2 seeds) | 59.00 ± 0.00 (2 seeds) |" in tables  # LAS without punctuation
    runs_table = "\n".join(bench._runs_table(config, runs))
    assert "| test UAS no punct | dev LAS | test LAS | test LAS no punct | sentences/s |" in runs_table
    assert (
        "| vi/sparsemap/lr0.002/seed1 | 20 | 20 | 20 | no | 80.00 | 71.00 | 72.00 | 61.00 | 61.00 | 62.00 |"
        in runs_table
    )

    unlabelled = tmp_path / "unlabelled"
    fake_run(unlabelled, "vi", "crf", 0.002, 0)
    plan, runs = finished_plan(unlabelled, config)
    assert "LAS" not in "\n".join(
        [*bench._uas_tables(plan, bench._grouped(runs, plan)), *bench._runs_table(config, runs)]
    )


def test_epoch_flag_rules():
    flag = bench.epoch_flag
    budget = {"min_epochs": 20, "epochs": 30}
    assert flag(budget, {"epochs_run": 30}) is None
    assert flag(budget, {"epochs_run": 24, "stopped_early": True}) is None  # early stopping after 20
    assert flag(budget, {"epochs_run": 12, "stopped_early": True}).startswith("stopped early after 12 epochs")
    assert flag(budget, {"epochs_run": 25}).startswith("trained 25 of 30 epochs without stopping early")
    assert flag(budget, {"epochs_run": 31}).startswith("trained 31 epochs, more than epochs 30")
    # another min_epochs than the protocol's: flagged only when the run is not the protocol's run
    assert flag(budget, {"epochs_run": 30}, (30, 30)) is None
    assert "not the protocol's 30, 30: stopped early after 24" in flag(
        budget, {"epochs_run": 24, "stopped_early": True}, (30, 30)
    )
    assert flag({"min_epochs": 20, "epochs": 20}, {"epochs_run": 20}, (20, 20)) is None  # the preset's
    assert flag({}, {"epochs_run": 3}) is None and flag(budget, {}) is None  # nothing to check


def test_report_counts_epochs_and_flags_runs(tmp_path):
    config = bench.SuiteConfig(
        protocol="tuned", languages=("vi",), losses=("crf", "hinge"), learning_rates=(0.002,), seeds=(0,)
    )
    fake_run(tmp_path, "vi", "crf", 0.002, 0, epochs=30, budget=(20, 30))  # the committed CRF runs' case
    fake_run(tmp_path, "vi", "hinge", 0.002, 0, epochs=22, budget=(20, 30), stopped_early=True)
    fake_run(tmp_path, "vi", "hinge", 0.002, 1, epochs=30, budget=(30, 30))
    plan, runs = finished_plan(tmp_path, config)
    lines = bench._epoch_lines(config, runs)
    assert lines[0].startswith("Epochs trained (`final.json`'s `epochs_run`): 22 (1 runs), 30 (2 runs).")
    assert "the protocol's runs train min_epochs 30, epochs 30." in lines[0]
    assert lines[1].splitlines() == [
        "**1 runs trained other epochs than they should** (marked ! below):",
        "- `vi/hinge/lr0.002/seed0`: config.json min_epochs 20, epochs 30, not the protocol's 30, 30: "
        "stopped early after 22 epochs, before min_epochs 30",
    ]
    assert lines[2].startswith(
        "1 runs' `config.json` holds other epochs than the protocol's (min_epochs 20, epochs 30)"
    )
    assert lines[2].endswith("so they count as its runs: `vi/crf/lr0.002/seed0`.")
    table = "\n".join(bench._runs_table(config, runs))
    assert "| vi/hinge/lr0.002/seed0 | 22 ! | 20-30 | 22 | yes |" in table
    assert "| vi/crf/lr0.002/seed0 | 30 | 20-30 | 30 | no |" in table
    quick = bench.SuiteConfig(**{**config.to_json(), "train_args": bench.QUICK_TRAIN_ARGS})
    quick_root = tmp_path / "quick"
    fake_run(quick_root, "vi", "crf", 0.002, 0, epochs=3, budget=(20, 3))  # the preset with --epochs 3
    quick_runs = bench.LAYOUT.finished_runs(quick_root, bench.RunResult)
    assert "| vi/crf/lr0.002/seed0 | 3 | 3 | 3 | no |" in "\n".join(bench._runs_table(quick, quick_runs))
    assert "| 3 ! |" in "\n".join(bench._runs_table(config, quick_runs))  # not the tuned protocol's 30
    assert "the suite's training options set the epochs" in bench._epoch_lines(quick, runs)[0]


def test_report_compares_the_two_protocols_side_by_side(tmp_path):
    options = {
        "languages": ("vi",),
        "losses": ("sparsemap", "hinge"),
        "learning_rates": (0.002,),
        "seeds": (0, 1),
    }
    paper, tuned = tmp_path / "bench_parsing_paper", tmp_path / "bench_parsing"
    scores = {paper: {"sparsemap": 72.0, "hinge": 71.0}, tuned: {"sparsemap": 72.3, "hinge": 30.0}}
    for root in (paper, tuned):
        for loss, uas in scores[root].items():
            for seed in (0, 1):
                fake_run(root, "vi", loss, 0.002, seed, test=uas + 0.2 * seed)
    assert bench.other_protocol_roots(paper, "sparsemap-paper") == []  # no plan recorded beside it
    for root, protocol in ((paper, "sparsemap-paper"), (tuned, "tuned")):
        config = bench.SuiteConfig(protocol=protocol, **options)
        (root / resumable_runs.PLAN_FILE).write_text(json.dumps({"config": config.to_json()}))
    assert bench.other_protocol_roots(paper, "sparsemap-paper") == [(bench.TUNED, tuned)]
    assert bench.other_protocol_roots(tuned, "tuned") == [(bench.PAPER, paper)]
    text = bench.RUNNER.write_report(paper).read_text()
    section = text.split("## The two protocols compared")[1].split("##")[0]
    assert (
        "| language | loss | sparsemap-paper lr | sparsemap-paper test UAS | tuned lr | tuned test UAS |"
        in section
    )
    lines = [line.split(" | ")[1:] for line in section.splitlines() if line.startswith("| vi")]
    rows = {cells[0]: cells for cells in lines}
    assert rows["sparsemap"] == [
        "sparsemap",
        "0.002",
        "72.10 ± 0.10 (2 seeds)",
        "0.002",
        "**72.40 ± 0.10** (2 seeds)",
        "behind (-0.30, spread 0.20, seeds 2/2) |",
    ]
    assert rows["hinge"][2] == "**71.10 ± 0.10** (2 seeds)" and rows["hinge"][5].startswith("ahead (+41.00")
    suites = [bench.ProtocolResults.read(root) for root in (paper, tuned)]
    assert bench._protocol_table(suites) == section.strip().splitlines()


def test_report_refuses_a_read_only_root_before_making_anything(tmp_path, monkeypatch, capsys):
    config = build_suite(tmp_path)
    make_read_only(monkeypatch, tmp_path)
    refused = r"report writes results.md and figures/ into the root, and .* cannot be written \(Read-only"
    with pytest.raises(PermissionError, match=refused):
        bench.RUNNER.write_report(tmp_path, config)
    assert not (tmp_path / "figures").exists() and not (tmp_path / "results.md").exists()
    with pytest.raises(SystemExit) as stop:  # the command line: a message, no traceback
        bench.RUNNER.main(["report", "--root", str(tmp_path)])
    assert stop.value.code == 2 and re.search(refused, capsys.readouterr().err)


def test_report_on_an_empty_root_lists_everything_missing(tmp_path):
    config = bench.SuiteConfig(languages=("vi",), losses=("crf",), learning_rates=(0.002,), seeds=(0,))
    text = bench.RUNNER.write_report(tmp_path / "nothing", config).read_text()
    assert "0 finished runs" in text and "| vi | missing |" in text and "No claim:" in text
    assert "`vi/crf/lr0.002/seed0`: not started" in text and "## Figures" not in text


# --------------------------------------------------------------------------------------------- execute


STEP_SECONDS = {"sparsemap": 0.12, "margin_sparsemap": 0.13, "crf": 0.1}


class FakeParser(FakeCLI):
    """Stands in for ``subprocess.run`` of the parsing CLI: writes what ``train`` / ``evaluate`` would."""

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        logdir = Path(arg_value(argv, "--logdir"))
        if argv[3] == "train":
            if self.refuses(argv, logdir):
                return subprocess.CompletedProcess(argv, 2)
            assert "--time-limit" in argv
            (logdir / "checkpoint").mkdir(parents=True, exist_ok=True)
            (logdir / "checkpoint" / "state.json").write_text("{}")
            if self.train_exit == 0 and self.trains(logdir) >= self.processes_to_finish:
                lr = float(arg_value(argv, "--learning-rate"))
                final = {"best_epoch": 1, "dev_uas": 70.0 + 1000 * lr, "train_seconds": 1.0, "epochs_run": 1}
                (logdir / "final.json").write_text(
                    json.dumps({**final, "dev_uas_no_punct": 0, "stopped_early": False})
                )
            return subprocess.CompletedProcess(argv, self.train_exit)
        if argv[3] == "time":
            logdirs = [Path(argv[i + 1]) for i, arg in enumerate(argv) if arg == "--logdir"]
            timing = {
                str(run): {
                    "loss": run.parts[-3],
                    "median_step_s": STEP_SECONDS[run.parts[-3]],
                    "sentences_per_s": 1.0,
                }
                for run in logdirs
            }
            Path(arg_value(argv, "--output")).write_text(json.dumps(timing))
            return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(timing), stderr="")
        split = arg_value(argv, "--split")
        result = {"split": split, "uas": 75.0, "uas_no_punct": 76.0, "tokens": 9, "sentences": 2}
        result.update(trees_per_sentence=[1, 2], long_sentences=0)
        return self.evaluation(argv, logdir / f"eval_{split}.json", result)


def test_execute_resumes_accumulates_wall_time_and_reads_eval_output(tmp_path, monkeypatch):
    config = bench.SuiteConfig(languages=("vi",), losses=("crf",), learning_rates=(0.002,), seeds=(0,))
    spec = bench.RunSpec("vi", "crf", 0.002, 0)
    logdir = spec.logdir(tmp_path)
    run = SuiteRun(config, Path("/ud"), tmp_path, {"OMP_NUM_THREADS": "2"})

    failing = FakeParser(train_exit=1)
    monkeypatch.setattr(subprocess, "run", failing)
    assert not bench.RUNNER.execute(spec, run)
    assert len(failing.calls) == 1 and "--resume" not in failing.calls[0]
    status = bench.LAYOUT.read_status(logdir)
    assert status.resumable and not status.finished and not (logdir / "eval_dev.json").exists()

    fake = FakeParser(write_eval=False)  # evaluate prints its JSON line only: the runner writes the file
    monkeypatch.setattr(subprocess, "run", fake)
    assert bench.RUNNER.execute(spec, run)
    assert "--resume" in fake.calls[0] and [c[3] for c in fake.calls] == ["train", "evaluate", "evaluate"]
    assert json.loads((logdir / "eval_test.json").read_text())["uas"] == 75.0
    assert (logdir / "bench_train.log").is_file()
    state = json.loads((logdir / resumable_runs.STATE_FILE).read_text())
    assert state["sessions"] == 2 and state["threads"] == 2 and set(state["eval_wall_s"]) == {"dev", "test"}

    assert bench.RUNNER.execute(spec, run) and len(fake.calls) == 3  # finished: skipped

    stale = bench.RunSpec("vi", "crf", 0.002, 1)
    stale.logdir(tmp_path).mkdir(parents=True)
    (stale.logdir(tmp_path) / "stale.txt").write_text("")  # partial without a checkpoint: afresh
    assert bench.RUNNER.execute(stale, run)
    assert "--resume" not in fake.calls[3] and not (stale.logdir(tmp_path) / "stale.txt").exists()


def test_run_suite_tunes_then_runs_the_chosen_rate(tmp_path, monkeypatch):
    fake = FakeParser()
    monkeypatch.setattr(subprocess, "run", fake)
    config = bench.SuiteConfig(
        languages=("ro",),
        losses=("crf",),
        learning_rates=(0.001, 0.004),
        seeds=(0, 1),
        tune_languages=("vi",),
    )
    assert bench.RUNNER.run_suite(SuiteRun(config, Path("/ud"), tmp_path, jobs=2))
    trained = sorted(
        (
            c[c.index("--treebank") + 1].split("/")[-1],
            c[c.index("--learning-rate") + 1],
            c[c.index("--seed") + 1],
        )
        for c in fake.calls
        if c[3] == "train"
    )
    assert trained == [  # the fake prefers the larger rate; en is not asked for
        ("ro_rrt-1.2", "0.004", "0"),
        ("vi_vtb-2.0", "0.001", "0"),
        ("vi_vtb-2.0", "0.004", "0"),
        ("vi_vtb-2.0", "0.004", "1"),
    ]
    recorded = json.loads((tmp_path / resumable_runs.PLAN_FILE).read_text())
    assert recorded["choices"][0]["learning_rate"] == 0.004
    assert bench.RUNNER.read_options(tmp_path) == config


@pytest.mark.parametrize("command", ["run", "report"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.RUNNER.parse_args([command, "--help"])
    assert exit_info.value.code == 0 and "--root" in capsys.readouterr().out


def test_execute_resumes_a_run_stopped_by_the_time_limit(tmp_path, monkeypatch):
    config = bench.SuiteConfig(languages=("vi",), losses=("crf",), learning_rates=(0.002,), seeds=(0,))
    spec = bench.RunSpec("vi", "crf", 0.002, 0)
    fake = FakeParser(processes_to_finish=3)
    monkeypatch.setattr(subprocess, "run", fake)
    assert bench.RUNNER.execute(spec, SuiteRun(config, Path("/ud"), tmp_path))
    trains = [call for call in fake.calls if call[3] == "train"]
    assert len(trains) == 3 and "--resume" not in trains[0] and all("--resume" in c for c in trains[1:])
    assert json.loads((spec.logdir(tmp_path) / resumable_runs.STATE_FILE).read_text())["sessions"] == 3


def test_a_best_rate_at_the_end_of_the_grid_widens_it():
    R = bench.RunSpec
    done = lambda uas: RunStatus(finished=True, score=uas)  # noqa: E731
    grid = (0.001, 0.002, 0.004)
    statuses = {R("vi", "crf", lr, 0): done(uas) for lr, uas in zip(grid, (60.0, 62.0, 65.0), strict=True)}
    choice = bench.choose_learning_rate("crf", ["vi"], grid, 0, statuses)
    assert choice.value is None and choice.missing == (R("vi", "crf", 0.008, 0),)
    config = bench.SuiteConfig(
        languages=("vi",), losses=("crf",), learning_rates=grid, seeds=(0,), tune_languages=("vi",)
    )
    assert R("vi", "crf", 0.008, 0) in bench.plan_suite(config, statuses).start
    statuses[R("vi", "crf", 0.008, 0)] = done(64.0)  # worse: 0.004 is chosen, inside the grid now
    assert bench.choose_learning_rate("crf", ["vi"], grid, 0, statuses).value == 0.004
    statuses[R("vi", "crf", 0.008, 0)] = done(66.0)  # better again: widened once more, then at most twice
    statuses[R("vi", "crf", 0.016, 0)] = done(67.0)
    assert bench.choose_learning_rate("crf", ["vi"], grid, 0, statuses).value == 0.016


def test_run_suite_times_the_sparsemap_and_crf_runs_side_by_side_once(tmp_path, monkeypatch):
    fake = FakeParser()
    monkeypatch.setattr(subprocess, "run", fake)
    config = bench.SuiteConfig(
        languages=("vi",), losses=("sparsemap", "crf"), learning_rates=(0.002,), seeds=(0,)
    )
    assert bench.RUNNER.run_suite(SuiteRun(config, Path("/ud"), tmp_path, jobs=1))
    times = [call for call in fake.calls if call[3] == "time"]
    assert len(times) == 1 and times[0].count("--logdir") == 2
    assert arg_value(times[0], "--steps") == str(bench.TIMING_STEPS)
    assert arg_value(times[0], "--output") == str(tmp_path / "vi" / bench.TIMING_FILE)
    assert bench.RUNNER.run_suite(SuiteRun(config, Path("/ud"), tmp_path, jobs=1))
    assert sum(call[3] == "time" for call in fake.calls) == 1  # the timings hold these runs: skipped
    report = bench.RUNNER.write_report(tmp_path, config).read_text()
    assert "| vi | last checkpoints | 1.0 | n/a | 1.0 | 1.20 | yes |" in report


def test_a_second_runner_on_the_same_suite_is_refused(tmp_path, monkeypatch):
    fake = FakeParser()
    monkeypatch.setattr(subprocess, "run", fake)
    config = bench.SuiteConfig(languages=("vi",), losses=("sparsemap",), learning_rates=(0.002,), seeds=(0,))
    with RunLock(tmp_path), pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
        bench.RUNNER.run_suite(SuiteRun(config, Path("/ud"), tmp_path, jobs=1))
    assert fake.calls == [] and not (tmp_path / "vi").exists()


def test_timed_runs_without_checkpoints_are_timed_through_replicas(tmp_path, monkeypatch):
    fake = FakeParser()
    monkeypatch.setattr(subprocess, "run", fake)
    config = bench.SuiteConfig(
        languages=("vi",), losses=("sparsemap", "crf"), learning_rates=(0.002,), seeds=(0,)
    )
    run = SuiteRun(config, Path("/ud"), tmp_path, jobs=2)
    plan, _ = run_rounds(
        tmp_path,
        lambda: bench.plan_suite(config, bench.LAYOUT.scan(tmp_path)),
        lambda spec: bench.RUNNER.execute(spec, run),
        1,
        "",
    )
    for spec in bench.timed_runs(plan, tmp_path, "vi"):  # a new machine: the checkpoints are gone
        shutil.rmtree(spec.logdir(tmp_path) / bench.CHECKPOINT_DIR)
    fake.calls.clear()
    assert bench.time_runs(plan, run)
    trains = [call for call in fake.calls if call[3] == "train"]
    replicas = {
        str(spec.logdir(tmp_path / bench.REPLICA_DIR)) for spec in bench.timed_runs(plan, tmp_path, "vi")
    }
    assert {arg_value(call, "--logdir") for call in trains} == replicas and len(trains) == 2
    assert all(call[call.index("--epochs") + 1] == str(bench.REPLICA_EPOCHS) for call in trains)
    times = [call for call in fake.calls if call[3] == "time"]
    assert (
        len(times) == 1 and {times[0][i + 1] for i, a in enumerate(times[0]) if a == "--logdir"} == replicas
    )
    assert bench.time_runs(plan, run) and len(fake.calls) == 3  # timed: skipped
    assert bench.LAYOUT.scan(tmp_path).keys() == {*plan.done}  # replicas are not runs of the suite
    report = bench.RUNNER.write_report(tmp_path, config).read_text()
    assert f"| vi | replicas, {bench.REPLICA_EPOCHS} epochs | 1.0 | n/a | 1.0 | 1.20 | yes |" in report


def test_no_timing_until_the_sparsemap_and_crf_runs_are_finished(tmp_path):
    config = bench.SuiteConfig(
        languages=("vi",), losses=("sparsemap", "crf"), learning_rates=(0.002,), seeds=(0,)
    )
    plan = bench.plan_suite(config, bench.LAYOUT.scan(tmp_path))
    assert bench.timed_runs(plan, tmp_path, "vi") == []
