"""Run directories of the parser and NLI command lines that a crash, a second writer, a planted
symlink, a diverging model or bad input cannot spoil: ``progress.csv`` rewritten whole, one
writer at a time, no write through a symlink, divergence as an error, a dead first epoch that
resumes, and clear refusals. Faults are simulated in-process; the real second process and the
real ``kill -9`` run under ``-m slow``."""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_structured.applications.nli.__main__ import main as nli_main
from keras_structured.applications.nli.training import NLIConfig
from keras_structured.applications.parsing.__main__ import main as parser_main
from keras_structured.applications.parsing.training import ParserConfig
from keras_structured.divergence import DivergenceError
from keras_structured.run_directory import RunLock, RunLockedError, UnsafePathError
from tests.cli_runs import make_read_only, read_progress, sample_treebank, write_pairs

pytestmark = pytest.mark.filterwarnings("ignore::keras_structured.engine.SparseMAPConvergenceWarning")

PARSER_OPTIONS = (
    "--epochs 1 --batch-size 8 --max-train-sentences 4 --sparsity-sentences 2 --quiet "
    "--word-dim 8 --tag-dim 4 --lstm-units 8 --lstm-layers 1 --mlp-units 8"
).split()
NLI_OPTIONS = (
    "--attention softmax --epochs 1 --batch-size 8 --max-train-pairs 8 --quiet --embedding-dim 8 --units 6"
).split()


def parser_train(treebank, logdir, *extra) -> list[str]:
    """The parser's ``train`` command line of a tiny run (``extra`` options override)."""
    return ["train", "--treebank", str(treebank), "--logdir", str(logdir), *PARSER_OPTIONS, *extra]


def nli_train(data, logdir, *extra) -> list[str]:
    """The NLI ``train`` command line of a tiny run (``extra`` options override)."""
    return ["train", "--data", str(data), "--logdir", str(logdir), *NLI_OPTIONS, *extra]


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    """The sample, with a dev split of 6 sentences (each epoch parses it)."""
    return sample_treebank(tmp_path_factory.mktemp("data") / "en_sample", dev_sentences=6)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return write_pairs(tmp_path_factory.mktemp("data") / "pairs.tsv")


@pytest.fixture(scope="module")
def parser_run(tmp_path_factory, treebank):
    """A finished one-epoch parser run (copy it before changing it: :func:`parser_copy`)."""
    logdir = tmp_path_factory.mktemp("runs") / "parser"
    parser_main(parser_train(treebank, logdir))
    return logdir


@pytest.fixture(scope="module")
def nli_run(tmp_path_factory, pairs):
    """A finished one-epoch NLI run (copy it before changing it)."""
    logdir = tmp_path_factory.mktemp("runs") / "nli"
    nli_main(nli_train(pairs, logdir))
    return logdir


@pytest.fixture
def parser_copy(parser_run, tmp_path):
    return shutil.copytree(parser_run, tmp_path / "parser")


@pytest.fixture
def nli_copy(nli_run, tmp_path):
    return shutil.copytree(nli_run, tmp_path / "nli")


class Killed(Exception):
    """Stands for the signal that kills a training process."""


def _killed(*args, **kwargs):
    raise Killed("the epoch was killed")


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


# --------------------------------------------------------------------------- 1. whole files


def test_a_crash_while_resuming_leaves_progress_csv_whole(parser_copy, treebank, monkeypatch):
    """``--resume`` rewrites ``progress.csv`` (dropping rows after the checkpoint); a process
    that dies while writing it leaves the old file, and the run still resumes."""
    rows = read_progress(parser_copy)
    with monkeypatch.context() as patched:
        patched.setattr(csv, "writer", _disk_full)
        with pytest.raises(OSError, match="No space left"):
            parser_main(parser_train(treebank, parser_copy, "--resume"))
    assert read_progress(parser_copy) == rows
    parser_main(parser_train(treebank, parser_copy, "--resume", "--epochs", "2"))
    assert [row["epoch"] for row in read_progress(parser_copy)] == ["1", "2"]
    assert not list(parser_copy.glob("*.tmp*"))  # no temporary file left behind


# ------------------------------------------------------------------------------- 2. one writer


@pytest.mark.parametrize("command", ["parser", "nli"])
def test_a_second_writer_is_refused_with_the_holders_pid(command, treebank, pairs, tmp_path):
    main, arguments = {"parser": (parser_main, parser_train), "nli": (nli_main, nli_train)}[command]
    data = {"parser": treebank, "nli": pairs}[command]
    logdir = tmp_path / "run"
    with RunLock(logdir):
        with pytest.raises(RunLockedError, match=rf"pid {os.getpid()}\b.*Received: logdir="):
            main(arguments(data, logdir))
        with pytest.raises(RunLockedError):
            main(arguments(data, logdir, "--resume"))
    assert not logdir.exists()  # nothing written; the lock took its folder away with it


def test_the_lock_is_released_when_a_run_ends_or_fails(parser_copy, treebank, monkeypatch):
    with pytest.raises(FileExistsError):  # refused: already holds a run
        parser_main(parser_train(treebank, parser_copy))
    RunLock(parser_copy).acquire().release()
    with monkeypatch.context() as patched:
        patched.setattr(keras.Model, "fit", _killed)
        with pytest.raises(Killed):
            parser_main(parser_train(treebank, parser_copy, "--resume", "--epochs", "2"))
    RunLock(parser_copy).acquire().release()
    parser_main(parser_train(treebank, parser_copy, "--resume", "--epochs", "2"))
    RunLock(parser_copy).acquire().release()


# ------------------------------------------------------------------------------- 3. no symlinks


@pytest.mark.parametrize("command", ["parser", pytest.param("nli", marks=pytest.mark.slow)])  # nli: 11 s
def test_evaluate_never_writes_through_a_planted_symlink(command, request, tmp_path, capsys):
    logdir = request.getfixturevalue(f"{command}_copy")
    main = {"parser": parser_main, "nli": nli_main}[command]
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (logdir / "eval_test.tmp").symlink_to(victim)  # the temporary name evaluate used to write
    main(["evaluate", "--logdir", str(logdir), "--split", "test", "--json"])
    assert victim.read_text() == "precious"
    assert json.loads((logdir / "eval_test.json").read_text())["split"] == "test"
    (logdir / "eval_test.json").unlink()
    (logdir / "eval_test.json").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="eval_test.json"):
        main(["evaluate", "--logdir", str(logdir), "--split", "test"])
    assert victim.read_text() == "precious"


def test_training_never_writes_the_sparsity_log_through_a_symlink(treebank, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    logdir = tmp_path / "run"
    logdir.mkdir()
    (logdir / "sparsity_dev.jsonl").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="sparsity_dev.jsonl"):
        parser_main(parser_train(treebank, logdir))
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("command", ["parser", pytest.param("nli", marks=pytest.mark.slow)])  # nli: 11 s
def test_evaluate_prints_its_result_on_a_read_only_run(command, request, monkeypatch, capsys):
    logdir = request.getfixturevalue(f"{command}_copy")
    main = {"parser": parser_main, "nli": nli_main}[command]
    make_read_only(monkeypatch, logdir)
    main(["evaluate", "--logdir", str(logdir), "--split", "test", "--json"])
    printed = capsys.readouterr()
    assert json.loads(printed.out.splitlines()[-1])["split"] == "test"
    assert f"'{logdir / 'eval_test.json'}' not written (Read-only file system)" in printed.err
    assert not (logdir / "eval_test.json").exists()


# ------------------------------------------------------------------------------ 4. divergence

REFUSED_OPTIONS = [
    ("parser", "train", "--learning-rate", "inf"),
    ("parser", "train", "--learning-rate", "0"),
    ("parser", "train", "--learning-rate-decay", "nan"),
    ("parser", "train", "--seed", "-1"),
    ("parser", "train", "--epochs", "0"),
    ("parser", "train", "--patience", "0"),
    ("parser", "train", "--batch-size", "0"),
    ("parser", "train", "--max-length", "0"),
    ("parser", "train", "--max-train-sentences", "-3"),
    ("parser", "train", "--sparsity-sentences", "-1"),
    ("parser", "train", "--word-dropout", "-0.5"),
    ("parser", "train", "--dropout", "1"),
    ("parser", "train", "--lstm-units", "0"),
    ("parser", "train", "--time-limit", "-1"),
    ("parser", "parse", "--index", "-1"),
    ("parser", "time", "--steps", "0"),
    ("nli", "train", "--clipnorm", "inf"),
    ("nli", "train", "--clipnorm", "0"),
    ("nli", "train", "--learning-rate", "inf"),
    ("nli", "train", "--seed", "-1"),
    ("nli", "train", "--max-trial-pairs", "0"),
    ("nli", "train", "--max-train-pairs", "-1"),
    ("nli", "train", "--min-count", "0"),
    ("nli", "train", "--embedding-dim", "0"),
    ("nli", "train", "--dropout", "1.5"),
    ("nli", "train", "--max-iter", "0"),
    ("nli", "evaluate", "--max-pairs", "0"),
]


@pytest.mark.parametrize("command, subcommand, option, value", REFUSED_OPTIONS)
def test_options_that_cannot_work_are_refused_when_parsed(
    command, subcommand, option, value, tmp_path, capsys
):
    main = {"parser": parser_main, "nli": nli_main}[command]
    data = {"parser": "--treebank", "nli": "--data"}[command]
    arguments = {
        "train": ["train", data, str(tmp_path / "missing"), "--logdir", str(tmp_path / "run")],
        "evaluate": ["evaluate", "--logdir", str(tmp_path / "run")],
        "parse": ["parse", "--logdir", str(tmp_path / "run")],
        "time": ["time", "--logdir", str(tmp_path / "run")],
    }[subcommand]
    with pytest.raises(SystemExit) as stop:
        main([*arguments, option, value])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and f"argument {option}: " in error and f"Received: '{value}'" in error
    assert not (tmp_path / "run").exists()


def test_settings_that_cannot_work_are_refused_by_the_configs():
    with pytest.raises(ValueError, match="Received: clipnorm=inf"):
        NLIConfig(clipnorm=math.inf)
    with pytest.raises(ValueError, match="Received: learning_rate=inf"):
        NLIConfig(learning_rate=math.inf)
    with pytest.raises(ValueError, match="Received: seed=-1"):
        NLIConfig(seed=-1)
    with pytest.raises(ValueError, match="Received: dropout=1.0"):
        NLIConfig(dropout=1.0)
    with pytest.raises(ValueError, match="Received: learning_rate=inf"):
        ParserConfig("treebank", learning_rate=math.inf)
    with pytest.raises(ValueError, match="Received: seed=-1"):
        ParserConfig("treebank", seed=-1)
    with pytest.raises(ValueError, match="Received: max_train_sentences=-1"):
        ParserConfig("treebank", max_train_sentences=-1)
    with pytest.raises(ValueError, match="Received: sparsity_sentences=-1"):
        ParserConfig("treebank", sparsity_sentences=-1)
    with pytest.raises(ValueError, match="Received: word_dropout=nan"):
        ParserConfig("treebank", word_dropout=math.nan)


def _poisoned_fit(epoch: int, before: bool):
    """``keras.Model.fit`` that makes the weights NaN in epoch ``epoch`` (from 1): ``before``
    the epoch's batches (its loss is NaN), or after them (only the weights are)."""
    fit, calls = keras.Model.fit, []

    def poison(model):
        variable = model.trainable_weights[0]
        variable.assign(np.full(variable.shape, np.nan, variable.dtype))

    def poisoned(model, *args, **kwargs):
        calls.append(None)
        if len(calls) == epoch and before:
            poison(model)
        history = fit(model, *args, **kwargs)
        if len(calls) == epoch and not before:
            poison(model)
        return history

    return poisoned


def _assert_finite_model(path):
    model = keras.models.load_model(path)
    assert all(np.all(np.isfinite(keras.ops.convert_to_numpy(w))) for w in model.weights)


def test_a_diverged_epoch_stops_training_and_keeps_the_last_finite_model(treebank, tmp_path, monkeypatch):
    # The CRF, like the SparseMAP losses, refuses NaN scores before a loss is seen, so the run
    # names the weights (the NaN loss of other models: tests/test_divergence.py).
    logdir = tmp_path / "run"
    monkeypatch.setattr(keras.Model, "fit", _poisoned_fit(epoch=2, before=True))
    with pytest.raises(DivergenceError, match=r"weights of .* are not finite in epoch 2\..*learning rate"):
        parser_main(parser_train(treebank, logdir, "--epochs", "3", "--loss", "crf"))
    assert not (logdir / "final.json").exists()
    assert json.loads((logdir / "checkpoint" / "state.json").read_text())["epoch"] == 1
    assert [row["epoch"] for row in read_progress(logdir)] == ["1"]
    _assert_finite_model(logdir / "best.keras")
    _assert_finite_model(logdir / "checkpoint" / "model.keras")


@pytest.mark.parametrize(
    "before, message",
    [
        (False, "after epoch 1"),  # the last step made the weights NaN, the loss was still finite
        (True, "in epoch 1"),  # the parser's SparseMAP loss refuses NaN scores before a loss is seen
    ],
)
def test_non_finite_weights_stop_training_before_anything_is_saved(
    before, message, treebank, tmp_path, monkeypatch
):
    logdir = tmp_path / "run"
    monkeypatch.setattr(keras.Model, "fit", _poisoned_fit(epoch=1, before=before))
    with pytest.raises(DivergenceError, match=rf"weights of .* are not finite {message}\. Likely cause"):
        parser_main(parser_train(treebank, logdir))
    assert not any((logdir / name).exists() for name in ("final.json", "best.keras", "checkpoint"))
    assert read_progress(logdir) == []


# ------------------------------------------------------------------------ 5. a dead first epoch


def test_a_run_whose_first_epoch_died_starts_again_on_resume(treebank, tmp_path, monkeypatch):
    logdir = tmp_path / "run"
    with monkeypatch.context() as patched:
        patched.setattr(keras.Model, "fit", _killed)
        with pytest.raises(Killed):
            parser_main(parser_train(treebank, logdir, "--epochs", "2", "--time-limit", "0"))
    assert {"config.json", "progress.csv"} <= {path.name for path in logdir.iterdir()}
    assert not (logdir / "checkpoint").exists()
    with pytest.raises(
        FileExistsError, match=r"incomplete run.*no finished epoch.*--resume.*Received: logdir="
    ):
        parser_main(parser_train(treebank, logdir, "--epochs", "2", "--time-limit", "0"))
    with pytest.raises(ValueError, match=r"'learning_rate': \(0.002, 0.001\)"):
        parser_main(parser_train(treebank, logdir, "--epochs", "2", "--resume", "--learning-rate", "1e-3"))
    parser_main(parser_train(treebank, logdir, "--epochs", "2", "--time-limit", "0", "--resume"))
    assert [row["epoch"] for row in read_progress(logdir)] == ["1"]
    assert json.loads((logdir / "checkpoint" / "state.json").read_text())["epoch"] == 1
    lines = (logdir / "sparsity_dev.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1]


# ---------------------------------------------------------------------------- 6. NLI trial pairs


def test_nli_refuses_to_train_without_trial_pairs(tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", counts=(("train", 8), ("trial", 0), ("test", 4)))
    with pytest.raises(ValueError, match=r"The trial split of .*pairs.tsv' has no pairs"):
        nli_main(nli_train(data, tmp_path / "run"))
    assert not (tmp_path / "run" / "config.json").exists()


# --------------------------------------------------------------------- 7. empty data, named


@pytest.mark.parametrize("split", ["train", "dev"])
@pytest.mark.parametrize("content", ["", "# sent_id = 1\n# text = only comments\n\n"])
def test_an_empty_split_is_named_with_its_file(split, content, tmp_path):
    treebank = sample_treebank(tmp_path / "en_sample")
    path = treebank / f"en_sample-ud-{split}.conllu"
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}.* no sentence"):
        parser_main(parser_train(treebank, tmp_path / "run"))
    assert not (tmp_path / "run" / "config.json").exists()


def test_a_max_length_that_leaves_out_every_sentence_is_named(treebank, tmp_path):
    """The first 4 training sentences have 16 to 29 words."""
    with pytest.raises(ValueError, match=r"--max-length 15 leaves out all 4 training sentences"):
        parser_main(parser_train(treebank, tmp_path / "run", "--max-length", "15"))


# -------------------------------------------------------------------- real processes (slow)


def _start_training(treebank, logdir, *extra) -> subprocess.Popen:
    arguments = parser_train(treebank, logdir, *extra)
    return subprocess.Popen(
        [sys.executable, "-m", "keras_structured.applications.parsing", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _wait_for(condition, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_second_training_process_is_refused(treebank, tmp_path):
    """The second process, started first, tries as soon as the first has written its settings."""
    logdir = tmp_path / "run"
    script = (
        "import pathlib, sys, time\n"
        "from keras_structured.applications.parsing.__main__ import main\n"
        "print('ready', flush=True)\n"
        f"while not pathlib.Path({str(logdir / 'config.json')!r}).exists():\n"
        "    time.sleep(0.01)\n"
        "main(sys.argv[1:])\n"
    )
    arguments = parser_train(treebank, logdir, "--epochs", "3", "--resume")
    second = subprocess.Popen(
        [sys.executable, "-c", script, *arguments], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert second.stdout.readline() == "ready\n"
    first = _start_training(treebank, logdir, "--epochs", "3")
    _, error = second.communicate(timeout=300)
    assert second.returncode == 1 and f"RunLockedError: Another process (pid {first.pid})" in error, error
    assert first.wait(timeout=300) == 0, first.communicate()[1][-3000:]
    assert [row["epoch"] for row in read_progress(logdir)] == ["1", "2", "3"]


@pytest.mark.slow
@pytest.mark.parametrize("when", ["in the first epoch", "after a checkpoint"])
def test_a_run_killed_at_any_time_resumes(treebank, tmp_path, when):
    logdir = tmp_path / "run"
    process = _start_training(treebank, logdir, "--epochs", "2")
    marker = {"in the first epoch": "progress.csv", "after a checkpoint": "checkpoint"}[when]
    _wait_for(lambda: (logdir / marker).exists(), process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert not (logdir / "final.json").exists()
    resumed = _start_training(treebank, logdir, "--epochs", "2", "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.communicate()[1][-3000:]
    assert [row["epoch"] for row in read_progress(logdir)] == ["1", "2"]
    assert json.loads((logdir / "final.json").read_text())["finished"]
