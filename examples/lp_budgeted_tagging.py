"""Sequence tagging under a budget: at most ``k`` tokens of a sentence may take one tag (LP-SparseMAP).

Data: the synthetic tagging task of ``examples/sparsemap_tagger.py`` (a Markov chain over
tags, ambiguous words), whose sentences are kept only when at most ``--budget`` of their
tokens carry the budgeted tag (``--budget-tag``; by default the most frequent one). Every
gold sentence obeys the budget; the model is not told.

Model: the tagger of ``sparsemap_tagger.py`` (embedding, tanh layer, unary scores and learned
transitions packed by ``ks.SequenceScores``), trained with ``ks.SparseMAPLoss`` as there.
Its scores are then decoded two ways, and the tag of every token is the argmax of the
marginals:

* ``sparsemap``: SparseMAP over the tag sequences (``ks.sparsemap`` on the sequence
  structure), no budget;
* ``lp_sparsemap``: LP-SparseMAP over the factor graph of each sentence length ``n``: the
  ``n x K`` tag indicators, a :class:`~keras_structured.engine.lp.StructureFactor` over
  the sequence (scores: the same unary and transition scores) and a
  :class:`~keras_structured.engine.lp.Budget` over the ``n`` indicators of the budgeted
  tag (``ks.lp_sparsemap``). It solves ``max <eta, mu> - ||u||^2 / 2`` over the sequence
  marginals ``mu = (u, v)`` with ``sum_i u[i, tag] <= k``.

The Viterbi sequence (``ks.map_decode``, its marginals the one-hot tags) is reported too.
Reported on held-out sentences: tag accuracy, sentences whose argmax tags break the budget,
the largest budgeted mass ``sum_i u[i, tag]`` of the marginals over the sentences, the
share of sentences whose marginals are one tag sequence (all zeros and ones) and the
decoding time. The budget binds the marginals; the argmax of fractional marginals can
still, in principle, put the tag on more than ``k`` tokens, and the violations column counts
that too. The rows go to a CSV (``--out``), a
markdown table to stdout, progress to stderr.

Run:  python examples/lp_budgeted_tagging.py [--budget 1] [--epochs 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

from _common.cli import add_tagging_arguments, make_parser
from _common.experiments import log, report_rows

COLUMNS = ("decoder", "accuracy", "violations", "max_budget_mass", "integral_share", "seconds")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    parser.add_argument("--budget", type=int, default=1, help="most tokens of a sentence with the tag, k")
    parser.add_argument("--budget-tag", type=int, default=None, help="the budgeted tag (most frequent)")
    add_tagging_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("runs/lp_budgeted_tagging.csv"), help="results CSV")
    args = parser.parse_args(argv)
    if args.max_length < 2 or args.tags < 2 or args.words <= args.tags:
        parser.error("needs --max-length >= 2, --tags >= 2 and --words > --tags")
    if not 1 <= args.budget < args.max_length:
        parser.error(f"--budget must be in [1, --max-length). Received: --budget={args.budget}")
    if args.budget_tag is not None and not 0 <= args.budget_tag < args.tags:
        parser.error(f"--budget-tag must be in [0, --tags). Received: --budget-tag={args.budget_tag}")
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sparsemap_tagger import accuracy, build_models, make_language, sample  # noqa: E402

import keras_structured as ks  # noqa: E402
from keras_structured.engine import SequenceStructure  # noqa: E402
from keras_structured.engine.lp import Budget, FactorGraph, StructureFactor  # noqa: E402
from keras_structured.ops import unpack_sequence_scores  # noqa: E402

# How many sentences to draw at a time while keeping those within the budget.
DRAW = 500


def tag_counts(tags: np.ndarray, tag: int) -> np.ndarray:
    """Tokens of each sentence (rows of ``tags``, padded with -1) that carry ``tag``."""
    return (tags == tag).sum(axis=1)


def sample_within_budget(count: int, args: argparse.Namespace, language, tag: int, rng) -> tuple:
    """``count`` sentences of ``sample`` with at most ``args.budget`` tokens tagged ``tag``."""
    kept_words, kept_tags, kept = [], [], 0
    while kept < count:
        words, tags = sample(DRAW, args.max_length, language, rng)
        within = tag_counts(tags, tag) <= args.budget
        kept_words.append(words[within])
        kept_tags.append(tags[within])
        kept += int(within.sum())
    return np.concatenate(kept_words)[:count], np.concatenate(kept_tags)[:count]


def budget_graph(length: int, num_tags: int, tag: int, budget: int) -> FactorGraph:
    """The tag indicators ``u[i, t]`` (variable ``i * K + t``) of a sentence of ``length``
    tokens: a sequence factor over all of them, a budget over the column of ``tag``."""
    indicators = np.arange(length * num_tags).reshape(length, num_tags)
    factors = [StructureFactor(SequenceStructure(), indicators)]
    if budget < length:  # shorter sentences cannot break it
        factors.append(Budget(indicators[:, tag], budget))
    return FactorGraph(indicators.size, factors)


def lp_marginals(unary: np.ndarray, pairwise: np.ndarray, lengths: np.ndarray, args, tag: int) -> np.ndarray:
    """LP-SparseMAP tag marginals ``(batch, n, K)`` (zeros past each length), one graph
    and one batched solve per sentence length."""
    marginals = np.zeros_like(unary)
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        graph = budget_graph(int(length), args.tags, tag, args.budget)
        eta_u = unary[rows, :length].reshape(len(rows), -1)
        eta_v = pairwise[rows, : length - 1].reshape(len(rows), -1)  # the sequence factor's parts
        u, _ = ks.lp_sparsemap(graph, eta_u, eta_v)
        marginals[rows, :length] = keras.ops.convert_to_numpy(u).reshape(len(rows), length, args.tags)
    return marginals


def report(name: str, marginals: np.ndarray, y: np.ndarray, tag: int, budget: int, seconds: float) -> dict:
    """One result row: accuracy and budget violations of the argmax tags of ``marginals``
    ``(batch, n, K)``, their largest budgeted mass and their integrality."""
    predicted = np.where(y >= 0, marginals.argmax(axis=-1), -1)
    return {
        "decoder": name,
        "accuracy": accuracy(predicted, y),
        "violations": int((tag_counts(predicted, tag) > budget).sum()),
        "max_budget_mass": float(marginals[..., tag].sum(axis=1).max()),
        "integral_share": float(np.all((marginals == 0) | (marginals == 1), axis=(1, 2)).mean()),
        "seconds": seconds,
    }


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> dict[str, dict]:
    """Trains the tagger and decodes it with and without the budget; returns the result row
    of every decoder, by name (also in ``--out``)."""
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    language = make_language(args.tags, args.words, rng)
    pilot_tags = sample(DRAW, args.max_length, language, rng)[1]
    tag = args.budget_tag
    if tag is None:
        tag = int(np.bincount(pilot_tags[pilot_tags >= 0], minlength=args.tags).argmax())
    x_train, y_train = sample_within_budget(args.sentences, args, language, tag, rng)
    x_test, y_test = sample_within_budget(args.test_sentences, args, language, tag, rng)
    share = float((tag_counts(pilot_tags, tag) <= args.budget).mean())
    log(
        f"{args.sentences} training and {args.test_sentences} test sentences with at most {args.budget} "
        f"token(s) tagged {tag} ({100 * share:.0f}% of the sentences the chain draws)"
    )

    tagger, _ = build_models(args)
    tagger.compile(keras.optimizers.Adam(args.learning_rate), ks.SparseMAPLoss(SequenceStructure()))
    tagger.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch_size, verbose=2)

    lengths = (y_test >= 0).sum(axis=1)
    unary, pairwise = (
        keras.ops.convert_to_numpy(s) for s in unpack_sequence_scores(tagger.predict(x_test, verbose=0))
    )
    (_, viterbi, _), viterbi_seconds = timed(
        lambda: ks.map_decode(SequenceStructure(), unary, pairwise, lengths=lengths)
    )
    (sparsemap, _), sparsemap_seconds = timed(
        lambda: ks.sparsemap(SequenceStructure(), unary, pairwise, lengths=lengths)
    )
    lp, lp_seconds = timed(lp_marginals, unary, pairwise, lengths, args, tag)
    rows = [
        report(name, keras.ops.convert_to_numpy(marginals), y_test, tag, args.budget, seconds)
        for name, marginals, seconds in (
            ("viterbi", viterbi, viterbi_seconds),
            ("sparsemap", sparsemap, sparsemap_seconds),
            ("lp_sparsemap", lp, lp_seconds),
        )
    ]
    report_rows(args.out, rows, COLUMNS)
    return {row["decoder"]: row for row in rows}


if __name__ == "__main__":
    main()
