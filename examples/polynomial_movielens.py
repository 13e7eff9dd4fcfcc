"""MovieLens 100K: ordinal multi-output polynomial network against single-output PN and FM.

Measured, on a seeded 80/20 random split of the 100,000 ratings with the sparse one-hot
features of ``_common.polynomial_data.load_movielens`` (user id, item id, age bucket, gender,
occupation, item genres: 2,674 columns), the test RMSE and nDCG@10 of these models, for
every budget ``k`` (``--budgets``: basis vectors for the networks, rank for the FM):

* ``ordinal l1/l2``: ``OrdinalPolynomialNetwork`` (all-threshold reduction: 4 outputs
  ``o_c(x)``, ``P(rating > c) = sigmoid(o_c(x))``, sharing one basis; binary logistic loss;
  conditional gradient with the ``l1/l2`` penalty, ``refit="V"``, ``max_basis=k``). Score:
  the expected rating ``1 + sum_c P(rating > c)``.
* ``pn regressor``: ``PolynomialNetworkRegressor`` (one output, squared loss, conditional
  gradient, ``max_basis=k``; with one output every penalty is the same), fitted to the
  ratings minus their training mean, which is added back.
* ``fm adam``: the Keras ``FactorizationMachine`` layer (``units=1``, ``rank=k``, linear term
  and bias, bias initialised to the training mean) trained with Adam on the squared error
  over the sparse inputs; ``--fm-epochs`` at most, early stopping on the validation split
  (patience 2, best weights restored; so it trains on 90% of the training ratings); L2 penalty
  ``--fm-l2`` on basis and linear weights.
* ``mean``: the training mean rating (a reference; its nDCG ranks in test-set order).

``tau`` of the two conditional-gradient models is chosen from ``--taus`` by validation RMSE
(ties: the first grid value): models trained on 90% of the training ratings, scored on the
other 10% (a seeded random split, the same one the FM uses for early stopping); the chosen
model is refitted on all training ratings. By default tau is chosen again at every budget
(``--select-budget each``): the best tau grows with k (at k = 10 the ordinal model prefers
tau = 10, at k = 40 tau = 10 holds it at RMSE 1.020 where tau = 30 gives 0.958), so one tau
chosen at a small budget understates the larger models. ``--select-budget K`` chooses it once,
at budget K, for every budget.

Metrics on the test ratings (all predictions clipped to ``[1, 5]``):

* RMSE ``sqrt(mean (score - rating)^2)``;
* nDCG@10, per test user ``u`` with at least one test rating: rank ``u``'s test items by
  decreasing score (ties in test-set order), ``DCG = sum_{i <= min(10, n_u)} r_(i) / log2(i + 1)``
  with gains the true ratings ``r_(i)`` of the ranked items, divided by the DCG of the
  ranking by true rating; averaged over those users (users with one test item score 1).

Outputs: a markdown table on stdout, a CSV (``--out``). Progress goes to stderr.

Run:  python examples/polynomial_movielens.py --budgets 5,10,20,40
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Sequence

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

CG_METHODS = ("ordinal l1/l2", "pn regressor")
METHODS = ("mean", *CG_METHODS, "fm adam")


def _select_budget(text: str) -> str | int:
    """``"each"`` or a positive integer (argparse ``type`` of ``--select-budget``)."""
    if text == "each":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected 'each' or a positive integer, got {text!r}")
    return int(text)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    add_common_arguments(parser, out="runs/polynomial_movielens.csv")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--budgets", type=int_list, default=[5, 10, 20, 40], help="basis vectors / FM rank k")
    parser.add_argument("--taus", type=float_list, default=[3.0, 10.0, 30.0, 100.0], help="tau grid")
    parser.add_argument(
        "--select-budget",
        type=_select_budget,
        default="each",
        help="'each' (choose tau at every budget) or the budget k at which tau is chosen once",
    )
    parser.add_argument("--max-train", type=int, default=None, help="seeded subset of the training ratings")
    parser.add_argument("--max-test", type=int, default=None, help="seeded subset of the test ratings")
    parser.add_argument("--tol", type=float, default=1e-4, help="relative Frank-Wolfe gap tolerance")
    parser.add_argument("--refit-iter", type=int, default=50, help="iterations of each corrective refit")
    parser.add_argument("--fm-epochs", type=int, default=30, help="maximum Adam epochs of the FM")
    parser.add_argument("--fm-lr", type=float, default=1e-3, help="Adam learning rate of the FM")
    parser.add_argument(
        "--fm-l2", type=float, default=1e-5, help="L2 factor on the FM basis and linear weights"
    )
    parser.add_argument("--batch-size", type=int, default=256, help="Adam batch size of the FM")
    args = parser.parse_args(argv)
    args.methods = args.methods.split(",")
    if set(args.methods) - set(METHODS):
        parser.error(
            f"unknown methods {sorted(set(args.methods) - set(METHODS))}; choose from {list(METHODS)}"
        )
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from _common.polynomial_data import RatingSplit, load_movielens  # noqa: E402

from keras_structured.polynomial import (  # noqa: E402
    ConvergenceWarning,
    FactorizationMachine,
    OrdinalPolynomialNetwork,
    PolynomialNetworkRegressor,
)


def ndcg_at(users: np.ndarray, ratings: np.ndarray, scores: np.ndarray, cutoff: int = 10) -> float:
    """Mean over users of nDCG@``cutoff`` of the ranking of their items by ``scores`` (gains: ``ratings``).

    Example:
        >>> round(ndcg_at(np.array([1, 1, 2]), np.array([5, 1, 3]), np.array([0.0, 1.0, 0.0])), 4)
        0.8689
    """

    def dcg(order: np.ndarray) -> np.ndarray:
        sorted_users = users[order]
        starts = np.flatnonzero(np.r_[True, sorted_users[1:] != sorted_users[:-1]])
        rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
        gains = np.where(rank < cutoff, ratings[order] / np.log2(rank + 2.0), 0.0)
        return np.add.reduceat(gains, starts)

    return float(np.mean(dcg(np.lexsort((-scores, users))) / dcg(np.lexsort((-ratings, users)))))


class CenteredRegressor:
    """``PolynomialNetworkRegressor`` fitted to ``y - mean(y)``; predicts ``mean(y) + o(x)``."""

    def __init__(self, **kwargs):
        self.network = PolynomialNetworkRegressor(loss="squared", penalty="l1", **kwargs)

    def fit(self, x: sp.csr_matrix, y: np.ndarray) -> CenteredRegressor:
        self.mean_ = float(np.mean(y))
        self.network.fit(x, y - self.mean_)
        self.n_basis_ = self.network.n_basis_
        return self

    def predict(self, x: sp.csr_matrix) -> np.ndarray:
        return self.mean_ + self.network.predict(x)


class ExpectedRating:
    """``OrdinalPolynomialNetwork`` scored by its expected rating."""

    def __init__(self, **kwargs):
        self.network = OrdinalPolynomialNetwork(loss="logistic", penalty="l1/l2", **kwargs)

    def fit(self, x: sp.csr_matrix, y: np.ndarray) -> ExpectedRating:
        self.network.fit(x, y)
        self.n_basis_ = self.network.n_basis_
        return self

    def predict(self, x: sp.csr_matrix) -> np.ndarray:
        return self.network.predict_expected(x)


class AdamFactorizationMachine:
    """Keras ``FactorizationMachine`` (rank ``k``) trained by Adam with early stopping."""

    def __init__(self, rank: int, args: argparse.Namespace, validation: tuple[sp.csr_matrix, np.ndarray]):
        self.n_basis_, self.args, self.validation = rank, args, validation

    def fit(self, x: sp.csr_matrix, y: np.ndarray) -> AdamFactorizationMachine:
        keras.utils.set_random_seed(self.args.seed)
        inputs = keras.Input((x.shape[1],), sparse=True)
        l2 = keras.regularizers.L2(self.args.fm_l2)
        layer = FactorizationMachine(
            units=1,
            rank=self.n_basis_,
            basis_initializer=keras.initializers.RandomNormal(stddev=0.01),
            bias_initializer=keras.initializers.Constant(float(np.mean(y))),
            basis_regularizer=l2,
            kernel_regularizer=l2,
        )
        self.model = keras.Model(inputs, layer(inputs))
        self.model.compile(optimizer=keras.optimizers.Adam(self.args.fm_lr), loss="mse")
        self.model.fit(
            x,
            y.astype(np.float32),
            epochs=self.args.fm_epochs,
            batch_size=self.args.batch_size,
            validation_data=(self.validation[0], self.validation[1].astype(np.float32)),
            callbacks=[keras.callbacks.EarlyStopping(patience=2, restore_best_weights=True)],
            verbose=0,
        )
        return self

    def predict(self, x: sp.csr_matrix) -> np.ndarray:
        return self.model.predict(x, batch_size=8192, verbose=0)[:, 0]


class MeanRating:
    """The training mean rating for every pair."""

    n_basis_ = 0

    def fit(self, x: sp.csr_matrix, y: np.ndarray) -> MeanRating:
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, x: sp.csr_matrix) -> np.ndarray:
        return np.full(x.shape[0], self.mean_)


def make_cg_model(method: str, budget: int, tau: float, args: argparse.Namespace):
    """The unfitted conditional-gradient model ``method`` with ``max_basis=budget`` and ``tau``."""
    kwargs = dict(
        tau=tau,
        max_basis=budget,
        max_iter=3 * budget,
        tol=args.tol,
        refit="V",
        refit_iter=args.refit_iter,
        random_state=args.seed,
    )
    return ExpectedRating(**kwargs) if method == "ordinal l1/l2" else CenteredRegressor(**kwargs)


def n_parameters(method: str, n_basis: int, n_features: int) -> int:
    """Stored numbers: ``k (d + 1) + k m`` (``m = 4`` ordinal, 1 regressor), ``k d + d + 1`` for the FM."""
    if method == "fm adam":
        return n_basis * (n_features + 1) + n_features + 1
    return n_basis * (n_features + 1 + (4 if method == "ordinal l1/l2" else 1)) + (method == "mean")


def _rmse(y: np.ndarray, scores: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.clip(scores, 1.0, 5.0) - y) ** 2)))


def choose_tau(
    method: str,
    budget: int,
    args: argparse.Namespace,
    fit: tuple[sp.csr_matrix, np.ndarray],
    validation: tuple[sp.csr_matrix, np.ndarray],
) -> float:
    """The ``tau`` of ``--taus`` whose model at ``budget`` fitted on ``fit`` has the best validation RMSE."""
    errors = []
    for tau in args.taus:
        model = make_cg_model(method, budget, tau, args).fit(*fit)
        errors.append(_rmse(validation[1], model.predict(validation[0])))
        log(f"{method} tau={tau}: validation RMSE {errors[-1]:.4f} (k={budget})")
    return args.taus[int(np.argmin(errors))]


def run(data: RatingSplit, args: argparse.Namespace) -> list[dict]:
    """Selects ``tau``, then fits and tests every model at every budget."""
    fit_rows, val_rows = holdout(len(data.y_train), 0.1, args.seed)
    x_fit, y_fit = data.x_train[fit_rows], data.y_train[fit_rows]
    x_val, y_val = data.x_train[val_rows], data.y_train[val_rows]
    rows = []

    def evaluate(method: str, model, budget: int, hyper: float, x: sp.csr_matrix, y: np.ndarray) -> None:
        start = time.perf_counter()
        model.fit(x, y)
        seconds = time.perf_counter() - start
        scores = np.clip(model.predict(data.x_test), 1.0, 5.0)
        rows.append(
            dict(
                method=method,
                budget=budget,
                hyper=hyper,
                n_basis=model.n_basis_,
                n_params=n_parameters(method, model.n_basis_, data.x_train.shape[1]),
                rmse=_rmse(data.y_test, scores),
                ndcg10=ndcg_at(data.users_test, data.y_test, scores),
                fit_seconds=round(seconds, 2),
            )
        )
        rmse, ndcg = rows[-1]["rmse"], rows[-1]["ndcg10"]
        log(f"{method} k={budget}: RMSE {rmse:.4f}, nDCG@10 {ndcg:.4f} ({seconds:.1f}s)")

    if "mean" in args.methods:
        evaluate("mean", MeanRating(), 0, float("nan"), data.x_train, data.y_train)
    for method in (m for m in CG_METHODS if m in args.methods):
        chosen_at = {k: k if args.select_budget == "each" else args.select_budget for k in args.budgets}
        data_splits = (x_fit, y_fit), (x_val, y_val)
        taus = {k: choose_tau(method, k, args, *data_splits) for k in dict.fromkeys(chosen_at.values())}
        for budget in args.budgets:
            tau = taus[chosen_at[budget]]
            evaluate(
                method, make_cg_model(method, budget, tau, args), budget, tau, data.x_train, data.y_train
            )
    if "fm adam" in args.methods:
        for budget in args.budgets:
            model = AdamFactorizationMachine(budget, args, validation=(x_val, y_val))
            evaluate("fm adam", model, budget, args.fm_l2, x_fit, y_fit)
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict]:
    """Runs the experiment; returns the result rows (also written to ``--out``)."""
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    data = load_movielens(args.data_dir, split_seed=args.seed)
    train = subsample(len(data.y_train), args.max_train, args.seed)
    test = subsample(len(data.y_test), args.max_test, args.seed)
    data = RatingSplit(
        data.x_train[train],
        data.y_train[train],
        data.users_train[train],
        data.x_test[test],
        data.y_test[test],
        data.users_test[test],
        data.blocks,
    )
    log(f"MovieLens: {len(train)} train / {len(test)} test ratings, {data.x_train.shape[1]} features")
    rows = run(data, args)
    write_csv(args.out, rows)
    print("MovieLens 100K, test set (RMSE: lower is better; nDCG@10: higher is better)\n")
    columns = ["method", "budget", "hyper", "n_basis", "n_params", "rmse", "ndcg10", "fit_seconds"]
    print(markdown_table(rows, columns))
    print(f"\nwrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
