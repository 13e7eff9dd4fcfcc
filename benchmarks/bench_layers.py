"""SparseMAP forward+backward against marginal inference, per structure, measured in one run.

For batch 32 in float64, every contestant maps scores to structured marginals
and back-propagates a random cotangent through them, inside ``tf.function``:

* dependency trees (n words): SparseMAP vs matrix-tree CRF marginals;
* sequences (n, K): SparseMAP vs linear-chain forward-backward marginals;
* matchings (m x m): SparseMAP vs 50 iterations of log-domain Sinkhorn.

It prints the time ratios (SparseMAP / baseline: machines are noisy, so the two
are called alternately and the ratio is the median of the per-pair ratios), the
mean number of MAP calls per instance,
the share of the SparseMAP forward time spent in MAP calls, and our
Chu-Liu-Edmonds against ``networkx.maximum_spanning_arborescence`` when
networkx is installed.

Example:
    python benchmarks/bench_layers.py --repeats 10 --scale 1.0
    python benchmarks/bench_layers.py --repeats 20 --structures tree
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import warnings

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


def paired_seconds(ours, baseline, repeats: int) -> tuple[float, float, float]:
    """Median seconds per call of ``ours`` and ``baseline``, called alternately, and the
    median of the per-pair time ratios (load changes during the run hit both sides)."""
    for _ in range(3):  # trace, compile and warm up (training runs in the steady state)
        ours(), baseline()
    times = np.empty((repeats, 2))
    for i in range(repeats):
        for j, function in enumerate((ours, baseline)):
            start = time.perf_counter()
            function()
            times[i, j] = time.perf_counter() - start
    ours_time, baseline_time = np.median(times, axis=0)
    return float(ours_time), float(baseline_time), float(np.median(times[:, 0] / times[:, 1]))


# The MAP answers of one solve, recorded by _recording (objmode appends here).
_TAPE: list = []


def _recording(oracle):
    """A compiled oracle that calls ``oracle`` and appends its answer to ``_TAPE``."""

    @nb.njit(nogil=True)
    def record(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
        count_u, count_v = oracle(
            scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code
        )
        with nb.objmode():
            _TAPE.append(
                np.concatenate(
                    (
                        [count_u, count_v],
                        code,
                        m_indices[:count_u],
                        m_values[:count_u].view(np.int64),
                        n_indices[:count_v],
                        n_values[:count_v].view(np.int64),
                    )
                )
            )
        return count_u, count_v

    return record


@nb.njit(nogil=True)
def _replay(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
    """A compiled oracle that ignores the scores and returns the next answer of the tape
    ``params`` (``params[0]``: the read position; float values stored as their bits)."""
    p = params[0]
    count_u, count_v = params[p], params[p + 1]
    p += 2
    for j in range(code.shape[0]):
        code[j] = params[p + j]
    p += code.shape[0]
    bits = params[p + count_u : p + 2 * count_u].copy().view(np.float64)
    for j in range(count_u):
        m_indices[j], m_values[j] = params[p + j], bits[j]
    p += 2 * count_u
    bits = params[p + count_v : p + 2 * count_v].copy().view(np.float64)
    for j in range(count_v):
        n_indices[j], n_values[j] = params[p + j], bits[j]
    params[0] = p + 2 * count_v
    return count_u, count_v


def oracle_share(structure: Structure, eta_u: np.ndarray, eta_v: np.ndarray, repeats: int):
    """Mean MAP calls per instance and the fraction of the solve spent in them.

    With a compiled oracle, every example is solved once with its MAP answers
    recorded, then timed twice in the same run: with the real oracle, and with
    an oracle that replays the recorded answers at almost no cost (the solver
    takes the same path). The difference is the time of the MAP calls on the
    solver's own iterates ``eta - u``. Structures without a compiled oracle
    time their batched Python oracle on the raw scores instead.
    """
    batch = eta_u.shape[0]
    flat_u, flat_v = eta_u.reshape(batch, -1), eta_v.reshape(batch, -1)
    compiled = structure.compiled_oracle(eta_u.shape[1:], eta_v.shape[1:])
    calls = solve(structure, eta_u, eta_v).map_calls
    if compiled is None:
        solve_time = seconds_per_call(lambda: solve(structure, eta_u, eta_v), repeats)
        per_call = seconds_per_call(lambda: structure.map(eta_u, eta_v), repeats) / batch
        return float(calls.mean()), min(1.0, float(calls.sum()) * per_call / solve_time)
    recording = dataclasses.replace(compiled, function=_recording(compiled.function))
    tapes, solutions = [], []
    with warnings.catch_warnings():  # objmode inside a nogil kernel: fine for recording
        warnings.simplefilter("ignore", nb.NumbaWarning)
        for b in range(batch):
            _TAPE.clear()
            solution = solve_compiled(recording, flat_u[b : b + 1], flat_v[b : b + 1], None, 1e-6, 100)
            solutions.append(solution[0])
            tapes.append(np.concatenate([[1]] + _TAPE).astype(np.int64))
    replays = [dataclasses.replace(compiled, function=_replay, params=tape) for tape in tapes]
    for b in range(batch):  # the replayed solve must take the real one's path
        replayed = solve_compiled(replays[b], flat_u[b : b + 1], flat_v[b : b + 1], None, 1e-6, 100)[0]
        if not np.array_equal(solutions[b][0], replayed[0]):
            raise RuntimeError(f"the replayed solve of example {b} left the real solver's path")

    def cpu_seconds(oracles: list, tapes: list) -> float:
        # One example at a time on one thread, in CPU time: the least noisy clock here.
        times = []
        for _ in range(repeats + 1):
            for tape in tapes:
                tape[0] = 1  # rewind
            start = time.process_time()
            for b in range(batch):
                solve_compiled(oracles[b], flat_u[b : b + 1], flat_v[b : b + 1], None, 1e-6, 100)
            times.append(time.process_time() - start)
        return min(times[1:])

    real, replayed = cpu_seconds([compiled] * batch, []), cpu_seconds(replays, tapes)
    return float(calls.mean()), min(1.0, max(0.0, real - replayed) / real)


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
    parser.add_argument(
        "--structures",
        default="tree,sequence,matching",
        help="comma-separated subset of tree, sequence, matching (default: all three)",
    )
    args = parser.parse_args(argv)
    chosen = args.structures.split(",")
    unknown = sorted(set(chosen) - {"tree", "sequence", "matching"})
    if unknown:
        parser.error(f"unknown structures {unknown}. Received: --structures={args.structures}")
    rng = np.random.default_rng(0)
    b, n, k, m = args.batch, args.words, args.labels, args.items
    tree_scores = rng.normal(size=(b, n + 1, n + 1)) * args.scale
    unary = rng.normal(size=(b, n, k)) * args.scale
    transitions = rng.normal(size=(k, k)) * args.scale
    pair_scores = rng.normal(size=(b, m, m)) * args.scale

    cases = [
        (
            "tree",
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
            "sequence",
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
            "matching",
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
    print(
        f"batch {b}, float64, scores ~ N(0, {args.scale}^2), "
        f"median of {args.repeats} alternating calls, tf.function"
    )
    header = f"{'structure':<26}{'SparseMAP s':>12}{'baseline s':>12}{'ratio':>8}  {'baseline':<18}"
    print(header + f"{'MAP calls':>10}{'oracle share':>14}")
    for key, name, structure, eta_u, eta_v, ours, theirs, inputs, baseline in cases:
        if key not in chosen:
            continue
        ours_time, baseline_time, ratio = paired_seconds(
            forward_backward(ours, inputs), forward_backward(theirs, inputs), args.repeats
        )
        calls, share = oracle_share(structure, eta_u, eta_v, args.repeats)
        print(
            f"{name:<26}{ours_time:>12.4f}{baseline_time:>12.4f}{ratio:>8.2f}  "
            f"{baseline:<18}{calls:>10.1f}{share:>14.2f}"
        )
    if "tree" in chosen:
        print(compare_cle_with_networkx(n, b))


if __name__ == "__main__":
    main()
