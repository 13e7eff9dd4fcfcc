"""Train, evaluate and inspect the parser: the work behind ``python -m keras_structured.parsing``.

A run lives in one directory (``logdir``):

- ``config.json``: the :class:`ParserConfig`, and ``vocabulary.json``;
- ``progress.csv``: one row per epoch (training loss, dev UAS with and without
  punctuation, training sentences per second, the mean number of trees SparseMAP puts
  weight on per dev sentence and the share of dev sentences with one tree);
- ``sparsity_dev.jsonl``: per epoch, the number of trees of every dev sentence;
- ``checkpoint/``: the model with its optimizer state and the loop state after the last
  finished epoch, from which ``--resume`` continues;
- ``best.keras``: the model of the best dev UAS (early stopping keeps it);
- ``final.json``: the summary, written when training ends.

Every epoch draws its shuffling and word dropout from ``(seed, epoch)``, so a resumed run
sees the same batches as an uninterrupted one.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import pathlib
import time
import warnings
from collections.abc import Sequence

import keras
import numpy as np

from keras_structured.engine import DependencyTreeStructure, SparseMAPConvergenceWarning, solve
from keras_structured.engine.dependency_tree import best_trees
from keras_structured.parsing.batching import make_dataset
from keras_structured.parsing.conllu_reader import Sentence, read_conllu, treebank_paths
from keras_structured.parsing.evaluation import attachment_scores
from keras_structured.parsing.model import LOSSES, build_parser, make_loss
from keras_structured.parsing.vocabulary import Vocabulary

# Files that make a directory hold a run (other files, such as a runner's logs, may sit beside them).
_RUN_FILES = ("config.json", "progress.csv", "checkpoint", "best.keras", "final.json")
#: MAP calls SparseMAP may make per sentence when the parser's predictions are inspected (the
#: paper's parser decodes with 100). Trained models need a few; near-uniform scores (an untrained
#: model, or one collapsed onto the hinge loss's plateau) would need thousands, at a cost that
#: grows with the square of the support: such sentences are counted as unfinished instead.
SPARSITY_MAX_ITER = 100
# Settings a resumed run may increase: they extend its training budget.
_BUDGET_FIELDS = ("epochs", "patience", "min_epochs")
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
        loss: one of :data:`~keras_structured.parsing.model.LOSSES`.
        learning_rate: Adam's learning rate.
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
        single_root: trees with exactly one word attached to the root.
        sparsity_sentences: the per-epoch sparsity (trees per sentence) is measured on the
            first this many dev sentences (all of them: None). An untrained model's scores
            are nearly uniform, and SparseMAP then needs up to ``max_iter`` MAP calls per
            sentence; ``evaluate`` always measures the whole split.
        word_dim, tag_dim, lstm_units, lstm_layers, mlp_units: model sizes.
    """

    treebank: str
    loss: str = "sparsemap"
    learning_rate: float = 2e-3
    seed: int = 0
    epochs: int = 30
    patience: int = 5
    min_epochs: int = 1
    batch_size: int = 32
    max_length: int = 100
    max_train_sentences: int | None = None
    word_dropout: float = 0.25
    single_root: bool = False
    sparsity_sentences: int | None = 300
    word_dim: int = 100
    tag_dim: int = 25
    lstm_units: int = 125
    lstm_layers: int = 2
    mlp_units: int = 100

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}. Received: loss={self.loss!r}")
        for name in ("epochs", "patience", "min_epochs", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1. Received: {name}={getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0. Received: learning_rate={self.learning_rate}")


def _write_json(path: pathlib.Path, value) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value, indent=1) + "\n")
    temporary.replace(path)


def _epoch_seed(seed: int, epoch: int) -> int:
    return seed * 100_003 + epoch


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


class _ProgressBar(keras.callbacks.Callback):
    """A tqdm bar over the batches of one epoch, with the running loss."""

    def __init__(self, epoch: int, epochs: int, batches: int | None):
        super().__init__()
        from tqdm.auto import tqdm

        self.bar = tqdm(total=batches, desc=f"epoch {epoch + 1}/{epochs}", unit="batch", leave=False)

    def on_train_batch_end(self, batch, logs=None):
        self.bar.update(1)
        if logs and "loss" in logs:
            self.bar.set_postfix(loss=f"{float(logs['loss']):.4f}")

    def on_train_end(self, logs=None):
        self.bar.close()


def _read_config(logdir: pathlib.Path) -> ParserConfig:
    return ParserConfig(**json.loads((logdir / "config.json").read_text()))


def _finished(config: ParserConfig, state: dict) -> bool:
    """Whether the loop is over: all epochs run, or early stopping after ``min_epochs``."""
    if state["epoch"] >= config.epochs:
        return True
    return state["epoch"] >= config.min_epochs and state["bad_epochs"] >= config.patience


def _check_logdir(logdir: pathlib.Path, config: ParserConfig, resume: bool) -> dict | None:
    """The loop state to resume from (None: a fresh start), after refusing to mix runs.

    A resumed run keeps its settings, except that a larger training budget (``epochs``,
    ``patience``, ``min_epochs``) extends it, finished or not: ``config.json`` is updated
    and ``final.json`` removed until the extended run ends.
    """
    state_path = logdir / "checkpoint" / "state.json"
    if resume:
        if not state_path.exists():
            raise FileNotFoundError(
                f"--resume needs a run with a checkpoint. Received: logdir={str(logdir)!r}"
            )
        stored = _read_config(logdir)
        differences = {
            field.name: (getattr(stored, field.name), getattr(config, field.name))
            for field in dataclasses.fields(ParserConfig)
            if getattr(stored, field.name) != getattr(config, field.name)
        }
        refused = {
            name: values
            for name, values in differences.items()
            if name not in _BUDGET_FIELDS or values[1] < values[0]
        }
        if refused:
            raise ValueError(
                "--resume continues a run with its own settings (only a larger epochs, patience or "
                f"min_epochs extends it); these differ (stored, given): {refused}. "
                f"Received: logdir={str(logdir)!r}"
            )
        if differences:
            _write_json(logdir / "config.json", dataclasses.asdict(config))
            (logdir / "final.json").unlink(missing_ok=True)
        return json.loads(state_path.read_text())
    held = [name for name in _RUN_FILES if (logdir / name).exists()]
    if held:
        raise FileExistsError(
            f"The logdir already holds a run ({', '.join(held)}): pass --resume to continue it, or "
            f"choose another logdir. Received: logdir={str(logdir)!r}"
        )
    return None


def _load_split(config: ParserConfig, split: str) -> list[Sentence]:
    return read_conllu(treebank_paths(config.treebank, (split,))[split])


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
    """
    invocation_start = time.perf_counter()
    logdir = pathlib.Path(logdir)
    state = _check_logdir(logdir, config, resume)
    train_all = _load_split(config, "train")
    dev = _load_split(config, "dev")
    train_sentences = train_all[: config.max_train_sentences]
    too_long = sum(s.length > config.max_length for s in train_sentences)
    train_sentences = [s for s in train_sentences if 0 < s.length <= config.max_length]
    logdir.mkdir(parents=True, exist_ok=True)
    checkpoint = logdir / "checkpoint"
    if state is None:
        keras.utils.set_random_seed(config.seed)
        vocabulary = Vocabulary.from_sentences(train_sentences)
        _write_json(logdir / "config.json", dataclasses.asdict(config))
        _write_json(logdir / "vocabulary.json", vocabulary.get_config())
        model = build_parser(
            vocabulary.num_words,
            vocabulary.num_tags,
            config.word_dim,
            config.tag_dim,
            config.lstm_units,
            config.lstm_layers,
            config.mlp_units,
        )
        model.compile(
            keras.optimizers.Adam(config.learning_rate),
            make_loss(config.loss, config.single_root),
            jit_compile=False,
        )
        state = {"epoch": 0, "best_uas": -1.0, "best_epoch": -1, "bad_epochs": 0, "train_seconds": 0.0}
        with open(logdir / "progress.csv", "w", newline="") as handle:
            csv.writer(handle).writerow(PROGRESS_COLUMNS)
        (logdir / "sparsity_dev.jsonl").write_text("")
    else:
        vocabulary = Vocabulary.from_config(json.loads((logdir / "vocabulary.json").read_text()))
        model = keras.models.load_model(checkpoint / "model.keras")
        _truncate_logs(logdir, state["epoch"])
    if not quiet:
        print(
            f"{len(train_sentences)} training sentences ({too_long} longer than {config.max_length} words "
            f"left out), {len(dev)} dev sentences; loss {config.loss}; from epoch {state['epoch'] + 1}",
            flush=True,
        )
    while not _finished(config, state):
        epoch = state["epoch"]
        dataset = make_dataset(
            train_sentences,
            vocabulary,
            config.batch_size,
            shuffle=True,
            seed=_epoch_seed(config.seed, epoch),
            word_dropout_alpha=config.word_dropout,
        )
        keras.utils.set_random_seed(_epoch_seed(config.seed, epoch))
        callbacks = (
            []
            if quiet
            else [_ProgressBar(epoch, config.epochs, -(-len(train_sentences) // config.batch_size))]
        )
        start = time.perf_counter()
        history = model.fit(dataset, epochs=epoch + 1, initial_epoch=epoch, verbose=0, callbacks=callbacks)
        seconds = time.perf_counter() - start
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
        with open(logdir / "progress.csv", "a", newline="") as handle:
            csv.writer(handle).writerow([row[column] for column in PROGRESS_COLUMNS])
        with open(logdir / "sparsity_dev.jsonl", "a") as handle:
            handle.write(
                json.dumps({"epoch": epoch + 1, "trees_per_sentence": scores["trees_per_sentence"]}) + "\n"
            )
        if scores["uas"] > state["best_uas"]:
            state.update(
                best_uas=scores["uas"], best_uas_no_punct=scores["uas_no_punct"], best_epoch=epoch + 1
            )
            state["bad_epochs"] = 0
            model.save(logdir / "best.keras")
        else:
            state["bad_epochs"] += 1
        state["epoch"] = epoch + 1
        state["train_seconds"] += seconds
        checkpoint.mkdir(exist_ok=True)
        model.save(checkpoint / "model.keras")
        _write_json(checkpoint / "state.json", state)
        if not quiet:
            print(
                f"epoch {epoch + 1}: loss {row['loss']:.4f}, dev UAS {row['dev_uas']:.2f} "
                f"({row['dev_uas_no_punct']:.2f} without punctuation), "
                f"{row['sentences_per_s']:.1f} sentences/s, "
                f"{row['trees_per_sentence']:.2f} trees per dev sentence",
                flush=True,
            )
        if time_limit is not None and time.perf_counter() - invocation_start >= 60 * time_limit:
            break
    finished = _finished(config, state)
    summary = {
        "finished": finished,
        "best_epoch": state["best_epoch"],
        "dev_uas": state["best_uas"],
        "dev_uas_no_punct": state.get("best_uas_no_punct", float("nan")),
        "train_seconds": state["train_seconds"],
        "epochs_run": state["epoch"],
        "stopped_early": state["epoch"] < config.epochs,
        "train_sentences": len(train_sentences),
        "train_sentences_too_long": too_long,
    }
    if finished:
        _write_json(logdir / "final.json", summary)
    return summary


def _truncate_logs(logdir: pathlib.Path, epochs: int) -> None:
    """Drop log rows of epochs after the checkpoint (written before a crash)."""
    with open(logdir / "progress.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    with open(logdir / "progress.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([rows[0]] + [row for row in rows[1:] if int(row[0]) <= epochs])
    lines = (logdir / "sparsity_dev.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["epoch"] <= epochs]
    (logdir / "sparsity_dev.jsonl").write_text("".join(line + "\n" for line in kept))


def load_run(logdir) -> tuple[keras.Model, Vocabulary, ParserConfig]:
    """The best model of a run, its vocabulary and its configuration."""
    logdir = pathlib.Path(logdir)
    if not (logdir / "best.keras").exists():
        raise FileNotFoundError(
            f"No trained parser (best.keras) in the logdir. Received: logdir={str(logdir)!r}"
        )
    vocabulary = Vocabulary.from_config(json.loads((logdir / "vocabulary.json").read_text()))
    return keras.models.load_model(logdir / "best.keras"), vocabulary, _read_config(logdir)


def evaluate(logdir, split: str = "test") -> dict:
    """UAS (all words and without punctuation) and SparseMAP sparsity of a run's best model on
    ``split``; also written to ``eval_{split}.json``. Every sentence is parsed, however long."""
    logdir = pathlib.Path(logdir)
    model, vocabulary, config = load_run(logdir)
    sentences = _load_split(config, split)
    result = evaluate_scores(
        predict_scores(model, vocabulary, sentences, config.batch_size), sentences, config.single_root
    )
    result.update(split=split, long_sentences=sum(s.length > config.max_length for s in sentences))
    _write_json(logdir / f"eval_{split}.json", result)
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
    scores = predict_scores(model, vocabulary, [sentence], 1)
    return sentence, sparse_trees(scores, config.single_root)[0][0]
