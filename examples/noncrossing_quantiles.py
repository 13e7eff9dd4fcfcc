"""Non-crossing quantile regression: ordered quantile outputs via an interpolation projection.

Problem. A network predicts ``k`` conditional quantiles ``q_1(x), ..., q_k(x)`` of a target for
levels ``tau_1 < ... < tau_k`` (default 0.1, 0.25, 0.5, 0.75, 0.9), trained with the mean
pinball (quantile) loss. Trained independently, the outputs can *cross*
(``q_i(x) > q_{i+1}(x)``), which is not a valid set of quantiles.

Models (same MLP body, Adam, mean pinball loss over the ``k`` levels, ``model.fit``):

(a) ``unconstrained``: ``k`` linear outputs;
(b) ``unconstrained + sort``: model (a) with its outputs sorted at test time (post-hoc
    rearrangement, Chernozhukov et al. 2010);
(c) ``projected``: ``k`` linear outputs followed by
    ``InterpolationProjection(Monotone(spacing=0.0), margin=...)``, which interpolates the
    output vector towards an ordered anchor (row mean plus an increasing ramp) whenever it is
    not ordered: outputs never cross, during training and at test time.

Data: scikit-learn's bundled diabetes regression data set (``sklearn.datasets.load_diabetes``,
442 patients, 10 features, target: disease progression one year after baseline; shipped with
scikit-learn, no download). Fixed seeded 80/20 train/test split (``--split-seed``); features
and target standardised with training statistics; losses are reported in target units.

Reported on the test set: mean pinball loss, the pinball loss per level, the crossing rate
(fraction of test points with at least one ``q_i > q_{i+1}``) and the empirical coverage of
the central interval ``[q_1, q_k]``.

Run:  python examples/noncrossing_quantiles.py [--epochs 100] [--seed 0]
(requires scikit-learn for the data: ``pip install scikit-learn``)
"""

from __future__ import annotations

import argparse
import os
import time

from _common.cli import make_parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=100, help="training epochs of every model")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and batching")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the 80/20 train/test split")
    parser.add_argument(
        "--quantiles", type=float, nargs="+", default=[0.1, 0.25, 0.5, 0.75, 0.9], help="increasing levels"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="Adam batch size")
    parser.add_argument("--hidden", type=int, default=32, help="width of the two hidden layers")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam learning rate")
    parser.add_argument(
        "--margin", type=float, default=1e-3, help="projection margin (keeps outputs strictly ordered)"
    )
    parser.add_argument("--max-train", type=int, default=None, help="use only the first N training rows")
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_structured.projections import InterpolationProjection, Monotone  # noqa: E402


def load_data(
    split_seed: int, test_fraction: float = 0.2
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Returns ``(x_train, y_train, x_test, y_test, y_mean, y_std)``; x and y standardised."""
    try:
        from sklearn.datasets import load_diabetes
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise SystemExit("This example needs scikit-learn for its data: pip install scikit-learn") from err
    data = load_diabetes()
    x, y = data.data.astype(np.float64), data.target.astype(np.float64)
    order = np.random.default_rng(split_seed).permutation(len(y))
    num_test = int(round(test_fraction * len(y)))
    test, train = order[:num_test], order[num_test:]
    x_mean, x_std = x[train].mean(axis=0), x[train].std(axis=0)
    y_mean, y_std = float(y[train].mean()), float(y[train].std())
    x = ((x - x_mean) / x_std).astype(np.float32)
    y_scaled = ((y - y_mean) / y_std).astype(np.float32)
    return x[train], y_scaled[train], x[test], y_scaled[test], y_mean, y_std


def pinball_loss(quantiles: list[float]):
    """Mean over batch and levels of ``max(tau (y - q), (tau - 1) (y - q))``."""
    taus = tf.constant(quantiles, tf.float32)

    def loss(y_true, y_pred):
        y_true = tf.reshape(tf.cast(y_true, y_pred.dtype), [-1, 1])
        diff = y_true - y_pred
        return tf.reduce_mean(tf.maximum(taus * diff, (taus - 1.0) * diff))

    return loss


def np_pinball(y: np.ndarray, q: np.ndarray, quantiles: list[float]) -> np.ndarray:
    """Pinball loss per level (averaged over points)."""
    taus = np.asarray(quantiles, dtype=np.float64)
    diff = y[:, None] - q
    return np.maximum(taus * diff, (taus - 1.0) * diff).mean(axis=0)


def build_model(
    num_features: int, num_quantiles: int, hidden: int, projection: InterpolationProjection | None
) -> keras.Model:
    inputs = keras.Input((num_features,))
    h = keras.layers.Dense(hidden, activation="relu")(inputs)
    h = keras.layers.Dense(hidden, activation="relu")(h)
    outputs = keras.layers.Dense(num_quantiles)(h)
    if projection is not None:
        outputs = projection(outputs)
    return keras.Model(inputs, outputs)


def evaluate(y: np.ndarray, q: np.ndarray, quantiles: list[float]) -> dict[str, object]:
    per_level = np_pinball(y, q, quantiles)
    crossing = (np.diff(q, axis=-1) < 0).any(axis=-1)
    coverage = ((y >= q[:, 0]) & (y <= q[:, -1])).mean()
    return {
        "pinball": float(per_level.mean()),
        "per_level": per_level,
        "crossing_rate": float(crossing.mean()),
        "coverage": float(coverage),
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, object]]:
    args = parse_args(argv)
    tf.get_logger().setLevel("ERROR")
    quantiles = [float(t) for t in args.quantiles]
    if (
        len(quantiles) < 2
        or bool(np.any(np.diff(quantiles) <= 0))
        or not (0 < quantiles[0] and quantiles[-1] < 1)
    ):
        raise ValueError(f"--quantiles must be >= 2 increasing levels in (0, 1). Received: {quantiles!r}")
    x_train, y_train, x_test, y_test, y_mean, y_std = load_data(args.split_seed)
    if args.max_train is not None:
        x_train, y_train = x_train[: args.max_train], y_train[: args.max_train]
    print(
        f"diabetes: {len(x_train)} train / {len(x_test)} test, {x_train.shape[1]} features; "
        f"quantile levels {quantiles}"
    )
    y_test_units = y_test.astype(np.float64) * y_std + y_mean

    def predict(model: keras.Model) -> np.ndarray:
        q = model.predict(x_test, batch_size=1024, verbose=0).astype(np.float64)
        return q * y_std + y_mean  # increasing affine map: preserves the ordering

    results: dict[str, dict[str, object]] = {}
    for name, projection in [
        ("unconstrained", None),
        ("projected (Monotone)", InterpolationProjection(Monotone(spacing=0.0), margin=args.margin)),
    ]:
        keras.utils.set_random_seed(args.seed)
        model = build_model(x_train.shape[1], len(quantiles), args.hidden, projection)
        model.compile(optimizer=keras.optimizers.Adam(args.learning_rate), loss=pinball_loss(quantiles))
        start = time.perf_counter()
        model.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch_size, shuffle=True, verbose=0)
        elapsed = time.perf_counter() - start
        q = predict(model)
        results[name] = evaluate(y_test_units, q, quantiles) | {"train_seconds": elapsed}
        if projection is None:
            sorted_q = np.sort(q, axis=-1)
            results["unconstrained + sort"] = evaluate(y_test_units, sorted_q, quantiles) | {
                "train_seconds": elapsed
            }
    order = ["unconstrained", "unconstrained + sort", "projected (Monotone)"]

    print()
    print(
        f"Test set, diabetes ({args.epochs} epochs, seed {args.seed}, split seed {args.split_seed}; "
        f"pinball loss in target units):"
    )
    print()
    level_cols = " | ".join(f"pinball tau={t:g}" for t in quantiles)
    print(
        f"| model | mean pinball | {level_cols} | crossing rate | "
        f"coverage [q{quantiles[0]:g}, q{quantiles[-1]:g}] | train time (s) |"
    )
    print("|---" * (len(quantiles) + 5) + "|")
    for name in order:
        r = results[name]
        levels = " | ".join(f"{v:.3f}" for v in r["per_level"])
        print(
            f"| {name} | {r['pinball']:.3f} | {levels} | {r['crossing_rate']:.4f} | "
            f"{r['coverage']:.3f} | {r['train_seconds']:.1f} |"
        )
    print()
    print(f"projected crossing rate: {results['projected (Monotone)']['crossing_rate']}")
    return {name: results[name] for name in order}


if __name__ == "__main__":
    main()
