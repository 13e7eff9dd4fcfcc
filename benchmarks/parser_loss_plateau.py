"""Why the structured hinge and perceptron losses stall the BiLSTM parser: the constant-score plateau.

For constant arc scores every tree scores the same, so the cost-augmented hinge loss
``max_y [s(y) + cost(y, gold)] - s(gold)`` equals the largest Hamming cost, ``2 n`` for a
sentence of ``n`` words (a wrong head differs from the gold tree in two arc indicators).
This script trains the parser of :mod:`keras_structured.applications.parsing` from its Keras
initialisation, step by step, and prints every ``--every`` steps, per loss:

* ``loss - 2n``: the mean training loss minus its constant-score value (hinge only);
* ``arc acc``: the share of words whose best-scoring head (per word, no tree) is gold,
  on the training batches;
* ``feature std``: the standard deviation of the BiLSTM outputs that the arc scorer reads;
* ``score std``: the standard deviation of the arc scores.

The CRF and SparseMAP gradients (``marginals - gold``) push every gold arc up against a
spread of competitors and the features grow; the hinge gradient (``argmax - gold``)
pushes the current best competitor down, which at initialisation mostly shrinks the
spread of scores the network has, and the features shrink towards the plateau.

Example:
    python benchmarks/parser_loss_plateau.py --losses hinge crf --steps 300
"""

from __future__ import annotations

import argparse
import pathlib

DEFAULT_TREEBANK = (
    pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "ud" / "vi_vtb-2.0"
).resolve()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--treebank", type=pathlib.Path, default=DEFAULT_TREEBANK, help="(default %(default)s)"
    )
    parser.add_argument("--losses", nargs="+", default=["hinge", "crf"], help="(default hinge crf)")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam's (default %(default)s)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default %(default)s)")
    parser.add_argument("--every", type=int, default=50, help="print every N steps (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="(default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="(default %(default)s)")
    return parser.parse_args(argv)


def trace(loss_name: str, args: argparse.Namespace) -> None:
    """Train one parser for ``args.steps`` steps and print the plateau statistics."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_structured.applications.parsing.batching import make_dataset
    from keras_structured.applications.parsing.conllu_reader import read_conllu, treebank_paths
    from keras_structured.applications.parsing.model import build_parser, make_loss
    from keras_structured.applications.parsing.vocabulary import Vocabulary

    train = read_conllu(treebank_paths(str(args.treebank), ("train",))["train"])
    train = [s for s in train if 0 < s.length <= 100]
    keras.utils.set_random_seed(args.seed)
    vocabulary = Vocabulary.from_sentences(train)
    model = build_parser(vocabulary.num_words, vocabulary.num_tags)
    features = keras.Model(model.inputs, model.get_layer("arc_scores").input)
    loss, optimizer = make_loss(loss_name), keras.optimizers.Adam(args.learning_rate)
    print(f"{loss_name}, lr {args.learning_rate:g}")
    print(f"{'step':>6} {'loss':>8} {'loss - 2n':>10} {'arc acc':>8} {'feature std':>12} {'score std':>10}")
    rows, step, epoch = [], 0, 0
    while step < args.steps:
        for x, heads in make_dataset(
            train, vocabulary, args.batch_size, shuffle=True, seed=epoch, word_dropout_alpha=0.25
        ):
            with tf.GradientTape() as tape:
                scores = model(x, training=True)
                value = loss(heads, scores)
            optimizer.apply_gradients(
                zip(tape.gradient(value, model.trainable_variables), model.trainable_variables, strict=True)
            )
            heads, scores = heads.numpy(), scores.numpy()
            words = heads >= 0
            correct = (scores.argmax(axis=1) == heads)[words].mean()
            rows.append((float(value), 2 * words.sum(axis=1).mean(), correct))
            step += 1
            if step % args.every == 0 or step == 1:
                recent = np.mean(rows[-args.every :], axis=0)
                spread = np.std(features(x).numpy())
                finite = scores[np.isfinite(scores)]
                print(
                    f"{step:>6} {recent[0]:>8.3f} {recent[0] - recent[1]:>10.4f} {recent[2]:>8.3f} "
                    f"{spread:>12.4f} {np.std(finite):>10.4f}",
                    flush=True,
                )
            if step >= args.steps:
                break
        epoch += 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for loss_name in args.losses:
        trace(loss_name, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
