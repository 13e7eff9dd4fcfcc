"""Plan, resume logic and report of ``benchmarks/bench_tracenorm.py`` on synthetic run directories.

No parser is trained: runs are fake ``config.json`` / ``progress.csv`` / ``checkpoint.npz`` /
``final.json`` / ``eval_{split}.json`` files following the contract of
``examples/tracenorm_parser.py``, and the runner's subprocess calls are replaced by a stub that
writes them.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_tracenorm as bench
from benchmarks import resumable_runs
from benchmarks.run_plans import RunStatus
from benchmarks.runner_core import SuiteRun
from keras_structured.applications.parsing.tracenorm import PROGRESS_COLUMNS
from tests.bench_fixtures import FakeCLI, arg_value

R = bench.RunSpec
SMALL = bench.Protocol(
    Cs=(10.0, 20.0, 40.0),
    dim=64,
    steps=20,
    line_search_steps=10,
    eval_every=5,
    checkpoint_every=5,
    frobenius_mus=(1e-4, 1e-3),
    frobenius_steps=5,
    dims=(16, 32),
    dim_steps=4,
    stochastic_batch_size=8,
    stochastic_steps=6,
    vi_train_sentences=50,
    vi_dev_sentences=20,
)


def write_progress(logdir: Path, steps: int, C: float, seconds: float = 0.5, eval_every: int = 5) -> None:
    """A ``progress.csv`` of ``steps`` Frank-Wolfe steps: gap ``C / k``, rank ``k``, feasible."""
    with open(logdir / "progress.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(PROGRESS_COLUMNS)
        for k in range(1, steps + 1):
            dev = 50.0 + k if eval_every and k % eval_every == 0 else ""
            writer.writerow([k, 5.0 + 1.0 / k, C / k, k, 2 / (k + 1), "A", 1.0, C, seconds * k, dev])


def fake_run(
    root: Path,
    kind: str,
    language: str,
    value: float,
    *,
    dev: float = 60.0,
    test: float | None = None,
    steps: int = 20,
    finished: bool = True,
    evaluated: bool = True,
    wall: float = 120.0,
    peak: float = 800.0,
    dim: int = 64,
) -> Path:
    """A run directory as ``train`` / ``frobenius`` (and ``evaluate``) would leave it."""
    spec = R(kind, language, value)
    logdir = spec.logdir(root)
    logdir.mkdir(parents=True)
    dim = int(value) if kind == "dim" else dim
    C = 20.0 if kind == "dim" else value
    if kind == "frobenius":
        config = {"treebank": f"/ud/{bench.LANGUAGES[language]}", "dim": dim, "frobenius": {"mu": value}}
        with open(logdir / "progress.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["step", "objective", "loss", "time"])
            writer.writerows([k, 6.0 - k / 10, 5.0 - k / 10, 3.0 * k] for k in range(1, steps + 1))
    else:
        config = {"treebank": f"/ud/{bench.LANGUAGES[language]}", "dim": dim, "hazan": {"C": C, "lam": 5.0}}
        (logdir / "checkpoint.npz").write_bytes(b"")
        write_progress(logdir, steps, C)
    (logdir / "config.json").write_text(json.dumps(config))
    (logdir / resumable_runs.STATE_FILE).write_text(
        json.dumps({"train_wall_s": wall, "sessions": 1, "threads": 2})
    )
    if not finished:
        return logdir
    dense = kind == "frobenius"
    final = {
        "steps": steps,
        "objective": 5.05,
        "gap": None if dense else C / steps,
        "loss": 4.5 if dense else None,
        "rank": None if dense else steps,
        "num_parameters": dim**2 + 15 if dense else steps * (2 * dim + 1) + 15,
        "time": 0.5 * steps,
        "dev": {"uas": dev, "tokens": 100},
        "peak_memory_mib": peak,
    }
    (logdir / "final.json").write_text(json.dumps(final))
    if evaluated or dense:
        for split, uas in (("dev", dev), ("test", dev - 1 if test is None else test)):
            if split == "test" or dense:
                (logdir / f"eval_{split}.json").write_text(json.dumps({"uas": uas, "tokens": 100}))
    return logdir


def done(dev: float, evaluated=("test",)) -> RunStatus:
    return RunStatus(finished=True, evaluated=frozenset(evaluated), score=dev)


# ------------------------------------------------------------------------------------------------ plan


def test_choose_best_dev_ties_nan_missing_and_widening():
    statuses = {
        R("sparsemap", "vi", C): done(uas) for C, uas in ((10.0, 60.0), (20.0, 64.0), (40.0, math.nan))
    }
    choice = bench.choose("sparsemap", "vi", (10, 20, 40), statuses, max_widenings=2)
    assert choice.value == 20.0 and choice.missing == () and math.isnan(choice.scores[40.0])
    assert not choice.at_edge()
    statuses[R("sparsemap", "vi", 10.0)] = done(64.0)  # a tie: the smaller C wins, at the edge: widened
    choice = bench.choose("sparsemap", "vi", (10, 20, 40), statuses, max_widenings=2)
    assert choice.value is None and choice.missing == (R("sparsemap", "vi", 5.0),) and choice.widened == 1
    statuses[R("sparsemap", "vi", 5.0)] = done(63.0)
    choice = bench.choose("sparsemap", "vi", (10, 20, 40), statuses, max_widenings=2)
    assert choice.value == 10.0 and set(choice.scores) == {5.0, 10.0, 20.0, 40.0} and not choice.at_edge()
    # No widening for a grid of two values; one value needs no run.
    mus = {R("frobenius", "vi", 1e-4): done(50.0, ()), R("frobenius", "vi", 1e-3): done(55.0, ())}
    assert bench.choose("frobenius", "vi", (1e-4, 1e-3), mus, max_widenings=2, factor=10).value == 1e-3
    # The mu grid widens by its own factor.
    mus[R("frobenius", "vi", 1e-5)] = done(40.0, ())
    choice = bench.choose("frobenius", "vi", (1e-5, 1e-4, 1e-3), mus, max_widenings=2, factor=10)
    assert choice.value is None and choice.missing == (R("frobenius", "vi", 1e-2),)
    assert bench.choose("sparsemap", "vi", (20.0,), {}).value == 20.0
    unfinished = {R("sparsemap", "vi", 10.0): RunStatus(resumable=True)}
    assert bench.choose("sparsemap", "vi", (10.0, 20.0), unfinished).missing == (
        R("sparsemap", "vi", 10.0),
        R("sparsemap", "vi", 20.0),
    )


def test_plan_is_pure_resumes_and_waits_for_C():
    statuses = {
        R("sparsemap", "vi", 10.0): done(60.0),
        R("sparsemap", "vi", 20.0): done(62.0, evaluated=()),  # trained, test not evaluated
        R("sparsemap", "vi", 40.0): RunStatus(resumable=True),  # a checkpoint
        R("dim", "vi", 16.0): done(30.0, evaluated=()),  # d runs need no evaluation
        R("frobenius", "vi", 1e-4): RunStatus(resumable=True),  # never resumed: started afresh
    }
    plan = bench.plan_suite(SMALL, statuses)
    assert plan == bench.plan_suite(SMALL, dict(statuses))  # pure
    assert plan.C.value is None and plan.waiting == list(bench.AT_CHOSEN_C)
    assert plan.runs == [
        R("sparsemap", "vi", 10.0),
        R("sparsemap", "vi", 20.0),
        R("sparsemap", "vi", 40.0),
        R("dim", "vi", 16.0),
        R("dim", "vi", 32.0),
        R("frobenius", "vi", 1e-4),
        R("frobenius", "vi", 1e-3),
    ]
    assert plan.done == [R("sparsemap", "vi", 10.0), R("dim", "vi", 16.0)]
    assert plan.evaluate == [R("sparsemap", "vi", 20.0)]
    assert plan.resume == [R("sparsemap", "vi", 40.0)]
    assert plan.start == [R("dim", "vi", 32.0), R("frobenius", "vi", 1e-4), R("frobenius", "vi", 1e-3)]
    assert plan.pending[:2] == [R("sparsemap", "vi", 20.0), R("sparsemap", "vi", 40.0)]  # under way first

    statuses[R("sparsemap", "vi", 40.0)] = done(61.0)
    plan = bench.plan_suite(SMALL, statuses)
    assert plan.C.value == 20.0 and not plan.waiting
    assert plan.runs[-5:] == [
        R("hinge", "vi", 20.0),
        R("line_search", "vi", 20.0),
        R("stochastic", "en", 10.0),
        R("stochastic", "en", 20.0),
        R("stochastic", "en", 40.0),
    ]
    lines = bench.describe_choices(plan)
    assert lines[0] == "C (vi, SparseMAP loss, by final dev UAS): 20 (dev UAS 62.00; grid 10, 20, 40)"
    assert lines[1].startswith("mu of the Frobenius baseline (vi, by dev UAS): not chosen yet (2 runs")


def test_scan_statuses_reads_the_logdirs(tmp_path):
    fake_run(tmp_path, "sparsemap", "vi", 20.0, dev=61.5, evaluated=False)
    fake_run(tmp_path, "stochastic", "en", 10.0, finished=False)
    fake_run(tmp_path, "frobenius", "vi", 1e-4)
    (tmp_path / "vi" / "hinge" / "C20").mkdir(parents=True)  # empty: a fresh start
    (tmp_path / "vi" / "hinge" / "junk").mkdir()  # not a run
    (tmp_path / "figures" / "vi-sparsemap-C20").mkdir(parents=True)  # not a run
    statuses = bench.LAYOUT.scan(tmp_path)
    assert set(statuses) == {
        R("sparsemap", "vi", 20.0),
        R("stochastic", "en", 10.0),
        R("frobenius", "vi", 1e-4),
        R("hinge", "vi", 20.0),
    }
    assert statuses[R("sparsemap", "vi", 20.0)] == RunStatus(True, True, frozenset(), 61.5)
    partial = statuses[R("stochastic", "en", 10.0)]
    assert partial.resumable and not partial.finished and math.isnan(partial.score)
    assert statuses[R("frobenius", "vi", 1e-4)].evaluated == {"dev", "test"}
    assert statuses[R("hinge", "vi", 20.0)] == RunStatus()
    assert R("dim", "vi", 65536.0).logdir(tmp_path) == tmp_path / "vi" / "dim" / "d65536"
    assert R("frobenius", "vi", 1e-05).label == "mu1e-05"


def test_commands_of_each_kind(tmp_path):
    data = Path("/ud")
    example = str(bench.EXAMPLE)

    def argv(spec, **kwargs):
        return bench.train_command(spec, SMALL, data, tmp_path, python="py", **kwargs)

    limits = ["--max-train-sentences", "50", "--max-dev-sentences", "20"]
    line_search = argv(R("line_search", "vi", 20.0))
    assert line_search == [
        "py",
        example,
        "train",
        "--treebank",
        "/ud/vi_vtb-2.0",
        "--C",
        "20",
        "--lam",
        "5",
        "--steps",
        "10",
        "--loss",
        "sparsemap",
        "--step-rule",
        "line_search",
        "--dim",
        "64",
        "--seed",
        "0",
        "--eval-every",
        "5",
        "--checkpoint-every",
        "5",
        *limits,
        "--logdir",
        str(tmp_path / "vi" / "line_search" / "C20"),
        "--time-limit",
        "40",
    ]
    hinge = argv(R("hinge", "vi", 10.0), time_limit=0)  # no limit: no option
    assert hinge[hinge.index("--loss") + 1] == "hinge" and "--time-limit" not in hinge
    dim = argv(R("dim", "vi", 32.0))
    assert dim[dim.index("--dim") + 1] == "32" and dim[dim.index("--C") + 1] == "20"
    assert dim[dim.index("--eval-every") + 1] == "0" and dim[dim.index("--steps") + 1] == "4"
    en = argv(R("stochastic", "en", 20.0))
    assert en[en.index("--batch-size") + 1] == "8" and "/ud/en_ewt-2.0" in en
    assert "--max-train-sentences" not in en and en[en.index("--steps") + 1] == "6"
    frobenius = argv(R("frobenius", "vi", 1e-4))
    assert frobenius[2:11] == ["frobenius", "--treebank", "/ud/vi_vtb-2.0", "--mu", "0.0001"] + [
        "--learning-rate",
        "0.01",
        "--steps",
        "5",
    ]
    assert "--time-limit" not in frobenius and "--C" not in frobenius

    spec = R("sparsemap", "vi", 20.0)
    evaluate = (
        "eval",
        ["py", example, "evaluate", "--logdir", str(spec.logdir(tmp_path)), "--split", "test"],
    )
    run = SuiteRun(SMALL, data, tmp_path)
    steps = bench.run_commands(spec, RunStatus(), run, python="py")
    assert steps == [("train", argv(spec)), evaluate]
    resumed = bench.run_commands(spec, RunStatus(resumable=True), run, python="py")
    assert resumed == steps  # train resumes from the logdir's checkpoint by itself
    trained = bench.run_commands(spec, done(60.0, ()), run, python="py")
    assert trained == [evaluate]
    assert bench.run_commands(spec, done(60.0), run) == []
    assert bench.run_commands(R("dim", "vi", 16.0), done(1.0, ()), run) == []
    assert [k for k, _ in bench.run_commands(R("frobenius", "vi", 1e-4), RunStatus(), run)] == ["train"]


# --------------------------------------------------------------------------------------------- execute


class FakeTracenorm(FakeCLI):
    """Stands in for ``subprocess.run`` of ``examples/tracenorm_parser.py``: writes what it would."""

    COMMAND = 2

    @staticmethod
    def dev_uas(C: float) -> float:
        return 70.0 - abs(math.log2(C / 20.0))  # best at C = 20

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        command, logdir = argv[2], Path(arg_value(argv, "--logdir"))
        if command == "evaluate":
            split = arg_value(argv, "--split")
            return self.evaluation(
                argv, logdir / f"eval_{split}.json", {"split": split, "uas": 65.0, "tokens": 9}
            )
        assert logdir.is_dir()
        steps = int(argv[argv.index("--steps") + 1])
        if command == "frobenius":
            assert "--time-limit" not in argv and not (logdir / "final.json").exists()
            for split in ("dev", "test"):
                (logdir / f"eval_{split}.json").write_text(json.dumps({"uas": 50.0}))
            final = {"steps": steps, "dev": {"uas": 50.0}, "num_parameters": 4111}
            (logdir / "final.json").write_text(json.dumps(final))
            return subprocess.CompletedProcess(argv, 0)
        assert "--time-limit" in argv and not (logdir / "final.json").exists()
        processes = self.trains(logdir)
        C = float(argv[argv.index("--C") + 1])
        (logdir / "checkpoint.npz").write_bytes(b"")
        (logdir / "config.json").write_text(json.dumps({"hazan": {"C": C}}))
        write_progress(logdir, steps if processes >= self.processes_to_finish else 1, C)
        if self.train_exit == 0 and processes >= self.processes_to_finish:
            final = {"steps": steps, "rank": steps, "dev": {"uas": self.dev_uas(C)}, "num_parameters": 99}
            (logdir / "final.json").write_text(json.dumps(final))
        return subprocess.CompletedProcess(argv, self.train_exit)


def test_execute_resumes_after_time_limits_and_accumulates_wall_time(tmp_path, monkeypatch):
    spec = R("sparsemap", "vi", 20.0)
    logdir = spec.logdir(tmp_path)
    run = SuiteRun(SMALL, Path("/ud"), tmp_path, {"OMP_NUM_THREADS": "2"})
    failing = FakeTracenorm(train_exit=1)
    monkeypatch.setattr(subprocess, "run", failing)
    assert not bench.RUNNER.execute(spec, run)
    assert len(failing.calls) == 1
    status = bench.LAYOUT.read_status(logdir)
    assert status.resumable and not status.finished and not (logdir / "eval_test.json").exists()

    # evaluate prints its JSON (the runner writes it); the first process stops at its time limit
    fake = FakeTracenorm(write_eval=False, processes_to_finish=2)
    monkeypatch.setattr(subprocess, "run", fake)
    (logdir / "keep.txt").write_text("")
    assert bench.RUNNER.execute(spec, run)
    assert [c[2] for c in fake.calls] == [
        "train",
        "train",
        "evaluate",
    ]  # stopped by its time limit, then resumed
    assert (logdir / "keep.txt").exists()  # a resumed run keeps its folder
    assert json.loads((logdir / "eval_test.json").read_text())["uas"] == 65.0
    state = json.loads((logdir / resumable_runs.STATE_FILE).read_text())
    assert state["sessions"] == 3 and state["threads"] == 2 and set(state["eval_wall_s"]) == {"test"}
    assert (logdir / resumable_runs.TRAIN_LOG).is_file()

    assert bench.RUNNER.execute(spec, run) and len(fake.calls) == 3  # finished: skipped

    stale = R("frobenius", "vi", 1e-4)
    stale.logdir(tmp_path).mkdir(parents=True)
    (stale.logdir(tmp_path) / "checkpoint.npz").write_bytes(b"")  # the baseline never resumes: afresh
    assert bench.RUNNER.execute(stale, run)
    assert not (stale.logdir(tmp_path) / "checkpoint.npz").exists()
    assert [c[2] for c in fake.calls[3:]] == ["frobenius"]  # it evaluates itself


def test_run_suite_sweeps_then_runs_the_chosen_C(tmp_path, monkeypatch):
    fake = FakeTracenorm()
    monkeypatch.setattr(subprocess, "run", fake)
    assert bench.RUNNER.run_suite(SuiteRun(SMALL, Path("/ud"), tmp_path, jobs=2))
    trained = [
        (c[2], c[c.index("--logdir") + 1].removeprefix(str(tmp_path) + "/"))
        for c in fake.calls
        if c[2] != "evaluate"
    ]
    first_round = {f"vi/sparsemap/C{C}" for C in (10, 20, 40)} | {"vi/dim/d16", "vi/dim/d32"}
    first_round |= {"vi/frobenius/mu0.0001", "vi/frobenius/mu0.001"}
    assert {name for _, name in trained[:7]} == first_round
    at_chosen_C = ["vi/hinge/C20", "vi/line_search/C20", *(f"en/stochastic/C{C}" for C in (10, 20, 40))]
    assert {name for _, name in trained[7:]} == set(at_chosen_C)
    evaluated = sorted(
        c[c.index("--logdir") + 1].removeprefix(str(tmp_path) + "/") for c in fake.calls if c[2] == "evaluate"
    )
    assert evaluated == sorted([f"vi/sparsemap/C{C}" for C in (10, 20, 40)] + at_chosen_C)
    recorded = json.loads((tmp_path / resumable_runs.PLAN_FILE).read_text())
    assert recorded["choices"]["C"]["value"] == 20.0 and recorded["choices"]["mu"]["value"] == 1e-4
    assert bench.RUNNER.read_options(tmp_path) == SMALL
    calls = len(fake.calls)
    assert bench.RUNNER.run_suite(SuiteRun(SMALL, Path("/ud"), tmp_path, jobs=1)) and len(fake.calls) == calls


def test_dry_run_prints_pending_commands_and_writes_nothing(tmp_path, capsys):
    root = tmp_path / "quick"
    assert bench.main(["run", "--quick", "--root", str(root), "--data", "/ud", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    py = sys.executable
    logdir = f"{root}/vi/sparsemap/C10"
    assert lines[0] == (
        f"{py} {bench.EXAMPLE} train --treebank /ud/vi_vtb-2.0 --C 10 --lam 5 --steps 10 --loss sparsemap "
        "--step-rule standard --dim 1024 --seed 0 --eval-every 5 --checkpoint-every 5 "
        f"--max-train-sentences 200 --max-dev-sentences 100 --logdir {logdir} --time-limit 40"
    )
    assert lines[1] == f"{py} {bench.EXAMPLE} evaluate --logdir {logdir} --split test"
    assert sum(" train " in line for line in lines) == 4 and sum(" frobenius " in line for line in lines) == 1
    assert lines[-3:] == [f"# {pair[0]}/{pair[1]} waits for the choice of C" for pair in bench.AT_CHOSEN_C]
    assert not root.exists()


def test_run_refuses_a_root_of_another_protocol(tmp_path, capsys):
    (tmp_path / resumable_runs.PLAN_FILE).write_text(json.dumps({"protocol": bench.QUICK.to_json()}))
    assert bench.main(["run", "--root", str(tmp_path), "--dry-run"]) == 2
    assert "another protocol" in capsys.readouterr().err
    assert bench.main(["run", "--quick", "--root", str(tmp_path), "--dry-run"]) == 0


@pytest.mark.parametrize("command", ["run", "report"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.RUNNER.parse_args([command, "--help"])
    assert exit_info.value.code == 0 and "--root" in capsys.readouterr().out


def test_gap_slope():
    steps = np.arange(1.0, 301.0)
    assert bench.gap_slope(steps, 4.0 / steps) == pytest.approx(-1.0)
    noisy = 4.0 / steps * np.where(steps % 2 == 0, 3.0, 1.0)  # oscillating: the running minimum counts
    assert bench.gap_slope(steps, noisy) == pytest.approx(-1.0, abs=0.02)
    assert bench.gap_slope(steps, np.full(300, 2.0)) == pytest.approx(0.0)
    assert math.isnan(bench.gap_slope(steps[:11], 1.0 / steps[:11]))  # too few points from step 10


# ---------------------------------------------------------------------------------------------- report


def test_report_tables_and_missing_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "_plot_figures", lambda *args: [])  # figures: the next test
    for C, dev in ((10.0, 58.0), (20.0, 63.0), (40.0, 61.0)):
        fake_run(tmp_path, "sparsemap", "vi", C, dev=dev)
    fake_run(tmp_path, "hinge", "vi", 20.0, dev=22.0, test=21.0)
    fake_run(tmp_path, "line_search", "vi", 20.0, dev=64.0, steps=10, evaluated=False)
    fake_run(tmp_path, "frobenius", "vi", 1e-4, dev=55.0, steps=5, wall=600.0)
    fake_run(tmp_path, "frobenius", "vi", 1e-3, dev=57.0, steps=5)
    fake_run(tmp_path, "dim", "vi", 16.0, steps=4, peak=700.0)
    fake_run(tmp_path, "dim", "vi", 32.0, steps=4, peak=710.0, finished=False)
    text = bench.RUNNER.write_report(tmp_path, SMALL).read_text()

    assert "C (vi, SparseMAP loss, by final dev UAS): 20 (dev UAS 63.00; grid 10, 20, 40)" in text
    assert "mu of the Frobenius baseline (vi, by dev UAS): 0.001 (dev UAS 57.00; grid 0.0001, 0.001;" in text
    sweep = text.split("## UAS against C (vi)")[1].split("##")[0]
    assert "| **20** | 20 | 63.00 | 62.00 | 5.05 | 1 | 20 | 2,595 | 0.50 | 2.0 |" in sweep
    assert "| 10 | 20 | 58.00 | 57.00 |" in sweep and "| 40 | 20 | 61.00 | 60.00 |" in sweep

    comparison = text.split("## Comparison at the chosen C (vi)")[1].split("##")[0]
    rows = [line for line in comparison.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows[0] == (
        "| trace norm, SparseMAP loss, step 2/(k+2) | C = 20 | 20 | 63.00 | 62.00 | 2,595 | 20 | 5.05 | 1 "
        "| 0.50 | 2.0 |"
    )
    assert rows[1].startswith("| trace norm, structured hinge, step 2/(k+2) | C = 20 | 20 | 22.00 | 21.00 |")
    assert rows[2].startswith("| trace norm, SparseMAP loss, line search | C = 20 | 10 | 64.00 | n/a |")
    assert rows[3] == (
        "| Frobenius penalty (dense A), SparseMAP loss, Adam | mu = 0.0001 | 5 | 55.00 | 54.00 | 4,111 "
        "| dense | 4.5 | n/a | 3.00 | 10.0 |"
    )
    assert rows[4].startswith(
        "| Frobenius penalty (dense A), SparseMAP loss, Adam | **mu = 0.001** | 5 | 57.00 |"
    )

    assert "| missing | | | | | | | | | | |" in text.split("## en_ewt")[1].split("##")[0]
    dims = text.split("## Time per step and memory against d")[1].split("##")[0]
    assert "| 16 | 4 | 0.500 | 0.500 | 700 | 0.00112 | 0.0 | 60.00 |" in dims and "| 32 |" not in dims

    claims = text.split("## The notes' claims on the logs")[1].split("##")[0]
    assert "| vi/sparsemap/C20 | 20 | 1.000 | 1.000000 | -1.00 | 20 | 1 |" in claims
    assert "frobenius" not in claims

    missing = text.split("## Missing runs")[1].split("##")[0]
    assert "- `vi/line_search/C20`: trained, not evaluated on test" in missing
    assert "- `vi/dim/d32`: partial (checkpoint), to resume" in missing
    assert "- `en/stochastic/C20`: not started" in missing
    assert "vi/hinge" not in missing and "frobenius" not in missing


def test_report_figures(tmp_path):
    for C in (10.0, 20.0, 40.0):
        fake_run(tmp_path, "sparsemap", "vi", C, dev=60.0 - abs(C - 20.0))
    fake_run(tmp_path, "hinge", "vi", 20.0, dev=22.0)
    fake_run(tmp_path, "dim", "vi", 16.0, steps=4)
    fake_run(tmp_path, "stochastic", "en", 20.0, dev=61.0)
    own = R("sparsemap", "vi", 20.0).logdir(tmp_path)
    for name in ("rank", "objective_gap"):  # as train writes them: linked, not plotted again
        (own / f"{name}.png").write_bytes(b"\x89PNG")
    text = bench.RUNNER.write_report(tmp_path, SMALL).read_text()
    names = ("uas_vs_C", "sweep_curves", "en_curves", "comparison_curves", "time_memory_vs_d")
    names += ("vi-hinge-C20/rank",)
    for name in names:
        data = (tmp_path / "figures" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
        assert f"(figures/{name}.png)" in text
    assert (tmp_path / "figures" / "vi-hinge-C20" / "objective_gap.png").is_file()
    assert "(vi/sparsemap/C20/rank.png)" in text and "(vi/sparsemap/C20/objective_gap.png)" in text
    assert not (tmp_path / "figures" / "vi-sparsemap-C20").exists() and "C10/rank" not in text


def test_report_on_an_empty_root_lists_everything_missing(tmp_path):
    text = bench.RUNNER.write_report(tmp_path / "nothing", SMALL).read_text()
    assert "0 finished runs" in text and "## Figures" not in text
    assert "`vi/sparsemap/C10`: not started" in text and "`vi/hinge`: waits for the choice of C" in text
    assert (
        "C (vi, SparseMAP loss, by final dev UAS): not chosen yet (3 runs of the grid 10, 20, 40 unfinished)"
        in text
    )
