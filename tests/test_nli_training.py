"""Training from the command line on tiny synthetic pairs: a run trained in parts (exact resume
against the uninterrupted run under ``-m slow``), the learning-rate decay, runs never mixed,
evaluation, alignment read-out, step timing, figures and a light ``--help``."""

from __future__ import annotations

import functools
import json
import shutil

import numpy as np
import pytest
from tensorflow.python.framework import config as tf_config

from keras_structured.applications.nli.__main__ import main
from keras_structured.applications.nli.figures import plot_alignments
from keras_structured.applications.nli.training import NLIConfig
from tests.cli_runs import read_progress, scalar_events, train_in_parts, write_pairs

SIZES = ["--embedding-dim", "8", "--units", "6"]
pytestmark = pytest.mark.filterwarnings("ignore::keras_structured.engine.SparseMAPConvergenceWarning")


def _train_args(data, logdir, *extra):
    options = "--attention sequence --epochs 2 --batch-size 8 --learning-rate 0.5 --quiet".split()
    return ["train", "--data", str(data), "--logdir", str(logdir), *options, *SIZES, *extra]


@pytest.fixture(scope="module")
def parts_run(tmp_path_factory):
    """``(data, logdir)``: a two-epoch run trained one epoch per invocation, as a session's time
    limit stops it, with TensorFlow's deterministic ops (as the uninterrupted run it is compared
    with under ``-m slow``). Tests that write into the run work on a copy."""
    root = tmp_path_factory.mktemp("nli_runs")
    data = write_pairs(root / "pairs.tsv")
    was_enabled = tf_config.is_op_determinism_enabled()
    tf_config.enable_op_determinism()
    try:
        train_in_parts(main, functools.partial(_train_args, data), root / "parts", epochs=2)
    finally:
        if not was_enabled:
            tf_config.disable_op_determinism()
    return data, root / "parts"


# ~10 s beyond the run in parts. In the default suite, the parser's exact resume (in a new process,
# tests/test_parsing_cli.py) checks the run machinery both command lines share, and the tests below
# check this run in parts.
@pytest.mark.slow
def test_a_resumed_run_is_the_uninterrupted_run(parts_run, tmp_path, op_determinism):
    data, logdir = parts_run
    main(_train_args(data, tmp_path / "whole"))
    whole, parts = read_progress(tmp_path / "whole"), read_progress(logdir)
    assert [row["epoch"] for row in parts] == ["1", "2"]
    for a, b in zip(whole, parts, strict=True):
        for column in ("loss", "trial_accuracy", "learning_rate", "alignment_nonzero_percent"):
            np.testing.assert_allclose(float(a[column]), float(b[column]), rtol=1e-5, err_msg=column)


def test_a_run_trained_in_parts_logs_each_epoch_once_and_decays_its_learning_rate(parts_run):
    _, logdir = parts_run
    parts = read_progress(logdir)
    assert [row["epoch"] for row in parts] == ["1", "2"]
    for row in parts:
        assert float(row["structures_per_pair"]) >= 1 and float(row["train_steps_per_s"]) > 0
    # TensorBoard: each epoch once (the resumed process rewrites the events), values as in the CSV
    events = {(tag, step): value for tag, step, value in scalar_events(logdir)}
    assert len(events) == len(scalar_events(logdir))
    assert {step for _, step in events} == {1, 2}
    for row in parts:
        np.testing.assert_allclose(events["loss", int(row["epoch"])], float(row["loss"]), rtol=1e-6)
    # The learning rate is multiplied by 0.9 after an epoch whose trial accuracy is not the best.
    first, second = parts
    improved = float(first["trial_accuracy"]) > -1.0  # the first epoch is always the best so far
    assert improved and float(second["learning_rate"]) == float(first["learning_rate"])
    state = json.loads((logdir / "checkpoint" / "state.json").read_text())
    decayed = float(second["trial_accuracy"]) <= float(first["trial_accuracy"])
    np.testing.assert_allclose(state["learning_rate"], 0.5 * (0.9 if decayed else 1.0), rtol=1e-12)
    final = json.loads((logdir / "final.json").read_text())
    assert final["epochs_run"] == 2 and final["finished"]


def test_runs_are_never_mixed(parts_run, tmp_path):
    """A larger budget extending a finished run: tests/test_training_runs.py."""
    data, finished = parts_run
    logdir = shutil.copytree(finished, tmp_path / "parts")
    with pytest.raises(FileExistsError, match="already holds a run"):
        main(_train_args(data, logdir))
    with pytest.raises(ValueError, match=r"attention.*logdir=.*Received: attention='matching'"):
        main(_train_args(data, logdir, "--resume") + ["--attention", "matching"])
    with pytest.raises(ValueError, match=r"'epochs': \(2, 1\)"):
        main(_train_args(data, logdir, "--resume", "--epochs", "1"))
    with pytest.raises(FileNotFoundError, match="--resume needs a run with a checkpoint"):
        main(_train_args(data, tmp_path / "empty", "--resume"))


def test_evaluate_align_and_time_a_run(parts_run, tmp_path, capsys):
    _, finished = parts_run
    logdir = shutil.copytree(finished, tmp_path / "parts")
    capsys.readouterr()
    main(["evaluate", "--logdir", str(logdir), "--split", "test", "--json"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["pairs"] == 10 and len(result["structures_per_pair"]) == 10
    assert 0 <= result["accuracy"] <= 100 and result["mean_structures"] >= 1
    assert 0 < result["alignment_nonzero_percent"] <= 100
    assert json.loads((logdir / "eval_test.json").read_text())["accuracy"] == result["accuracy"]

    # the outputs' folder is a symlink to a real one (as ~/data often is): followed
    (tmp_path / "disk").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "disk", target_is_directory=True)
    output, png = tmp_path / "out" / "align.json", tmp_path / "out" / "align.png"
    main(["align", "--logdir", str(logdir), "--output", str(output), "--png", str(png)])
    pairs = json.loads(output.read_text())["pairs"]
    assert [pair["label"] for pair in pairs] == ["entailment", "contradiction"]
    for pair in pairs:
        p2h = np.array(pair["p2h"])
        assert p2h.shape == (len(pair["premise"]), len(pair["hypothesis"]))
        np.testing.assert_allclose(p2h.sum(axis=1), 1.0, atol=1e-5)
    assert png.with_name("align_0.png").stat().st_size > 0 and png.with_name("align_1.png").is_file()

    timing_file = tmp_path / "out" / "timing.json"
    main(["time", "--logdir", str(logdir), "--steps", "1", "--output", str(timing_file)])
    timing = json.loads(timing_file.read_text())[str(logdir)]
    assert timing["attention"] == "sequence" and timing["steps"] == 1 and timing["median_step_s"] > 0


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="Received: attention='dense'"):
        NLIConfig(attention="dense")
    with pytest.raises(ValueError, match="Received: learning_rate_decay=1.5"):
        NLIConfig(learning_rate_decay=1.5)
    with pytest.raises(ValueError, match="Received: max_trial_pairs=0"):
        NLIConfig(max_trial_pairs=0)


def test_alignment_figure(tmp_path):
    eye = np.eye(3)
    models = {"softmax": (np.full((3, 3), 1 / 3), np.full((3, 3), 1 / 3)), "matching": (eye, eye)}
    path = plot_alignments(
        ["a", "dog", "runs"], ["a", "dog", "sleeps"], models, tmp_path / "f" / "pair.png", "t"
    )
    assert path.stat().st_size > 0
    with pytest.raises(ValueError, match=r"matching p2h must have .* Received: matching p2h.shape=\(2, 3\)"):
        plot_alignments(["a", "dog", "runs"], ["a", "dog", "sleeps"], {"matching": (eye[:2], eye)}, path)


def test_train_help_shows_the_run_options_and_refuses_bad_values(capsys):
    """The ``train`` command's options: its own and those every run has (``run_commands``)."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = capsys.readouterr().out
    for option in ("--attention {softmax,sequence,matching}", "--time-limit", "--resume", "--min-epochs"):
        assert option in help_text
    with pytest.raises(SystemExit):
        main(["train", "--logdir", "x", "--learning-rate-decay", "1.5"])
    assert "--learning-rate-decay" in capsys.readouterr().err
