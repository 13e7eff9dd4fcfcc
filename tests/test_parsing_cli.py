"""The parser's command line (``python -m keras_structured.applications.parsing``) on the
30-sentence sample: training runs that resume exactly, the learning-rate decay, XPOS tags,
runs never mixed, ``evaluate`` and ``time``.

Two small finished runs are trained once for the module and shared: the decay run (three
epochs at a learning rate of 1e-9, SparseMAP loss) and the XPOS run (one epoch, CRF loss).
A test that writes into a run other than its ``evaluate`` result works on a copy."""

import functools
import json
import shutil

import keras
import numpy as np
import pytest

from keras_structured.applications.parsing.__main__ import main
from keras_structured.progress_log import ProgressLogError
from tests.cli_runs import main_in_new_process, read_progress, sample_treebank, train_in_parts


def _arguments(treebank, logdir, *extra):
    options = "--loss sparsemap --epochs 3 --batch-size 8 --learning-rate 5e-3 --quiet".split()
    sizes = "--word-dim 24 --tag-dim 8 --lstm-units 24 --lstm-layers 1 --mlp-units 24".split()
    return ["train", "--treebank", str(treebank), "--logdir", str(logdir), *options, *sizes, *extra]


def _assert_test_evaluation(logdir, capsys):
    """``evaluate --split test --json`` of the run in ``logdir`` prints and stores a sane result."""
    capsys.readouterr()
    main(["evaluate", "--logdir", str(logdir), "--split", "test", "--json"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["sentences"] == 30 and len(result["trees_per_sentence"]) == 30
    assert min(result["trees_per_sentence"]) >= 1 and 0 <= result["uas"] <= 100
    assert json.loads((logdir / "eval_test.json").read_text())["uas"] == result["uas"]


@pytest.mark.slow  # ~45 s; the default suite resumes a run in a new process (below)
def test_a_resumed_run_is_the_uninterrupted_run(tmp_path, capsys, op_determinism):
    treebank = sample_treebank(tmp_path / "en_sample")
    main(_arguments(treebank, tmp_path / "whole"))
    train_in_parts(main, functools.partial(_arguments, treebank), tmp_path / "parts", epochs=3)
    whole, parts = read_progress(tmp_path / "whole"), read_progress(tmp_path / "parts")
    assert [row["epoch"] for row in parts] == ["1", "2", "3"]
    for a, b in zip(whole, parts, strict=True):
        np.testing.assert_allclose(float(a["loss"]), float(b["loss"]), rtol=1e-5)
        np.testing.assert_allclose(float(a["dev_uas"]), float(b["dev_uas"]), atol=1e-9)
    final = json.loads((tmp_path / "parts" / "final.json").read_text())
    assert final["epochs_run"] == 3 and final["finished"]
    # A finished run resumed with a larger budget is extended into the longer run.
    main(_arguments(treebank, tmp_path / "short", "--epochs", "2"))
    assert json.loads((tmp_path / "short" / "final.json").read_text())["epochs_run"] == 2
    main(_arguments(treebank, tmp_path / "short", "--resume", "--epochs", "3"))
    extended = read_progress(tmp_path / "short")
    assert [row["loss"] for row in extended] == [row["loss"] for row in parts]
    assert json.loads((tmp_path / "short" / "config.json").read_text())["epochs"] == 3
    assert json.loads((tmp_path / "short" / "final.json").read_text())["epochs_run"] == 3
    _assert_test_evaluation(tmp_path / "parts", capsys)


def test_a_run_resumed_in_a_new_process_is_the_uninterrupted_run(tmp_path, capsys):
    """The resumed epoch runs in a new process, without the random state that the earlier
    epochs leave behind (TensorFlow's global seed enters tf.data's shuffling and word
    dropout), as after a real interruption."""
    treebank = sample_treebank(tmp_path / "en_sample")
    quick = ["--epochs", "2", "--max-train-sentences", "12", "--sparsity-sentences", "2"]
    quick += ["--dropout", "0.3", "--lowercase", "--collapse-numbers"]  # dropout's random state resumes too
    uninterrupted = _arguments(treebank, tmp_path / "whole", *quick)
    part = functools.partial(_arguments, treebank, tmp_path / "parts", *quick, "--time-limit", "0")
    # The uninterrupted run, then the first epoch of the interrupted one; its second epoch alone.
    main_in_new_process("keras_structured.applications.parsing", uninterrupted, part())
    main_in_new_process("keras_structured.applications.parsing", part("--resume"))
    whole, parts = read_progress(tmp_path / "whole"), read_progress(tmp_path / "parts")
    assert [row["epoch"] for row in parts] == ["1", "2"]
    for column in ("loss", "dev_uas"):
        np.testing.assert_allclose(
            [float(row[column]) for row in parts], [float(row[column]) for row in whole], rtol=1e-7
        )
    _assert_test_evaluation(tmp_path / "parts", capsys)


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    """The sample as a treebank (read only), with a dev split of 6 sentences (each epoch parses it)."""
    return sample_treebank(tmp_path_factory.mktemp("parsing_cli") / "en_sample", dev_sentences=6)


# Two batches of four sentences an epoch (``time --steps 2`` takes two batches of its first run).
DECAY = ["--max-train-sentences", "8", "--batch-size", "4", "--sparsity-sentences", "2"]
DECAY += ["--learning-rate-decay", "0.5", "--learning-rate", "1e-9"]


@pytest.fixture(scope="module")
def decay_run(treebank, tmp_path_factory):
    """A finished run of three epochs at a learning rate of 1e-9 with a decay of 0.5."""
    logdir = tmp_path_factory.mktemp("decay") / "run"
    main(_arguments(treebank, logdir, *DECAY))
    return logdir


@pytest.fixture(scope="module")
def xpos_run(treebank, tmp_path_factory):
    """A finished run of one epoch that embeds the XPOS tags, trained with the CRF loss."""
    logdir = tmp_path_factory.mktemp("xpos") / "run"
    xpos = ["--max-train-sentences", "4", "--epochs", "1", "--tag-column", "xpos", "--loss", "crf"]
    main(_arguments(treebank, logdir, *xpos))
    return logdir


def test_the_learning_rate_decays_after_each_epoch_without_a_better_dev_uas(
    decay_run, treebank, tmp_path, capsys
):
    """At a learning rate of 1e-9 the dev UAS of epoch 1 is never beaten: epochs 2 and 3 each
    multiply the rate by the decay, and the optimizer trains at the decayed rate."""
    rows = read_progress(decay_run)
    assert len({row["dev_uas"] for row in rows}) == 1 and len(rows) == 3
    final = json.loads((decay_run / "final.json").read_text())
    assert final["final_learning_rate"] == pytest.approx(1e-9 * 0.5**2)
    model = keras.saving.load_model(decay_run / "checkpoint" / "model.keras", compile=True)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(1e-9 * 0.5)  # epoch 3's rate
    with pytest.raises(SystemExit):
        main(_arguments(treebank, tmp_path / "bad", "--learning-rate-decay", "0"))
    error = capsys.readouterr().err
    assert "argument --learning-rate-decay: must be a number in (0, 1]. Received: '0'" in error


def test_the_parser_can_embed_xpos_tags(xpos_run, treebank, tmp_path, capsys):
    vocabulary = json.loads((xpos_run / "vocabulary.json").read_text())
    assert (
        vocabulary["tag_column"] == "xpos" and "NN" in vocabulary["tags"] and "NOUN" not in vocabulary["tags"]
    )
    assert json.loads((xpos_run / "config.json").read_text())["tag_column"] == "xpos"
    _assert_test_evaluation(xpos_run, capsys)
    with pytest.raises(SystemExit):
        main(_arguments(treebank, tmp_path / "bad", "--tag-column", "cpos"))


def test_runs_are_never_mixed(decay_run, treebank, tmp_path):
    logdir = tmp_path / "run"
    shutil.copytree(decay_run, logdir)
    with pytest.raises(FileExistsError, match="already holds a run"):
        main(_arguments(treebank, logdir))
    with pytest.raises(ValueError, match=r"learning_rate.*logdir=.*Received: learning_rate=0.001"):
        main(_arguments(treebank, logdir, *DECAY, "--resume", "--learning-rate", "1e-3"))
    with pytest.raises(ValueError, match=r"'epochs': \(3, 2\).*logdir=.*Received: epochs=2"):
        main(_arguments(treebank, logdir, *DECAY, "--resume", "--epochs", "2"))  # a budget only grows
    with pytest.raises(FileNotFoundError, match="--resume needs a run with a checkpoint"):
        main(_arguments(treebank, tmp_path / "empty", "--resume"))
    with pytest.raises(FileNotFoundError, match="missing"):
        main(_arguments(tmp_path / "missing", tmp_path / "other"))


def _run_files(logdir) -> dict:
    """Every file of a run (its lock file aside) and its bytes, by path."""
    files = [path for path in logdir.rglob("*") if path.is_file() and path.name != ".lock"]
    return {path.relative_to(logdir): path.read_bytes() for path in files}


def test_a_failed_resume_leaves_a_finished_run_as_it_was(decay_run, treebank, tmp_path):
    """A larger budget on --resume extends a finished run only once it has resumed: a resume that
    fails first, on a treebank gone missing or a progress.csv that lost rows, changes no file (the
    run stays finished), and the run then extends once its treebank is back."""
    logdir = tmp_path / "run"
    shutil.copytree(decay_run, logdir)
    config = json.loads((logdir / "config.json").read_text())
    moved = tmp_path / "moved"
    (logdir / "config.json").write_text(json.dumps({**config, "treebank": str(moved)}))
    rows = (logdir / "progress.csv").read_text()
    longer = [*DECAY, "--resume", "--epochs", "4"]
    for damage, error in (("treebank", FileNotFoundError), ("progress.csv", ProgressLogError)):
        if damage == "progress.csv":
            shutil.copytree(treebank, moved)
            (logdir / "progress.csv").write_text("".join(rows.splitlines(keepends=True)[:2]))
        before = _run_files(logdir)
        with pytest.raises(error):
            main(_arguments(moved, logdir, *longer))
        assert _run_files(logdir) == before
    (logdir / "progress.csv").write_text(rows)
    main(_arguments(moved, logdir, *longer))
    assert json.loads((logdir / "config.json").read_text())["epochs"] == 4
    assert json.loads((logdir / "final.json").read_text())["epochs_run"] == 4


@pytest.mark.slow  # 7.5 s
def test_time_measures_the_runs_side_by_side(decay_run, xpos_run, tmp_path, capsys):
    capsys.readouterr()
    runs = [str(decay_run), str(xpos_run)]
    output = tmp_path / "t.json"
    main(["time", "--logdir", runs[0], "--logdir", runs[1], "--steps", "2", "--output", str(output)])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result == json.loads(output.read_text())
    assert [result[run]["loss"] for run in runs] == ["sparsemap", "crf"]
    for run in runs:
        assert result[run]["steps"] == 2 and result[run]["sentences_per_s"] > 0
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        main(["time", "--logdir", str(tmp_path / "nothing")])
