"""The LP-SparseMAP benchmark's graphs, solvers and table, at tiny sizes: the batched solve
equals the per-example loop, and cvxpy's solve of the local polytope QP equals ours."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from scipy.optimize import linprog

from benchmarks import bench_lp_sparsemap as bench

TINY = ["--batch", "3", "--words", "4", "--labels", "3", "--tree-words", "4", "--logic-variables", "12"]


def _graphs():
    args = bench.parse_args(TINY)
    rng = np.random.default_rng(0)
    for name in bench.GRAPHS:
        graph = bench.build_graph(name, args, rng)
        yield (
            name,
            graph,
            rng.standard_normal((3, graph.num_variables)),
            rng.standard_normal((3, graph.v_size)),
        )


def test_the_batch_equals_the_loop_on_every_graph():
    for name, graph, eta_u, eta_v in _graphs():
        result = bench.run_graph(graph, eta_u, eta_v, cvxpy_examples=0, solver="CLARABEL")
        assert result["loop_difference"] <= 1e-9, name
        np.testing.assert_array_equal(result["iterations"], result["loop_iterations"])
        assert result["converged"] == result["polished"] == 3
        assert len(bench.table_row(name, 3, result)) == 8


def test_cvxpy_solves_the_same_relaxation():
    pytest.importorskip("cvxpy", reason="the benchmark's reference solver: pip install -e '.[bench]'")
    for name, graph, eta_u, eta_v in _graphs():
        result = bench.run_graph(graph, eta_u, eta_v, cvxpy_examples=2, solver="CLARABEL")
        assert result["cvxpy_difference_u"] <= 1e-6, name
        assert result["cvxpy_difference_v"] <= 1e-6, name
        assert result["cvxpy_s"].shape == (2,)
        assert len(bench.table_row(name, 3, result)) == 12


def test_the_tree_polytope_holds_exactly_the_trees():
    """The multi-commodity flow rows admit a tree's arcs (with its paths as flows) and
    refuse a cycle that gives every word one head."""
    graph = bench.tree_graph(3, 3)
    size, (a_eq, b_eq), (a_in, b_in) = bench.local_polytope(graph)
    arcs = np.arange(16).reshape(4, 4)

    def point(heads):
        y = np.zeros(size)
        y[arcs[heads, np.arange(1, 4)]] = 1.0
        valid = [(h, d) for h in range(4) for d in range(1, 4) if h != d]  # the arcs, row-major
        count = len(valid)
        for k in range(1, 4):  # the path from the root to k
            node = k
            while node != 0:
                head = heads[node - 1]
                y[graph.num_variables + (k - 1) * count + valid.index((head, node))] = 1.0
                node = head
        return y

    tree = point(np.array([0, 1, 1]))  # 0 -> 1 -> {2, 3}
    np.testing.assert_allclose(a_eq @ tree, b_eq)
    assert (a_in @ tree <= b_in + 1e-12).all()
    cycle = np.zeros(graph.num_variables)
    cycle[arcs[[2, 3, 1], [1, 2, 3]]] = 1.0  # 2 -> 1, 3 -> 2, 1 -> 3: no flow can leave the root
    bounds = [(value, value) for value in cycle] + [(None, None)] * (size - graph.num_variables)
    result = linprog(np.zeros(size), A_ub=a_in, b_ub=b_in, A_eq=a_eq, b_eq=b_eq, bounds=bounds)
    assert result.status == 2  # infeasible


def test_main_prints_one_row_per_graph(capsys):
    bench.main([*TINY, "--cvxpy-examples", "0"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| graph | batched ms/example")
    assert [row.split(" | ")[0] for row in rows[1:]] == [f"| {name}" for name in bench.GRAPHS]


def test_logic_variables_must_split_into_fours():
    with pytest.raises(ValueError, match="Received: variables=10"):
        bench.logic_graph(10, np.random.default_rng(0))
    assert isinstance(bench.parse_args([]), argparse.Namespace)
