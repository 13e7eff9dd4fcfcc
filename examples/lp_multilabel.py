"""Multi-label classification on yeast with LP-SparseMAP over label pairs, against sigmoids and sparsemax.

Data: the MULAN yeast set (Elisseeff and Weston, 2002): 2,417 genes, 103 features, 14
binary labels (functional classes), 4.2 labels per gene on average. The file
(``<data>/multiclass/yeast_multilabel.csv.gz``, see that folder's README) does not say which
rows are MULAN's 1,500 training and 917 test genes, so the split keeps MULAN's sizes and
draws the rows by a seeded permutation (``--split-seed``). Features are standardised with
the training statistics.

A baseline without features, ``frequent_labels``, predicts for every gene the same labels:
the most frequent ones in training, as many as a training gene has on average (rounded).
Three models share one MLP body ``x -> Dense(hidden, relu) -> Dense(hidden, relu)`` and
differ in their head, loss and prediction:

* ``sigmoid``: ``Dense(14)`` scores, binary cross-entropy on every label; predicts the
  labels whose sigmoid is above 0.5.
* ``sparsemax``: ``Dense(14)`` scores, ``ks.SparsemaxLoss`` against the labels normalised
  to sum to one; predicts the support of ``ks.sparsemax`` over the labels.
* ``lp_sparsemap``: a factor graph with one variable per label and a
  :class:`~keras_structured.engine.lp.Pair` factor on each of ``--pairs`` label pairs: for
  every label the label it is most correlated with (absolute phi coefficient on the
  training labels), then the most correlated remaining pairs. ``Dense(14 + pairs)`` scores
  the labels and, for each example, the pairs' couplings (packed scores);
  ``ks.LPSparseMAPLoss`` trains it (ADMM tolerance ``--tol``, no polish: the loss's
  gradient ``u - y`` needs neither an exact ``u`` nor its Jacobian) and
  ``ks.LPSparseMAP`` (default tolerance, 1e-6) predicts the labels whose marginal ``u`` is
  above 0.5, where ``u`` solves

      max_{(u, z) in L}  <eta_u, u> + <eta_z, z> - ||u||^2 / 2,

  ``L`` the local polytope of the pairs (``z_ij`` the relaxed product ``u_i u_j``).

Reported on the test genes: example-based F1 (mean over genes of ``2 |Y & P| / (|Y| + |P|)``),
micro-F1, Hamming loss, labels predicted per gene, the share of outputs that are exactly
zero (and exactly 0 or 1), and the training time. The rows go to a CSV (``--out``), a
markdown table to stdout, progress to stderr; ``--save`` keeps the LP-SparseMAP predictor
as a ``.keras`` file.

Run:  python examples/lp_multilabel.py [--epochs 10] [--pairs 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

from _common.cli import DEFAULT_DATA_DIR, make_parser
from _common.experiments import log, report_rows, subsample

MODELS = ("frequent_labels", "sigmoid", "sparsemax", "lp_sparsemap")
MULAN_TRAIN_ROWS = 1500
DATA_FILE = Path("multiclass") / "yeast_multilabel.csv.gz"
COLUMNS = (
    "model",
    "example_f1",
    "micro_f1",
    "hamming_loss",
    "labels_per_example",
    "zero_share",
    "integral_share",
    "train_seconds",
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR / DATA_FILE, help="yeast CSV (gzip)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " + ", ".join(MODELS))
    parser.add_argument("--pairs", type=int, default=20, help="label pairs with a Pair factor (14 to 91)")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs of every model")
    parser.add_argument("--hidden", type=int, default=64, help="width of the two hidden layers")
    parser.add_argument("--tol", type=float, default=1e-4, help="LP-SparseMAP tolerance in the loss")
    parser.add_argument("--batch-size", type=int, default=32, help="Adam batch size")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam learning rate")
    parser.add_argument("--train-rows", type=int, default=None, help="use only this many training rows")
    parser.add_argument("--test-rows", type=int, default=None, help="use only this many test rows")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the 1,500/917 split")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and of --*-rows")
    parser.add_argument("--out", type=Path, default=Path("runs/lp_multilabel.csv"), help="results CSV")
    parser.add_argument("--save", type=Path, default=None, help="optional .keras path of the LP predictor")
    args = parser.parse_args(argv)
    args.models = [name for name in args.models.split(",") if name]
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown or not args.models:
        parser.error(f"--models takes names of {list(MODELS)}. Received: --models={unknown or args.models}")
    if not 14 <= args.pairs <= 91:
        parser.error(
            f"--pairs must be in [14, 91] (every label in a pair; all pairs). Received: {args.pairs}"
        )
    if not args.data.is_file():
        parser.error(f"the yeast data is not at {args.data}: set --data to yeast_multilabel.csv.gz")
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from _common.polynomial_data import standardize  # noqa: E402

import keras_structured as ks  # noqa: E402
from keras_structured.engine.lp import FactorGraph, Pair  # noqa: E402


def load_yeast(path: Path, split_seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: 1,500 / 917 rows drawn by ``split_seed``,
    features standardised, labels as float32 zeros and ones ``(rows, 14)``."""
    import csv
    import gzip

    with gzip.open(path, "rt", newline="") as handle:
        header, *rows = list(csv.reader(handle))
    labels = [i for i, name in enumerate(header) if name.startswith("Class")]
    table = np.array(rows, dtype=np.float64)
    x, y = np.delete(table, labels, axis=1), table[:, labels].astype("float32")
    order = np.random.default_rng(split_seed).permutation(len(table))
    train, test = np.sort(order[:MULAN_TRAIN_ROWS]), np.sort(order[MULAN_TRAIN_ROWS:])
    x_train, x_test = standardize(x[train], x[test])
    return x_train.astype("float32"), y[train], x_test.astype("float32"), y[test]


def correlated_pairs(y: np.ndarray, count: int) -> list[tuple[int, int]]:
    """``count`` label pairs: each label's most correlated partner, then the most correlated
    other pairs (absolute phi coefficient of the label columns ``y``)."""
    phi = np.abs(np.nan_to_num(np.corrcoef(y.T)))
    np.fill_diagonal(phi, -1.0)
    pairs = {tuple(sorted((label, int(phi[label].argmax())))) for label in range(len(phi))}
    upper = np.triu_indices(len(phi), k=1)
    for flat in np.argsort(-phi[upper], kind="stable"):
        if len(pairs) >= count:
            break
        pairs.add((int(upper[0][flat]), int(upper[1][flat])))
    return sorted(pairs)


def label_graph(num_labels: int, pairs: list[tuple[int, int]]) -> FactorGraph:
    """One variable per label, a Pair factor (learned coupling score) per pair."""
    return FactorGraph(num_labels, [Pair(i, j) for i, j in pairs])


def body(num_features: int, hidden: int) -> tuple[keras.KerasTensor, keras.KerasTensor]:
    """The MLP body every model shares: ``(inputs, hidden features)``."""
    inputs = keras.Input((num_features,))
    features = keras.layers.Dense(hidden, activation="relu")(inputs)
    return inputs, keras.layers.Dense(hidden, activation="relu")(features)


def train(model: keras.Model, loss, x: np.ndarray, y: np.ndarray, args: argparse.Namespace) -> float:
    """Fits ``model`` with Adam; returns the seconds it took."""
    model.compile(keras.optimizers.Adam(args.learning_rate), loss)
    start = time.perf_counter()
    model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=2)
    return time.perf_counter() - start


def run_model(name: str, data, args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, float]:
    """Trains model ``name``; returns its test outputs, its predicted label sets and the
    training seconds."""
    x_train, y_train, x_test, _ = data
    num_labels = y_train.shape[1]
    if name == "frequent_labels":
        count = int(round(y_train.sum(axis=1).mean()))
        outputs = np.zeros((len(x_test), num_labels), "float32")
        outputs[:, np.argsort(-y_train.sum(axis=0), kind="stable")[:count]] = 1.0
        return outputs, outputs > 0.5, 0.0
    inputs, features = body(x_train.shape[1], args.hidden)
    if name == "sigmoid":
        model = keras.Model(inputs, keras.layers.Dense(num_labels)(features))
        seconds = train(model, keras.losses.BinaryCrossentropy(from_logits=True), x_train, y_train, args)
        outputs = keras.ops.convert_to_numpy(keras.ops.sigmoid(model.predict(x_test, verbose=0)))
        return outputs, outputs > 0.5, seconds
    if name == "sparsemax":
        model = keras.Model(inputs, keras.layers.Dense(num_labels)(features))
        targets = y_train / y_train.sum(axis=1, keepdims=True)
        seconds = train(model, ks.SparsemaxLoss(sparse_labels=False), x_train, targets, args)
        outputs = keras.ops.convert_to_numpy(ks.sparsemax(model.predict(x_test, verbose=0)))
        return outputs, outputs > 0, seconds
    graph = label_graph(num_labels, correlated_pairs(y_train, args.pairs))
    log(f"lp_sparsemap: {len(graph.factors)} Pair factors")
    model = keras.Model(inputs, keras.layers.Dense(num_labels + graph.v_size)(features))  # packed scores
    seconds = train(model, ks.LPSparseMAPLoss(graph, tol=args.tol, polish=False), x_train, y_train, args)
    predictor = keras.Sequential([model, ks.LPSparseMAP(graph)])
    outputs = predictor.predict(x_test, batch_size=256, verbose=0)
    if args.save:
        predictor.save(args.save)
        log(f"saved the LP-SparseMAP predictor to {args.save}")
    return outputs, outputs > 0.5, seconds


def scores(y: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """Example-based F1 (1 where both sets are empty), micro-F1, Hamming loss, labels per example."""
    y, predicted = y.astype(bool), predicted.astype(bool)
    hits = (y & predicted).sum(axis=1)
    sizes = y.sum(axis=1) + predicted.sum(axis=1)
    example_f1 = np.where(sizes > 0, 2 * hits / np.maximum(sizes, 1), 1.0)
    return {
        "example_f1": float(example_f1.mean()),
        "micro_f1": float(2 * hits.sum() / sizes.sum()),
        "hamming_loss": float((y != predicted).mean()),
        "labels_per_example": float(predicted.sum(axis=1).mean()),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Runs the comparison; returns the results of every model, by name (also in ``--out``)."""
    args = parse_args(argv)
    x_train, y_train, x_test, y_test = load_yeast(args.data, args.split_seed)
    keep_train = subsample(len(x_train), args.train_rows, args.seed)
    keep_test = subsample(len(x_test), args.test_rows, args.seed)
    data = x_train[keep_train], y_train[keep_train], x_test[keep_test], y_test[keep_test]
    log(f"yeast: {len(keep_train)} train and {len(keep_test)} test genes, {y_train.shape[1]} labels")
    results, rows = {}, []
    for name in args.models:
        keras.utils.set_random_seed(args.seed)  # the same initial body for every model
        outputs, predicted, seconds = run_model(name, data, args)
        results[name] = {
            **scores(data[3], predicted),
            "zero_share": float((outputs == 0).mean()),
            "integral_share": float(((outputs == 0) | (outputs == 1)).mean()),
            "train_seconds": seconds,
        }
        rows.append({"model": name, **results[name]})
        log(f"{name}: example-F1 {results[name]['example_f1']:.4f} ({seconds:.1f} s of training)")
    report_rows(args.out, rows, COLUMNS)
    return results


if __name__ == "__main__":
    main()
