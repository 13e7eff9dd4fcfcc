"""Train, evaluate and inspect ESIM on SICK: the work behind ``python -m keras_structured.applications.nli``.

Training follows the SparseMAP paper (section 5.2): plain SGD (with DyNet's default
gradient clipping, a global norm of 5), the learning rate multiplied by 0.9 after every
epoch whose trial accuracy is not the best seen so far, and early stopping on the trial
split (SICK's development set). A run lives in one directory (``logdir``):

- ``config.json``: the :class:`NLIConfig`, and ``vocabulary.json``;
- ``progress.csv``: one row per epoch (:data:`PROGRESS_COLUMNS`): the learning rate the
  epoch ran with, the training loss and accuracy, the trial accuracy, the alignment
  sparsity on trial (percentage of nonzero attention weights among all real word pairs,
  both directions), the mean number of SparseMAP structures per pair on trial (NaN for
  the softmax), the batches whose SparseMAP did not finish within ``max_iter``, the
  epoch's seconds and training steps per second;
- ``checkpoint/``: the model with its optimizer state and the loop state after the last
  finished epoch, from which ``--resume`` continues;
- ``best.keras``: the model of the best trial accuracy;
- ``final.json``: the summary, written when training ends.

Every epoch draws its shuffling and its dropout masks from ``(seed, epoch)``, so a resumed
run sees the same batches and masks as an uninterrupted one. The rules of the directory (one
writer, whole files, runs never mixed, ``--resume``, the time limit, early stopping,
divergence as an error) are those of :mod:`keras_structured.applications.training_runs`.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import warnings
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_structured.applications.nli.alignments import ATTENTIONS
from keras_structured.applications.nli.batching import encode_pairs, make_dataset
from keras_structured.applications.nli.model import build_esim
from keras_structured.applications.nli.sick_reader import DEFAULT_SICK, LABELS, Pair, read_sick
from keras_structured.applications.nli.vocabulary import PAD_ID, Vocabulary
from keras_structured.applications.training_runs import (
    TrainingRun,
    check_run_settings,
    epoch_seed,
    load_best,
    reseed_dropout,
    save_evaluation,
)
from keras_structured.engine import SparseMAPConvergenceWarning
from keras_structured.validation import check_integer, check_number

PROGRESS_COLUMNS = (
    "epoch",
    "learning_rate",
    "loss",
    "train_accuracy",
    "trial_accuracy",
    "alignment_nonzero_percent",
    "structures_per_pair",
    "unfinished_train_batches",
    "epoch_seconds",
    "train_steps_per_s",
)


@dataclasses.dataclass(frozen=True)
class NLIConfig:
    """Everything that defines a training run.

    Attributes:
        data: the SICK ``.tsv`` file.
        attention: ``"softmax"``, ``"sequence"`` or ``"matching"``.
        learning_rate: SGD's initial learning rate (the paper's grid: ``2^-6 .. 2^-3``).
        learning_rate_decay: factor applied after an epoch whose trial accuracy is not the
            best seen (0.9 in the paper).
        clipnorm: gradients are rescaled to this global norm at most (DyNet's default, 5).
        seed: seeds the initialisation, the shuffling and the dropout masks.
        epochs: most training epochs.
        patience: epochs without a better trial accuracy before training stops.
        min_epochs: early stopping waits until this many epochs have run.
        batch_size: pairs per batch.
        max_train_pairs: use only the first this many training pairs (None: all).
        max_trial_pairs: measure the trial accuracy (early stopping, learning-rate decay) on
            the first this many trial pairs only (None: all 495); for quick runs.
        min_count: least training count of a known word (others are ``<unk>``).
        embedding_dim, units, dropout: model sizes and dropout rate (see
            :func:`~keras_structured.applications.nli.model.build_esim`).
        max_iter: most MAP calls per SparseMAP problem (see
            :func:`~keras_structured.applications.nli.model.build_esim`; None: the library's default, 1000).
    """

    data: str = str(DEFAULT_SICK)
    attention: str = "softmax"
    learning_rate: float = 2.0**-4
    learning_rate_decay: float = 0.9
    clipnorm: float = 5.0
    seed: int = 0
    epochs: int = 30
    patience: int = 5
    min_epochs: int = 1
    batch_size: int = 32
    max_train_pairs: int | None = None
    max_trial_pairs: int | None = None
    min_count: int = 2
    embedding_dim: int = 100
    units: int = 100
    dropout: float = 0.5
    max_iter: int | None = None

    def __post_init__(self):
        check_run_settings(self)
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}. Received: attention={self.attention!r}")
        for name in ("min_count", "embedding_dim", "units"):
            check_integer(name, getattr(self, name), minimum=1)
        for name in ("max_train_pairs", "max_trial_pairs", "max_iter"):
            check_integer(name, getattr(self, name), minimum=1, allow_none=True)
        check_number("clipnorm", self.clipnorm, minimum=0, open_minimum=True)
        check_number("dropout", self.dropout, minimum=0, maximum=1, open_maximum=True)


# ------------------------------------------------------------------------------------------ inspection


class AlignmentReader:
    """Predictions and attention matrices of a trained ESIM, batch by batch (eagerly).

    The model's classifier output and the inputs of its ``"alignment"`` layer (the encoded
    premise and hypothesis) come from one functional sub-model; the layer's
    :meth:`~keras_structured.applications.nli.layers.Alignment.attention_weights` then gives the
    attention matrices and the SparseMAP structure counts.

    Args:
        model: a model of :func:`~keras_structured.applications.nli.model.build_esim`.
        vocabulary: the vocabulary it was trained with.
    """

    def __init__(self, model: keras.Model, vocabulary: Vocabulary):
        self.alignment = model.get_layer("alignment")
        self.inspector = keras.Model(model.inputs, [model.outputs[0], *self.alignment.input])
        self.vocabulary = vocabulary

    def read(self, pairs: Sequence[Pair], batch_size: int = 64, matrices: bool = False) -> dict:
        """Per pair: the predicted label id, the nonzero and real attention entries, the
        SparseMAP structures and convergence flags; with ``matrices``, also the ``(m, n)``
        ``p2h`` and ``(n, m)`` ``h2p`` matrices (float64, padding cut off)."""
        result = {"predictions": [], "nonzero": [], "entries": [], "structures": [], "converged": []}
        if matrices:
            result.update(p2h=[], h2p=[])
        with warnings.catch_warnings():  # unfinished problems are counted (converged) instead
            warnings.simplefilter("ignore", SparseMAPConvergenceWarning)
            for start in range(0, len(pairs), batch_size):
                chunk = pairs[start : start + batch_size]
                batch = encode_pairs(chunk, self.vocabulary)
                features = {"premise": batch["premise"], "hypothesis": batch["hypothesis"]}
                logits, premise, hypothesis = self.inspector(features, training=False)
                masks = [tf.constant(batch[side] != PAD_ID) for side in ("premise", "hypothesis")]
                weights = self.alignment.attention_weights(
                    [premise, hypothesis], mask=masks, return_info=True
                )
                p2h, h2p = np.asarray(weights["p2h"], np.float64), np.asarray(weights["h2p"], np.float64)
                result["predictions"] += np.argmax(np.asarray(logits), axis=-1).tolist()
                result["structures"] += np.asarray(weights["structures"]).tolist()
                result["converged"] += np.asarray(weights["converged"]).tolist()
                for row, pair in enumerate(chunk):
                    m, n = len(pair.premise), len(pair.hypothesis)
                    cut_p2h, cut_h2p = p2h[row, :m, :n], h2p[row, :n, :m]
                    result["nonzero"].append(int(np.count_nonzero(cut_p2h) + np.count_nonzero(cut_h2p)))
                    result["entries"].append(2 * m * n)
                    if matrices:
                        result["p2h"].append(cut_p2h)
                        result["h2p"].append(cut_h2p)
        return result


def evaluate_pairs(
    model: keras.Model, vocabulary: Vocabulary, pairs: Sequence[Pair], batch_size: int = 64
) -> dict:
    """Accuracy and alignment sparsity of ``model`` on ``pairs``.

    Returns:
        A JSON-able dict: ``accuracy`` (%), ``pairs``, per-label ``accuracy_by_label``,
        ``alignment_nonzero_percent`` (nonzero attention weights among all real word pairs
        of the split, both directions, in %), ``structures_per_pair`` (per pair, the mean
        over its SparseMAP problems of the structures with nonzero weight; empty for the
        softmax), ``mean_structures`` (their mean, NaN for the softmax),
        ``one_structure_nonzero_percent`` (the nonzero percentage if every SparseMAP problem
        had a single structure: the sparsest the alignment can be, ``(m + n) / 2mn`` a pair for
        the sequence, ``min(m, n) / mn`` for the matching; NaN for the softmax) and
        ``sparsemap_unfinished`` (problems the solver did not finish within ``max_iter``).
    """
    reader = AlignmentReader(model, vocabulary)
    read = reader.read(list(pairs), batch_size)
    sizes = np.array([(len(pair.premise), len(pair.hypothesis)) for pair in pairs], float).reshape(-1, 2)
    one_structure = {
        "sequence": sizes.sum(axis=1),
        "matching": 2 * sizes.min(axis=1),
    }.get(reader.alignment.attention)
    gold = np.array([pair.label_id for pair in pairs])
    predicted = np.array(read["predictions"])
    structures = [float(np.mean(row)) for row in read["structures"] if row]
    by_label = {
        label: float(100 * np.mean(predicted[gold == k] == k)) if np.any(gold == k) else math.nan
        for k, label in enumerate(LABELS)
    }
    return {
        "accuracy": float(100 * np.mean(predicted == gold)),
        "pairs": len(pairs),
        "accuracy_by_label": by_label,
        "alignment_nonzero_percent": float(100 * np.sum(read["nonzero"]) / np.sum(read["entries"])),
        "structures_per_pair": structures,
        "mean_structures": float(np.mean(structures)) if structures else math.nan,
        "one_structure_nonzero_percent": (
            math.nan if one_structure is None else float(100 * one_structure.sum() / np.sum(read["entries"]))
        ),
        "sparsemap_unfinished": int(sum(not flag for row in read["converged"] for flag in row)),
    }


# -------------------------------------------------------------------------------------------- training


def _compile(model: keras.Model, config: NLIConfig) -> None:
    model.compile(
        keras.optimizers.SGD(config.learning_rate, global_clipnorm=config.clipnorm),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=False,  # the SparseMAP layers call Python oracles; the softmax runs alike
    )


def train(
    config: NLIConfig, logdir, resume: bool = False, quiet: bool = False, time_limit: float | None = None
) -> dict:
    """Train ESIM with ``config`` into ``logdir``, one ``model.fit`` epoch at a time.

    Args:
        config: the run's settings.
        logdir: the run directory: empty (or missing) for a new run.
        resume: continue the run in ``logdir`` (same settings; a larger budget extends it).
        quiet: no progress bar or per-epoch lines.
        time_limit: minutes after which no new epoch starts (None: no limit). The run then
            stops with a checkpoint and without ``final.json``, to be resumed later.

    Returns:
        The summary written to ``final.json`` when training ended, with ``finished`` False
        (and no file) when the time limit stopped it first.

    Raises:
        RunLockedError: another process is writing ``logdir``.
        DivergenceError: the loss or the weights became non-finite; the run is not finished
            and keeps its last checkpoint and ``best.keras``.
        ValueError: settings or data that cannot make a run (named), such as a split with
            no pairs.
    """
    with TrainingRun(config, logdir, PROGRESS_COLUMNS, "accuracy", resume, quiet, time_limit) as run:
        return _train(run, config, quiet)


def _train(run: TrainingRun, config: NLIConfig, quiet: bool) -> dict:
    """The work of :func:`train` in the opened ``run``."""
    data = read_sick(config.data, ("train", "trial"))
    train_pairs, trial = data["train"][: config.max_train_pairs], data["trial"][: config.max_trial_pairs]
    if not (train_pairs and trial):
        raise ValueError(
            f"The {'trial' if train_pairs else 'train'} split of {config.data!r} has no pairs: a run "
            "trains on the train split and follows the accuracy on the trial split (early stopping, "
            f"best.keras). Received: data={config.data!r}"
        )
    if run.resumed:
        model, vocabulary = run.restore(Vocabulary)
    else:
        keras.utils.set_random_seed(config.seed)
        vocabulary = Vocabulary.from_pairs(train_pairs, config.min_count)
        run.write_settings(vocabulary)
        model = build_esim(
            vocabulary.num_words,
            config.attention,
            config.embedding_dim,
            config.units,
            config.dropout,
            seed=config.seed,
            max_iter=config.max_iter,
        )
        _compile(model, config)
        run.start(learning_rate=config.learning_rate)
    if not quiet:
        print(
            f"{len(train_pairs)} training pairs, {len(trial)} trial pairs, {vocabulary.num_words} word ids; "
            f"attention {config.attention}; from epoch {run.state['epoch'] + 1}",
            flush=True,
        )
    batches = -(-len(train_pairs) // config.batch_size)
    for epoch in run.epochs():
        seed = epoch_seed(config.seed, epoch)
        dataset = make_dataset(train_pairs, vocabulary, config.batch_size, shuffle=True, seed=seed)
        # Not keras.utils.set_random_seed: a new global TensorFlow seed retraces the training function.
        reseed_dropout(model, seed)
        model.optimizer.learning_rate.assign(run.state["learning_rate"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SparseMAPConvergenceWarning)
            history, seconds = run.fit(model, dataset, batches)
        unfinished = sum(issubclass(w.category, SparseMAPConvergenceWarning) for w in caught)
        for other in (w for w in caught if not issubclass(w.category, SparseMAPConvergenceWarning)):
            warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
        scores = evaluate_pairs(model, vocabulary, trial, 2 * config.batch_size)
        row = {
            "epoch": epoch + 1,
            "learning_rate": run.state["learning_rate"],
            "loss": float(history.history["loss"][-1]),
            "train_accuracy": 100 * float(history.history["accuracy"][-1]),
            "trial_accuracy": scores["accuracy"],
            "alignment_nonzero_percent": scores["alignment_nonzero_percent"],
            "structures_per_pair": scores["mean_structures"],
            "unfinished_train_batches": unfinished,
            "epoch_seconds": seconds,
            "train_steps_per_s": batches / seconds,
        }
        if not run.end_epoch(model, row, scores["accuracy"]):
            run.state["learning_rate"] *= config.learning_rate_decay
        run.save_checkpoint(model, seconds)
        if not quiet:
            print(
                f"epoch {epoch + 1}: loss {row['loss']:.4f}, trial accuracy {row['trial_accuracy']:.2f}, "
                f"{row['alignment_nonzero_percent']:.1f}% nonzero attention, "
                f"{row['structures_per_pair']:.2f} structures per pair, "
                f"{row['train_steps_per_s']:.2f} steps/s",
                flush=True,
            )
    return run.finish(
        {"trial_accuracy": run.state["best_accuracy"]},
        {"train_pairs": len(train_pairs), "final_learning_rate": run.state["learning_rate"]},
    )


# ------------------------------------------------------------------------------------ after training


def load_run(logdir) -> tuple[keras.Model, Vocabulary, NLIConfig]:
    """The best model of a run, its vocabulary and its configuration."""
    return load_best(logdir, NLIConfig, Vocabulary, "model")


def evaluate(logdir, split: str = "test", max_pairs: int | None = None) -> dict:
    """Accuracy and alignment sparsity (:func:`evaluate_pairs`) of a run's best model on
    ``split`` (its first ``max_pairs`` pairs; None: all); also written to ``eval_{split}.json``
    unless the run directory is read-only
    (:func:`~keras_structured.applications.training_runs.save_evaluation`)."""
    check_integer("max_pairs", max_pairs, minimum=1, allow_none=True)
    logdir = pathlib.Path(logdir)
    model, vocabulary, config = load_run(logdir)
    pairs = read_sick(config.data, (split,))[split][:max_pairs]
    result = evaluate_pairs(model, vocabulary, pairs, 2 * config.batch_size)
    result.update(split=split, attention=config.attention)
    save_evaluation(logdir, split, result)
    return result


def figure_pairs(
    pairs: Sequence[Pair], labels: Sequence[str] = ("entailment", "contradiction")
) -> list[Pair]:
    """The pairs drawn by default (the paper's Figure 5): for each label, the first pair whose
    sentences differ and both have 5 to 9 tokens (short enough for readable heatmaps), or
    failing that the first pair of the label; labels without a pair are left out."""
    chosen = []
    for label in labels:
        candidates = [pair for pair in pairs if pair.label == label]
        readable = [
            pair
            for pair in candidates
            if 5 <= min(len(pair.premise), len(pair.hypothesis))
            and max(len(pair.premise), len(pair.hypothesis)) <= 9
            and pair.premise != pair.hypothesis
        ]
        chosen += (readable or candidates)[:1]
    return chosen


def alignments(logdir, split: str = "test", pair_ids: Sequence[int] | None = None) -> dict:
    """The attention matrices of a run's best model on some pairs of ``split``.

    Args:
        logdir: the run.
        split: the SICK split.
        pair_ids: SICK ``pair_id`` values (None: :func:`figure_pairs`).

    Returns:
        A JSON-able dict: ``attention``, ``split`` and ``pairs``, a list of dicts with
        ``pair_id``, ``label``, ``predicted``, ``premise`` and ``hypothesis`` tokens,
        ``p2h`` ``(m, n)`` and ``h2p`` ``(n, m)`` nested lists and ``structures`` (per
        SparseMAP problem).
    """
    model, vocabulary, config = load_run(logdir)
    pairs = read_sick(config.data, (split,))[split]
    if pair_ids is None:
        chosen = figure_pairs(pairs)
    else:
        by_id = {pair.pair_id: pair for pair in pairs}
        missing = [i for i in pair_ids if i not in by_id]
        if missing:
            raise ValueError(f"pair_ids must be pair_id values of the {split} split. Received: {missing}")
        chosen = [by_id[i] for i in pair_ids]
    read = AlignmentReader(model, vocabulary).read(chosen, matrices=True)
    return {
        "attention": config.attention,
        "split": split,
        "pairs": [
            {
                "pair_id": pair.pair_id,
                "label": pair.label,
                "predicted": LABELS[predicted],
                "premise": list(pair.premise),
                "hypothesis": list(pair.hypothesis),
                "p2h": np.round(p2h, 6).tolist(),
                "h2p": np.round(h2p, 6).tolist(),
                "structures": structures,
            }
            for pair, predicted, p2h, h2p, structures in zip(
                chosen, read["predictions"], read["p2h"], read["h2p"], read["structures"], strict=True
            )
        ],
    }
