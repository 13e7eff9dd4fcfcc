"""keras-structured quickstart: sparsemax vs softmax, then SparseMAP over tag sequences,
dependency trees and matchings.

SparseMAP returns a sparse combination of a few whole structures (label
sequences, parse trees, alignments), found with only a MAP oracle (Viterbi,
Chu-Liu-Edmonds, Hungarian), and is differentiable.

Run:  python examples/quickstart.py [--seed 0] [--length 6] [--labels 3]
"""

from __future__ import annotations

import argparse
import os

from _common.cli import make_parser

TAGS = ["DET", "NOUN", "VERB", "ADJ", "ADV", "PRON"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    parser.add_argument("--seed", type=int, default=0, help="random seed for the scores")
    parser.add_argument("--length", type=int, default=6, help="sentence length")
    parser.add_argument(
        "--labels", type=int, default=3, choices=range(1, len(TAGS) + 1), help="number of tags"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_structured as ks  # noqa: E402
from keras_structured.engine import DependencyTreeStructure, MatchingStructure  # noqa: E402


def show_sparsemax() -> None:
    scores = tf.constant([[2.0, 1.4, 0.1, -1.0]])
    print("scores      ", scores.numpy()[0])
    print("softmax     ", np.round(tf.nn.softmax(scores).numpy()[0], 3), "(dense)")
    print("sparsemax   ", np.round(ks.sparsemax(scores).numpy()[0], 3), "(exact zeros)")


def show_sparsemap(seed: int, length: int, num_labels: int) -> None:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(length)]
    unary = tf.constant(rng.normal(size=(1, length, num_labels)))
    transitions = tf.constant(rng.normal(size=(num_labels, num_labels)))
    with tf.GradientTape() as tape:
        tape.watch(unary)
        u, v, info = ks.sparsemap_sequence(unary, transitions, return_info=True)
        first_tag_marginal = u[0, 0, 0]
    grad = tape.gradient(first_tag_marginal, unary)
    tags = TAGS[:num_labels]
    print(
        f"\nSparseMAP over {num_labels}**{length} = {num_labels**length} tag sequences "
        f"({int(info['map_calls'][0])} Viterbi calls, gap {float(info['gap'][0]):.1e}):"
    )
    weights = info["weights"].numpy()[0]
    structures = info["structures"].numpy()[0]
    for weight, sequence in sorted(zip(weights, structures, strict=True), key=lambda p: -p[0]):
        if weight > 0:
            tagged = " ".join(f"{w}/{tags[t]}" for w, t in zip(words, sequence, strict=True))
            print(f"  {weight:6.3f}  {tagged}")
    print("unary marginals u (rows: words, columns: tags):")
    print(np.round(u.numpy()[0], 3))
    print("d u[0, 0] / d unary[0] =", np.round(grad.numpy()[0, 0], 3))


def show_trees(seed: int) -> None:
    words = ["<root>", "I", "saw", "her", "duck"]
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(1, 5, 5)) * 0.1
    scores[0, 0, 2] += 2.0  # root -> saw
    scores[0, 2, 1] += 2.0  # saw -> I
    scores[0, 2, 3] += 1.0  # saw -> her: "her" is the object ...
    scores[0, 3, 4] += 0.6  # her -> duck
    scores[0, 4, 3] += 0.6  # ... or "her duck": duck -> her
    scores[0, 2, 4] += 1.0  # saw -> duck
    u, _, info = ks.sparsemap(
        DependencyTreeStructure(single_root=True), tf.constant(scores), return_info=True
    )
    print("\nSparseMAP over the dependency trees of 'I saw her duck' (Chu-Liu-Edmonds oracle):")
    for weight, heads in _active(info):
        arcs = ", ".join(f"{words[h]}->{words[d]}" for d, h in enumerate(heads) if d > 0)
        print(f"  {weight:6.3f}  {arcs}")
    print("arc marginals u[head, modifier]:")
    print(np.round(u.numpy()[0], 3))


def show_matching(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = np.eye(4) + rng.normal(size=(4, 4)) * 0.5
    u, _, info = ks.sparsemap(MatchingStructure(), tf.constant(scores[None]), return_info=True)
    print("\nSparseMAP over the 4! = 24 matchings of a 4x4 alignment (Hungarian oracle):")
    for weight, columns in _active(info):
        print(f"  {weight:6.3f}  " + " ".join(f"{i}->{j}" for i, j in enumerate(columns)))
    print("alignment u:")
    print(np.round(u.numpy()[0], 3))


def _active(info):
    weights, structures = info["weights"].numpy()[0], info["structures"].numpy()[0]
    order = np.argsort(-weights)
    return [(weights[i], structures[i]) for i in order if weights[i] > 0]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    show_sparsemax()
    show_sparsemap(args.seed, args.length, args.labels)
    show_trees(args.seed)
    show_matching(args.seed)


if __name__ == "__main__":
    main()
