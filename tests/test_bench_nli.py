"""Plan, resume logic and report of ``benchmarks/bench_nli.py`` with a fake NLI command line.

No model is trained: the runner's subprocess calls are replaced by a stub that writes what
``python -m keras_structured.applications.nli {train,evaluate,align,time}`` would (``config.json``,
``progress.csv``, ``checkpoint/state.json``, ``final.json``, ``eval_test.json``, the
``align`` and ``time`` JSON files).
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_nli as bench
from benchmarks import resumable_runs
from benchmarks.run_plans import RunStatus
from benchmarks.runner_core import SuiteRun
from keras_structured.applications.nli.training import PROGRESS_COLUMNS
from tests.bench_fixtures import FakeCLI, arg_value

R = bench.RunSpec
NONZERO = {"softmax": 100.0, "sequence": 12.0, "matching": 9.0}
STEP_SECONDS = {"softmax": 0.2, "sequence": 0.26, "matching": 0.34}


def done(trial: float) -> RunStatus:
    return RunStatus(finished=True, evaluated=frozenset({"test"}), score=trial)


class FakeNLI(FakeCLI):
    """Stands in for ``subprocess.run`` of the NLI CLI: writes what each subcommand would.

    The trial accuracy of a run is ``trial(attention, lr)``; a run finishes after
    ``processes_to_finish`` training processes (the others stop at the time limit)."""

    def __init__(
        self, trial=None, train_exit: int = 0, write_eval: bool = True, processes_to_finish: int = 1
    ):
        super().__init__(train_exit, write_eval, processes_to_finish)
        self.trial = trial or (lambda attention, lr: 60.0 + 10 * lr)

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        command = argv[3]
        if command == "train":
            return self._train(argv)
        if command == "evaluate":
            logdir = Path(arg_value(argv, "--logdir"))
            attention = json.loads((logdir / "config.json").read_text())["attention"]
            result = {
                "accuracy": 70.0
                + {"softmax": 1.0, "sequence": 0.5, "matching": -2.5}[attention]
                + 0.1 * int(logdir.name[len("seed") :]),
                "pairs": 300,
                "alignment_nonzero_percent": NONZERO[attention],
                "one_structure_nonzero_percent": math.nan if attention == "softmax" else 8.0,
                "structures_per_pair": [] if attention == "softmax" else [1.0, 2.0],
                "mean_structures": math.nan if attention == "softmax" else 1.5,
                "sparsemap_unfinished": 0,
            }
            return self.evaluation(argv, logdir / "eval_test.json", result)
        if command == "align":
            logdir = Path(arg_value(argv, "--logdir"))
            attention = json.loads((logdir / "config.json").read_text())["attention"]
            pairs = [
                {
                    "pair_id": pair_id,
                    "label": label,
                    "predicted": label,
                    "premise": ["a", "dog", "runs"],
                    "hypothesis": ["a", "dog", "sleeps"],
                    "p2h": [[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]],
                    "h2p": [[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]],
                    "structures": [1],
                }
                for pair_id, label in ((12, "entailment"), (40, "contradiction"))
            ]
            Path(arg_value(argv, "--output")).write_text(json.dumps({"attention": attention, "pairs": pairs}))
            return subprocess.CompletedProcess(argv, 0, stdout="", stderr="")
        assert command == "time"
        logdirs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--logdir"]
        timing = {}
        for logdir in logdirs:
            attention = json.loads((Path(logdir) / "config.json").read_text())["attention"]
            timing[logdir] = {
                "attention": attention,
                "steps": int(arg_value(argv, "--steps")),
                "median_step_s": STEP_SECONDS[attention],
            }
        Path(arg_value(argv, "--output")).write_text(json.dumps(timing))
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(timing), stderr="")

    def _train(self, argv):
        logdir = Path(arg_value(argv, "--logdir"))
        if self.refuses(argv, logdir):
            return subprocess.CompletedProcess(argv, 2)
        assert "--time-limit" in argv and "--quiet" in argv
        attention, lr = arg_value(argv, "--attention"), float(arg_value(argv, "--learning-rate"))
        (logdir / "checkpoint").mkdir(parents=True, exist_ok=True)
        (logdir / "checkpoint" / "state.json").write_text("{}")
        (logdir / "config.json").write_text(json.dumps({"attention": attention, "learning_rate": lr}))
        with open(logdir / "progress.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(PROGRESS_COLUMNS)
            for epoch in (1, 2):
                speed = 1 / STEP_SECONDS[attention]
                writer.writerow([epoch, lr, 1.0, 50, 60, NONZERO[attention], 1.5, 0, 30.0 * epoch, speed])
        if self.train_exit == 0 and self.trains(logdir) >= self.processes_to_finish:
            final = {
                "finished": True,
                "best_epoch": 2,
                "trial_accuracy": self.trial(attention, lr),
                "epochs_run": 2,
            }
            (logdir / "final.json").write_text(
                json.dumps({**final, "train_seconds": 60.0, "stopped_early": False})
            )
        return subprocess.CompletedProcess(argv, self.train_exit)


# ------------------------------------------------------------------------------------------------ plan


def test_choose_learning_rate_best_ties_nan_missing_and_widening():
    grid = (2.0**-6, 2.0**-5, 2.0**-4, 2.0**-3)
    rate = resumable_runs.logdir_value  # a learning rate as it reads back from its logdir name
    statuses = {
        R("sequence", rate(lr), 0): done(acc) for lr, acc in zip(grid, (60.0, 64.0, 64.0, 61.0), strict=True)
    }
    choice = bench.choose_learning_rate("sequence", grid, 0, statuses)
    assert choice.value == rate(2.0**-5) and choice.missing == ()  # a tie: the smaller rate
    statuses[R("sequence", rate(2.0**-5), 0)] = done(float("nan"))  # a diverged run ranks last
    assert bench.choose_learning_rate("sequence", grid, 0, statuses).value == rate(2.0**-4)

    best_at_top = {R("softmax", rate(lr), 0): done(50.0 + 100 * lr) for lr in grid}
    widened = bench.choose_learning_rate("softmax", grid, 0, best_at_top)
    assert widened.value is None and widened.missing == (R("softmax", 0.25, 0),)
    best_at_top[R("softmax", 0.25, 0)] = done(70.0)
    best_at_top[R("softmax", 0.5, 0)] = done(80.0)  # widened twice, then stops widening
    assert bench.choose_learning_rate("softmax", grid, 0, best_at_top).value == 0.5

    partial = bench.choose_learning_rate("matching", grid, 0, {R("matching", rate(grid[0]), 0): done(1.0)})
    assert partial.value is None and len(partial.missing) == 3
    assert bench.choose_learning_rate("matching", [0.0625], 0, {}).value == 0.0625


def test_plan_tunes_each_attention_then_runs_its_seeds():
    config = bench.SuiteConfig(
        attentions=("softmax", "matching"), learning_rates=(0.25, 0.5), seeds=(0, 1, 2)
    )
    plan = bench.plan_suite(config, {})
    assert [spec.name for spec in plan.start] == [
        "softmax/lr0.25/seed0",
        "softmax/lr0.5/seed0",
        "matching/lr0.25/seed0",
        "matching/lr0.5/seed0",
    ]
    assert plan.waiting == ["softmax", "matching"]
    statuses = {R("softmax", 0.25, 0): done(60.0), R("softmax", 0.5, 0): done(65.0)}
    statuses[R("matching", 0.25, 0)] = RunStatus(resumable=True)
    plan = bench.plan_suite(config, statuses)
    assert plan.chosen == {"softmax": 0.5} and plan.waiting == ["matching"]
    assert R("softmax", 0.5, 2) in plan.start and R("softmax", 0.25, 1) not in plan.runs
    assert plan.resume == [R("matching", 0.25, 0)] and plan.pending[0] == R("matching", 0.25, 0)
    assert plan.figure_runs() == {"softmax": R("softmax", 0.5, 0)}
    with pytest.raises(ValueError, match="attentions must be among"):
        bench.SuiteConfig(attentions=("dense",))


def test_commands_fresh_resume_and_evaluation_only(tmp_path):
    config = bench.SuiteConfig(train_args=("--epochs", "2"), eval_args=("--max-pairs", "300"))
    spec = R("sequence", 0.0625, 1)
    run = SuiteRun(config, Path("sick.tsv"), tmp_path)
    steps = bench.run_commands(spec, RunStatus(), run)
    (kind, train), (_, evaluate) = steps
    assert kind == "train" and train[1:4] == ["-m", "keras_structured.applications.nli", "train"]
    assert arg_value(train, "--attention") == "sequence" and arg_value(train, "--learning-rate") == "0.0625"
    assert arg_value(train, "--logdir") == str(tmp_path / "sequence" / "lr0.0625" / "seed1")
    assert "--resume" not in train and train[-3:] == ["--epochs", "2", "--quiet"]
    assert evaluate[-4:] == ["test", "--max-pairs", "300", "--json"]
    resumed = bench.run_commands(spec, RunStatus(resumable=True), run)
    assert resumed[0][1][-1] == "--resume"
    assert bench.run_commands(spec, done(1.0), run) == []


def test_scan_statuses_reads_the_logdirs(tmp_path, monkeypatch):
    fake = FakeNLI()
    monkeypatch.setattr(subprocess, "run", fake)
    config = bench.SuiteConfig(attentions=("matching",), learning_rates=(0.125,), seeds=(0,))
    assert bench.RUNNER.execute(R("matching", 0.125, 0), SuiteRun(config, Path("sick.tsv"), tmp_path))
    (tmp_path / "matching" / "lr0.125" / "seed1" / "checkpoint").mkdir(parents=True)
    (tmp_path / "matching" / "lr0.125" / "seed1" / "checkpoint" / "state.json").write_text("{}")
    (tmp_path / "other" / "lr0.1" / "seed0").mkdir(parents=True)  # not a run
    statuses = bench.LAYOUT.scan(tmp_path)
    assert statuses == {
        R("matching", 0.125, 0): RunStatus(
            finished=True, resumable=True, evaluated=frozenset({"test"}), score=61.25
        ),
        R("matching", 0.125, 1): RunStatus(resumable=True),
    }


# --------------------------------------------------------------------------------------------- execute


def test_execute_resumes_after_a_failure_and_reads_the_eval_output(tmp_path, monkeypatch):
    config = bench.SuiteConfig(attentions=("sequence",), learning_rates=(0.0625,), seeds=(0,))
    spec = R("sequence", 0.0625, 0)
    logdir = spec.logdir(tmp_path)
    run = SuiteRun(config, Path("sick.tsv"), tmp_path, {"OMP_NUM_THREADS": "2"})
    failing = FakeNLI(train_exit=1)
    monkeypatch.setattr(subprocess, "run", failing)
    assert not bench.RUNNER.execute(spec, run)
    status = bench.LAYOUT.read_status(logdir)
    assert status.resumable and not status.finished and len(failing.calls) == 1

    fake = FakeNLI(write_eval=False)  # evaluate prints its JSON line only: the runner writes the file
    monkeypatch.setattr(subprocess, "run", fake)
    assert bench.RUNNER.execute(spec, run)
    assert "--resume" in fake.calls[0] and [c[3] for c in fake.calls] == ["train", "evaluate"]
    assert json.loads((logdir / "eval_test.json").read_text())["alignment_nonzero_percent"] == 12.0
    state = json.loads((logdir / resumable_runs.STATE_FILE).read_text())
    assert state["sessions"] == 2 and state["threads"] == 2 and "eval_wall_s" in state
    assert bench.RUNNER.execute(spec, run) and len(fake.calls) == 2  # skipped

    stale = R("sequence", 0.0625, 1)
    stale.logdir(tmp_path).mkdir(parents=True)
    (stale.logdir(tmp_path) / "stale.txt").write_text("")  # partial without a checkpoint: afresh
    assert bench.RUNNER.execute(stale, run)
    assert "--resume" not in fake.calls[2] and not (stale.logdir(tmp_path) / "stale.txt").exists()


def test_execute_resumes_a_run_stopped_by_the_time_limit(tmp_path, monkeypatch):
    config = bench.SuiteConfig(attentions=("softmax",), learning_rates=(0.0625,), seeds=(0,))
    fake = FakeNLI(processes_to_finish=3)
    monkeypatch.setattr(subprocess, "run", fake)
    assert bench.RUNNER.execute(R("softmax", 0.0625, 0), SuiteRun(config, Path("sick.tsv"), tmp_path))
    trains = [call for call in fake.calls if call[3] == "train"]
    assert len(trains) == 3 and "--resume" not in trains[0] and all("--resume" in c for c in trains[1:])
    assert all(arg_value(c, "--time-limit") == "40" for c in trains)


def test_run_suite_tunes_runs_the_seeds_then_aligns_and_times_once(tmp_path, monkeypatch):
    fake = FakeNLI(trial=lambda attention, lr: 60.0 - abs(lr - 0.03125))  # 2^-5 is best: inside the grid
    monkeypatch.setattr(subprocess, "run", fake)
    config = bench.SuiteConfig(learning_rates=bench.LEARNING_RATES, seeds=(0, 1, 2), timing_steps=7)
    assert bench.RUNNER.run_suite(SuiteRun(config, Path("sick.tsv"), tmp_path, jobs=2))
    trained = sorted(
        (arg_value(c, "--attention"), arg_value(c, "--learning-rate"), arg_value(c, "--seed"))
        for c in fake.calls
        if c[3] == "train"
    )
    assert len(trained) == 3 * (4 + 2)  # four tuning runs and two more seeds per attention
    assert sum(t[1] == "0.03125" for t in trained) == 9
    kinds = [c[3] for c in fake.calls]
    assert kinds.count("align") == 3 and kinds.count("time") == 1 and kinds[-1] == "time"
    time_call = fake.calls[-1]
    assert arg_value(time_call, "--steps") == "7" and time_call.count("--logdir") == 3
    assert all("seed0" in logdir for logdir in time_call if "lr0.03125" in logdir)
    recorded = json.loads((tmp_path / resumable_runs.PLAN_FILE).read_text())
    assert {c["attention"]: c["learning_rate"] for c in recorded["choices"]} == dict.fromkeys(
        bench.ATTENTIONS, 0.03125
    )
    assert bench.RUNNER.read_options(tmp_path) == config

    calls = len(fake.calls)
    assert (
        bench.RUNNER.run_suite(SuiteRun(config, Path("sick.tsv"), tmp_path, jobs=1))
        and len(fake.calls) == calls
    )


def test_dry_run_prints_pending_commands_and_a_root_of_other_options_is_refused(
    tmp_path, capsys, monkeypatch
):
    root = tmp_path / "quick"
    assert bench.main(["run", "--quick", "--root", str(root), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    trains = [line for line in lines if " train " in line]
    assert len(trains) == 3 and all("--max-train-pairs 1000" in line for line in trains)
    assert lines[-1].startswith("# One learning rate (0.125)")

    monkeypatch.setattr(subprocess, "run", FakeNLI())
    data = tmp_path / "sick.tsv"
    data.write_text("")
    assert bench.main(["run", "--quick", "--root", str(root), "--data", str(data)]) == 0
    assert (root / "results.md").is_file() and len(list((root / "figures").glob("figure5_*.png"))) == 2
    assert bench.main(["run", "--root", str(root), "--data", str(data), "--learning-rates", "0.125"]) == 2
    assert "use another --root" in capsys.readouterr().err
    assert bench.main(["run", "--root", str(tmp_path / "x"), "--data", str(tmp_path / "missing.tsv")]) == 2


# ---------------------------------------------------------------------------------------------- report


def test_report_table_claims_and_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", FakeNLI())
    config = bench.SuiteConfig(learning_rates=(0.0625,), seeds=(0, 1))
    assert bench.RUNNER.run_suite(SuiteRun(config, Path("sick.tsv"), tmp_path, jobs=1))
    text = bench.RUNNER.write_report(tmp_path, config).read_text()
    assert "| softmax | 0.0625 | 71.05 ± 0.05 (2 seeds) | 100.0 ± 0.0 (2 seeds) | n/a | n/a |" in text
    assert (
        "| sequence | 0.0625 | 70.55 ± 0.05 (2 seeds) | 12.0 ± 0.0 (2 seeds) | 8.0 | 1.50 ± 0.00 (2 seeds)"
        in text
    )
    assert "| 1.30 | 1.30 |" in text  # sequence: 0.26 s / 0.2 s per step, in one process and from the runs
    assert "sequence -0.50 (yes); matching -3.50 (no)" in text
    assert "sequence 8.3x fewer nonzero weights (0.9 orders)" in text
    assert "sequence 1.30x (yes); matching 1.70x (no)" in text
    assert "None: every planned run is finished and evaluated." in text
    assert "SNLI" in text and "learned" in text
    figures = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert figures == ["figure5_0_entailment_pair12.png", "figure5_1_contradiction_pair40.png"]


def test_report_on_an_empty_root_lists_everything_missing(tmp_path):
    config = bench.SuiteConfig(attentions=("softmax", "sequence"), learning_rates=(0.0625,), seeds=(0,))
    text = bench.RUNNER.write_report(tmp_path / "nothing", config).read_text()
    assert "0 finished runs" in text and "| sequence | 0.0625 | missing |" in text
    assert "`sequence/lr0.0625/seed0`: not started" in text and "## Figure 5" not in text
    assert "not decided (missing results)" in text


def test_step_cost_ratios_and_claims():
    timing = {
        "a": {"attention": "softmax", "median_step_s": 0.5},
        "b": {"attention": "matching", "median_step_s": 0.6},
    }
    assert bench.step_cost_ratios(timing) == {"matching": pytest.approx(1.2)}
    assert bench.step_cost_ratios(None) == {}
    assert bench.claim_lines({}, {"matching": 1.2})[2].endswith("matching 1.20x (yes).")


@pytest.mark.parametrize("command", ["run", "report"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.RUNNER.parse_args([command, "--help"])
    assert exit_info.value.code == 0 and "--root" in capsys.readouterr().out
