"""A classifier that is never over-confident: predicted entropy is bounded below by construction.

Problem. For a ``K``-class classifier we require every predicted distribution ``p(y | x)`` to
satisfy ``H(p) >= bound`` (in nats), i.e. the model may never be more confident than a
prescribed level. The bound is a fraction of the maximum entropy ``log K``
(``--entropy-fraction``).

Models (same MLP body, Adam, cross-entropy on the final probabilities, ``model.fit``):

(a) ``softmax``: unconstrained softmax output;
(b) ``confidence penalty``: unconstrained softmax trained with ``CE - beta * H(p)``
    (Pereyra et al. 2017), which discourages but does not forbid low entropy;
(c) ``projected``: softmax followed by
    ``InterpolationProjection(EntropyLowerBound(bound), margin=...)``, which interpolates
    ``p`` towards the uniform distribution whenever ``H(p) < bound``: the constraint holds for
    every input, at training and at test time, and gradients flow through the projection.

Data: the Statlog (Landsat) satellite data set, ``shared/data/multiclass/satellite.csv`` next to
the repository (header row, 36 features, last column ``label``), standard split (rows 1-4435
train, 4436-6435 test), features standardised with training statistics.

Reported on the test set: accuracy, negative log-likelihood, expected calibration error
(15 equal-width confidence bins), mean and minimum predicted entropy.

Run:  python examples/entropy_bounded_classifier.py [--epochs 60] [--seed 0] [--entropy-fraction 0.1]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

from _common.cli import DEFAULT_DATA_DIR, make_parser

DEFAULT_DATA = DEFAULT_DATA_DIR / "multiclass" / "satellite.csv"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to satellite.csv")
    parser.add_argument("--epochs", type=int, default=60, help="training epochs of every model")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and batching")
    parser.add_argument("--batch-size", type=int, default=64, help="Adam batch size")
    parser.add_argument("--hidden", type=int, default=128, help="width of the two hidden layers")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam learning rate")
    parser.add_argument(
        "--entropy-fraction", type=float, default=0.1, help="bound = fraction * log K (must be in [0, 1))"
    )
    parser.add_argument("--beta", type=float, default=0.1, help="confidence-penalty weight (model b)")
    parser.add_argument(
        "--margin", type=float, default=1e-3, help="projection margin (keeps outputs strictly feasible)"
    )
    parser.add_argument("--max-train", type=int, default=None, help="use only the first N training rows")
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_structured.projections import EntropyLowerBound, InterpolationProjection  # noqa: E402

NUM_TRAIN = 4435


def load_satellite(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Returns standardised ``(x_train, y_train, x_test, y_test, class_names)`` (standard split)."""
    with open(path) as f:
        header = f.readline().strip().split(",")
        rows = [line.strip().split(",") for line in f if line.strip()]
    if header[-1] != "label":
        raise ValueError(f"Expected the last column to be 'label'. Received: header={header!r}")
    features = np.array([[float(v) for v in row[:-1]] for row in rows], dtype=np.float64)
    labels = [row[-1] for row in rows]
    class_names = sorted(set(labels))
    index = {name: i for i, name in enumerate(class_names)}
    y = np.array([index[name] for name in labels], dtype=np.int64)
    x_train, x_test = features[:NUM_TRAIN], features[NUM_TRAIN:]
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std[std == 0] = 1.0
    x_train = ((x_train - mean) / std).astype(np.float32)
    x_test = ((x_test - mean) / std).astype(np.float32)
    return x_train, y[:NUM_TRAIN], x_test, y[NUM_TRAIN:], class_names


def np_entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) of each row, ``0 log 0 = 0``."""
    probs = probs.astype(np.float64)
    logs = np.log(np.where(probs > 0, probs, 1.0))
    return -(probs * logs).sum(axis=-1)


def expected_calibration_error(probs: np.ndarray, y: np.ndarray, num_bins: int = 15) -> float:
    """ECE with ``num_bins`` equal-width bins on the top-class confidence (Guo et al. 2017)."""
    confidence = probs.max(axis=-1)
    correct = (probs.argmax(axis=-1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    ece = 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        in_bin = (confidence > lo) & (confidence <= hi)
        if in_bin.any():
            ece += in_bin.mean() * abs(correct[in_bin].mean() - confidence[in_bin].mean())
    return float(ece)


def build_model(
    num_features: int, num_classes: int, hidden: int, projection: InterpolationProjection | None
) -> keras.Model:
    """MLP body -> softmax probabilities (-> optional projection)."""
    inputs = keras.Input((num_features,))
    h = keras.layers.Dense(hidden, activation="relu")(inputs)
    h = keras.layers.Dense(hidden, activation="relu")(h)
    probs = keras.layers.Dense(num_classes, activation="softmax")(h)
    if projection is not None:
        probs = projection(probs)
    return keras.Model(inputs, probs)


def confidence_penalty_loss(beta: float):
    """``CE(y, p) - beta * H(p)`` (Pereyra et al. 2017)."""
    ce = keras.losses.SparseCategoricalCrossentropy()

    def loss(y_true, y_pred):
        p = tf.clip_by_value(y_pred, 1e-7, 1.0)
        ent = -tf.reduce_sum(p * tf.math.log(p), axis=-1)
        return ce(y_true, y_pred) - beta * tf.reduce_mean(ent)

    return loss


def evaluate(probs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    probs = probs.astype(np.float64)
    ent = np_entropy(probs)
    nll = -np.log(np.clip(probs[np.arange(len(y)), y], 1e-12, 1.0)).mean()
    return {
        "accuracy": float((probs.argmax(axis=-1) == y).mean()),
        "nll": float(nll),
        "ece": expected_calibration_error(probs, y),
        "mean_entropy": float(ent.mean()),
        "min_entropy": float(ent.min()),
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    args = parse_args(argv)
    tf.get_logger().setLevel("ERROR")
    if not 0.0 <= args.entropy_fraction < 1.0:
        raise ValueError(f"--entropy-fraction must be in [0, 1). Received: {args.entropy_fraction!r}")
    x_train, y_train, x_test, y_test, class_names = load_satellite(args.data)
    if args.max_train is not None:
        x_train, y_train = x_train[: args.max_train], y_train[: args.max_train]
    num_classes = len(class_names)
    bound = args.entropy_fraction * math.log(num_classes)
    print(
        f"satellite: {len(x_train)} train / {len(x_test)} test, {x_train.shape[1]} features, "
        f"K={num_classes}; entropy bound = {args.entropy_fraction} * log K = {bound:.4f} nats"
    )

    configs = {
        "softmax": (None, keras.losses.SparseCategoricalCrossentropy()),
        f"confidence penalty (beta={args.beta:g})": (None, confidence_penalty_loss(args.beta)),
        "projected (EntropyLowerBound)": (
            InterpolationProjection(EntropyLowerBound(bound), margin=args.margin),
            keras.losses.SparseCategoricalCrossentropy(),
        ),
    }
    results: dict[str, dict[str, float]] = {}
    for name, (projection, loss) in configs.items():
        keras.utils.set_random_seed(args.seed)
        model = build_model(x_train.shape[1], num_classes, args.hidden, projection)
        model.compile(optimizer=keras.optimizers.Adam(args.learning_rate), loss=loss)
        start = time.perf_counter()
        model.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch_size, shuffle=True, verbose=0)
        elapsed = time.perf_counter() - start
        probs = model.predict(x_test, batch_size=1024, verbose=0)
        results[name] = evaluate(probs, y_test)
        results[name]["train_seconds"] = elapsed

    print()
    print(
        f"Test set, satellite ({args.epochs} epochs, seed {args.seed}, "
        f"entropy bound {bound:.4f} nats = {args.entropy_fraction:g} log {num_classes}):"
    )
    print()
    print("| model | accuracy | NLL | ECE (15 bins) | mean entropy | min entropy | train time (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['accuracy']:.4f} | {r['nll']:.4f} | {r['ece']:.4f} | "
            f"{r['mean_entropy']:.4f} | {r['min_entropy']:.4f} | {r['train_seconds']:.1f} |"
        )
    projected = results["projected (EntropyLowerBound)"]
    print()
    print(f"bound: {bound:.6f}")
    print(f"projected min entropy: {projected['min_entropy']:.6f}")
    print(f"constraint satisfied: {projected['min_entropy'] >= bound}")
    return results


if __name__ == "__main__":
    main()
