"""Time the MAP oracles of dependency trees and matchings against independent implementations.

Trees: every oracle solves ``argmax_T sum_{(h, d) in T} scores[h, d]`` over the
dependency trees ``T`` of random sentences (see
:mod:`keras_structured.engine.dependency_tree`). The non-projective trees are
checked against ``networkx.maximum_spanning_arborescence`` and the numpy
reference (same total score: with continuous random scores the best tree is
unique). Needs ``networkx``.

Matchings: the assignment oracle of :class:`MatchingStructure` solves
``argmax_sigma sum_i scores[i, sigma(i)]``, timed per instance against scipy's
``linear_sum_assignment`` (a Python call per instance) and checked to reach the
same optimum, on two kinds of scores: ``N(0, 1)`` (a solve's first MAP call) and
the SparseMAP solver's last iterate ``eta - u``, on which every matching of the
support ties for the best (the degenerate calls that dominate a solve).

Example:
    python benchmarks/bench_oracles.py --batch 32 --words 30 --repeats 20
    python benchmarks/bench_oracles.py --structures matching --shapes 20x20,15x25,50x50
"""

from __future__ import annotations

import argparse
import time

import networkx as nx
import numpy as np
from scipy.optimize import linear_sum_assignment

from keras_structured.engine import MatchingStructure, solve
from keras_structured.engine.dependency_tree import DependencyTreeStructure, best_trees


def networkx_heads(scores: np.ndarray) -> np.ndarray:
    """Heads of the maximum spanning arborescence of one ``(n + 1, n + 1)`` score matrix, by networkx."""
    size = scores.shape[0]
    graph = nx.DiGraph()
    graph.add_weighted_edges_from((h, d, scores[h, d]) for h in range(size) for d in range(1, size) if h != d)
    heads = np.full(size, -1)
    for h, d in nx.maximum_spanning_arborescence(graph).edges:
        heads[d] = h
    return heads


def numpy_heads(scores: np.ndarray) -> np.ndarray:
    """Heads of the maximum spanning arborescence by recursive, numpy-vectorised Chu-Liu-Edmonds."""
    scores = scores.astype(np.float64)
    scores[:, 0] = -np.inf
    np.fill_diagonal(scores, -np.inf)
    return _contract_and_solve(scores)


def _find_cycle(heads: np.ndarray) -> np.ndarray | None:
    mark = np.zeros(len(heads), dtype=np.int64)
    for start in range(1, len(heads)):
        node = start
        while node > 0 and mark[node] == 0:
            mark[node] = start
            node = heads[node]
        if node > 0 and mark[node] == start:
            cycle = [node]
            while heads[cycle[-1]] != node:
                cycle.append(heads[cycle[-1]])
            return np.array(cycle)
    return None


def _contract_and_solve(scores: np.ndarray) -> np.ndarray:
    heads = scores.argmax(axis=0)
    heads[0] = -1
    cycle = _find_cycle(heads)
    if cycle is None:
        return heads
    rest = np.setdiff1d(np.arange(len(heads)), cycle)
    entering = scores[np.ix_(rest, cycle)] - scores[heads[cycle], cycle]
    leaving = scores[np.ix_(cycle, rest)]
    size = len(rest)
    contracted = np.full((size + 1, size + 1), -np.inf)
    contracted[:size, :size] = scores[np.ix_(rest, rest)]
    contracted[:size, size] = entering.max(axis=1)
    contracted[size, :size] = leaving.max(axis=0)
    contracted[size, 0] = -np.inf
    inner = _contract_and_solve(contracted)
    for i in range(1, size):
        heads[rest[i]] = rest[inner[i]] if inner[i] < size else cycle[leaving[:, i].argmax()]
    source = inner[size]
    heads[cycle[entering[source].argmax()]] = rest[source]
    return heads


def _timed(function, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times)), result


def _score(heads: np.ndarray, scores: np.ndarray) -> float:
    dependents = np.flatnonzero(heads >= 0)
    return float(scores[heads[dependents], dependents].sum())


def bench_trees(args: argparse.Namespace) -> None:
    """Chu-Liu-Edmonds and Eisner against networkx and numpy, then the full solve."""
    scores = np.random.default_rng(args.seed).normal(size=(args.batch, args.words + 1, args.words + 1))

    start = time.perf_counter()
    best_trees(scores[:1, :3, :3])
    best_trees(scores[:1, :3, :3], projective=True)
    print(f"first call (numba compile or cache load): {1e3 * (time.perf_counter() - start):.0f} ms")

    ours, heads = _timed(lambda: best_trees(scores), args.repeats)
    reference, nx_heads = _timed(lambda: [networkx_heads(s) for s in scores], max(1, args.repeats // 4))
    numpy_time, np_heads = _timed(lambda: [numpy_heads(s) for s in scores], max(1, args.repeats // 4))
    for b in range(args.batch):
        ours_score = _score(heads[b], scores[b])
        for name, other in (("networkx", nx_heads[b]), ("numpy", np_heads[b])):
            if abs(ours_score - _score(other, scores[b])) > 1e-9 or not np.array_equal(heads[b], other):
                raise AssertionError(f"{name} found a different tree on example {b}")

    print(f"\nbatch={args.batch} words={args.words}: milliseconds per batched MAP call (median)")
    print(f"{'oracle':<40}{'ms':>10}{'vs ours':>10}")
    print(f"{'ours, non-projective (Chu-Liu-Edmonds)':<40}{ours:>10.3f}{1.0:>10.1f}")
    print(f"{'networkx maximum_spanning_arborescence':<40}{reference:>10.3f}{reference / ours:>10.1f}")
    print(f"{'numpy Chu-Liu-Edmonds (reference)':<40}{numpy_time:>10.3f}{numpy_time / ours:>10.1f}")
    for name, single_root, projective in (
        ("ours, single root", True, False),
        ("ours, projective (Eisner)", False, True),
        ("ours, projective + single root", True, True),
    ):
        elapsed, _ = _timed(lambda s=single_root, p=projective: best_trees(scores, None, s, p), args.repeats)
        print(f"{name:<40}{elapsed:>10.3f}{elapsed / ours:>10.1f}")
    print("(all non-projective trees identical to networkx and numpy)")

    print("\nfull SparseMAP solve of the batch (active set, tol=1e-8), scores as above:")
    structure = DependencyTreeStructure()
    solve(structure, scores[:1])  # compile the kernel outside the timings
    for name, compiled in (("compiled kernel", True), ("Python reference", False)):
        elapsed, solution = _timed(
            lambda c=compiled: solve(structure, scores, tol=1e-8, compiled=c), max(1, args.repeats // 4)
        )
        print(
            f"  {name:<18}{elapsed:>9.1f} ms  ({solution.map_calls.mean():.1f} MAP calls and "
            f"{np.mean([len(w) for w in solution.weights]):.1f} trees per example)"
        )


def bench_matchings(args: argparse.Namespace) -> None:
    """The assignment oracle against scipy, per instance, on random scores and solver iterates."""
    structure = MatchingStructure()
    print(f"\nmatchings, batch={args.batch}: microseconds per instance (median batched call / batch)")
    print(f"{'shape':<8}{'scores':<22}{'ours':>10}{'scipy':>10}{'scipy / ours':>14}")
    for shape in args.shapes.split(","):
        rows, cols = (int(size) for size in shape.split("x"))
        eta_u = np.random.default_rng(args.seed).normal(size=(args.batch, rows, cols))
        structure.map(eta_u[:1], None)  # compile outside the timings
        iterates = eta_u - solve(structure, eta_u).u
        for name, scores in (("N(0, 1)", eta_u), ("solver's last iterate", iterates)):
            ours, codes = _timed(lambda s=scores: structure.map(s, None), args.repeats)
            theirs, best = _timed(
                lambda s=scores: [linear_sum_assignment(x, maximize=True) for x in s], args.repeats
            )
            for b, (best_rows, best_cols) in enumerate(best):
                matched = np.flatnonzero(codes[b] >= 0)
                ours_score = scores[b, matched, codes[b, matched]].sum()
                if abs(ours_score - scores[b, best_rows, best_cols].sum()) > 1e-9 * rows:
                    raise AssertionError(f"scipy found a better assignment on example {b} ({shape}, {name})")
            ours, theirs = 1e3 * ours / args.batch, 1e3 * theirs / args.batch
            print(f"{shape:<8}{name:<22}{ours:>10.2f}{theirs:>10.2f}{theirs / ours:>14.1f}")
    print("(every assignment as good as scipy's; scipy's times include a Python call per instance)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32, help="instances per batch")
    parser.add_argument("--words", type=int, default=30, help="words per sentence")
    parser.add_argument("--shapes", default="20x20,15x25,50x50", help="matching shapes, rows x columns")
    parser.add_argument("--repeats", type=int, default=20, help="timed repetitions (median reported)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--structures", default="tree,matching", help="comma-separated subset of tree, matching"
    )
    args = parser.parse_args(argv)
    chosen = args.structures.split(",")
    unknown = sorted(set(chosen) - {"tree", "matching"})
    if unknown:
        parser.error(f"unknown structures {unknown}. Received: --structures={args.structures}")
    if "tree" in chosen:
        bench_trees(args)
    if "matching" in chosen:
        bench_matchings(args)


if __name__ == "__main__":
    main()
