"""Cost of conditional-gradient training of polynomial networks, two tasks (``--task``).

``--task logistic`` (side by side, one run): on a multi-class set (``--dataset``, default
satellite; splits and standardisation of ``examples/_common/polynomial_data.py``), the wall time
and test accuracy of

* ``PolynomialNetworkClassifier(penalty="l1/l2", tau=--tau, max_basis=--budget)`` (multinomial
  logistic loss, ``refit="V"``, ``max_iter=3 k``, ``tol=1e-4``, the settings of
  ``examples/polynomial_multiclass.py``), and
* scikit-learn's ``LogisticRegression(C=--C, max_iter=1000)`` (lbfgs, multinomial) on
  ``PolynomialFeatures(2)`` of the features, standardised (``StandardScaler``): the same model
  class (all degree-2 monomials) fitted explicitly;

the median of ``--repeats`` fits each (alternating), and the ratio ``CG time / LR time``
(target: at most 1 at equal or better accuracy). ``--profile`` prints the ten functions with
the largest cumulative time of one more CG fit (``cProfile``).

``--task scaling`` (default): measured on MovieLens 100K (all 100,000 ratings as the sparse one-hot rows of
``examples/_common/polynomial_data.py``: 2,674 columns, 6-11 non-zeros a row), for every number of
ratings ``n`` in ``--sizes`` (a seeded subsample):

* **time per iteration**: the wall time of ``OrdinalPolynomialNetwork(penalty="l1/l2",
  loss="logistic").fit`` (4 outputs, ``refit="V"``, ``tol=0``) stopped at
  ``--iterations`` basis vectors, divided by the number of Frank-Wolfe iterations it ran;
  the median of ``--repeats`` fits. Each iteration runs the block power method, the
  generalized power method, a line search and a FISTA refit, all ``O(nnz(X))`` per step.
* **baseline**: one sparse product ``X @ h`` with the augmented ``X`` (median of 50), timed in
  the same run; the table gives the ratio ``iteration / product`` so the numbers compare
  across machines.
* **scaling exponent**: the slope of ``log(time per iteration)`` against ``log(n)`` (least
  squares); linear-time training gives 1 (target: at most 1.1). The same slope is given for
  the baseline product.
* **peak memory**: the peak of the memory traced by ``tracemalloc`` (Python and numpy
  allocations; not TensorFlow's, which the trainer never calls) during one more fit, in MiB,
  and its ratio to the bytes of the CSR matrix ``X``. The process' ``ru_maxrss`` is printed too:
  it includes the TensorFlow runtime imported with the package, so it is not the trainer's.

Run:  python benchmarks/bench_polynomial.py --sizes 10000,30000,100000 --iterations 5
      python benchmarks/bench_polynomial.py --task logistic --repeats 3
(BLAS threads: set ``OMP_NUM_THREADS`` the same for both tasks' runs; on a shared machine, 1.)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import sys
import time
import tracemalloc
import warnings
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))  # the shared data loaders

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from _common.experiments import add_common_arguments, int_list, log, markdown_table, subsample, write_csv  # noqa: E402
from _common.polynomial_data import load_movielens, load_multiclass  # noqa: E402

from keras_structured.polynomial import OrdinalPolynomialNetwork, PolynomialNetworkClassifier  # noqa: E402
from keras_structured.polynomial.conditional_gradient import check_features  # noqa: E402


def _product_seconds(x: sp.csr_matrix, rng: np.random.Generator, repeats: int = 50) -> float:
    """Median wall time of one ``X @ h`` with the augmented ``X``."""
    augmented = check_features(x, augment=True)
    h = rng.standard_normal(augmented.shape[1])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        augmented @ h
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _fit(x: sp.csr_matrix, y: np.ndarray, args: argparse.Namespace) -> tuple[float, int]:
    """``(seconds, Frank-Wolfe iterations)`` of one fit."""
    model = OrdinalPolynomialNetwork(
        loss="logistic",
        penalty="l1/l2",
        tau=args.tau,
        max_basis=args.iterations,
        max_iter=3 * args.iterations,
        tol=0.0,
        random_state=args.seed,
    )
    start = time.perf_counter()
    model.fit(x, y)
    return time.perf_counter() - start, model.n_iter_


def _peak_mib(x: sp.csr_matrix, y: np.ndarray, args: argparse.Namespace) -> float:
    tracemalloc.start()
    _fit(x, y, args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def slope(n: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares slope of ``log(seconds)`` against ``log(n)``.

    Example:
        >>> round(slope([1.0, 10.0, 100.0], [2.0, 20.0, 200.0]), 6)
        1.0
    """
    return float(np.polyfit(np.log(n), np.log(seconds), 1)[0])


def _timed_fit(make_model, x: np.ndarray, y: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> dict:
    """Wall time and test accuracy of ``make_model().fit(x, y)``."""
    model = make_model()
    start = time.perf_counter()
    model.fit(x, y)
    seconds = time.perf_counter() - start
    return dict(seconds=seconds, accuracy=float(np.mean(model.predict(x_test) == y_test)), model=model)


def compare_logistic(args: argparse.Namespace) -> list[dict]:
    """``--task logistic``: CG l1/l2 against logistic regression on explicit degree-2 features."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    data = load_multiclass(args.dataset, args.data_dir, split_seed=args.seed)
    models = {
        f"cg l1/l2 k={args.budget}": lambda: PolynomialNetworkClassifier(
            penalty="l1/l2", tau=args.tau, max_basis=args.budget, max_iter=3 * args.budget, tol=1e-4,
            random_state=args.seed,
        ),
        "logistic regression, PolynomialFeatures(2)": lambda: make_pipeline(
            PolynomialFeatures(2), StandardScaler(), LogisticRegression(C=args.C, max_iter=1000)
        ),
    }  # fmt: skip
    fits = {name: [] for name in models}
    for repeat in range(args.repeats):
        for name, make_model in models.items():
            fits[name].append(_timed_fit(make_model, data.x_train, data.y_train, data.x_test, data.y_test))
            log(f"{name} fit {repeat + 1}: {fits[name][-1]['seconds']:.2f}s")
    rows = [
        dict(
            dataset=args.dataset,
            model=name,
            seconds=float(np.median([fit["seconds"] for fit in runs])),
            test_accuracy=runs[0]["accuracy"],
        )
        for name, runs in fits.items()
    ]
    cg, lr = rows
    cg["basis_vectors"] = fits[cg["model"]][0]["model"].n_basis_
    lr["basis_vectors"] = ""
    write_csv(args.out, rows)
    print(markdown_table(rows, ["dataset", "model", "basis_vectors", "seconds", "test_accuracy"]))
    ratio, difference = cg["seconds"] / lr["seconds"], cg["test_accuracy"] - lr["test_accuracy"]
    print(
        f"\ntime ratio CG / LR: {ratio:.2f} (<= 1: {ratio <= 1}); "
        f"accuracy CG - LR: {difference:+.4f} (>= 0: {difference >= 0})"
    )
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(models[cg["model"]]().fit, data.x_train, data.y_train)
        stream = io.StringIO()
        pstats.Stats(profile, stream=stream).sort_stats("cumulative").print_stats(10)
        print(stream.getvalue())
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict]:
    """Runs the benchmark; returns one row per size or model (also written to ``--out``)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser, out="runs/bench_polynomial.csv")
    parser.add_argument("--task", choices=("scaling", "logistic"), default="scaling", help="what to run")
    parser.add_argument("--sizes", type=int_list, default=[10000, 30000, 100000], help="scaling: ratings n")
    parser.add_argument("--iterations", type=int, default=5, help="basis vectors per fit")
    parser.add_argument("--repeats", type=int, default=1, help="timed fits per size or model (median)")
    parser.add_argument("--tau", type=float, default=None, help="l1/l2 budget (30 scaling, 100 logistic)")
    parser.add_argument("--dataset", default="satellite", help="logistic: the multi-class set")
    parser.add_argument("--budget", type=int, default=40, help="logistic: basis vectors k of the CG model")
    parser.add_argument("--C", type=float, default=1.0, help="logistic: inverse regularisation of LR")
    parser.add_argument("--profile", action="store_true", help="logistic: profile one more CG fit")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="Conditional gradient did not converge")
    if args.task == "logistic":
        args.tau = 100.0 if args.tau is None else args.tau
        return compare_logistic(args)
    args.tau = 30.0 if args.tau is None else args.tau
    return scaling(args)


def scaling(args: argparse.Namespace) -> list[dict]:
    """``--task scaling``: time per iteration and memory against the number of ratings."""
    data = load_movielens(args.data_dir, split_seed=args.seed)
    x_all = sp.vstack([data.x_train, data.x_test], format="csr")
    y_all = np.concatenate([data.y_train, data.y_test])
    rng = np.random.default_rng(args.seed)
    rows = []
    for n in args.sizes:
        keep = subsample(len(y_all), n, args.seed)
        x, y = x_all[keep], y_all[keep]
        product = _product_seconds(x, rng)
        fits = [_fit(x, y, args) for _ in range(args.repeats)]
        per_iteration = float(np.median([seconds / iterations for seconds, iterations in fits]))
        peak = _peak_mib(x, y, args)
        x_mib = (x.data.nbytes + x.indices.nbytes + x.indptr.nbytes) / 2**20
        rows.append(
            dict(
                n=len(keep),
                nnz=x.nnz,
                iterations=fits[0][1],
                seconds_per_iteration=per_iteration,
                product_ms=1e3 * product,
                ratio_to_product=per_iteration / product,
                peak_mib=peak,
                peak_over_x=peak / x_mib,
            )
        )
        log(f"n={len(keep)}: {per_iteration:.3f} s/iteration, peak {peak:.1f} MiB")
    write_csv(args.out, rows)
    print(markdown_table(rows, list(rows[0])))
    if len(rows) > 1:
        sizes = [row["n"] for row in rows]
        exponent = slope(sizes, [row["seconds_per_iteration"] for row in rows])
        print(f"\nscaling exponent of time per iteration vs n: {exponent:.3f} (<= 1.1: {exponent <= 1.1})")
        print(
            f"scaling exponent of the X @ h baseline: {slope(sizes, [row['product_ms'] for row in rows]):.3f}"
        )
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"process ru_maxrss (includes the TensorFlow runtime): {max_rss:.0f} MiB")
    print(f"wrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
