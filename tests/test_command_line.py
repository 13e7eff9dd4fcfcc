"""User errors of the command lines (the parser, NLI, RL): exit status 2 and one message naming
the file, option or value, never a traceback; ``--debug`` or ``KERAS_STRUCTURED_DEBUG=1`` shows
the traceback. Most cases run the command as ``python -m`` does, in this process
(:func:`keras_structured.command_line.run_command`); one per command line runs in a subprocess."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import subprocess
import sys

import pytest

from keras_structured.command_line import DEBUG_HELP, DEBUG_VARIABLE, run_command
from keras_structured.divergence import DivergenceError
from rl.cli import _DEBUG_HELP
from rl.cli import main as rl_main

PARSER, NLI = "keras_structured.applications.parsing", "keras_structured.applications.nli"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(module, argv):
    """``python -m module *argv`` in this process: what it raises."""
    if module == "rl":
        return rl_main(argv)
    cli = importlib.import_module(f"{module}.__main__")
    return run_command(cli._parser(), cli._run, argv)


def _exit(module, argv, capsys):
    """The exit status and the standard error of ``python -m module *argv`` (in this process)."""
    with pytest.raises(SystemExit) as stop:
        _run(module, argv)
    return stop.value.code, capsys.readouterr().err


@pytest.fixture
def damaged_rl_run(tmp_path):
    """An RL run directory with a checkpoint whose ``config.json`` names a field that is none."""
    logdir = tmp_path / "rl_run"
    (logdir / "checkpoints" / "iter_000001").mkdir(parents=True)
    (logdir / "checkpoints" / "iter_000001" / "weights.npz").write_bytes(b"")
    (logdir / "config.json").write_text(json.dumps({"env_id": "CartPole-v1", "num_step": 128}))
    return logdir


def _cases(tmp_path, damaged_rl_run):
    missing = tmp_path / "missing"
    progress = tmp_path / "plotted"
    progress.mkdir()
    (progress / "progress.csv").write_text("global_step,iteration,charts/episodic_return\n512,1,twelve\n")
    return [
        (PARSER, ["evaluate", "--logdir", str(missing)], ["best.keras", str(missing)]),
        (PARSER, ["train", "--treebank", str(missing), "--logdir", str(tmp_path / "a")], [str(missing)]),
        (
            PARSER,
            ["parse", "--logdir", str(missing), "--input", str(missing / "x.conllu"), "--output", "-"],
            ["x.conllu"],
        ),
        (PARSER, ["time", "--logdir", str(missing)], ["checkpoint", str(missing)]),
        (NLI, ["train", "--data", str(missing / "sick.tsv"), "--logdir", str(tmp_path / "b")], ["sick.tsv"]),
        (NLI, ["evaluate", "--logdir", str(missing)], ["best.keras", str(missing)]),
        (NLI, ["align", "--logdir", str(missing)], ["best.keras", str(missing)]),
        ("rl", ["train", "--set", "seed=abc", "--logdir", str(tmp_path / "c")], ["--set seed", "'seed=abc'"]),
        (
            "rl",
            ["evaluate", "--checkpoint", str(damaged_rl_run)],
            ["config.json", "'num_step' is not a setting"],
        ),
        ("rl", ["train", "--resume", "--logdir", str(damaged_rl_run)], ["config.json", "num_step=128"]),
        (
            "rl",
            ["plot", str(progress), "--output", str(tmp_path / "c.png")],
            ["progress.csv", "row 1", "'twelve'"],
        ),
        ("rl", ["evaluate", "--checkpoint", str(missing)], [str(missing)]),
    ]


def test_user_errors_exit_with_status_2_and_a_message_naming_what_cannot_work(
    tmp_path, damaged_rl_run, capsys
):
    for module, argv, named in _cases(tmp_path, damaged_rl_run):
        status, stderr = _exit(module, argv, capsys)
        prog = "python -m rl" if module == "rl" else f"python -m {module}"
        assert (status, "Traceback" in stderr) == (2, False), (argv, stderr)
        assert stderr.startswith(f"{prog} {argv[0]}: error: "), (argv, stderr)
        assert all(name in stderr for name in named), (argv, named, stderr)


@pytest.mark.parametrize("module", [PARSER, NLI, "rl"])
def test_debug_raises_the_error_itself_so_that_its_traceback_shows(module, tmp_path, monkeypatch, capsys):
    command = ["evaluate", "--checkpoint" if module == "rl" else "--logdir", str(tmp_path / "missing")]
    for argv in (["--debug", *command], [*command, "--debug"]):
        with pytest.raises(FileNotFoundError):
            _run(module, argv)
    monkeypatch.setenv(DEBUG_VARIABLE, "1")
    with pytest.raises(FileNotFoundError):
        _run(module, command)
    monkeypatch.setenv(DEBUG_VARIABLE, "0")
    assert _exit(module, command, capsys)[0] == 2


def test_bugs_keep_their_traceback_and_a_divergence_exits_with_status_1(capsys):
    cli = importlib.import_module(f"{PARSER}.__main__")

    def fails(error):
        def run(args):
            raise error

        return run

    with pytest.raises(TypeError, match="a bug"):
        run_command(cli._parser(), fails(TypeError("a bug")), ["evaluate", "--logdir", "x"])
    with pytest.raises(SystemExit) as stop:
        run_command(cli._parser(), fails(DivergenceError("loss became nan")), ["evaluate", "--logdir", "x"])
    assert stop.value.code == 1 and "evaluate: error: loss became nan" in capsys.readouterr().err


def test_every_command_offers_debug_with_the_same_help(capsys):
    assert _DEBUG_HELP == DEBUG_HELP
    for module, commands in (
        (PARSER, ["train", "evaluate", "parse", "time"]),
        ("rl", ["train", "plot", "fields"]),
    ):
        for command in commands:
            with pytest.raises(SystemExit):
                _run(module, [command, "--help"])
            assert "--debug" in capsys.readouterr().out, (module, command)


CLI_CASES = [
    (PARSER, ["evaluate", "--logdir", "{missing}"], "best.keras"),
    (NLI, ["train", "--data", "{missing}/sick.tsv", "--logdir", "{tmp}/run"], "sick.tsv"),
    ("rl", ["train", "--set", "gamma=high", "--logdir", "{tmp}/run"], "--set gamma"),
]


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
@pytest.mark.parametrize(("module", "argv", "named"), CLI_CASES)
def test_the_modules_run_as_scripts_exit_with_status_2(module, argv, named, tmp_path, monkeypatch, capsys):
    argv = [a.format(missing=tmp_path / "missing", tmp=tmp_path) for a in argv]
    monkeypatch.setattr(sys, "argv", [module, *argv])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    stderr = capsys.readouterr().err
    assert stop.value.code == 2 and f"{argv[0]}: error: " in stderr and named in stderr, stderr


def _python_m(module, argv, tmp_path, **environment):
    """``python -m module *argv`` in a subprocess, with ``environment`` (and no debug variable)."""
    argv = [a.format(missing=tmp_path / "missing", tmp=tmp_path) for a in argv]
    environment = {
        **{k: v for k, v in os.environ.items() if k != DEBUG_VARIABLE},
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **environment,
    }
    command = [sys.executable, "-m", module, *argv]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("module", "argv", "named"),
    [CLI_CASES[0], *(pytest.param(*case, marks=pytest.mark.slow) for case in CLI_CASES[1:])],  # 5-15 s each
)
def test_python_m_prints_no_traceback(module, argv, named, tmp_path):
    result = _python_m(module, argv, tmp_path)
    assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
    assert f"{argv[0]}: error: " in result.stderr and named in result.stderr, result.stderr


@pytest.mark.slow
def test_python_m_shows_the_traceback_with_the_debug_variable(tmp_path):
    result = _python_m(*CLI_CASES[0][:2], tmp_path, **{DEBUG_VARIABLE: "1"})
    assert result.returncode == 1 and "Traceback" in result.stderr and "FileNotFoundError" in result.stderr
