"""Run directories of ``python -m rl train``: refusal, ``--overwrite``, honest ``--resume``, help.

The scenario of issue 19: a finished run of N steps, then a shorter run into the same logdir.
It must be refused; with ``--overwrite`` the logdir holds only the new run (its CSV rows, one
event file, its own final checkpoint) and ``evaluate`` reports the new policy. The commands call
``rl.cli.main`` in this process (``tests/test_rl_cli.py`` runs ``python -m rl`` in subprocesses).
"""

import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from rl.checkpoint import checkpoint_dirs, resolve_checkpoint, save_checkpoint
from rl.cli import _json_line, _train_config, build_parser, main
from rl.config import TrainConfig
from rl.evaluation import evaluate
from tests.cli_runs import make_read_only
from tests.test_rl_cli import ROOT, _rows

# CartPole batches are 4 x 128 = 512 steps; a checkpoint after every iteration.
FAST = ["--set", "update_epochs=1", "--set", "distill_epochs=1", "--set", "checkpoint_every=1", "--quiet"]
LONG_STEPS = 1536  # 3 iterations: checkpoints iter_000002 and iter_000003 are kept


def _strict_json(line):
    """Parses ``line`` as JSON, refusing NaN and infinities (not JSON)."""
    return json.loads(line, parse_constant=lambda name: pytest.fail(f"not JSON: {name} in {line}"))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("run_dirs") / "finished"
    assert main(["train", "--steps", str(LONG_STEPS), "--logdir", str(logdir), *FAST]) == 0
    return logdir


@pytest.fixture
def copy_of_finished(finished_run, tmp_path):
    logdir = tmp_path / "copy"
    shutil.copytree(finished_run, logdir)
    return logdir


def test_shorter_run_into_a_finished_run_is_refused_then_overwrites_it(copy_of_finished, capsys):
    logdir = copy_of_finished
    (logdir / "bench_train.log").write_text("not the run's\n")
    with pytest.raises(SystemExit) as refused:
        main(["train", "--steps", "512", "--logdir", str(logdir), *FAST])
    stderr = capsys.readouterr().err
    assert refused.value.code == 2, stderr[-2000:]
    assert str(logdir) in stderr and f"step {LONG_STEPS}" in stderr
    assert "--resume" in stderr and "--overwrite" in stderr
    assert len(_rows(logdir)) == 3  # untouched

    assert main(["train", "--steps", "512", "--logdir", str(logdir), "--overwrite", *FAST]) == 0
    summary = _strict_json(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["global_step"] == 512
    assert [int(r["global_step"]) for r in _rows(logdir)] == [512]
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1
    assert [p.name for p in checkpoint_dirs(logdir)] == ["iter_000001"]
    assert TrainConfig.load(logdir / "config.json").total_steps == 512
    assert (logdir / "bench_train.log").read_text() == "not the run's\n"  # other files are kept

    assert resolve_checkpoint(logdir) == logdir / "checkpoints" / "iter_000001"
    assert main(["evaluate", "--checkpoint", str(logdir), "--episodes", "2", "--json"]) == 0
    values = _strict_json(capsys.readouterr().out.strip().splitlines()[-1])
    assert values == evaluate(logdir / "checkpoints" / "iter_000001", episodes=2)


def test_retention_never_deletes_the_new_runs_newest_checkpoint(tmp_path):
    arrays = {"policy/0": np.zeros(3, np.float32)}
    for old in (30, 40):  # an earlier, longer run's checkpoints sort after the new run's
        save_checkpoint(tmp_path, old, arrays, {"iteration": old}, None)
    for iteration in (1, 2, 3):
        newest = save_checkpoint(tmp_path, iteration, arrays, {"iteration": iteration}, None)
        assert checkpoint_dirs(tmp_path)[-1] == newest
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["iter_000002", "iter_000003"]
    assert resolve_checkpoint(tmp_path) == newest


def test_resume_refuses_settings_that_cannot_change_and_names_them(copy_of_finished, capsys):
    logdir = str(copy_of_finished)
    for argv, names in (
        (["--kl-bound", "0.5"], ["kl_bound=0.5"]),
        (["--set", "update_epochs=3", "--steps", "4096"], ["update_epochs=3"]),
        (["--env", "Pendulum-v1", "--seed", "1", "--per-state"], ["env_id=", "seed=1", "per_state=True"]),
        (["--algo", "ppo", "--num-envs", "2"], ["algo='ppo'", "num_envs=2"]),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["train", "--resume", "--logdir", logdir, *argv])
        assert stop.value.code == 2
        error = capsys.readouterr().err
        assert "keeps its settings" in error and "only the step budget (--steps) and --vector may" in error
        for name in names:
            assert name in error, (argv, error)
    assert TrainConfig.load(copy_of_finished / "config.json").total_steps == LONG_STEPS


def test_a_read_only_run_is_evaluated_and_a_resume_refused_before_anything(
    copy_of_finished, monkeypatch, capsys
):
    make_read_only(monkeypatch, copy_of_finished)
    assert main(["evaluate", "--checkpoint", str(copy_of_finished), "--episodes", "1", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) >= {"deterministic_mean", "stochastic_mean"}
    with pytest.raises(SystemExit) as stop:
        main(["train", "--resume", "--logdir", str(copy_of_finished), "--steps", str(2 * LONG_STEPS), *FAST])
    stderr = capsys.readouterr().err
    assert stop.value.code == 2 and f"Read-only file system: '{copy_of_finished / '.lock'}'" in stderr, stderr


def test_the_library_trainer_refuses_a_logdir_holding_a_run(copy_of_finished):
    from rl.algorithms import make_trainer

    before = sorted(p.name for p in copy_of_finished.rglob("*"))
    config = TrainConfig.load(copy_of_finished / "config.json")
    config.logdir = str(copy_of_finished)
    trainer = make_trainer(config, verbose=False)
    with pytest.raises(FileExistsError, match=rf"step {LONG_STEPS}.*trainer\.restore.*clear_run"):
        trainer.train()
    trainer.close()
    assert sorted(p.name for p in copy_of_finished.rglob("*")) == before  # nothing written
    config.total_steps = LONG_STEPS + 512
    trainer = make_trainer(config, verbose=False)
    trainer.restore(resolve_checkpoint(copy_of_finished))  # a restored trainer continues its run
    trainer.train()
    trainer.close()
    assert int(_rows(copy_of_finished)[-1]["global_step"]) == LONG_STEPS + 512


def test_resuming_a_finished_run_says_so_and_prints_valid_json(copy_of_finished, capsys):
    logdir = str(copy_of_finished)
    events = sorted(copy_of_finished.glob("events.out.tfevents.*"))
    # settings equal to the run's are accepted, even when given explicitly at their defaults
    argv = ["train", "--resume", "--logdir", logdir, "--env", "CartPole-v1", "--seed", "0", "--quiet"]
    assert main([*argv, "--steps", "1000", "--set", "update_epochs=1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert f"already complete at step {LONG_STEPS}" in lines[0]
    summary = _strict_json(lines[-1])
    assert summary["logdir"] == logdir and summary["global_step"] == LONG_STEPS
    assert summary["episodic_return"] == pytest.approx(float(_rows(logdir)[-1]["charts/episodic_return"]))
    assert sorted(copy_of_finished.glob("events.out.tfevents.*")) == events  # nothing written


def test_final_json_line_is_valid_json_when_no_episode_ended():
    line = _json_line({"logdir": "x", "global_step": 512, "episodic_return": math.nan})
    assert _strict_json(line) == {"logdir": "x", "global_step": 512, "episodic_return": None}
    assert "NaN" not in _json_line({"a": math.inf, "b": -math.inf})


# Runs ``python -m rl ARGS`` as __main__, then tells whether TensorFlow got imported.
PROBE = """
import runpy, sys
sys.argv = ["rl", *sys.argv[1:]]
try:
    runpy.run_module("rl", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
print("TENSORFLOW IMPORTED" if "tensorflow" in sys.modules else "NO TENSORFLOW")
"""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["train", "--help"],
        ["fields", "--env", "Hopper-v5"],
        ["fields", "--env", "MountainCarContinuous-v0"],
    ],
)
def test_help_shows_defaults_choices_and_fields_without_tensorflow(args):
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert out.rstrip().endswith("NO TENSORFLOW"), out
    assert "``" not in out and ":class:" not in out and ":data:" not in out  # no reStructuredText
    if args == ["train", "--help"]:
        assert "(default: 100000)" in out and "{projected,ppo}" in out and "('projected'" not in out
        assert "whole batches" in out and "--overwrite" in out and "{sync,async}" in out
        assert "update_epochs" in out and "trust_region_coef" in out  # the --set field names
    if args[0] == "fields":
        for field in ("num_steps", "kl_bound", "obs_norm_warmup_steps", "trust_region_coef"):
            assert f"  {field} = " in out
        if "Hopper-v5" in args:
            assert "num_steps = 2048" in out  # the MuJoCo family's default
        else:
            assert "num_steps = 512" in out and "gamma = 0.99" in out  # classic continuous, long episodes


def test_options_given_override_set_and_defaults_do_not():
    parser = build_parser()
    config = _train_config(parser.parse_args(["train", "--set", "total_steps=5000", "--set", "seed=3"]))
    assert (config.total_steps, config.seed) == (5000, 3)
    config = _train_config(parser.parse_args(["train", "--set", "total_steps=5000", "--steps", "700"]))
    assert config.total_steps == 700
