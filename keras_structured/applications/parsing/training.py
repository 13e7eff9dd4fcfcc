"""Train, evaluate and inspect the parser: the work behind
``python -m keras_structured.applications.parsing``.

A run lives in one directory (``logdir``):

- ``config.json``: the :class:`ParserConfig`, and ``vocabulary.json``;
- ``progress.csv``: one row per epoch (training loss, dev UAS with and without
  punctuation, training sentences per second, the mean number of trees SparseMAP puts
  weight on per dev sentence and the share of dev sentences with one tree);
- ``sparsity_dev.jsonl``: per epoch, the number of trees of every dev sentence (rewritten
  whole after each epoch);
- ``checkpoint/``: the model with its optimizer state and the loop state after the last
  finished epoch, from which ``--resume`` continues;
- ``best.keras``: the model of the best dev UAS (early stopping keeps it);
- ``final.json``: the summary, written when training ends.

Every epoch draws its shuffling and word dropout from ``(seed, epoch)``, so a resumed run
sees the same batches as an uninterrupted one. The rules of the directory (one writer, whole
files, runs never mixed, ``--resume``, the time limit, early stopping, divergence as an error)
are those of :mod:`keras_structured.applications.training_runs`.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import warnings
from collections.abc import Sequence

import keras
import numpy as np

from keras_structured.applications.parsing.batching import make_dataset
from keras_structured.applications.parsing.conllu_reader import (
    TAG_COLUMNS,
    Sentence,
    read_conllu,
    treebank_paths,
)
from keras_structured.applications.parsing.evaluation import attachment_scores
from keras_structured.applications.parsing.model import LOSSES, build_parser, make_loss
from keras_structured.applications.parsing.vocabulary import Vocabulary
from keras_structured.applications.training_runs import (
    TrainingRun,
    check_run_settings,
    epoch_seed,
    load_best,
    reseed_dropout,
)
from keras_structured.engine import DependencyTreeStructure, SparseMAPConvergenceWarning, solve
from keras_structured.engine.dependency_tree import best_trees
from keras_structured.run_directory import write_json, write_text
from keras_structured.validation import check_integer, check_number, check_one_of

#: MAP calls SparseMAP may make per sentence when the parser's predictions are inspected (the
#: paper's parser decodes with 100). Trained models need a few; near-uniform scores (an untrained
#: model, or one collapsed onto the hinge loss's plateau) would need thousands, at a cost that
#: grows with the square of the support: such sentences are counted as unfinished instead.
SPARSITY_MAX_ITER = 100
PROGRESS_COLUMNS = (
    "epoch",
    "loss",
    "dev_uas",
    "dev_uas_no_punct",
    "sentences_per_s",
    "trees_per_sentence",
    "one_tree_fraction",
    "epoch_seconds",
)


@dataclasses.dataclass(frozen=True)
class ParserConfig:
    """Everything that defines a training run.

    Attributes:
        treebank: folder with ``*-ud-{train,dev,test}.conllu``.
        loss: one of :data:`~keras_structured.applications.parsing.model.LOSSES`.
        learning_rate: Adam's (initial) learning rate.
        learning_rate_decay: factor applied to the learning rate after an epoch whose dev UAS
            is not the best so far (1: constant, as in the SparseMAP paper's parser; its NLI
            models use 0.9).
        seed: seeds the initialisation, the shuffling and the word dropout.
        epochs: most training epochs.
        patience: epochs without a better dev UAS before training stops.
        min_epochs: early stopping waits until this many epochs have run (the SparseMAP
            paper's parser trains a fixed 20 epochs and keeps the best dev UAS; losses that
            sit on a plateau first, such as the structured hinge, need the time).
        batch_size: sentences per batch.
        max_length: training sentences with more words are left out of training (and
            counted); evaluation parses every sentence.
        max_train_sentences: use only the first this many training sentences (None: all).
        word_dropout: alpha of the word dropout (a word seen c times is replaced by the
            unknown word with probability alpha / (alpha + c)).
        lowercase: words are lowercased before they are counted and looked up.
        collapse_numbers: words starting with a digit are all one word (with ``lowercase``,
            Kiperwasser & Goldberg's normalisation, as in the SparseMAP paper's parser).
        tag_column: the gold tags the parser embeds: ``"upos"`` (universal tags) or
            ``"xpos"`` (the treebank's own tags, which Kiperwasser & Goldberg's parser reads
            from the CoNLL-U files). The UAS without punctuation always uses UPOS.
        single_root: trees with exactly one word attached to the root.
        sparsity_sentences: the per-epoch sparsity (trees per sentence) is measured on the
            first this many dev sentences (all of them: None; none: 0). An untrained model's scores
            are nearly uniform, and SparseMAP then needs up to ``max_iter`` MAP calls per
            sentence; ``evaluate`` always measures the whole split.
        word_dim, tag_dim, lstm_units, lstm_layers, mlp_units: model sizes.
        dropout: dropout rate on the embeddings and BiLSTM outputs (0: none, as in
            Kiperwasser & Goldberg).
    """

    treebank: str
    loss: str = "sparsemap"
    learning_rate: float = 2e-3
    learning_rate_decay: float = 1.0
    seed: int = 0
    epochs: int = 30
    patience: int = 5
    min_epochs: int = 1
    batch_size: int = 32
    max_length: int = 100
    max_train_sentences: int | None = None
    word_dropout: float = 0.25
    lowercase: bool = False
    collapse_numbers: bool = False
    tag_column: str = "upos"
    single_root: bool = False
    sparsity_sentences: int | None = 300
    word_dim: int = 100
    tag_dim: int = 25
    lstm_units: int = 125
    lstm_layers: int = 2
    mlp_units: int = 100
    dropout: float = 0.0

    def __post_init__(self):
        check_run_settings(self)
        check_one_of("loss", self.loss, LOSSES)
        check_one_of("tag_column", self.tag_column, TAG_COLUMNS)
        for name in ("max_length", "word_dim", "tag_dim", "lstm_units", "lstm_layers", "mlp_units"):
            check_integer(name, getattr(self, name), minimum=1)
        check_integer("max_train_sentences", self.max_train_sentences, minimum=1, allow_none=True)
        check_integer("sparsity_sentences", self.sparsity_sentences, minimum=0, allow_none=True)
        check_number("word_dropout", self.word_dropout, minimum=0)
        check_number("dropout", self.dropout, minimum=0, maximum=1, open_maximum=True)


def predict_scores(
    model: keras.Model, vocabulary: Vocabulary, sentences: Sequence[Sentence], batch_size: int
):
    """Arc scores of every sentence, in order: a list of ``(n + 1, n + 1)`` float64 arrays."""
    scores = []
    for inputs, _ in make_dataset(sentences, vocabulary, batch_size, shuffle=False):
        batch = np.asarray(model.predict_on_batch(inputs), np.float64)
        scores.extend(batch)
    return [score[: s.length + 1, : s.length + 1] for score, s in zip(scores, sentences, strict=True)]


def _padded(scores: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    size = max(score.shape[0] for score in scores)
    padded = np.zeros((len(scores), size, size))
    for b, score in enumerate(scores):
        padded[b, : score.shape[0], : score.shape[0]] = score
    return padded, np.array([score.shape[0] - 1 for score in scores], np.int64)


def decode(scores: Sequence[np.ndarray], single_root: bool = False, chunk: int = 256) -> list[np.ndarray]:
    """The best tree (MAP) of every sentence's scores: heads ``(n + 1,)``, -1 at the root."""
    heads = []
    for start in range(0, len(scores), chunk):
        padded, lengths = _padded(scores[start : start + chunk])
        decoded = best_trees(padded, lengths, single_root=single_root)
        heads.extend(row[: n + 1] for row, n in zip(decoded, lengths, strict=True))
    return heads


def sparse_trees(
    scores: Sequence[np.ndarray],
    single_root: bool = False,
    chunk: int = 64,
    max_iter: int = SPARSITY_MAX_ITER,
):
    """The trees SparseMAP puts weight on, per sentence.

    Args:
        scores: per sentence, its ``(n + 1, n + 1)`` arc scores.
        single_root: trees with exactly one word attached to the root.
        chunk: sentences solved per batched call.
        max_iter: the solver's MAP calls per sentence (:data:`SPARSITY_MAX_ITER`).

    Returns:
        ``(supports, converged)``: per sentence a list ``[(heads, weight), ...]`` sorted by
        weight, descending, and a boolean array: whether the solver finished (near-uniform
        scores, as an untrained or collapsed model gives, can need more than ``max_iter``
        MAP calls; their supports are then incomplete, and counted rather than warned about).
    """
    structure = DependencyTreeStructure(single_root=single_root)
    result, converged = [], []
    for start in range(0, len(scores), chunk):
        padded, lengths = _padded(scores[start : start + chunk])
        with warnings.catch_warnings():  # near-uniform scores of an untrained model: counted instead
            warnings.simplefilter("ignore", SparseMAPConvergenceWarning)
            solution = solve(structure, padded, lengths=lengths, max_iter=max_iter)
        converged.extend(solution.converged)
        for codes, weights, n in zip(solution.structures, solution.weights, lengths, strict=True):
            order = np.argsort(-weights)
            result.append([(codes[i][: n + 1], float(weights[i])) for i in order if weights[i] > 0])
    return result, np.array(converged, bool)


def evaluate_scores(
    scores, sentences: Sequence[Sentence], single_root: bool = False, sparsity_sentences: int | None = None
) -> dict:
    """UAS of the MAP trees and the SparseMAP sparsity of ``scores`` on ``sentences`` (the
    sparsity on the first ``sparsity_sentences`` of them; None: all)."""
    predicted = decode(scores, single_root)
    result = attachment_scores(predicted, [s.heads for s in sentences], [s.tags for s in sentences])
    supports, converged = sparse_trees(scores[:sparsity_sentences], single_root)
    trees = [len(support) for support in supports]
    result.update(
        sentences=len(sentences),
        sparsemap_unfinished=int(np.sum(~converged)),
        trees_per_sentence=trees,
        mean_trees=float(np.mean(trees)) if trees else float("nan"),
        one_tree_fraction=float(np.mean(np.equal(trees, 1))) if trees else float("nan"),
    )
    return result


def _load_split(config: ParserConfig, split: str) -> list[Sentence]:
    return read_conllu(treebank_paths(config.treebank, (split,))[split], single_root=config.single_root)


def train(
    config: ParserConfig, logdir, resume: bool = False, quiet: bool = False, time_limit: float | None = None
) -> dict:
    """Train the parser of ``config`` into ``logdir`` with ``model.fit``, one epoch at a time.

    Early stopping on dev UAS; a checkpoint after every epoch; ``resume`` continues from
    the last one (with the same settings only).

    Args:
        config: the run's settings.
        logdir: the run directory: empty (or missing) for a new run.
        resume: continue the run in ``logdir``.
        quiet: no progress bar or per-epoch lines.
        time_limit: minutes after which no new epoch starts (None: no limit). The run then
            stops with a checkpoint and without ``final.json``, to be resumed later: long
            trainings fit in bounded sessions.

    Returns:
        The summary written to ``final.json`` when training ended, with ``finished``
        False (and no file) when the time limit stopped it first.

    Raises:
        RunLockedError: another process is writing ``logdir``.
        DivergenceError: the loss or the weights became non-finite; the run is not finished
            and keeps its last checkpoint and ``best.keras``.
        ValueError: settings or data that cannot make a run (named).
    """
    with TrainingRun(config, logdir, PROGRESS_COLUMNS, "uas", resume, quiet, time_limit) as run:
        return _train(run, config, quiet)


def _training_sentences(config: ParserConfig) -> tuple[list[Sentence], int]:
    """The training sentences of ``config`` and the number left out for their length."""
    sentences = _load_split(config, "train")[: config.max_train_sentences]
    too_long = sum(s.length > config.max_length for s in sentences)
    kept = [s for s in sentences if 0 < s.length <= config.max_length]
    if not kept:
        shortest = min(s.length for s in sentences)
        raise ValueError(
            f"--max-length {config.max_length} leaves out all {too_long} training sentences (the "
            f"shortest has {shortest} words). Received: max_length={config.max_length}"
        )
    return kept, too_long


def _write_lines(path: pathlib.Path, lines: Sequence[str]) -> None:
    """Write ``lines`` to ``path`` whole, one a line."""
    write_text(path, "".join(f"{line}\n" for line in lines))


def _train(run: TrainingRun, config: ParserConfig, quiet: bool) -> dict:
    """The work of :func:`train` in the opened ``run``."""
    train_sentences, too_long = _training_sentences(config)
    dev = _load_split(config, "dev")
    sparsity_log, sparsity_lines = run.logdir / "sparsity_dev.jsonl", []
    if run.resumed:  # without the epochs after the checkpoint (written before a crash)
        lines = sparsity_log.read_text().splitlines()
        sparsity_lines = [line for line in lines if json.loads(line)["epoch"] <= run.state["epoch"]]
    _write_lines(sparsity_log, sparsity_lines)  # first: a planted symlink is refused before any write
    if run.resumed:
        model, vocabulary = run.restore(Vocabulary)
    else:
        keras.utils.set_random_seed(config.seed)
        vocabulary = Vocabulary.from_sentences(
            train_sentences,
            lowercase=config.lowercase,
            collapse_numbers=config.collapse_numbers,
            tag_column=config.tag_column,
        )
        run.write_settings(vocabulary)
        model = build_parser(
            vocabulary.num_words,
            vocabulary.num_tags,
            config.word_dim,
            config.tag_dim,
            config.lstm_units,
            config.lstm_layers,
            config.mlp_units,
            config.dropout,
        )
        model.compile(
            keras.optimizers.Adam(config.learning_rate),
            make_loss(config.loss, config.single_root),
            jit_compile=False,
        )
        run.start(learning_rate=config.learning_rate)
    if not quiet:
        print(
            f"{len(train_sentences)} training sentences ({too_long} longer than {config.max_length} words "
            f"left out), {len(dev)} dev sentences; loss {config.loss}; from epoch {run.state['epoch'] + 1}",
            flush=True,
        )
    for epoch in run.epochs():
        # The global seed first: TensorFlow draws the shuffling and word dropout from it and the
        # dataset's seed together, and a resumed run in a new process has no global seed yet.
        # The dropout masks restart from the epoch's seed too (a checkpoint does not hold them).
        keras.utils.set_random_seed(epoch_seed(config.seed, epoch))
        reseed_dropout(model, epoch_seed(config.seed, epoch))
        model.optimizer.learning_rate.assign(run.state.get("learning_rate", config.learning_rate))
        dataset = make_dataset(
            train_sentences,
            vocabulary,
            config.batch_size,
            shuffle=True,
            seed=epoch_seed(config.seed, epoch),
            word_dropout_alpha=config.word_dropout,
        )
        history, seconds = run.fit(model, dataset, -(-len(train_sentences) // config.batch_size))
        scores = evaluate_scores(
            predict_scores(model, vocabulary, dev, config.batch_size),
            dev,
            config.single_root,
            config.sparsity_sentences,
        )
        row = {
            "epoch": epoch + 1,
            "loss": float(history.history["loss"][-1]),
            "dev_uas": scores["uas"],
            "dev_uas_no_punct": scores["uas_no_punct"],
            "sentences_per_s": len(train_sentences) / seconds,
            "trees_per_sentence": scores["mean_trees"],
            "one_tree_fraction": scores["one_tree_fraction"],
            "epoch_seconds": seconds,
        }
        sparsity_lines.append(
            json.dumps({"epoch": epoch + 1, "trees_per_sentence": scores["trees_per_sentence"]})
        )
        _write_lines(sparsity_log, sparsity_lines)
        if not run.end_epoch(model, row, scores["uas"], best_uas_no_punct=scores["uas_no_punct"]):
            run.state["learning_rate"] = run.state.get("learning_rate", config.learning_rate)
            run.state["learning_rate"] *= config.learning_rate_decay
        run.save_checkpoint(model, seconds)
        if not quiet:
            print(
                f"epoch {epoch + 1}: loss {row['loss']:.4f}, dev UAS {row['dev_uas']:.2f} "
                f"({row['dev_uas_no_punct']:.2f} without punctuation), "
                f"{row['sentences_per_s']:.1f} sentences/s, "
                f"{row['trees_per_sentence']:.2f} trees per dev sentence",
                flush=True,
            )
    best = {
        "dev_uas": run.state["best_uas"],
        "dev_uas_no_punct": run.state.get("best_uas_no_punct", float("nan")),
    }
    details = {"train_sentences": len(train_sentences), "train_sentences_too_long": too_long}
    details["final_learning_rate"] = run.state.get("learning_rate", config.learning_rate)
    return run.finish(best, details)


def load_run(logdir) -> tuple[keras.Model, Vocabulary, ParserConfig]:
    """The best model of a run, its vocabulary and its configuration."""
    return load_best(logdir, ParserConfig, Vocabulary, "parser")


@dataclasses.dataclass(frozen=True)
class ParsedSentence:
    """A parser's output for one sentence.

    Attributes:
        heads: ``(n + 1,)`` int64, the best tree (MAP), ``-1`` at the root.
        relations: the ``n`` predicted dependency relations, or None when the run has no
            arc-label classifier.
        trees: with ``with_trees``, the trees SparseMAP puts weight on,
            ``[(heads, weight), ...]`` by decreasing weight (None otherwise).
        trees_converged: with ``with_trees``, whether SparseMAP finished within
            :data:`SPARSITY_MAX_ITER` MAP calls (None otherwise).
    """

    heads: np.ndarray
    relations: tuple[str, ...] | None = None
    trees: list[tuple[np.ndarray, float]] | None = None
    trees_converged: bool | None = None


def parse_sentences(
    model: keras.Model,
    vocabulary: Vocabulary,
    config: ParserConfig,
    sentences: Sequence[Sentence],
    with_trees: bool = False,
) -> list[ParsedSentence]:
    """Parse ``sentences`` (their gold heads and relations, if any, are not read).

    Args:
        model: a run's model (:func:`load_run`).
        vocabulary: its vocabulary; unknown words and tags are looked up as ``<unk>``.
        config: its configuration.
        sentences: the sentences to parse, of any length.
        with_trees: also return the trees SparseMAP puts weight on.

    Returns:
        One :class:`ParsedSentence` per sentence, in order.
    """
    scores = predict_scores(model, vocabulary, sentences, config.batch_size)
    heads = decode(scores, config.single_root)
    if not with_trees:
        return [ParsedSentence(h) for h in heads]
    supports, converged = sparse_trees(scores, config.single_root)
    return [
        ParsedSentence(h, trees=support, trees_converged=bool(done))
        for h, support, done in zip(heads, supports, converged, strict=True)
    ]


def evaluate_sentences(
    model: keras.Model, vocabulary: Vocabulary, config: ParserConfig, sentences: Sequence[Sentence]
) -> dict:
    """UAS (all words and without punctuation) and SparseMAP sparsity of ``model`` on the
    gold ``sentences`` (:func:`evaluate_scores`), with the number of sentences longer than the
    training limit (``long_sentences``; they are parsed too)."""
    result = evaluate_scores(
        predict_scores(model, vocabulary, sentences, config.batch_size), sentences, config.single_root
    )
    result.update(long_sentences=sum(s.length > config.max_length for s in sentences))
    return result


def evaluate(logdir, split: str = "test") -> dict:
    """UAS (all words and without punctuation) and SparseMAP sparsity of a run's best model on
    ``split`` (:func:`evaluate_sentences`); also written to ``eval_{split}.json``. Every
    sentence is parsed, however long."""
    logdir = pathlib.Path(logdir)
    model, vocabulary, config = load_run(logdir)
    result = evaluate_sentences(model, vocabulary, config, _load_split(config, split))
    result.update(split=split)
    write_json(logdir / f"eval_{split}.json", result)
    return result


def parse_sentence(model: keras.Model, vocabulary: Vocabulary, config: ParserConfig, split: str, index: int):
    """Sentence ``index`` of ``split`` and the trees SparseMAP puts weight on for it,
    ``[(heads, weight), ...]`` by decreasing weight."""
    sentences = _load_split(config, split)
    if not 0 <= index < len(sentences):
        raise IndexError(
            f"index must be in [0, {len(sentences)}) for the {split} split. Received: index={index}"
        )
    sentence = sentences[index]
    [parsed] = parse_sentences(model, vocabulary, config, [sentence], with_trees=True)
    return sentence, parsed.trees
