"""Multi-class polynomial networks: test accuracy against the number of basis vectors.

Measured, on each multi-class set (splits and standardisation: ``_common/polynomial_data.py``), the
test accuracy of these models as a function of the budget ``k`` (``--budgets``), the number
of basis vectors (hidden units) of the whole model:

* ``cg l1/l2``, ``cg l1/linf``, ``cg l1``: one multi-output polynomial network
  ``o_c(x) = sum_r V[r, c] (h_r . [1, x])^2`` trained by conditional gradient (paper
  Alg. 1, ``PolynomialNetworkClassifier``, multinomial logistic loss, ``refit="V"``) with
  ``max_basis=k``. The trainer is deterministic for a seed, so the model fitted with
  ``max_basis=k`` is the iterate of a longer run at the moment it first has ``k`` basis
  vectors (a snapshot).
* ``ovr l1``: one-vs-rest, ``m`` single-output binary polynomial networks (conditional
  gradient, binary logistic loss: ``OrdinalPolynomialNetwork`` on the two "ratings"
  ``1 + [y = c]``) sharing the same *total* budget: classifier ``c`` gets ``k // m`` basis
  vectors, plus one for the first ``k % m`` classes; budgets ``k < m`` are skipped.
  Prediction: the class with the largest logit.
* ``sgd``: the Keras ``PolynomialNetwork`` layer (``rank=k``, ``augment=True``) trained with
  Adam on the softmax cross-entropy (``--epochs``, ``--batch-size``, ``--lr``; not tuned).
* ``svm poly2``: scikit-learn ``SVC(kernel="poly", degree=2, coef0=1, gamma="scale")``; its
  model size is its number of support vectors.

Hyper-parameters: ``tau`` of every conditional-gradient model (grid ``--taus``) and ``C``
of the SVM (grid ``--svm-cs``) are chosen by accuracy on a stratified validation split
(``--val-fraction`` of the training rows, seeded) with the models trained on the rest (ties:
the first grid value); ``tau`` is chosen at the budget ``--select-budget``, then used for
every budget. The chosen model is refitted on the whole training set and evaluated once on
the test set.

Outputs: a CSV (``--out``, one row per dataset, model and budget), markdown tables on stdout
(accuracy against ``k``; the SVM and the smallest budget within ``--within`` of its accuracy)
and, with ``--plot``, a PNG of accuracy against ``k``. Progress goes to stderr.
``--summarize a.csv b.csv`` only tabulates (and plots) earlier results, e.g. of runs split
by dataset.

Run:  python examples/polynomial_multiclass.py --datasets vowel,vehicle --budgets 5,10,20,40
(needs scikit-learn; matplotlib for ``--plot``)
"""

from __future__ import annotations

import argparse
import csv
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from _common.cli import make_parser
from _common.experiments import (
    add_common_arguments,
    float_list,
    holdout,
    int_list,
    log,
    markdown_table,
    subsample,
    write_csv,
)
from _common.polynomial_data import MULTICLASS_DATASETS, MulticlassSplit, load_multiclass

CG_PENALTIES = ("l1/l2", "l1/linf", "l1")
BUDGET_METHODS = (*(f"cg {penalty}" for penalty in CG_PENALTIES), "ovr l1", "sgd")
SVM = "svm poly2"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    add_common_arguments(parser, out="runs/polynomial_multiclass.csv")
    parser.add_argument("--datasets", default=",".join(MULTICLASS_DATASETS), help="comma-separated")
    parser.add_argument("--methods", default=",".join((*BUDGET_METHODS, SVM)), help="comma-separated")
    parser.add_argument(
        "--budgets", type=int_list, default=[5, 10, 20, 40, 80], help="basis vector budgets k"
    )
    parser.add_argument("--taus", type=float_list, default=[10.0, 100.0, 1000.0], help="tau grid")
    parser.add_argument("--svm-cs", type=float_list, default=[0.1, 1.0, 10.0, 100.0], help="SVM C grid")
    parser.add_argument("--select-budget", type=int, default=10, help="budget k at which tau is chosen")
    parser.add_argument(
        "--val-fraction", type=float, default=0.2, help="validation share of the training rows"
    )
    parser.add_argument(
        "--max-train", type=int, default=None, help="use a seeded subset of the training rows"
    )
    parser.add_argument("--tol", type=float, default=1e-4, help="relative Frank-Wolfe gap tolerance")
    parser.add_argument("--refit-iter", type=int, default=50, help="iterations of each corrective refit")
    parser.add_argument("--epochs", type=int, default=60, help="Adam epochs of the sgd model")
    parser.add_argument("--batch-size", type=int, default=64, help="Adam batch size of the sgd model")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate of the sgd model")
    parser.add_argument(
        "--within", type=float, default=0.01, help="accuracy tolerance of the size comparison"
    )
    parser.add_argument("--plot", type=Path, default=None, help="optional PNG of accuracy against k")
    parser.add_argument(
        "--summarize", type=Path, nargs="+", default=None, help="run nothing: tabulate (and plot) these CSVs"
    )
    args = parser.parse_args(argv)
    args.methods = args.methods.split(",")
    unknown = set(args.methods) - {*BUDGET_METHODS, SVM}
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; choose from {[*BUDGET_METHODS, SVM]}")
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_structured.polynomial import (  # noqa: E402
    ConvergenceWarning,
    OrdinalPolynomialNetwork,
    PolynomialNetwork,
    PolynomialNetworkClassifier,
)


def _cg_kwargs(args: argparse.Namespace, budget: int) -> dict:
    return dict(
        max_basis=budget,
        max_iter=3 * budget,
        tol=args.tol,
        refit="V",
        refit_iter=args.refit_iter,
        random_state=args.seed,
    )


class OneVsRestNetworks:
    """``m`` single-output binary polynomial networks sharing a total of ``budget`` basis vectors."""

    def __init__(self, n_classes: int, budget: int, tau: float, args: argparse.Namespace):
        if budget < n_classes:
            raise ValueError(f"budget must be >= n_classes={n_classes}. Received: budget={budget}")
        shares = budget // n_classes + (np.arange(n_classes) < budget % n_classes)
        self.models = [
            OrdinalPolynomialNetwork(loss="logistic", penalty="l1", tau=tau, **_cg_kwargs(args, int(share)))
            for share in shares
        ]

    def fit(self, x: np.ndarray, y: np.ndarray) -> OneVsRestNetworks:
        for label, model in enumerate(self.models):
            model.fit(x, 1 + (y == label))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        # P(y = c) = sigmoid(logit_c): the largest probability is the largest logit.
        probabilities = [model.predict_cumulative(x)[:, 0] for model in self.models]
        return np.argmax(np.column_stack(probabilities), axis=1)

    @property
    def n_basis_(self) -> int:
        return sum(model.n_basis_ for model in self.models)


class AdamNetwork:
    """The Keras ``PolynomialNetwork`` layer (``rank = budget``) trained by Adam on cross-entropy."""

    def __init__(self, n_classes: int, budget: int, args: argparse.Namespace):
        self.n_classes, self.n_basis_, self.args = n_classes, budget, args

    def fit(self, x: np.ndarray, y: np.ndarray) -> AdamNetwork:
        keras.utils.set_random_seed(self.args.seed)
        self.model = keras.Sequential(
            [
                keras.Input((x.shape[1],)),
                PolynomialNetwork(units=self.n_classes, rank=self.n_basis_, augment=True),
            ]
        )
        self.model.compile(
            optimizer=keras.optimizers.Adam(self.args.lr),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        self.model.fit(x, y, epochs=self.args.epochs, batch_size=self.args.batch_size, verbose=0)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.argmax(self.model.predict(x, batch_size=4096, verbose=0), axis=1)


class PolySVM:
    """Degree-2 polynomial kernel SVM; its size is the number of support vectors."""

    def __init__(self, c: float):
        from sklearn.svm import SVC

        self.svc = SVC(kernel="poly", degree=2, coef0=1.0, gamma="scale", C=c)

    def fit(self, x: np.ndarray, y: np.ndarray) -> PolySVM:
        self.svc.fit(x, y)
        self.n_basis_ = int(self.svc.n_support_.sum())
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.svc.predict(x)


def make_model(method: str, n_classes: int, budget: int, hyper: float, args: argparse.Namespace):
    """The unfitted model ``method`` with budget ``budget`` and hyper-parameter (``tau``/``C``) ``hyper``."""
    if method.startswith("cg "):
        penalty = method.removeprefix("cg ")
        return PolynomialNetworkClassifier(
            loss="logistic", penalty=penalty, tau=hyper, **_cg_kwargs(args, budget)
        )
    if method == "ovr l1":
        return OneVsRestNetworks(n_classes, budget, hyper, args)
    if method == "sgd":
        return AdamNetwork(n_classes, budget, args)
    return PolySVM(hyper)


def n_parameters(method: str, n_basis: int, n_features: int, n_classes: int) -> int:
    """Stored numbers: ``k (d + 1) + k m`` for a shared-basis network, ``k (d + 2)`` for one-vs-rest
    (one output weight per basis vector), ``n_SV (d + m - 1)`` for the SVM (vectors and dual weights)."""
    if method == SVM:
        return n_basis * (n_features + n_classes - 1)
    if method == "ovr l1":
        return n_basis * (n_features + 2)
    return n_basis * (n_features + 1 + n_classes)


def _accuracy(model, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(model.predict(x) == y))


def select_hyper(
    build: Callable[[float], object], grid: Sequence[float], data: MulticlassSplit, args: argparse.Namespace
) -> tuple[float, float]:
    """``(best value, its validation accuracy)`` of ``build(value).fit`` over ``grid``."""
    fit_rows, val_rows = holdout(len(data.y_train), args.val_fraction, args.seed, stratify=data.y_train)
    scores = []
    for value in grid:
        model = build(value).fit(data.x_train[fit_rows], data.y_train[fit_rows])
        scores.append(_accuracy(model, data.x_train[val_rows], data.y_train[val_rows]))
    best = int(np.argmax(scores))
    return grid[best], scores[best]


def run_dataset(data: MulticlassSplit, args: argparse.Namespace) -> list[dict]:
    """Selects the hyper-parameters, then fits and tests every model at every budget."""
    n_classes, n_features = len(data.classes), data.x_train.shape[1]
    rows = []

    def evaluate(method: str, budget: int, hyper: float, val_accuracy: float) -> None:
        start = time.perf_counter()
        model = make_model(method, n_classes, budget, hyper, args).fit(data.x_train, data.y_train)
        seconds = time.perf_counter() - start
        rows.append(
            dict(
                dataset=data.name,
                method=method,
                budget=budget,
                hyper=hyper,
                val_accuracy=val_accuracy,
                n_basis=model.n_basis_,
                n_params=n_parameters(method, model.n_basis_, n_features, n_classes),
                test_accuracy=_accuracy(model, data.x_test, data.y_test),
                fit_seconds=round(seconds, 2),
            )
        )
        log(f"{data.name} {method} k={budget}: accuracy {rows[-1]['test_accuracy']:.4f} ({seconds:.1f}s)")

    if SVM in args.methods:
        c, val_accuracy = select_hyper(
            lambda c: make_model(SVM, n_classes, 0, c, args), args.svm_cs, data, args
        )
        log(f"{data.name} {SVM}: C={c} (validation accuracy {val_accuracy:.4f})")
        evaluate(SVM, 0, c, val_accuracy)
    for method in (m for m in BUDGET_METHODS if m in args.methods):
        budgets = [k for k in args.budgets if method != "ovr l1" or k >= n_classes]
        if not budgets:
            continue
        tau = val_accuracy = float("nan")
        if method != "sgd":
            select_budget = max(args.select_budget, n_classes) if method == "ovr l1" else args.select_budget
            tau, val_accuracy = select_hyper(
                lambda tau, m=method, k=select_budget: make_model(m, n_classes, k, tau, args),
                args.taus,
                data,
                args,
            )
            log(
                f"{data.name} {method}: tau={tau} (validation accuracy {val_accuracy:.4f}, k={select_budget})"
            )
        for budget in budgets:
            evaluate(method, budget, tau, val_accuracy)
    return rows


def summary_tables(rows: Sequence[dict], within: float) -> str:
    """Accuracy against ``k`` per dataset and model; then the SVM and the smallest budget near it."""
    budgets = sorted({row["budget"] for row in rows if row["method"] != SVM})
    datasets = list(dict.fromkeys(row["dataset"] for row in rows))
    accuracy = {(r["dataset"], r["method"], r["budget"]): r for r in rows}
    pivot = []
    for dataset in datasets:
        for method in BUDGET_METHODS:
            cells = {
                f"k={k}": accuracy[dataset, method, k]["test_accuracy"]
                for k in budgets
                if (dataset, method, k) in accuracy
            }
            if cells:
                hyper = next(r["hyper"] for r in rows if r["dataset"] == dataset and r["method"] == method)
                pivot.append(dict(dataset=dataset, method=method, tau=hyper, **cells))
    text = "Test accuracy against the number of basis vectors k\n\n"
    text += markdown_table(pivot, ["dataset", "method", "tau", *(f"k={k}" for k in budgets)])
    reference = []
    for dataset in datasets:
        if (dataset, SVM, 0) not in accuracy:
            continue
        svm = accuracy[dataset, SVM, 0]
        row = dict(
            dataset=dataset,
            C=svm["hyper"],
            accuracy=svm["test_accuracy"],
            SVs=svm["n_basis"],
            params=svm["n_params"],
        )
        for method in BUDGET_METHODS:
            reached = [
                accuracy[dataset, method, k]
                for k in budgets
                if (dataset, method, k) in accuracy
                and accuracy[dataset, method, k]["test_accuracy"] >= svm["test_accuracy"] - within
            ]
            row[method] = f"{reached[0]['budget']} ({reached[0]['n_params']})" if reached else "-"
        reference.append(row)
    if reference:
        text += (
            f"\n\nPolynomial kernel SVM and, per model, the smallest budget k (parameters) whose test "
            f"accuracy is at least the SVM's minus {within}\n\n"
        )
        text += markdown_table(reference, ["dataset", "C", "accuracy", "SVs", "params", *BUDGET_METHODS])
    return text


def read_rows(paths: Sequence[Path]) -> list[dict]:
    """The rows of result CSVs written by this script, with their numeric types."""
    types = dict(budget=int, n_basis=int, n_params=int)
    types.update(dict.fromkeys(("hyper", "val_accuracy", "test_accuracy", "fit_seconds"), float))
    rows = []
    for path in paths:
        with path.open(newline="") as handle:
            rows += [
                {key: types.get(key, str)(value) for key, value in row.items()}
                for row in csv.DictReader(handle)
            ]
    return rows


def plot(rows: Sequence[dict], path: Path) -> None:
    """Accuracy against ``k`` (log scale), one panel per dataset; the SVM as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(row["dataset"] for row in rows))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4 * len(datasets), 3.5), squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for method in (*BUDGET_METHODS, SVM):
            runs = [r for r in rows if r["dataset"] == dataset and r["method"] == method]
            if method == SVM and runs:
                ax.axhline(runs[0]["test_accuracy"], color="k", linestyle="--", label=SVM)
                ax.text(0.98, 0.02, f"SVM: {runs[0]['n_basis']} SVs", transform=ax.transAxes, ha="right")
            elif runs:
                ax.plot(
                    [r["budget"] for r in runs], [r["test_accuracy"] for r in runs], marker="o", label=method
                )
        budgets = sorted({r["budget"] for r in rows if r["dataset"] == dataset and r["method"] != SVM})
        ax.set(xscale="log", title=dataset, xlabel="basis vectors k", ylabel="test accuracy")
        ax.set_xticks(budgets, [str(k) for k in budgets])
        ax.minorticks_off()
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> list[dict]:
    """Runs the experiment; returns the result rows (also written to ``--out``)."""
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    rows = read_rows(args.summarize) if args.summarize else []
    for name in [] if args.summarize else args.datasets.split(","):
        data = load_multiclass(name, args.data_dir, split_seed=args.seed)
        keep = subsample(len(data.y_train), args.max_train, args.seed)
        data = MulticlassSplit(
            name, data.x_train[keep], data.y_train[keep], data.x_test, data.y_test, data.classes
        )
        log(f"{name}: {len(keep)} train rows, {len(data.y_test)} test rows, {len(data.classes)} classes")
        rows += run_dataset(data, args)
        write_csv(args.out, rows)
        log(f"wrote {args.out}")
    print(summary_tables(rows, args.within))
    if args.plot is not None:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    return rows


if __name__ == "__main__":
    main()
