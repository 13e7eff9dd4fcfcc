"""The parser: its arc scorer layer, each of the five losses fitting 20 sentences, and
training runs that resume exactly, from the command line."""

import functools
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_structured.applications.parsing.__main__ import main
from keras_structured.applications.parsing.batching import make_dataset
from keras_structured.applications.parsing.conllu_reader import read_conllu
from keras_structured.applications.parsing.evaluation import attachment_scores
from keras_structured.applications.parsing.model import ArcScorer, build_parser, make_loss
from keras_structured.applications.parsing.training import decode, predict_scores, sparse_trees
from keras_structured.applications.parsing.vocabulary import Vocabulary
from tests.cli_runs import SAMPLE_CONLLU as SAMPLE
from tests.cli_runs import main_in_new_process, read_progress, sample_treebank, train_in_parts
from tests.layer_checks import check_layer

SMALL = {"word_dim": 24, "tag_dim": 8, "lstm_units": 24, "lstm_layers": 1, "mlp_units": 24}


def test_arc_scorer_layer(tmp_path):
    tokens = np.random.default_rng(0).normal(size=(2, 4, 6)).astype("float32")
    check_layer(ArcScorer, {"units": 5}, tokens, tmp_path=tmp_path)


def test_arc_scorer_scores_every_pair_with_the_perceptron():
    layer = ArcScorer(3)
    tokens = tf.random.normal([1, 4, 5], seed=1)
    scores = layer(tokens).numpy()
    w_head, w_dep, b, v = (
        w.numpy()
        for w in (
            layer.head.kernel,
            layer.dependent.kernel,
            layer.dependent.bias,
            layer.output_weights.kernel,
        )
    )
    r = tokens.numpy()[0]
    expected = np.array(
        [[np.tanh(r[h] @ w_head + r[m] @ w_dep + b) @ v[:, 0] for m in range(4)] for h in range(4)]
    )
    np.testing.assert_allclose(scores[0], expected, rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="Received: loss='svm'"):
        make_loss("svm")
    with pytest.raises(ValueError, match="Received: units=0"):
        ArcScorer(0)
    with pytest.raises(ValueError, match="Received: lstm_layers=0"):
        build_parser(10, 5, lstm_layers=0)
    with pytest.raises(ValueError, match="dropout"):
        build_parser(10, 5, dropout=1.0)


def test_dropout_acts_in_training_only():
    inputs = {"words": tf.constant([[2, 5, 7, 9]]), "tags": tf.constant([[2, 3, 4, 3]])}
    keras.utils.set_random_seed(0)
    model = build_parser(50, 10, dropout=0.5, **SMALL)
    assert [layer.name for layer in model.layers if isinstance(layer, keras.layers.Dropout)] == [
        "token_dropout",
        "bilstm_0_dropout",
    ]
    inference = model(inputs).numpy()
    np.testing.assert_array_equal(model(inputs, training=False).numpy(), inference)
    assert not np.allclose(model(inputs, training=True).numpy(), inference)
    assert not any(isinstance(layer, keras.layers.Dropout) for layer in build_parser(50, 10, **SMALL).layers)


def _fit_sample(loss: str, rounds: int = 30):
    """Fit the 20-sentence sample, 10 epochs a round, until 100% UAS or ``rounds`` rounds;
    returns the last UAS and training loss."""
    sentences = read_conllu(SAMPLE)[:20]
    vocabulary = Vocabulary.from_sentences(sentences)
    keras.utils.set_random_seed(0)
    model = build_parser(vocabulary.num_words, vocabulary.num_tags, **SMALL)
    model.compile(keras.optimizers.Adam(1e-2), make_loss(loss), jit_compile=False)
    dataset = make_dataset(sentences, vocabulary, 10, shuffle=True, seed=0)
    gold = [s.heads for s in sentences]
    for _ in range(rounds):
        history = model.fit(dataset, epochs=10, verbose=0)
        uas = attachment_scores(decode(predict_scores(model, vocabulary, sentences, 10)), gold)["uas"]
        if uas == 100.0:
            break
    return uas, history.history["loss"][-1]


@pytest.mark.parametrize("loss", ["sparsemap", "margin_sparsemap", "crf", "hinge"])
def test_each_loss_of_table_1_fits_twenty_sentences(loss):
    assert _fit_sample(loss)[0] == 100.0


def test_the_perceptron_loss_reaches_its_degenerate_minimum():
    """The structured perceptron loss ``max_s score(s) - score(gold)`` is zero as soon as the
    gold tree ties with the best one, which all-equal scores achieve: a network trained with
    it drives the loss to zero while its scores collapse, and the MAP decoder's tie-breaking
    then decides the trees. So it fits the sample in the sense of its loss, not in UAS (the
    SparseMAP paper's Table 1 has no perceptron row; the margin of the hinge loss is the cure)."""
    uas, loss = _fit_sample("perceptron", rounds=8)
    assert loss < 0.01
    assert uas < 100.0


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


def test_the_learning_rate_decays_after_each_epoch_without_a_better_dev_uas(tmp_path, capsys):
    """At a learning rate of 1e-9 the dev UAS of epoch 1 is never beaten: epochs 2 and 3 each
    multiply the rate by the decay, and the optimizer trains at the decayed rate."""
    treebank = sample_treebank(tmp_path / "en_sample")
    logdir = tmp_path / "decay"
    quick = ["--max-train-sentences", "4", "--sparsity-sentences", "2", "--learning-rate-decay", "0.5"]
    main(_arguments(treebank, logdir, *quick, "--learning-rate", "1e-9"))
    rows = read_progress(logdir)
    assert len({row["dev_uas"] for row in rows}) == 1 and len(rows) == 3
    final = json.loads((logdir / "final.json").read_text())
    assert final["final_learning_rate"] == pytest.approx(1e-9 * 0.5**2)
    model = keras.saving.load_model(logdir / "checkpoint" / "model.keras", compile=True)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(1e-9 * 0.5)  # epoch 3's rate
    with pytest.raises(SystemExit):
        main(_arguments(treebank, tmp_path / "bad", "--learning-rate-decay", "0"))
    error = capsys.readouterr().err
    assert "argument --learning-rate-decay: must be a number in (0, 1]. Received: '0'" in error


def test_the_parser_can_embed_xpos_tags(tmp_path, capsys):
    treebank = sample_treebank(tmp_path / "en_sample")
    logdir = tmp_path / "xpos"
    main(_arguments(treebank, logdir, "--max-train-sentences", "4", "--epochs", "1", "--tag-column", "xpos"))
    vocabulary = json.loads((logdir / "vocabulary.json").read_text())
    assert (
        vocabulary["tag_column"] == "xpos" and "NN" in vocabulary["tags"] and "NOUN" not in vocabulary["tags"]
    )
    assert json.loads((logdir / "config.json").read_text())["tag_column"] == "xpos"
    _assert_test_evaluation(logdir, capsys)
    with pytest.raises(SystemExit):
        main(_arguments(treebank, tmp_path / "bad", "--tag-column", "cpos"))


def test_runs_are_never_mixed(tmp_path):
    treebank = sample_treebank(tmp_path / "en_sample")
    logdir = tmp_path / "run"
    main(_arguments(treebank, logdir, "--time-limit", "0"))
    with pytest.raises(FileExistsError, match="already holds a run"):
        main(_arguments(treebank, logdir))
    with pytest.raises(ValueError, match=r"learning_rate.*logdir=.*Received: learning_rate=0.001"):
        main(_arguments(treebank, logdir, "--resume") + ["--learning-rate", "1e-3"])
    with pytest.raises(ValueError, match=r"'epochs': \(3, 2\).*logdir=.*Received: epochs=2"):
        main(_arguments(treebank, logdir, "--resume", "--epochs", "2"))  # a budget only grows
    with pytest.raises(FileNotFoundError, match="--resume needs a run with a checkpoint"):
        main(_arguments(treebank, tmp_path / "empty", "--resume"))
    with pytest.raises(FileNotFoundError, match="missing"):
        main(_arguments(tmp_path / "missing", tmp_path / "other"))


def test_sparse_trees_are_few_and_sum_to_one_on_a_trained_model(tmp_path):
    sentences = read_conllu(SAMPLE)[:5]
    vocabulary = Vocabulary.from_sentences(sentences)
    keras.utils.set_random_seed(1)
    model = build_parser(vocabulary.num_words, vocabulary.num_tags, **SMALL)
    scores = predict_scores(model, vocabulary, sentences, 4)
    assert [s.shape for s in scores] == [(s.length + 1, s.length + 1) for s in sentences]
    supports, converged = sparse_trees([10 * s for s in scores], max_iter=1000)
    assert converged.all()
    # Near-uniform scores need many MAP calls: a small budget stops and says so.
    assert not sparse_trees([s / 100 for s in scores], max_iter=2)[1].all()
    for support, sentence in zip(supports, sentences, strict=True):
        weights = [weight for _, weight in support]
        assert weights == sorted(weights, reverse=True) and abs(sum(weights) - 1) < 1e-9
        assert all(heads.shape == (sentence.length + 1,) and heads[0] == -1 for heads, _ in support)


def test_time_measures_the_runs_side_by_side(tmp_path, capsys):
    treebank = sample_treebank(tmp_path / "en_sample")
    quick = ["--epochs", "1", "--max-train-sentences", "8", "--sparsity-sentences", "2", "--batch-size", "4"]
    for loss in ("sparsemap", "crf"):
        main(_arguments(treebank, tmp_path / loss, *quick) + ["--loss", loss])
    capsys.readouterr()
    runs = [str(tmp_path / loss) for loss in ("sparsemap", "crf")]
    main(
        [
            "time",
            "--logdir",
            runs[0],
            "--logdir",
            runs[1],
            "--steps",
            "2",
            "--output",
            str(tmp_path / "t.json"),
        ]
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result == json.loads((tmp_path / "t.json").read_text())
    assert [result[run]["loss"] for run in runs] == ["sparsemap", "crf"]
    for run in runs:
        assert result[run]["steps"] == 2 and result[run]["sentences_per_s"] > 0
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        main(["time", "--logdir", str(tmp_path / "nothing")])
