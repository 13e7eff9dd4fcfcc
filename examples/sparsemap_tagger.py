"""Train a sequence tagger with the SparseMAP loss, end to end, on synthetic data.

Data: tag sequences drawn from a Markov chain over K tags, and for each tag a word drawn
from a tag-specific distribution over a small vocabulary. Many words are shared by
several tags, so a word alone does not give its tag: the transitions between tags
resolve the ambiguity, as in part-of-speech tagging.

Model (Keras functional API, ``model.fit``):

    words -> Embedding(mask_zero=True) -> Dense(tanh) -> Dense(K)  unary scores
          -> ks.SequenceScores(use_boundary=True)                  packed (batch, n, K, K + 1)

trained with ``ks.SparseMAPLoss(SequenceStructure())`` (or ``--loss`` margin / crf). The
``SequenceScores`` layer owns the transition and boundary scores; padding comes from the
embedding's mask and, in the loss, from the ``-1`` labels. For prediction the same layers
feed ``ks.SparseMAPSequence()``, which reads the transitions from the packed scores and
returns a sparse mixture of a few whole tag sequences; ``ks.map_decode`` gives the best
sequence (Viterbi).

Reported on held-out sentences: tag accuracy of the decoded sequences, of the argmax of
the SparseMAP marginals and of the unary scores alone (no transitions), and how many
tag sequences SparseMAP mixes per sentence.

Run:  python examples/sparsemap_tagger.py [--epochs 10] [--loss sparsemap] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import time

from _common.cli import add_tagging_arguments, make_parser

LOSSES = ("sparsemap", "margin", "crf")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    parser.add_argument("--loss", choices=LOSSES, default="sparsemap", help="structured loss")
    add_tagging_arguments(parser)
    parser.add_argument("--save", default=None, help="optional .keras path for the trained predictor")
    args = parser.parse_args(argv)
    if args.max_length < 2 or args.tags < 2 or args.words <= args.tags:
        parser.error("needs --max-length >= 2, --tags >= 2 and --words > --tags")
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_structured as ks  # noqa: E402
from keras_structured.engine import SequenceStructure  # noqa: E402
from keras_structured.ops import unpack_sequence_scores  # noqa: E402


def make_language(num_tags: int, num_words: int, rng: np.random.Generator):
    """A Markov chain over tags (each tag has two likely successors) and ambiguous emissions."""
    transitions = np.full((num_tags, num_tags), 0.02)
    for tag in range(num_tags):
        transitions[tag, rng.choice(num_tags, size=2, replace=False)] += [0.6, 0.3]
    transitions /= transitions.sum(axis=1, keepdims=True)
    # Word ids 1..num_words-1 (0 is padding); each tag emits 4 words, most of them shared with other tags.
    emissions = np.zeros((num_tags, num_words))
    for tag in range(num_tags):
        emissions[tag, 1 + rng.choice(num_words - 1, size=4, replace=False)] = [0.4, 0.3, 0.2, 0.1]
    return transitions, emissions


def sample(count: int, max_length: int, language, rng: np.random.Generator):
    """``count`` sentences: word ids and tags ``(count, max_length)``, padded with 0 and -1."""
    transitions, emissions = language
    num_tags = len(transitions)
    words = np.zeros((count, max_length), dtype="int32")
    tags = np.full((count, max_length), -1, dtype="int32")
    for i in range(count):
        tag = rng.integers(num_tags)
        for position in range(rng.integers(2, max_length + 1)):
            tags[i, position], words[i, position] = tag, rng.choice(emissions.shape[1], p=emissions[tag])
            tag = rng.choice(num_tags, p=transitions[tag])
    return words, tags


def build_models(args: argparse.Namespace):
    """The training model (packed scores) and the predictor (SparseMAP marginals), sharing layers."""
    words = keras.Input((None,), dtype="int32", name="words")
    hidden = keras.layers.Embedding(args.words, args.hidden, mask_zero=True)(words)
    hidden = keras.layers.Dense(args.hidden, activation="tanh")(hidden)
    unary = keras.layers.Dense(args.tags, name="unary")(hidden)
    scores = ks.SequenceScores(use_boundary=True, name="scores")(unary)
    marginals = ks.SparseMAPSequence(name="sparsemap")(scores)
    return keras.Model(words, scores, name="tagger"), keras.Model(words, marginals, name="predictor")


def make_loss(name: str):
    if name == "sparsemap":
        return ks.SparseMAPLoss(SequenceStructure())
    if name == "margin":
        return ks.MarginSparseMAPLoss(SequenceStructure())
    return ks.LinearChainCRFLoss()


def accuracy(predicted: np.ndarray, tags: np.ndarray) -> float:
    labelled = tags >= 0
    return float((predicted == tags)[labelled].mean())


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    language = make_language(args.tags, args.words, rng)
    x_train, y_train = sample(args.sentences, args.max_length, language, rng)
    x_test, y_test = sample(args.test_sentences, args.max_length, language, rng)
    print(
        f"{args.sentences} training and {args.test_sentences} test sentences, {args.tags} tags, "
        f"{args.words - 1} words, lengths 2-{args.max_length}; loss: {args.loss}"
    )

    tagger, predictor = build_models(args)
    tagger.compile(keras.optimizers.Adam(args.learning_rate), make_loss(args.loss))
    start = time.perf_counter()
    history = tagger.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch_size, verbose=2)
    seconds = time.perf_counter() - start

    lengths = (y_test >= 0).sum(axis=1)
    scores = tagger.predict(x_test, verbose=0)
    decoded, _, _ = ks.map_decode(SequenceStructure(), *unpack_sequence_scores(scores), lengths=lengths)
    marginals = predictor.predict(x_test, verbose=0)
    # The same solve as the predictor's, asked for its active set: how many sequences it mixes.
    _, _, info = ks.sparsemap(
        SequenceStructure(), *unpack_sequence_scores(scores), lengths=lengths, return_info=True
    )
    mixed = (info["weights"].numpy() > 0).sum(axis=1)
    results = {
        "final_loss": float(history.history["loss"][-1]),
        "decoded_accuracy": accuracy(decoded.numpy(), y_test),
        "marginal_accuracy": accuracy(marginals.argmax(axis=-1), y_test),
        "unary_only_accuracy": accuracy(scores[..., 0].argmax(axis=-1), y_test),
        "sequences_per_sentence": float(mixed.mean()),
        "one_sequence_share": float((mixed == 1).mean()),
        "train_seconds": seconds,
    }
    print(f"\nheld-out tag accuracy ({args.epochs} epochs, {seconds:.1f} s of training):")
    print(f"  best sequence (map_decode):        {results['decoded_accuracy']:.3f}")
    print(f"  argmax of the SparseMAP marginals: {results['marginal_accuracy']:.3f}")
    print(f"  unary scores alone (no transitions): {results['unary_only_accuracy']:.3f}")
    print(
        f"SparseMAP mixes {results['sequences_per_sentence']:.2f} tag sequences per sentence on "
        f"average; a single one for {100 * results['one_sequence_share']:.0f}% of them"
    )
    if args.save:
        predictor.save(args.save)
        print(f"saved the predictor to {args.save}")
    return results


if __name__ == "__main__":
    main()
