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
) -> Path:
    """A run directory as ``train`` (and ``evaluate``) would leave it."""
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
    (logdir / "config.json").write_text(json.dumps(config))
    epochs = 3
    with open(logdir / "progress.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(COLUMNS.split(","))
        for epoch in range(1, epochs + 1):
            uas = dev - (epochs - epoch)
            writer.writerow(
                [epoch, 1.0 / epoch, uas, uas + 1, sps * (0.9 + 0.1 * epoch), 4 - epoch, 0.3 * epoch, 10]
            )
    sparsity = [{"epoch": e, "trees_per_sentence": [max(1, 4 - e), 1, 2]} for e in range(1, epochs + 1)]
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
        "stopped_early": False,
    }
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


def test_plan_default_tunes_on_vi_and_seeds_en_and_vi():
    R = bench.RunSpec
    config = bench.SuiteConfig(
        languages=("en", "ro"), losses=("crf",), learning_rates=(1e-3, 2e-3), seeds=(0, 1)
    )
    assert config.all_languages == ("en", "vi", "ro")  # vi joins: it is the tuning language
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
    assert "only at the chosen rates, on vi and en." in bench.describe_choices(plan)[0]


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
    config = bench.SuiteConfig(train_args=bench.QUICK_TRAIN_ARGS)
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


def test_a_run_stopped_early_before_min_epochs_is_extended(tmp_path):
    logdir = fake_run(tmp_path, "vi", "crf", 0.002, 0)
    assert bench.LAYOUT.read_status(logdir).finished  # ran all its epochs
    final = json.loads((logdir / "final.json").read_text())
    (logdir / "final.json").write_text(json.dumps({**final, "stopped_early": True}))
    status = bench.LAYOUT.read_status(logdir)
    assert not status.finished and status.resumable
    run = SuiteRun(bench.SuiteConfig(), Path("/ud"), tmp_path)
    steps = bench.run_commands(bench.RunSpec("vi", "crf", 0.002, 0), status, run)
    assert [kind for kind, _ in steps] == ["train", "eval", "eval"]
    assert "--resume" in steps[0][1] and "--min-epochs" in steps[0][1]
    config = json.loads((logdir / "config.json").read_text())
    (logdir / "config.json").write_text(json.dumps({**config, "min_epochs": bench.MIN_EPOCHS}))
    assert bench.LAYOUT.read_status(logdir).finished  # already trained under the suite's rule


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
    argv = [
        "run",
        "--quick",
        "--root",
        str(root),
        "--data",
        "/ud",
        "--losses",
        "sparsemap",
        "crf",
        "--dry-run",
    ]
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


def test_dry_run_full_grid_waits_for_tuning(tmp_path, capsys):
    assert bench.main(["run", "--root", str(tmp_path), "--dry-run", "--losses", "crf", "hinge"]) == 0
    lines = capsys.readouterr().out.splitlines()
    trains = [line for line in lines if " train " in line]
    assert len(trains) == 2 * 5  # vi, two losses, five rates, seed 0
    assert all("--seed 0" in line and "/vi_vtb-2.0 " in line for line in trains)
    assert "# crf: en, vi, ja, zh, ro wait for the learning-rate tuning runs" in lines


def test_run_refuses_a_root_of_other_training_options(tmp_path, capsys):
    (tmp_path / resumable_runs.PLAN_FILE).write_text(
        json.dumps({"config": {"train_args": list(bench.QUICK_TRAIN_ARGS)}})
    )
    assert bench.main(["run", "--root", str(tmp_path), "--dry-run"]) == 2
    assert "other options" in capsys.readouterr().err
    # a suite of the parser's earlier configuration (no parser options recorded) is refused too
    (tmp_path / resumable_runs.PLAN_FILE).write_text(json.dumps({"config": {"train_args": []}}))
    assert bench.main(["run", "--root", str(tmp_path), "--dry-run"]) == 2
    assert "parser_args" in capsys.readouterr().err
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


def test_report_tables_missing_verdict_and_figures(tmp_path):
    config = build_suite(tmp_path)
    text = bench.RUNNER.write_report(tmp_path, config).read_text()

    with_punct = text.split("**Test UAS (%), punctuation included**")[1].split("**Test UAS")[0]
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in with_punct.splitlines()
        if line.startswith("| ") and "---" not in line
    }
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

    # en won (87.2 > 86.0 and the seed-2 hinge), vi lost (crf 71.1), ro not compared: 1 of 2 is not most.
    assert "No: the SparseMAP losses" in text and "on 1 of the 2 languages with all results (en)" in text

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

    assert "| en/hinge/lr0.002/seed2 | 3 | 3 | no | 80.00 | 10.00 | 11.00 | 110.0 | 2.0 | 110 |" in text
    assert "ro_rrt-1.2" in text and "much smaller than the treebank the paper used" in text
    assert text.count("UD v1 labels") == 2

    for name in ("sparsity_en", "sparsity_training_vi", "learning_curves_ro", "sparsity_test"):
        data = (tmp_path / "figures" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
        assert f"![{name}](figures/{name}.png)" in text


def test_report_verdict_flips_when_sparsemap_wins_most(tmp_path):
    config = build_suite(tmp_path)
    fake_run(tmp_path, "ro", "hinge", 0.002, 0, test=87.9)
    (tmp_path / resumable_runs.PLAN_FILE).write_text(
        json.dumps({"config": config.to_json()})
    )  # report reads it
    text = bench.RUNNER.write_report(tmp_path).read_text()
    assert "Yes: the SparseMAP losses" in text and "on 2 of the 3 languages with all results (en, ro)" in text
    assert "ro/hinge" not in text.split("## Missing runs")[1].split("##")[0]


def test_sparsemap_verdict_rules():
    verdict = bench.sparsemap_verdict
    uas = {("en", "margin_sparsemap"): 80.0, ("en", "crf"): 79.0, ("en", "hinge"): 79.5}
    assert verdict(uas, ["en"]).startswith("Yes") and "1 of the 1 languages" in verdict(uas, ["en"])
    uas[("en", "hinge")] = 80.0  # a tie is not a win
    assert verdict(uas, ["en"]).startswith("No")
    uas[("en", "sparsemap")] = float("nan")  # NaN does not count, the other SparseMAP loss does
    assert verdict(uas, ["en"]).startswith("No")
    del uas[("en", "crf")]
    assert verdict(uas, ["en"]).startswith("Not decided")


def test_report_on_an_empty_root_lists_everything_missing(tmp_path):
    config = bench.SuiteConfig(languages=("vi",), losses=("crf",), learning_rates=(0.002,), seeds=(0,))
    text = bench.RUNNER.write_report(tmp_path / "nothing", config).read_text()
    assert "0 finished runs" in text and "| vi | missing |" in text and "Not decided" in text
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
        languages=("ro",), losses=("crf",), learning_rates=(0.001, 0.004), seeds=(0, 1)
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
