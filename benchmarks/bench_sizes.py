"""SparseMAP at the sizes users train with: per-instance cost, quiet and under CPU contention.

For every structure and size, one batch of ``--instances`` problems is solved by
:func:`keras_structured.engine.solve` at its default settings in two ways:

* **one at a time**: one ``solve`` call per instance, each timed on its own, which gives
  the per-instance distribution (median, p90, max) and the MAP calls;
* **batched**: one ``solve`` call for the whole batch, repeated ``--repeats`` times; the
  per-instance cost is the call's time over the batch size (median over the repeats).

Each configuration runs on a quiet machine and again with ``--load`` busy processes
(pure-Python loops, one per core by default) beside it, which stand for a training job's
data pipeline, TensorFlow's thread pools or a second job. The table gives the loaded
run's mean and p90 as multiples of the quiet run's, measured back to back in the same
process: a fair share of the cores among ``cores + load`` busy processes costs about
``(cores + load) / cores``.

Scores are N(0, 1) (``normal``) or ``confident``: the parts of a random gold structure
raised by 3, as a trained model scores its training data (most of the mass on a few
structures).

``--gradients`` also prints the float32 gradient table: the gradient of
``<sparsemap(x), g>`` in float32 against the same in float64 on the same (float32-rounded)
scores, relative error per example.

Example:
    python benchmarks/bench_sizes.py --structures tree --sizes 30 80 --instances 16 --load 0
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import (
    BudgetStructure,
    DependencyTreeStructure,
    MatchingStructure,
    SequenceStructure,
    SparseMAPConvergenceWarning,
    solve,
)

SEQUENCE_LABELS = 20
CONFIDENT_MARGIN = 3.0
SCORES = ("normal", "confident")
GRADIENT_BATCH = 16


@contextlib.contextmanager
def busy_processes(count: int):
    """``count`` processes that keep one core each busy, for the duration of the block."""
    processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.2 if count else 0.0)  # let them get scheduled
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait()


def tree_scores(rng: np.random.Generator, batch: int, words: int, kind: str) -> np.ndarray:
    """``(batch, words + 1, words + 1)`` arc scores ``[head, modifier]``."""
    scores = rng.normal(size=(batch, words + 1, words + 1))
    if kind == "confident":
        for b in range(batch):
            heads = [int(rng.integers(0, m)) for m in range(1, words + 1)]  # a random tree
            scores[b, heads, np.arange(1, words + 1)] += CONFIDENT_MARGIN
    return scores


def sequence_scores(rng: np.random.Generator, batch: int, length: int, kind: str):
    """``(batch, length, K)`` unary and ``(batch, length - 1, K, K)`` transition scores."""
    unary = rng.normal(size=(batch, length, SEQUENCE_LABELS))
    pairwise = rng.normal(size=(batch, length - 1, SEQUENCE_LABELS, SEQUENCE_LABELS))
    if kind == "confident":
        tags = rng.integers(0, SEQUENCE_LABELS, size=(batch, length))
        np.put_along_axis(unary, tags[..., None], CONFIDENT_MARGIN, axis=2)
    return unary, pairwise


def problems(structure_name: str, size: int, batch: int, kind: str, seed: int):
    """``(structure, eta_u, eta_v)`` for one configuration."""
    rng = np.random.default_rng(seed)
    if structure_name == "tree":
        return DependencyTreeStructure(), tree_scores(rng, batch, size, kind), None
    return SequenceStructure(), *sequence_scores(rng, batch, size, kind)


def _solve(structure, eta_u, eta_v):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseMAPConvergenceWarning)
        return solve(structure, eta_u, eta_v)


def measure(structure, eta_u, eta_v, repeats: int) -> dict:
    """Per-instance times (ms) one at a time, batched per-instance times, MAP calls, convergence."""
    batch = eta_u.shape[0]
    single, calls, converged = [], [], []
    for b in range(batch):
        pair = (eta_u[b : b + 1], None if eta_v is None else eta_v[b : b + 1])
        start = time.perf_counter()
        solution = _solve(structure, *pair)
        single.append(1e3 * (time.perf_counter() - start))
        calls.append(int(solution.map_calls[0]))
        converged.append(bool(solution.converged[0]))
    batched = []
    for _ in range(repeats):
        start = time.perf_counter()
        _solve(structure, eta_u, eta_v)
        batched.append(1e3 * (time.perf_counter() - start) / batch)
    single = np.array(single)
    return {
        "median": float(np.median(single)),
        "mean": float(single.mean()),
        "p90": float(np.percentile(single, 90)),
        "max": float(single.max()),
        "batched": float(np.median(batched)),
        "calls_median": float(np.median(calls)),
        "calls_max": int(max(calls)),
        "converged": int(sum(converged)),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="Per-instance SparseMAP cost at realistic sizes, quiet and under CPU contention.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--structures", nargs="+", default=["tree", "sequence"], choices=["tree", "sequence"])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[30, 50, 80, 100, 150], help="words (trees) or positions"
    )
    parser.add_argument("--scores", nargs="+", default=list(SCORES), choices=SCORES)
    parser.add_argument("--instances", type=int, default=64, help="problems per configuration (one batch)")
    parser.add_argument("--repeats", type=int, default=3, help="timed batched calls per configuration")
    parser.add_argument(
        "--load",
        type=int,
        default=os.cpu_count() or 1,
        help="busy processes beside the loaded runs (0: quiet runs only)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gradients", action="store_true", help="also print the float32 gradient table")
    return parser.parse_args(argv)


def _row(name: str, size: int, kind: str, load: str, stats: dict, quiet: dict | None) -> str:
    ratios = " | | "
    if quiet is not None:
        ratios = f" | {stats['mean'] / quiet['mean']:.2f} | {stats['p90'] / quiet['p90']:.2f}"
    return (
        f"| {name} {size} | {kind} | {load} | {stats['median']:.2f} | {stats['p90']:.2f} | {stats['max']:.2f}"
        f" | {stats['batched']:.2f} | {stats['batched'] / stats['mean']:.2f}"
        f" | {stats['calls_median']:.0f} / {stats['calls_max']} | {stats['converged']}{ratios} |"
    )


def run_distribution(args: argparse.Namespace) -> None:
    """Print the per-instance table."""
    print(
        "| problem | scores | load | median ms | p90 ms | max ms | batched ms/inst | batched/single"
        " | MAP calls med / max | converged | mean/quiet | p90/quiet |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    _solve(*problems("tree", 5, 2, "normal", 0))  # compile or load the kernels before timing
    _solve(*problems("sequence", 5, 2, "normal", 0))
    for name in args.structures:
        for size in args.sizes:
            for kind in args.scores:
                structure, eta_u, eta_v = problems(name, size, args.instances, kind, args.seed)
                quiet = measure(structure, eta_u, eta_v, args.repeats)
                print(_row(name, size, kind, "quiet", quiet, None), flush=True)
                if args.load:
                    with busy_processes(args.load):
                        loaded = measure(structure, eta_u, eta_v, args.repeats)
                    print(_row(name, size, kind, f"+{args.load}", loaded, quiet), flush=True)


def rounded_normal(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """N(0, 1) values rounded to ``dtype``, returned in float64."""
    return tf.cast(tf.constant(rng.normal(size=shape), dtype), tf.float64).numpy()


def _gradients(function, inputs, cotangents, dtype) -> list[np.ndarray]:
    """Gradients of ``sum_i <function(*inputs)[i], cotangents[i]>`` w.r.t. the inputs, in float64."""
    tensors = [tf.constant(x, dtype) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        outputs = function(*tensors)
        total = sum(
            tf.reduce_sum(tf.cast(out, tf.float64) * tf.constant(g))
            for out, g in zip(outputs, cotangents, strict=True)
        )
    return [tf.cast(g, tf.float64).numpy() for g in tape.gradient(total, tensors)]


def relative_errors(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Per-example relative error ``||low - high|| / ||high||`` of ``(batch, ...)`` arrays."""
    difference = np.linalg.norm((low - high).reshape(len(high), -1), axis=1)
    return difference / np.maximum(np.linalg.norm(high.reshape(len(high), -1), axis=1), 1e-300)


def gradient_errors(function, shapes, cotangent_shapes, dtype: str = "float32", seed: int = 0) -> list:
    """Per-example relative errors of the gradient computed in ``dtype`` against float64.

    ``function`` maps input tensors to a tuple of outputs; inputs and cotangents are drawn
    N(0, 1) and rounded to ``dtype``, so both runs see the same values. Returns one
    ``(batch,)`` array of errors per input.
    """
    rng = np.random.default_rng(seed)
    inputs = [rounded_normal(rng, shape, dtype) for shape in shapes]
    cotangents = [rounded_normal(rng, shape, dtype) for shape in cotangent_shapes]
    exact = _gradients(function, inputs, cotangents, tf.float64)
    low = _gradients(function, inputs, cotangents, dtype)
    return [relative_errors(a, b) for a, b in zip(low, exact, strict=True)]


def _solution_u(structure):
    """``x -> (u,)`` of SparseMAP over ``structure``."""
    return lambda x: ks.sparsemap(structure, x)[:1]


def gradient_cases() -> dict:
    """The float32 gradient table's cases: name -> (function, input shapes, cotangent shapes)."""
    batch = GRADIENT_BATCH
    cases = {}
    for words in (10, 30, 50, 80):
        for single_root in (False, True):
            shape = (batch, words + 1, words + 1)
            name = f"tree {words} {'single' if single_root else 'multi'}-root"
            cases[name] = (_solution_u(DependencyTreeStructure(single_root=single_root)), [shape], [shape])
    for positions, labels in ((30, 20), (60, 40)):
        u_shape, v_shape = (batch, positions, labels), (batch, positions - 1, labels, labels)
        cases[f"sequence {positions}x{labels}"] = (
            lambda unary, transitions: ks.sparsemap_sequence(unary, transitions),
            [u_shape, (batch, labels, labels)],
            [u_shape, v_shape],
        )
    for rows, columns in ((20, 20), (15, 25)):
        shape = (batch, rows, columns)
        cases[f"matching {rows}x{columns}"] = (_solution_u(MatchingStructure()), [shape], [shape])
    cases["budget 10 of 60"] = (_solution_u(BudgetStructure(10)), [(batch, 60)], [(batch, 60)])
    return cases


def run_gradients() -> None:
    """Print the float32 gradient table."""
    print("\n| problem | input | median rel. error | max rel. error |")
    print("|---|---|---|---|")
    for name, (function, shapes, cotangent_shapes) in gradient_cases().items():
        for index, errors in enumerate(gradient_errors(function, shapes, cotangent_shapes)):
            print(f"| {name} | {index} | {np.median(errors):.1e} | {errors.max():.1e} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_distribution(args)
    if args.gradients:
        run_gradients()


if __name__ == "__main__":
    main()
