"""Train, evaluate and inspect the parser: the work behind
``python -m keras_structured.applications.parsing``.

A run lives in one directory (``logdir``):

- ``config.json``: the :class:`ParserConfig`, and ``vocabulary.json``;
- ``progress.csv``: one row per epoch (training loss, dev UAS with and without
  punctuation, the dev LAS of a labelled parser, training sentences per second, the mean
  number of trees SparseMAP puts weight on per dev sentence and the share of dev sentences
  with one tree);
- ``sparsity_dev.jsonl``: per epoch, the number of trees of every dev sentence (rewritten
  whole after each epoch);
- ``checkpoint/``: the model with its optimizer state and the loop state after the last
  finished epoch, from which ``--resume`` continues;
- ``best.keras``: the model of the best dev UAS (early stopping keeps it);
- ``final.json``: the summary, written when training ends (with the dev LAS of the best
  model for a labelled parser).

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
    UNSPECIFIED,
    Sentence,
    read_conllu,
    treebank_paths,
)
from keras_structured.applications.parsing.evaluation import attachment_scores
from keras_structured.applications.parsing.model import (
    ARC_BIAS_INITIALIZERS,
    LOSSES,
    REDUCTIONS,
    ROOTS,
    RelationCrossEntropy,
    build_parser,
    make_loss,
)
from keras_structured.applications.parsing.presets import PRESETS
from keras_structured.applications.parsing.vocabulary import Vocabulary
from keras_structured.applications.training_runs import (
    TrainingRun,
    check_run_settings,
    epoch_seed,
    load_best,
    reseed_dropout,
    save_evaluation,
)
from keras_structured.engine import DependencyTreeStructure, SparseMAPConvergenceWarning, solve
from keras_structured.engine.dependency_tree import best_trees
from keras_structured.run_directory import write_text
from keras_structured.validation import check_bool, check_integer, check_number, check_one_of

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
#: The columns of a labelled parser's ``progress.csv``: the dev LAS after the dev UAS.
LABELLED_PROGRESS_COLUMNS = (*PROGRESS_COLUMNS[:4], "dev_las", *PROGRESS_COLUMNS[4:])


@dataclasses.dataclass(frozen=True)
class ParserConfig:
    """Everything that defines a training run.

    The defaults are Kiperwasser & Goldberg's parser as this project first trained it. A
    preset (:data:`~keras_structured.applications.parsing.presets.PRESETS`, applied by
    :meth:`from_preset` or the command line's ``--preset``) replaces some defaults: settings
    given explicitly override it, and ``config.json`` records the preset's name with every
    resulting value. ``sparsemap-paper`` is the configuration of the SparseMAP authors'
    released parser: one BiLSTM layer of 125 units, embeddings of 100 (words) and 25 (UPOS),
    an arc perceptron of 100 units, batches of 16, Adam at 1e-3 without decay, no dropout
    but the word dropout (0.25), a fixed 20 epochs keeping the best dev UAS, lowercased words
    and collapsed numbers, the losses summed over a batch, a cost of one per wrong head
    (``cost_weight=0.5``), a learned root vector and a random arc bias (see
    :mod:`~keras_structured.applications.parsing.presets`).

    Settings added after runs were made (``preset``, ``cost_weight``, ``loss_reduction``,
    ``root``, ``arc_bias_initializer``, ``labels``, ``label_units``) default to what those
    runs did, so their ``config.json`` still loads, evaluates and resumes as they ran.

    Attributes:
        treebank: folder with ``*-ud-{train,dev,test}.conllu``.
        loss: one of :data:`~keras_structured.applications.parsing.model.LOSSES`.
        learning_rate: Adam's (initial) learning rate.
        learning_rate_decay: factor applied to the learning rate after an epoch whose dev UAS
            is not the best so far (1: constant, as in the SparseMAP paper's parser; its NLI
            models use 0.9).
        seed: seeds the initialisation, the shuffling and the word dropout.
        epochs: the most training epochs: a run ends after this many epochs, or sooner by
            early stopping.
        patience: early stopping: epochs without a better dev UAS before training stops
            (counted from the best epoch, once ``min_epochs`` have run).
        min_epochs: early stopping never stops a run before this many epochs have run. With
            ``min_epochs == epochs`` a run trains exactly ``epochs`` epochs and keeps the
            model of the best dev UAS (the SparseMAP paper's parser trains a fixed 20 epochs;
            losses that sit on a plateau first, such as the structured hinge, need the time).
        batch_size: sentences per batch.
        max_length: training sentences with more words are left out of training (and
            counted); evaluation parses every sentence.
        max_train_sentences: use only the first this many training sentences (None: all).
        word_dropout: alpha of the word dropout (a word seen c times is replaced by the
            unknown word with probability alpha / (alpha + c)).
        lowercase: words are lowercased before they are counted and looked up.
        collapse_numbers: words starting with a digit are all one word (with ``lowercase``,
            Kiperwasser & Goldberg's normalisation, as in the SparseMAP paper's parser).
        tag_column: the gold tags the parser embeds: ``"upos"`` (universal tags),
            ``"xpos"`` (the treebank's own tags, which Kiperwasser & Goldberg's parser reads
            from the CoNLL-U files) or ``"none"`` (no tags: the parser reads the words alone,
            has no tag input and no tag embedding, and parses plain tokenised text). The UAS
            without punctuation always uses the sentences' UPOS.
        single_root: trees with exactly one word attached to the root.
        sparsity_sentences: the per-epoch sparsity (trees per sentence) is measured on the
            first this many dev sentences (all of them: None; none: 0). An untrained model's scores
            are nearly uniform, and SparseMAP then needs up to ``max_iter`` MAP calls per
            sentence; ``evaluate`` always measures the whole split.
        word_dim, tag_dim, lstm_units, lstm_layers, mlp_units: model sizes.
        dropout: dropout rate on the embeddings and BiLSTM outputs (0: none, as in
            Kiperwasser & Goldberg).
        preset: the name of the preset the run started from (None: none); a record only,
            the settings themselves are the other fields.
        cost_weight: the weight of the Hamming cost of the ``hinge`` and
            ``margin_sparsemap`` losses (unused by the others). The Hamming distance over arc
            indicators counts a wrong head twice: 1 costs two per wrong head, 0.5 one (the
            SparseMAP authors' cost).
        loss_reduction: ``"mean"`` (the loss of a batch is the mean over its sentences) or
            ``"sum"`` (their sum, as the SparseMAP authors' parser trains); the arc-label
            loss of a labelled parser is reduced the same way.
        root: ``"token"`` (the BiLSTM reads a root token, whose vector gives the root's head
            representation) or ``"learned"`` (the BiLSTM reads ``BOS w_1 ... w_n EOS`` and
            the root's head representation is a learned vector, as in the SparseMAP authors'
            parser).
        arc_bias_initializer: ``"zeros"`` or ``"random"`` (Glorot uniform, as DyNet
            initialises every parameter): the start of the arc perceptron's bias.
        labels: a labelled parser: Kiperwasser & Goldberg's arc-label classifier (an MLP on
            the BiLSTM vectors of each word and its head) is trained jointly with the tree
            loss (their sum; the relation's cross-entropy over the words), and the dev LAS is
            reported next to the UAS. Early stopping still follows the dev UAS.
        label_units: hidden units of the arc-label classifier.
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
    preset: str | None = None
    cost_weight: float = 1.0
    loss_reduction: str = "mean"
    root: str = "token"
    arc_bias_initializer: str = "zeros"
    labels: bool = False
    label_units: int = 100

    def __post_init__(self):
        check_run_settings(self)
        check_one_of("loss", self.loss, LOSSES)
        check_one_of("tag_column", self.tag_column, TAG_COLUMNS)
        for name in (
            "max_length",
            "word_dim",
            "tag_dim",
            "lstm_units",
            "lstm_layers",
            "mlp_units",
            "label_units",
        ):
            check_integer(name, getattr(self, name), minimum=1)
        check_integer("max_train_sentences", self.max_train_sentences, minimum=1, allow_none=True)
        check_integer("sparsity_sentences", self.sparsity_sentences, minimum=0, allow_none=True)
        check_number("word_dropout", self.word_dropout, minimum=0)
        check_number("dropout", self.dropout, minimum=0, maximum=1, open_maximum=True)
        if self.preset is not None:
            check_one_of("preset", self.preset, PRESETS)
        check_number("cost_weight", self.cost_weight, minimum=0)
        check_one_of("loss_reduction", self.loss_reduction, REDUCTIONS)
        check_one_of("root", self.root, ROOTS)
        check_one_of("arc_bias_initializer", self.arc_bias_initializer, ARC_BIAS_INITIALIZERS)
        check_bool("labels", self.labels)

    @classmethod
    def from_preset(cls, preset: str, **settings) -> ParserConfig:
        """The configuration of ``preset`` (a key of
        :data:`~keras_structured.applications.parsing.presets.PRESETS`), ``settings`` overriding it.

        Args:
            preset: the preset's name, recorded in :attr:`preset`.
            **settings: other fields (``treebank`` at least); they win over the preset.

        Returns:
            The configuration.

        Example:
            >>> config = ParserConfig.from_preset("sparsemap-paper", treebank="ud/en", loss="hinge")
            >>> config.lstm_layers, config.batch_size, config.cost_weight, config.root
            (1, 16, 0.5, 'learned')
        """
        return cls(**{**PRESETS[check_one_of("preset", preset, PRESETS)], **settings, "preset": preset})


def progress_columns(config: ParserConfig) -> tuple[str, ...]:
    """The columns of the run's ``progress.csv``: :data:`LABELLED_PROGRESS_COLUMNS` for a
    labelled parser, :data:`PROGRESS_COLUMNS` otherwise (those of the runs made before)."""
    return LABELLED_PROGRESS_COLUMNS if config.labels else PROGRESS_COLUMNS


def is_labelled(model: keras.Model) -> bool:
    """Whether ``model`` is a labelled parser (it takes the heads and classifies relations)."""
    return isinstance(model.input, dict) and "heads" in model.input


def predict_scores(
    model: keras.Model, vocabulary: Vocabulary, sentences: Sequence[Sentence], batch_size: int
):
    """Arc scores of every sentence, in order: a list of ``(n + 1, n + 1)`` float64 arrays."""
    labelled = is_labelled(model)
    scores = []
    for inputs, _ in make_dataset(sentences, vocabulary, batch_size, shuffle=False, labels=labelled):
        outputs = model.predict_on_batch(inputs)  # a labelled parser's relations are not read
        scores.extend(np.asarray(outputs["arcs"] if labelled else outputs, np.float64))
    return [score[: s.length + 1, : s.length + 1] for score, s in zip(scores, sentences, strict=True)]


def predict_relations(
    model: keras.Model,
    vocabulary: Vocabulary,
    sentences: Sequence[Sentence],
    heads: Sequence[np.ndarray],
    batch_size: int,
) -> list[tuple[str, ...]]:
    """The relation of every word given its head in ``heads``, by a labelled parser.

    Args:
        model: a labelled parser (:func:`is_labelled`).
        vocabulary: its vocabulary, with the relations.
        sentences: the sentences.
        heads: one head vector ``(n + 1,)`` per sentence (the predicted trees, :func:`decode`).
        batch_size: sentences per batch.

    Returns:
        Per sentence, its ``n`` relations (full labels of the training data; never the
        unknown relation, which no training word has): for a word attached to the root, the
        likeliest of the relations seen at the root in training (UD's ``root``), for another
        word the likeliest of those seen below a word (:meth:`Vocabulary.relation_mask`).
    """
    relations = []
    at_root, below_word = vocabulary.relation_mask(True), vocabulary.relation_mask(False)
    batches = make_dataset(sentences, vocabulary, batch_size, shuffle=False, labels=True, heads=heads)
    for inputs, _ in batches:
        logits = np.asarray(model.predict_on_batch(inputs)["labels"])
        allowed = np.where(np.asarray(inputs["heads"])[..., None] == 0, at_root, below_word)
        relations.extend(np.argmax(np.where(allowed, logits, -np.inf), axis=-1))
    names = vocabulary.relations
    return [
        tuple(names[i] for i in ids[1 : s.length + 1]) for ids, s in zip(relations, sentences, strict=True)
    ]


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
    scores,
    sentences: Sequence[Sentence],
    single_root: bool = False,
    sparsity_sentences: int | None = None,
    heads: Sequence[np.ndarray] | None = None,
    relations: Sequence[Sequence[str]] | None = None,
) -> dict:
    """UAS of the MAP trees and the SparseMAP sparsity of ``scores`` on ``sentences`` (the
    sparsity on the first ``sparsity_sentences`` of them; None: all); with the predicted
    ``relations`` of a labelled parser, the LAS too (``las`` and ``las_no_punct``,
    :func:`~keras_structured.applications.parsing.evaluation.attachment_scores`), unless a
    gold word's relation is unspecified (DEPREL ``_``): the LAS is then not available,
    ``las`` and ``las_no_punct`` are None and ``las_unavailable`` says why. ``heads`` are the
    MAP trees of ``scores`` when already decoded (None: decoded here)."""
    predicted = decode(scores, single_root) if heads is None else heads
    unspecified = 0 if relations is None else sum(r == UNSPECIFIED for s in sentences for r in s.relations)
    labelled = relations is not None and not unspecified
    result = attachment_scores(
        predicted,
        [s.heads for s in sentences],
        [s.tags for s in sentences],
        predicted_relations=relations if labelled else None,
        gold_relations=[s.relations for s in sentences] if labelled else None,
    )
    if unspecified:
        result.update(
            las=None,
            las_no_punct=None,
            las_unavailable=f"{unspecified} of {result['tokens']} gold words have no relation (DEPREL '_')",
        )
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


def _predict(
    model: keras.Model, vocabulary: Vocabulary, config: ParserConfig, sentences: Sequence[Sentence]
) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[str, ...]] | None]:
    """``(scores, heads, relations)`` of ``sentences``: the arc scores, the MAP trees and, for a
    labelled parser, the relations of the words in those trees (None otherwise)."""
    scores = predict_scores(model, vocabulary, sentences, config.batch_size)
    heads = decode(scores, config.single_root)
    relations = None
    if config.labels:
        relations = predict_relations(model, vocabulary, sentences, heads, config.batch_size)
    return scores, heads, relations


def _load_split(config: ParserConfig, split: str) -> list[Sentence]:
    return read_conllu(treebank_paths(config.treebank, (split,))[split], single_root=config.single_root)


def train(
    config: ParserConfig, logdir, resume: bool = False, quiet: bool = False, time_limit: float | None = None
) -> dict:
    """Train the parser of ``config`` into ``logdir`` with ``model.fit``, one epoch at a time.

    Early stopping on dev UAS (never before ``config.min_epochs``); a checkpoint after every
    epoch; ``resume`` continues from the last one (with the same settings only). A labelled
    parser (``config.labels``) learns the relations jointly and reports the dev LAS too.

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
    with TrainingRun(config, logdir, progress_columns(config), "uas", resume, quiet, time_limit) as run:
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


def _check_relations(sentences: Sequence[Sentence], split: str) -> None:
    """A labelled parser learns and scores the relations: refuse a split with one unspecified."""
    unspecified = next((s for s in sentences if UNSPECIFIED in s.relations), None)
    if unspecified is not None:
        raise ValueError(
            f"--labels needs the relation (DEPREL) of every word, and the {split} split leaves some "
            f"unspecified: train without --labels, or on a treebank with relations. Received: DEPREL "
            f"'{UNSPECIFIED}' in the sentence at {unspecified.location}"
        )


def _losses(config: ParserConfig) -> keras.losses.Loss | dict[str, keras.losses.Loss]:
    """The loss of the run's model: the tree loss, and for a labelled parser the relations'
    cross-entropy beside it (``model.fit`` minimises their sum)."""
    tree = make_loss(config.loss, config.single_root, config.cost_weight, config.loss_reduction)
    if not config.labels:
        return tree
    return {"arcs": tree, "labels": RelationCrossEntropy(reduction=REDUCTIONS[config.loss_reduction])}


def _write_lines(path: pathlib.Path, lines: Sequence[str]) -> None:
    """Write ``lines`` to ``path`` whole, one a line."""
    write_text(path, "".join(f"{line}\n" for line in lines))


def _train(run: TrainingRun, config: ParserConfig, quiet: bool) -> dict:
    """The work of :func:`train` in the opened ``run``."""
    train_sentences, too_long = _training_sentences(config)
    dev = _load_split(config, "dev")
    if config.labels:
        _check_relations(train_sentences, "train")
        _check_relations(dev, "dev")
    sparsity_log, sparsity_lines = run.logdir / "sparsity_dev.jsonl", []
    if run.resumed:  # without the epochs after the checkpoint (written before a crash)
        lines = sparsity_log.read_text().splitlines()
        sparsity_lines = [line for line in lines if json.loads(line)["epoch"] <= run.state["epoch"]]
        model, vocabulary = run.restore(Vocabulary)  # the first write: a failed resume changes nothing
        _write_lines(sparsity_log, sparsity_lines)
    else:
        _write_lines(sparsity_log, sparsity_lines)  # first: a planted symlink is refused before any write
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
            root=config.root,
            arc_bias_initializer=config.arc_bias_initializer,
            num_relations=vocabulary.num_relations if config.labels else 0,
            label_units=config.label_units,
        )
        model.compile(keras.optimizers.Adam(config.learning_rate), _losses(config), jit_compile=False)
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
            labels=config.labels,
        )
        history, seconds = run.fit(model, dataset, -(-len(train_sentences) // config.batch_size))
        dev_scores, dev_heads, dev_relations = _predict(model, vocabulary, config, dev)
        scores = evaluate_scores(
            dev_scores, dev, config.single_root, config.sparsity_sentences, dev_heads, dev_relations
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
        kept_with_best = {"best_uas_no_punct": scores["uas_no_punct"]}  # loop state of the best epoch
        if config.labels:
            row["dev_las"] = kept_with_best["best_las"] = scores["las"]
        sparsity_lines.append(
            json.dumps({"epoch": epoch + 1, "trees_per_sentence": scores["trees_per_sentence"]})
        )
        _write_lines(sparsity_log, sparsity_lines)
        if not run.end_epoch(model, row, scores["uas"], **kept_with_best):
            run.state["learning_rate"] = run.state.get("learning_rate", config.learning_rate)
            run.state["learning_rate"] *= config.learning_rate_decay
        run.save_checkpoint(model, seconds)
        if not quiet:
            las = f", dev LAS {row['dev_las']:.2f}" if config.labels else ""
            print(
                f"epoch {epoch + 1}: loss {row['loss']:.4f}, dev UAS {row['dev_uas']:.2f} "
                f"({row['dev_uas_no_punct']:.2f} without punctuation){las}, "
                f"{row['sentences_per_s']:.1f} sentences/s, "
                f"{row['trees_per_sentence']:.2f} trees per dev sentence",
                flush=True,
            )
    best = {
        "dev_uas": run.state["best_uas"],
        "dev_uas_no_punct": run.state.get("best_uas_no_punct", float("nan")),
    }
    if config.labels:
        best["dev_las"] = run.state.get("best_las", float("nan"))
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
        One :class:`ParsedSentence` per sentence, in order; a labelled parser's
        (``config.labels``) with the predicted relations of the words in its best tree.
    """
    scores, heads, relations = _predict(model, vocabulary, config, sentences)
    if relations is None:
        relations = [None] * len(sentences)
    if not with_trees:
        return [ParsedSentence(h, r) for h, r in zip(heads, relations, strict=True)]
    supports, converged = sparse_trees(scores, config.single_root)
    return [
        ParsedSentence(h, r, trees=support, trees_converged=bool(done))
        for h, r, support, done in zip(heads, relations, supports, converged, strict=True)
    ]


def evaluate_sentences(
    model: keras.Model, vocabulary: Vocabulary, config: ParserConfig, sentences: Sequence[Sentence]
) -> dict:
    """UAS (all words and without punctuation), for a labelled parser LAS (``las`` and
    ``las_no_punct``), and SparseMAP sparsity of ``model`` on the gold ``sentences``
    (:func:`evaluate_scores`), with the number of sentences longer than the training limit
    (``long_sentences``; they are parsed too). An unlabelled parser's result has no LAS."""
    scores, heads, relations = _predict(model, vocabulary, config, sentences)
    result = evaluate_scores(scores, sentences, config.single_root, heads=heads, relations=relations)
    result.update(long_sentences=sum(s.length > config.max_length for s in sentences))
    return result


def evaluate(logdir, split: str = "test") -> dict:
    """UAS (all words and without punctuation), LAS for a labelled parser, and SparseMAP
    sparsity of a run's best model on ``split`` (:func:`evaluate_sentences`); also written to
    ``eval_{split}.json`` unless the run directory is read-only
    (:func:`~keras_structured.applications.training_runs.save_evaluation`). Every sentence is
    parsed, however long."""
    logdir = pathlib.Path(logdir)
    model, vocabulary, config = load_run(logdir)
    result = evaluate_sentences(model, vocabulary, config, _load_split(config, split))
    result.update(split=split)
    save_evaluation(logdir, split, result)
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
