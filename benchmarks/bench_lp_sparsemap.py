"""Time LP-SparseMAP on a batch: the batched ADMM against the per-example loop and cvxpy.

Three factor graphs (issue 44's benchmark), each with a batch of standard-normal scores
``eta_u`` and ``eta_v`` (seeded):

* ``sequence``: a tagger of ``--words`` words and ``--labels`` labels (a
  ``SequenceStructure`` factor over the ``n x K`` tag indicators, transitions scored) whose
  indicators of label ``c`` at consecutive words are joined by ``Pair`` factors (scored),
  for the first ``--chains`` labels;
* ``tree``: a non-projective dependency tree of ``--tree-words`` words
  (``DependencyTreeStructure``) with a ``Budget``: at most ``--budget`` arcs out of the root;
* ``logic``: ``--logic-variables`` variables, covered by ``Xor`` and ``Or`` factors of four
  (alternating), plus random ``Or`` and ``Xor`` factors of three and ``Pair`` factors.

Each graph is solved three ways in the same run, and the ratios are what to compare:

1. **batched**: ``lp_sparsemap_batch`` on the whole batch in one call (the ADMM vectorised
   over the examples, :mod:`keras_structured.engine.lp.batch`); its time per example is
   the batch's time divided by the batch size.
2. **loop**: ``lp_sparsemap`` on one example after the other, which is what
   ``lp_sparsemap_batch`` did before it was batched: p50/p90/max time per example, and the
   ratio of its total to the batched call's. Both run the same iterations; the largest
   difference of their solutions is printed (the tests require 1e-9).
3. **cvxpy**: the same QP, ``max <eta_u, u> + <eta_v, v> - ||u||^2 / 2`` over the local
   polytope, solved by cvxpy (``--solver``, default Clarabel, at tolerances of 1e-12) on the first
   ``--cvxpy-examples`` examples one by one (a parametrised problem compiled once; the
   solve alone is timed). Each structure factor's marginal polytope is written exactly by
   an extended formulation: a chain's by its local consistency constraints (pairwise
   marginals that sum to the unary ones), a tree's by the multi-commodity flow
   formulation (Martins, Smith and Xing, ACL 2009: one unit of flow from the root to each
   word, within the arcs); a logic factor's by its inequalities. Printed: p50/p90/max
   time per example, the ratio to the batched time per example, and the largest
   difference of the variable marginals ``u`` (and additional ones ``v``) from ours. The
   tree's formulation is large (for 50 words, about 125,000 flow unknowns): each solve
   takes cvxpy over a minute there, hence the few examples.

Why cvxpy and not lp-sparsemap: deep-spin/lp-sparsemap, the C++/Cython implementation of
LP-SparseMAP, cannot be built here: its build needs the Eigen headers (and
``CFLAGS="-include tuple"`` on current compilers), and its wheels are for old Pythons
only. cvxpy solves the same relaxation with a general solver instead, which checks the
solutions as well as timing a generic alternative. cvxpy is a benchmark-only dependency
(``pip install cvxpy``); without it the cvxpy columns are left out with a message.

Example:
    python benchmarks/bench_lp_sparsemap.py --batch 32 --cvxpy-examples 2 2>/dev/null
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from keras_structured.engine import DependencyTreeStructure, SequenceStructure
from keras_structured.engine.lp import (
    Budget,
    FactorGraph,
    LogicFactor,
    LPSparseMAPConvergenceWarning,
    LPSparseMAPSolution,
    Or,
    Pair,
    StructureFactor,
    Xor,
    lp_sparsemap,
    lp_sparsemap_batch,
)

GRAPHS = ("sequence", "tree", "logic")
# Clarabel's default tolerances stop at a relative duality gap of 1e-8, which leaves ``u``
# off by up to about 1e-5 (a QP's distance to its solution goes as the root of the gap);
# these bring it to about 1e-9 where it converges.
CLARABEL_TOLERANCES = {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "tol_ktratio": 1e-10}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="LP-SparseMAP: batched ADMM vs the per-example loop vs cvxpy, on three factor graphs.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--graphs", nargs="+", choices=GRAPHS, default=list(GRAPHS), help="graphs to run")
    parser.add_argument("--batch", type=int, default=32, help="examples per batch")
    parser.add_argument("--words", type=int, default=30, help="sequence: words")
    parser.add_argument("--labels", type=int, default=10, help="sequence: labels")
    parser.add_argument(
        "--chains", type=int, default=2, help="sequence: labels whose indicators Pair factors chain"
    )
    parser.add_argument("--tree-words", type=int, default=50, help="tree: words")
    parser.add_argument("--budget", type=int, default=2, help="tree: most arcs out of the root")
    parser.add_argument("--logic-variables", type=int, default=100, help="logic: variables (a multiple of 4)")
    parser.add_argument("--cvxpy-examples", type=int, default=2, help="examples solved by cvxpy (0: none)")
    parser.add_argument("--solver", default="CLARABEL", help="cvxpy solver (a QP solver)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------- graphs


def sequence_graph(words: int, labels: int, chains: int) -> FactorGraph:
    """A tagger whose label-``c`` indicators are chained by Pair factors, ``c < chains``.

    Example:
        >>> len(sequence_graph(4, 3, 2).factors)  # the sequence and 2 x 3 pairs
        7
    """
    tags = np.arange(words * labels).reshape(words, labels)
    pairs = [Pair(tags[i, c], tags[i + 1, c]) for c in range(chains) for i in range(words - 1)]
    return FactorGraph(tags.size, [StructureFactor(SequenceStructure(), tags), *pairs])


def tree_graph(words: int, budget: int) -> FactorGraph:
    """A non-projective dependency tree with at most ``budget`` arcs out of the root.

    Example:
        >>> tree_graph(3, 1).num_variables  # the (words + 1)^2 arc indicators [head, dependent]
        16
    """
    arcs = np.arange((words + 1) ** 2).reshape(words + 1, words + 1)
    return FactorGraph(
        arcs.size, [StructureFactor(DependencyTreeStructure(), arcs), Budget(arcs[0, 1:], budget)]
    )


def logic_graph(variables: int, rng: np.random.Generator) -> FactorGraph:
    """XOR and OR factors of four over a random partition of the variables, plus
    ``variables // 5`` random ORs of three, ``variables // 10`` XORs of three and
    ``3 * variables // 10`` Pair factors; drawn again while the logic factors contradict.

    Example:
        >>> len(logic_graph(20, np.random.default_rng(0)).factors)  # 5 + 4 + 2 + 6
        17
    """
    if variables % 4:
        raise ValueError(f"logic-variables must be a multiple of 4. Received: variables={variables}")
    while True:
        blocks = rng.permutation(variables).reshape(-1, 4)
        factors = [(Xor if i % 2 == 0 else Or)(block) for i, block in enumerate(blocks)]
        factors += [Or(rng.choice(variables, 3, replace=False)) for _ in range(variables // 5)]
        factors += [Xor(rng.choice(variables, 3, replace=False)) for _ in range(variables // 10)]
        factors += [Pair(*rng.choice(variables, 2, replace=False)) for _ in range(3 * variables // 10)]
        try:
            return FactorGraph(variables, factors)
        except ValueError:  # contradictory logic factors
            continue


def build_graph(name: str, args: argparse.Namespace, rng: np.random.Generator) -> FactorGraph:
    """The graph ``name`` (one of :data:`GRAPHS`) at the sizes of ``args``."""
    if name == "sequence":
        return sequence_graph(args.words, args.labels, args.chains)
    if name == "tree":
        return tree_graph(args.tree_words, args.budget)
    return logic_graph(args.logic_variables, rng)


def describe(name: str, graph: FactorGraph) -> str:
    """One line: the graph's variables, factors by kind and links."""
    kinds: dict[str, int] = {}
    for factor in graph.factors:
        kind = type(factor.structure if isinstance(factor, StructureFactor) else factor).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
    factors = ", ".join(f"{count} {kind}" for kind, count in kinds.items())
    links = sum(link.size for link in graph.links)
    return (
        f"{name}: {graph.num_variables} variables, {factors}; {links} links, {graph.v_size} additional parts"
    )


# ------------------------------------------------------------------------------ the two solvers


def solve_batched(graph: FactorGraph, eta_u, eta_v) -> tuple[list[LPSparseMAPSolution], float]:
    """``lp_sparsemap_batch`` on the batch: ``(solutions, seconds)``."""
    start = time.perf_counter()
    solutions = lp_sparsemap_batch(graph, eta_u, eta_v)
    return solutions, time.perf_counter() - start


def solve_loop(graph: FactorGraph, eta_u, eta_v) -> tuple[list[LPSparseMAPSolution], np.ndarray]:
    """``lp_sparsemap`` on each example in turn: ``(solutions, seconds per example)``."""
    solutions, seconds = [], []
    for scores_u, scores_v in zip(eta_u, eta_v, strict=True):
        start = time.perf_counter()
        solutions.append(lp_sparsemap(graph, scores_u, graph.split_additional(scores_v)))
        seconds.append(time.perf_counter() - start)
    return solutions, np.array(seconds)


def max_difference(first: list[LPSparseMAPSolution], second: list[LPSparseMAPSolution]) -> float:
    """The largest absolute difference of ``u`` and of every factor's ``v``, over the examples."""
    return max(
        max(
            [np.abs(a.u - b.u).max()]
            + [np.abs(x - y).max(initial=0.0) for x, y in zip(a.v, b.v, strict=True)]
        )
        for a, b in zip(first, second, strict=True)
    )


# ----------------------------------------------------------------------------------- cvxpy


class _Rows:
    """Sparse constraint rows ``A y (=|<=) b`` over the stacked unknowns ``y``, added block by block."""

    def __init__(self):
        self.entries: dict[bool, list] = {True: [], False: []}  # equality -> (rows, cols, values, b)

    def add(self, columns, coefficients, bounds: np.ndarray, equality) -> None:
        """Rows ``coefficients @ y[columns] (= or <=) bounds`` (``coefficients`` dense or
        sparse); ``equality`` per row or for all."""
        columns, matrix = np.asarray(columns), sp.csr_matrix(coefficients)
        equality = np.broadcast_to(np.asarray(equality, bool), bounds.shape)
        for kind in (True, False):
            chosen = np.flatnonzero(equality == kind)
            if chosen.size:
                block = matrix[chosen].tocoo()
                self.entries[kind].append((block.row, columns[block.col], block.data, bounds[chosen]))

    def matrices(self, size: int, equality: bool) -> tuple[sp.csr_matrix, np.ndarray]:
        """The stacked ``(A, b)`` of the equality or of the inequality rows."""
        rows, cols, values, bounds, offset = [], [], [], [], 0
        for row, col, value, bound in self.entries[equality]:
            rows.append(row + offset)
            cols.append(col)
            values.append(value)
            bounds.append(bound)
            offset += bound.size
        if not bounds:
            return sp.csr_matrix((0, size)), np.zeros(0)
        matrix = sp.csr_matrix(
            (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(offset, size)
        )
        return matrix, np.concatenate(bounds)


def _sequence_rows(rows: _Rows, tags: np.ndarray, parts: np.ndarray) -> None:
    """A chain's marginal polytope: transition marginals ``mu >= 0`` whose sums over the next
    (previous) label are the unary marginals of a word (of the next word), and one label
    per first word. Exact for a chain (a tree-structured model)."""
    words, labels = tags.shape
    rows.add(tags[0], np.ones((1, labels)), np.ones(1), True)
    rows.add(tags.ravel(), -sp.eye(tags.size), np.zeros(tags.size), False)
    if words == 1:
        return
    mu = parts.reshape(words - 1, labels, labels)
    rows.add(mu.ravel(), -sp.eye(mu.size), np.zeros(mu.size), False)
    ones = np.ones(labels)
    for i in range(words - 1):
        for k in range(labels):
            rows.add(np.append(mu[i, k, :], tags[i, k]), np.append(ones, -1.0)[None], np.zeros(1), True)
            rows.add(np.append(mu[i, :, k], tags[i + 1, k]), np.append(ones, -1.0)[None], np.zeros(1), True)


def _tree_rows(rows: _Rows, arcs: np.ndarray, flows: int) -> int:
    """The arborescence polytope of ``arcs[head, dependent]`` by multi-commodity flows from
    the root (Martins, Smith and Xing, ACL 2009), its flow unknowns from index ``flows`` on:
    one head per word, no arc into the root or from a word to itself, and for each word
    ``k`` a unit flow ``phi^k`` from the root to ``k`` with ``0 <= phi^k <= z`` on every arc.
    Returns the index after the flow unknowns."""
    nodes = arcs.shape[0]
    valid = ~np.eye(nodes, dtype=bool) & (np.arange(nodes) > 0)[None, :]
    heads, dependents = np.nonzero(valid)
    invalid = arcs[~valid]
    rows.add(invalid, sp.eye(invalid.size), np.zeros(invalid.size), True)
    for d in range(1, nodes):
        rows.add(arcs[np.arange(nodes) != d, d], np.ones((1, nodes - 1)), np.ones(1), True)
    count = heads.size
    coupling = sp.hstack([sp.eye(count), -sp.eye(count)])  # phi - z <= 0
    # Inflow - outflow at every word (the root's row, their negated sum, is left out: an
    # interior-point solver stalls on dependent equalities).
    balance = np.zeros((nodes, count))
    balance[dependents, np.arange(count)] += 1.0
    balance[heads, np.arange(count)] -= 1.0
    for k in range(1, nodes):
        phi = flows + (k - 1) * count + np.arange(count)
        rows.add(phi, -sp.eye(count), np.zeros(count), False)
        rows.add(np.concatenate([phi, arcs[heads, dependents]]), coupling, np.zeros(count), False)
        rows.add(phi, balance[1:], (np.arange(1, nodes) == k).astype(float), True)
    return flows + (nodes - 1) * count


def local_polytope(graph: FactorGraph) -> tuple[int, tuple, tuple]:
    """The local polytope of ``graph`` over ``y = (u, v, flows)``: ``(size, (A_eq, b_eq), (A_in, b_in))``.

    Raises:
        NotImplementedError: for a structure factor other than a sequence or a
            non-projective tree with several root arcs allowed.
    """
    rows, size = _Rows(), graph.num_variables + graph.v_size
    for factor, link, start, stop in zip(
        graph.factors, graph.links, graph.v_offsets[:-1], graph.v_offsets[1:], strict=True
    ):
        parts = graph.num_variables + np.arange(start, stop)
        if isinstance(factor, LogicFactor):
            a_x, a_z, b, equality = factor.inequalities()
            rows.add(np.concatenate([link, parts]), np.hstack([a_x, a_z]), b, equality)
        elif type(factor.structure) is SequenceStructure:
            _sequence_rows(rows, factor.variables, parts)
        elif type(factor.structure) is DependencyTreeStructure and not (
            factor.structure.single_root or factor.structure.projective
        ):
            size = _tree_rows(rows, factor.variables, size)
        else:
            raise NotImplementedError(f"No cvxpy polytope for {factor!r}.")
    return size, rows.matrices(size, True), rows.matrices(size, False)


def cvxpy_solver(graph: FactorGraph, solver: str) -> Callable[[np.ndarray, np.ndarray], tuple]:
    """A function ``(eta_u, eta_v flat) -> (u, v flat, exact)`` solving LP-SparseMAP by cvxpy:
    the problem is built once with the scores as parameters. ``exact`` is False when the
    solver stopped just short of its tolerances (cvxpy's ``optimal_inaccurate``, Clarabel's
    ``AlmostSolved``: on the trees' flow formulation the relative gap stalls near 1e-8)."""
    import cvxpy as cp

    size, (a_eq, b_eq), (a_in, b_in) = local_polytope(graph)
    n, scored = graph.num_variables, graph.num_variables + graph.v_size
    y = cp.Variable(size)
    scores = cp.Parameter(scored)
    constraints = [a_eq @ y == b_eq] + ([a_in @ y <= b_in] if b_in.size else [])
    problem = cp.Problem(cp.Maximize(scores @ y[:scored] - 0.5 * cp.sum_squares(y[:n])), constraints)
    scores.value = np.zeros(scored)
    problem.get_problem_data(solver)  # compiles the problem once, for every later solve

    def solve(eta_u: np.ndarray, eta_v: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        scores.value = np.concatenate([eta_u, eta_v])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Solution may be inaccurate")
            problem.solve(solver=solver, **(CLARABEL_TOLERANCES if solver == "CLARABEL" else {}))
        if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            raise RuntimeError(f"cvxpy returned status {problem.status!r}")
        return y.value[:n], y.value[n:scored], problem.status == cp.OPTIMAL

    return solve


def solve_cvxpy(solve: Callable, eta_u, eta_v) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``solve`` on each example: ``(u, v, seconds per example, how many were solved to the
    solver's tolerances)``."""
    outputs, seconds = [], []
    for scores_u, scores_v in zip(eta_u, eta_v, strict=True):
        start = time.perf_counter()
        outputs.append(solve(scores_u, scores_v))
        seconds.append(time.perf_counter() - start)
    u, v, exact = zip(*outputs, strict=True)
    return np.stack(u), np.stack(v), np.array(seconds), sum(exact)


# ------------------------------------------------------------------------------------- runs


def percentiles(values) -> str:
    """``p50 / p90 / max`` of ``values``."""
    p50, p90, largest = np.percentile(values, [50, 90, 100])
    return f"{p50:.3g} / {p90:.3g} / {largest:.3g}"


def run_graph(graph: FactorGraph, eta_u, eta_v, cvxpy_examples: int, solver: str) -> dict:
    """Solve a batch the three ways (after an untimed warm-up of both of ours).

    Returns:
        A dict: ``batched_s`` (total), ``loop_s`` (per example), ``iterations`` and
        ``loop_iterations`` (per example), ``converged``, ``polished``, ``loop_difference``
        (largest ``|u|, |v|`` difference batched vs loop), and when cvxpy ran
        ``cvxpy_s`` (per example), ``cvxpy_optimal`` (how many reached the solver's
        tolerances, of how many) and ``cvxpy_difference_u`` / ``cvxpy_difference_v``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LPSparseMAPConvergenceWarning)
        solve_batched(graph, eta_u[:1], eta_v[:1])
        solve_loop(graph, eta_u[:1], eta_v[:1])
        batched, batched_s = solve_batched(graph, eta_u, eta_v)
        loop, loop_s = solve_loop(graph, eta_u, eta_v)
    result = {
        "batched_s": batched_s,
        "loop_s": loop_s,
        "iterations": np.array([s.iterations for s in batched]),
        "loop_iterations": np.array([s.iterations for s in loop]),
        "converged": sum(s.converged for s in batched),
        "polished": sum(s.polished for s in batched),
        "loop_difference": max_difference(batched, loop),
    }
    if cvxpy_examples:
        m = min(cvxpy_examples, len(eta_u))
        u, v, seconds, exact = solve_cvxpy(cvxpy_solver(graph, solver), eta_u[:m], eta_v[:m])
        ours_u = np.stack([s.u for s in batched[:m]])
        ours_v = np.stack([np.concatenate([z.ravel() for z in s.v]) for s in batched[:m]])
        result["cvxpy_s"] = seconds
        result["cvxpy_optimal"] = f"{exact}/{m}"
        result["cvxpy_difference_u"] = float(np.abs(u - ours_u).max())
        result["cvxpy_difference_v"] = float(np.abs(v - ours_v).max(initial=0.0))
    return result


def table_row(name: str, batch: int, result: dict) -> list[str]:
    """One Markdown row of :func:`main`'s table."""
    per_example = result["batched_s"] / batch
    same_iterations = int(np.sum(result["iterations"] == result["loop_iterations"]))
    row = [
        name,
        f"{1e3 * per_example:.3g}",
        percentiles(1e3 * result["loop_s"]),
        f"{result['loop_s'].sum() / result['batched_s']:.2f}",
        percentiles(result["iterations"]),
        f"{same_iterations}/{batch}",
        f"{result['converged']}/{batch}, {result['polished']}/{batch}",
        f"{result['loop_difference']:.1e}",
    ]
    if "cvxpy_s" in result:
        row += [
            percentiles(1e3 * result["cvxpy_s"]),
            result["cvxpy_optimal"],
            f"{np.median(result['cvxpy_s']) / per_example:.1f}",
            f"{result['cvxpy_difference_u']:.1e} / {result['cvxpy_difference_v']:.1e}",
        ]
    return row


def main(argv: list[str] | None = None) -> None:
    """Runs every graph and prints a Markdown table."""
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    cvxpy_examples = args.cvxpy_examples
    header = [
        "graph",
        "batched ms/example",
        "loop ms/example p50 / p90 / max",
        "loop / batched",
        "ADMM iterations p50 / p90 / max",
        "same iterations",
        "converged, polished",
        "max diff batched vs loop",
    ]
    try:
        import cvxpy as cp
    except ImportError:
        print("cvxpy is not installed (`pip install cvxpy`): its columns are left out.\n")
        cvxpy_examples = 0
    if cvxpy_examples:
        header += [
            f"cvxpy ({args.solver}) ms/example p50 / p90 / max",
            "cvxpy optimal (not inaccurate)",
            "cvxpy p50 / batched",
            "max diff u / v vs cvxpy",
        ]
    print(
        f"# LP-SparseMAP, batch {args.batch}: batched ADMM vs the per-example loop"
        + (f" vs cvxpy {cp.__version__} (first {cvxpy_examples} examples)" if cvxpy_examples else "")
        + "\n\nCompare the ratios (same run), not the absolute times.\n"
    )
    rows = []
    for name in args.graphs:
        graph = build_graph(name, args, rng)
        print(describe(name, graph))
        eta_u = rng.standard_normal((args.batch, graph.num_variables))
        eta_v = rng.standard_normal((args.batch, graph.v_size))
        rows.append(table_row(name, args.batch, run_graph(graph, eta_u, eta_v, cvxpy_examples, args.solver)))
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
