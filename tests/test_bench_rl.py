"""Aggregation, targets, constraint checks and resume logic of ``benchmarks/bench_rl.py`` on fake runs.

No training happens: runs are fake ``progress.csv`` / ``eval.json`` files, and
the subprocess calls of the runner are replaced by a stub.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_rl as bench

COLUMNS = [
    "global_step",
    "iteration",
    "time/sps",
    "charts/episodic_return",
    "charts/episodic_length",
    "losses/policy_loss",
    "losses/value_loss",
    "constraints/kl",
    "constraints/kl_max",
    "constraints/eps",
    "constraints/entropy",
    "constraints/entropy_min",
    "constraints/entropy_bound",
    "constraints/entropy_projection_active",
    "constraints/kl_projection_active",
]


def fake_run(
    root: Path,
    env: str,
    algo: str,
    seed: int,
    returns: list[float],
    *,
    steps: int,
    det_mean: float,
    eps: float = 0.01,
    kl: list[float] | None = None,
    entropy: list[float] | None = None,
    bound: float = 0.5,
    scale: float = 1.0,
    wall: float = 60.0,
) -> Path:
    """A finished run: ``progress.csv`` with evenly spaced updates over ``steps``, eval.json, marker."""
    logdir = root / env / algo / f"seed{seed}"
    logdir.mkdir(parents=True)
    n = len(returns)
    kl = kl if kl is not None else [0.5 * eps] * n
    entropy = entropy if entropy is not None else [bound + 0.1] * n
    with open(logdir / "progress.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        writer.writeheader()
        for i in range(n):
            row = dict.fromkeys(COLUMNS, 0.0)
            row.update(
                {
                    "global_step": round((i + 1) * steps / n),
                    "iteration": i + 1,
                    "time/sps": 1000.0,
                    "charts/episodic_return": "" if np.isnan(returns[i]) else returns[i],
                    "constraints/kl": kl[i],
                    "constraints/kl_max": kl[i],
                    "constraints/eps": eps,
                    "constraints/entropy": entropy[i],
                    "constraints/entropy_bound": bound,
                    "constraints/kl_projection_active": float(i % 2),
                }
            )
            writer.writerow(row)
    evaluation = {"deterministic_mean": det_mean, "deterministic_std": 0.0, "stochastic_mean": 0.0}
    (logdir / "eval.json").write_text(json.dumps({**evaluation, "stochastic_std": 0.0}))
    done = {"steps": steps, "steps_scale": scale, "train_wall_s": wall, "trained": True}
    (logdir / bench.DONE_MARKER).write_text(json.dumps(done))
    return logdir


def test_judge_rules_and_missing_values():
    all_seeds = bench.Target(475, 100_000, "all")
    assert bench.judge(all_seeds, [500, 480, 476]) == (476, True)
    assert bench.judge(all_seeds, [500, 500, 400])[1] is False
    assert bench.judge(all_seeds, [500, 500, float("nan")])[1] is False
    median = bench.Target(-100, 200_000, "median")
    assert bench.judge(median, [-90, -95, -300]) == (-95, True)
    assert bench.judge(median, [-90, -150, -300])[1] is False
    any_seed = bench.Target(2000, 300_000, "any")
    assert bench.judge(any_seed, [100, 2100, float("nan")]) == (2100, True)
    assert bench.judge(any_seed, [])[1] is False


def test_best_within_budget_and_final_return(tmp_path):
    fake_run(
        tmp_path, "HalfCheetah-v5", "ppo", 0, [1300, float("nan"), 900, 2500], steps=1_000_000, det_mean=1
    )
    (run,) = bench.load_runs(tmp_path)
    assert bench.best_within(run, 300_000) == 1300  # updates at 250k, 500k, 750k, 1M
    assert bench.best_within(run, 1_000_000) == 2500
    assert np.isnan(bench.best_within(run, 100_000))
    assert bench.final_return(run) == 2500


def test_results_table_targets_met_and_missed(tmp_path):
    for seed in range(3):
        fake_run(tmp_path, "CartPole-v1", "projected", seed, [50, 480, 500], steps=100_000, det_mean=500)
        fake_run(tmp_path, "CartPole-v1", "ppo", seed, [50, 300, 470 + seed], steps=100_000, det_mean=400)
        hopper = [10, 2100 if seed == 1 else 900]
        fake_run(tmp_path, "Hopper-v5", "projected", seed, hopper, steps=300_000, det_mean=1000 + seed)
    rows = {
        (cells[1], cells[2]): cells
        for line in bench.results_table(bench.load_runs(tmp_path)).splitlines()[2:]
        if (cells := [c.strip() for c in line.split("|")])
    }
    projected = rows["CartPole-v1", "projected"]
    assert (
        projected[3] == "3"
        and projected[4] == "500.0 ± 0.0"
        and projected[6].startswith(">= 475 within 100k")
    )
    assert projected[7] == "500.0, 500.0, 500.0" and projected[9] == "yes"
    assert rows["CartPole-v1", "ppo"][9] == "no"  # best returns 470, 471, 472 < 475
    hopper = rows["Hopper-v5", "projected"]
    assert hopper[5] == "1001.0" and hopper[8] == "2100.0" and hopper[9] == "yes"  # one seed suffices


def test_halfcheetah_has_both_budgets_and_scaled_targets(tmp_path):
    returns = [1250, 1000, 1500, 1900]  # at 2.5k, 5k, 7.5k, 10k
    fake_run(tmp_path, "HalfCheetah-v5", "ppo", 0, returns, steps=10_000, det_mean=1, scale=0.01)
    table = bench.results_table(bench.load_runs(tmp_path))
    lines = [line for line in table.splitlines() if "HalfCheetah" in line]
    assert len(lines) == 2
    assert ">= 1200 within 3k" in lines[0] and "| yes |" in lines[0]
    assert ">= 2000 within 10k" in lines[1] and "| no |" in lines[1]


def test_constraint_summary_catches_violations(tmp_path):
    eps = 0.02
    fake_run(
        tmp_path,
        "Pendulum-v1",
        "projected",
        0,
        [1, 2],
        steps=10,
        det_mean=0,
        eps=eps,
        kl=[eps * (1 + 1e-6)] * 2,
    )
    fake_run(tmp_path, "Pendulum-v1", "ppo", 0, [1, 2], steps=10, det_mean=0, eps=eps, kl=[3 * eps] * 2)
    runs = bench.load_runs(tmp_path)
    ok = bench.constraint_stats([r for r in runs if r.algo == "projected"])
    assert ok.holds and ok.updates == 2 and ok.kl_slack == pytest.approx(1e-6) and ok.kl_active == 0.5
    section = bench.constraint_section(runs)
    assert "held" in section and "**NO**" not in section  # ppo's 3x eps is not held against it

    fake_run(
        tmp_path, "Acrobot-v1", "projected", 0, [1, 2], steps=10, det_mean=0, eps=eps, kl=[eps, eps * 1.001]
    )
    fake_run(tmp_path, "CartPole-v1", "projected", 0, [1, 2], steps=10, det_mean=0, entropy=[0.6, 0.5 - 1e-4])
    runs = bench.load_runs(tmp_path)
    kl_bad = bench.constraint_stats([r for r in runs if r.env == "Acrobot-v1"])
    assert not kl_bad.holds and kl_bad.kl_slack == pytest.approx(1e-3)
    entropy_bad = bench.constraint_stats([r for r in runs if r.env == "CartPole-v1"])
    assert not entropy_bad.holds and entropy_bad.entropy_margin == pytest.approx(-1e-4)
    section = bench.constraint_section(runs)
    assert section.count("**NO**") == 2 and "VIOLATED" in section


def test_write_report_with_comparison_and_curves(tmp_path):
    for seed in range(2):
        fake_run(
            tmp_path,
            "Acrobot-v1",
            "projected",
            seed,
            [-500, -200, -90],
            steps=200_000,
            det_mean=-85,
            wall=120,
        )
        fake_run(
            tmp_path, "Acrobot-v1", "ppo", seed, [-500, -300, -150], steps=200_000, det_mean=-140, wall=60
        )
    (tmp_path / "Acrobot-v1" / "ppo" / "seed5").mkdir()  # unfinished: ignored
    path = bench.write_report(tmp_path)
    text = path.read_text()
    assert "4 finished runs" in text and "![Acrobot-v1](curves/Acrobot-v1.png)" in text
    assert (tmp_path / "curves" / "Acrobot-v1.png").stat().st_size > 0
    comparison = text.split("## Projected vs PPO")[1].split("##")[0]
    assert "| Acrobot-v1 | 200k | -85.0 | -140.0 | -90.0 | -150.0 | -90.0 | -150.0 | 2.00 |" in comparison


def test_plan_commands_fresh_resume_eval_done(tmp_path):
    spec = bench.RunSpec("CartPole-v1", "projected", 1, 2000, num_envs=4)
    logdir = str(tmp_path / "CartPole-v1" / "projected" / "seed1")
    train = ["py", "-m", "rl", "train", "--env", "CartPole-v1", "--algo", "projected", "--steps", "2000"]
    train += ["--seed", "1", "--num-envs", "4", "--logdir", logdir, "--quiet"]
    evaluate = ["py", "-m", "rl", "evaluate", "--checkpoint", logdir, "--episodes", "10", "--json"]
    plan = bench.plan_commands
    assert plan(spec, bench.RunStatus(), tmp_path, "py") == [("train", train), ("eval", evaluate)]
    resumed = plan(spec, bench.RunStatus(resumable=True), tmp_path, "py")
    assert resumed == [("train", [*train, "--resume"]), ("eval", evaluate)]
    assert plan(spec, bench.RunStatus(trained=True, resumable=True), tmp_path, "py") == [("eval", evaluate)]
    assert plan(spec, bench.RunStatus(done=True), tmp_path, "py") == []
    no_envs = bench.train_command(bench.RunSpec("Acrobot-v1", "ppo", 0, 10), tmp_path, python="py")
    assert "--num-envs" not in no_envs


def test_suite_scales_steps():
    specs = bench.suite(["CartPole-v1", "HalfCheetah-v5"], ["ppo"], [0, 1], steps_scale=0.02)
    assert [(s.env, s.seed, s.steps) for s in specs] == [
        ("CartPole-v1", 0, 2000),
        ("CartPole-v1", 1, 2000),
        ("HalfCheetah-v5", 0, 20_000),
        ("HalfCheetah-v5", 1, 20_000),
    ]


class FakeRl:
    """Stands in for ``subprocess.run`` of ``python -m rl``: writes what the CLI would write."""

    def __init__(self, train_exit: int = 0):
        self.calls: list[list[str]] = []
        self.train_exit = train_exit

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        logdir = Path(argv[argv.index("--checkpoint" if argv[3] == "evaluate" else "--logdir") + 1])
        if argv[3] == "train":
            (logdir / "checkpoints").mkdir(parents=True, exist_ok=True)
            (logdir / "checkpoints" / "ckpt-1").write_text("")
            (logdir / "progress.csv").write_text("global_step,charts/episodic_return\n100,5\n")
            return subprocess.CompletedProcess(argv, self.train_exit)
        stdout = 'noise\n{"deterministic_mean": 9.5, "deterministic_std": 0.5, "stochastic_mean": 8.0}\n'
        return subprocess.CompletedProcess(argv, 0, stdout=stdout, stderr="")


def test_execute_skips_resumes_and_restarts(tmp_path, monkeypatch):
    spec = bench.RunSpec("CartPole-v1", "ppo", 0, 100)
    logdir = spec.logdir(tmp_path)

    failing = FakeRl(train_exit=1)
    monkeypatch.setattr(subprocess, "run", failing)
    assert not bench.execute(spec, tmp_path, {})
    assert "--resume" not in failing.calls[0] and len(failing.calls) == 1
    assert bench.read_status(logdir) == bench.RunStatus(done=False, trained=False, resumable=True)

    fake = FakeRl()
    monkeypatch.setattr(subprocess, "run", fake)
    assert bench.execute(spec, tmp_path, {})
    assert fake.calls[0][-1] == "--resume" and fake.calls[1][3] == "evaluate"
    assert json.loads((logdir / "eval.json").read_text())["deterministic_mean"] == 9.5
    done = json.loads((logdir / bench.DONE_MARKER).read_text())
    assert done["sessions"] == 2 and done["trained"] and done["steps"] == 100

    assert bench.execute(spec, tmp_path, {}) and len(fake.calls) == 2  # finished: skipped

    stale = bench.RunSpec("CartPole-v1", "ppo", 1, 100)
    stale.logdir(tmp_path).mkdir(parents=True)
    (stale.logdir(tmp_path) / "stale.txt").write_text("")  # partial without checkpoints
    assert bench.execute(stale, tmp_path, {})
    assert "--resume" not in fake.calls[2] and not (stale.logdir(tmp_path) / "stale.txt").exists()


def test_parse_eval_output_requires_json():
    assert bench.parse_eval_output('{"x": 1}\n{"deterministic_mean": 3}\nbye')["deterministic_mean"] == 3
    with pytest.raises(ValueError):
        bench.parse_eval_output("Traceback ...\n")


def test_throughput_section_ratios():
    row = {"sps": 500.0, "process_sps": 400.0}
    data = {
        "steps": 2048,
        "threads": 1,
        "sb3": {"sps": 1000.0, "process_sps": 800.0},
        "ppo": row,
        "projected": row,
    }
    assert "| rl projected | 500 | 0.50 | 400 | 0.50 |" in bench.throughput_section(data)


def test_sb3_reference_without_torch(monkeypatch):
    from benchmarks import sb3_ppo_reference as reference

    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    with pytest.raises(ImportError, match="rl-bench"):
        reference.measure(steps=1)


def test_suite_has_two_mujoco_tasks_outside_the_tuned_ones(capsys):
    specs = bench.suite(["Walker2d-v5", "Reacher-v5"], list(bench.ALGOS), [0, 1, 2])
    assert {(s.env, s.steps) for s in specs} == {("Walker2d-v5", 300_000), ("Reacher-v5", 300_000)}
    assert len(specs) == 12
    assert bench.main(["run", "--dry-run", "--tasks", "Reacher-v5", "--seeds", "0", "--root", "unused"]) == 0
    assert "--env Reacher-v5 --algo projected --steps 300000" in capsys.readouterr().out


def test_vector_benchmark_prints_sync_async_and_their_ratio(capsys):
    from benchmarks import bench_rl_vector as vector

    vector.main(["--envs", "CartPole-v1", "--num-envs", "2", "--seconds", "0.2", "--warmup", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3] == "| env | num_envs | sync steps/s | async steps/s | async / sync |"
    env, num_envs, sync, asynchronous, ratio = (cell.strip() for cell in lines[-1].strip("|").split("|"))
    assert (env, num_envs) == ("CartPole-v1", "2")
    assert float(ratio) == pytest.approx(float(asynchronous) / float(sync), abs=0.01)
