"""SparseMAP forward+backward against marginal inference, per structure, measured in one run.

For batch 32 in float64, every contestant maps scores to structured marginals
and back-propagates a random cotangent through them, inside ``tf.function``:

* dependency trees (n words): SparseMAP vs matrix-tree CRF marginals;
* sequences (n, K): SparseMAP vs linear-chain forward-backward marginals;
* matchings (m x m): SparseMAP vs 50 iterations of log-domain Sinkhorn.

It prints the time ratios (SparseMAP / baseline: machines are noisy, ratios from
the same run are what to compare), the mean number of MAP calls per instance,
the share of the SparseMAP forward time spent in MAP calls, and our
Chu-Liu-Edmonds against ``networkx.maximum_spanning_arborescence`` when
networkx is installed.

Example:
    python benchmarks/bench_layers.py --repeats 10 --scale 1.0
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numba as nb  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_structured as ks  # noqa: E402
from keras_structured.engine import (  # noqa: E402
    DependencyTreeStructure,
    MatchingStructure,
    SequenceStructure,
    Structure,
    solve,
)
from keras_structured.engine.compiled_active_set import solve_compiled  # noqa: E402
from keras_structured.ops import linear_chain_crf_marginals, tree_crf_marginals  # noqa: E402


def sinkhorn(scores: tf.Tensor, iterations: int = 50) -> tf.Tensor:
    """Doubly-stochastic matrix ``exp(scores)`` rescaled by log-domain Sinkhorn iterations."""
    log_p = scores
    for _ in range(iterations):
        log_p = log_p - tf.reduce_logsumexp(log_p, axis=2, keepdims=True)
        log_p = log_p - tf.reduce_logsumexp(log_p, axis=1, keepdims=True)
    return tf.exp(log_p)


def sparsemap_tree(scores):
    return ks.sparsemap(DependencyTreeStructure(), scores)[0]


def sparsemap_chain(unary, transitions):
    return ks.sparsemap_sequence(unary, transitions)[0]


def sparsemap_matching(scores):
    return ks.sparsemap(MatchingStructure(), scores)[0]


def crf_chain(unary, transitions):
    return linear_chain_crf_marginals(unary, transitions)[0]


def forward_backward(marginals, inputs: list[tf.Tensor]):
    """A ``tf.function`` computing marginals and the gradient of <marginals, cotangent>."""
    variables = [tf.Variable(x) for x in inputs]
    cotangent = tf.constant(np.random.default_rng(0).normal(size=marginals(*inputs).shape))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(marginals(*variables) * cotangent)
        return tape.gradient(total, variables)

    return step


def seconds_per_call(function, repeats: int) -> float:
    function()  # trace and compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _twice(oracle):
    """A compiled oracle that runs ``oracle`` twice on the same scores (same answer)."""

    @nb.njit(nogil=True)
    def twice(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
        oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code)
        return oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code)

    return twice


def oracle_share(structure: Structure, eta_u: np.ndarray, eta_v: np.ndarray, repeats: int):
    """Mean MAP calls per instance and the fraction of the solve spent in them.

    With a compiled oracle, the solve is timed twice in the same run: as is, and
    with every MAP call made twice on the scores the solver hands it (the
    solver's path is unchanged, since both calls return the same structure).
    The difference is the time of the MAP calls on the solver's own iterates
    ``eta - u``, which are flatter, and slower to maximise, than the raw scores.
    A repeated call meets warm caches, so this share is if anything an
    underestimate. Structures without a compiled oracle time their batched
    Python oracle on the raw scores instead.
    """
    batch = eta_u.shape[0]
    flat_u, flat_v = eta_u.reshape(batch, -1), eta_v.reshape(batch, -1)
    compiled = structure.compiled_oracle(eta_u.shape[1:], eta_v.shape[1:])
    calls = solve(structure, eta_u, eta_v).map_calls
    if compiled is None:
        solve_time = seconds_per_call(lambda: solve(structure, eta_u, eta_v), repeats)
        per_call = seconds_per_call(lambda: structure.map(eta_u, eta_v), repeats) / batch
        return float(calls.mean()), min(1.0, float(calls.sum()) * per_call / solve_time)
    doubled = dataclasses.replace(compiled, function=_twice(compiled.function))

    def cpu_seconds(oracle: object) -> float:
        # One example at a time on one thread, in CPU time: the least noisy clock here.
        times = []
        for _ in range(repeats + 1):
            start = time.process_time()
            for b in range(batch):
                solve_compiled(oracle, flat_u[b : b + 1], flat_v[b : b + 1], None, 1e-6, 100)
            times.append(time.process_time() - start)
        return min(times[1:])

    once, twice = cpu_seconds(compiled), cpu_seconds(doubled)
    return float(calls.mean()), min(1.0, max(0.0, twice - once) / once)


def compare_cle_with_networkx(words: int, batch: int) -> str:
    try:
        import networkx as nx
    except ImportError:
        return "networkx not installed: pip install networkx to compare Chu-Liu-Edmonds"
    scores = np.random.default_rng(1).normal(size=(batch, words + 1, words + 1))
    structure = DependencyTreeStructure()
    structure.map(scores, np.zeros((batch, 0)))
    ours = seconds_per_call(lambda: structure.map(scores, np.zeros((batch, 0))), 5)
    heads = structure.map(scores, np.zeros((batch, 0)))

    def networkx_trees():
        trees = []
        for s in scores:
            graph = nx.DiGraph()
            graph.add_weighted_edges_from(
                (h, d, s[h, d]) for h in range(words + 1) for d in range(1, words + 1) if h != d
            )
            trees.append(nx.maximum_spanning_arborescence(graph))
        return trees

    theirs = seconds_per_call(networkx_trees, 2)
    same = all(all(heads[b, d] == h for h, d in tree.edges) for b, tree in enumerate(networkx_trees()))
    speedup = theirs / ours
    return f"Chu-Liu-Edmonds vs networkx (n={words}, batch {batch}): same trees={same}, {speedup:.0f}x faster"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--words", type=int, default=30, help="tree and sequence length")
    parser.add_argument("--labels", type=int, default=20, help="sequence labels")
    parser.add_argument("--items", type=int, default=20, help="matching size (items x items)")
    parser.add_argument("--scale", type=float, default=1.0, help="standard deviation of the random scores")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    b, n, k, m = args.batch, args.words, args.labels, args.items
    tree_scores = rng.normal(size=(b, n + 1, n + 1)) * args.scale
    unary = rng.normal(size=(b, n, k)) * args.scale
    transitions = rng.normal(size=(k, k)) * args.scale
    pair_scores = rng.normal(size=(b, m, m)) * args.scale

    cases = [
        (
            f"dependency tree n={n}",
            DependencyTreeStructure(),
            tree_scores,
            np.zeros((b, 0)),
            sparsemap_tree,
            tree_crf_marginals,
            [tf.constant(tree_scores)],
            "matrix-tree CRF",
        ),
        (
            f"sequence n={n}, K={k}",
            SequenceStructure(),
            unary,
            np.broadcast_to(transitions, (b, n - 1, k, k)).copy(),
            sparsemap_chain,
            crf_chain,
            [tf.constant(unary), tf.constant(transitions)],
            "forward-backward",
        ),
        (
            f"matching {m}x{m}",
            MatchingStructure(),
            pair_scores,
            np.zeros((b, 0)),
            sparsemap_matching,
            sinkhorn,
            [tf.constant(pair_scores)],
            "Sinkhorn x50",
        ),
    ]
    print(f"batch {b}, float64, scores ~ N(0, {args.scale}^2), median of {args.repeats} calls, tf.function")
    header = f"{'structure':<26}{'SparseMAP s':>12}{'baseline s':>12}{'ratio':>8}  {'baseline':<18}"
    print(header + f"{'MAP calls':>10}{'oracle share':>14}")
    for name, structure, eta_u, eta_v, ours, theirs, inputs, baseline in cases:
        ours_time = seconds_per_call(forward_backward(ours, inputs), args.repeats)
        baseline_time = seconds_per_call(forward_backward(theirs, inputs), args.repeats)
        calls, share = oracle_share(structure, eta_u, eta_v, args.repeats)
        print(
            f"{name:<26}{ours_time:>12.4f}{baseline_time:>12.4f}{ours_time / baseline_time:>8.2f}  "
            f"{baseline:<18}{calls:>10.1f}{share:>14.2f}"
        )
    print(compare_cle_with_networkx(n, b))


if __name__ == "__main__":
    main()
