"""LP-SparseMAP on a batch (the ADMM vectorised over the examples) against the per-example solver.

The reference is :func:`lp_sparsemap` on each example alone: its own ADMM loop, one ``rho``
and stopping test per problem. The batch must give the same solutions (to 1e-9; in
practice bit for bit), the same iterations, flags and Jacobians, with one warning for
the examples stopped at the cap. Also: the vectorised pieces it is built from (the logic
factors' projections over stacked factors and examples, the sorted counts), and the
active set's public warm restart.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from keras_structured.engine import (
    CustomStructure,
    DependencyTreeStructure,
    MatchingStructure,
    SequenceStructure,
    SimplexStructure,
)
from keras_structured.engine.active_set import ActiveSetSolver
from keras_structured.engine.compiled_active_set import CONVERGED, solve_compiled
from keras_structured.engine.jacobian import dense_rows
from keras_structured.engine.lp import (
    AndOut,
    AtMostOne,
    Budget,
    FactorGraph,
    Imply,
    LPSparseMAPConvergenceWarning,
    LPSparseMAPOptions,
    Or,
    OrOut,
    Pair,
    Xor,
    XorOut,
    lp_sparsemap,
    lp_sparsemap_batch,
)
from keras_structured.engine.lp import batch as lp_batch
from keras_structured.engine.lp.blocks import GraphLayout
from keras_structured.engine.lp.graph import StructureFactor
from keras_structured.engine.lp.projections import PAIRWISE_COUNT, _count_sorted
from tests.test_lp_sparsemap_engine import (
    _directional_difference,
    _random_mixes,
    local_polytope_is_empty,
    logic_graph,
    logic_out_graph,
    sequence_pair_chain,
    tree_at_most_one,
    tree_budget,
)

GRAPHS = {
    "sequence_pair_chain": lambda: sequence_pair_chain(4, 3),
    "tree_budget": lambda: tree_budget(4, 2),
    "tree_at_most_one": tree_at_most_one,
    "logic": logic_graph,
    "logic_out": logic_out_graph,
}


def _batch_scores(graph: FactorGraph, batch: int, seed: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    # Scales differ per example, so that the examples stop after different iterations.
    scales = scale * rng.uniform(0.3, 3.0, size=(batch, 1))
    return rng.normal(size=(batch, graph.num_variables)) * scales, rng.normal(
        size=(batch, graph.v_size)
    ) * scales


def _references(graph, eta_u, eta_v, options=None):
    return [
        lp_sparsemap(graph, u, graph.split_additional(v), options=options)
        for u, v in zip(eta_u, eta_v, strict=True)
    ]


def _assert_same(solutions, references, graph, seed: int = 0) -> None:
    """Equal solutions (1e-9), flags, iterations, final rho and Jacobians."""
    assert len(solutions) == len(references)
    rng = np.random.default_rng(seed)
    for solution, reference in zip(solutions, references, strict=True):
        np.testing.assert_allclose(solution.u, reference.u, rtol=0, atol=1e-9)
        for v, expected in zip(solution.v, reference.v, strict=True):
            np.testing.assert_allclose(v, expected, rtol=0, atol=1e-9)
        assert (solution.converged, solution.polished) == (reference.converged, reference.polished)
        assert solution.iterations == reference.iterations
        assert solution.map_calls == reference.map_calls
        assert solution.rho == reference.rho
        assert solution.objective == pytest.approx(reference.objective, abs=1e-9)
        g_u = rng.normal(size=graph.num_variables)
        g_v = [rng.normal(size=shape) for shape in graph.v_shapes]
        grads, expected = solution.vjp(g_u, g_v), reference.vjp(g_u, g_v)
        np.testing.assert_allclose(grads[0], expected[0], rtol=0, atol=1e-9)
        for grad, value in zip(grads[1], expected[1], strict=True):
            np.testing.assert_allclose(grad, value, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_batch_equals_per_example_solver(name):
    graph = GRAPHS[name]()
    eta_u, eta_v = _batch_scores(graph, 6, seed=1)
    solutions = lp_sparsemap_batch(graph, eta_u, eta_v)
    _assert_same(solutions, _references(graph, eta_u, eta_v), graph)
    assert all(s.converged and s.polished for s in solutions)
    if name in ("sequence_pair_chain", "logic"):  # the examples leave the batch at different iterations
        assert len({s.iterations for s in solutions}) > 1


def test_batch_equals_per_example_solver_on_random_mixed_graphs():
    graphs = [g for g in _random_mixes(np.random.default_rng(2), 6) if not local_polytope_is_empty(g)]
    assert len(graphs) >= 3
    for i, graph in enumerate(graphs):
        eta_u, eta_v = _batch_scores(graph, 3, seed=10 + i)
        _assert_same(lp_sparsemap_batch(graph, eta_u, eta_v), _references(graph, eta_u, eta_v), graph)


@pytest.mark.parametrize(
    "options",
    [
        LPSparseMAPOptions(adapt_rho=False, rho=0.5),
        LPSparseMAPOptions(polish=False, tol=1e-8),
        LPSparseMAPOptions(max_inner_iter=1),
    ],
    ids=["fixed_rho", "no_polish", "one_map_call"],
)
def test_batch_follows_the_options(options):
    graph = sequence_pair_chain(4, 3)
    eta_u, eta_v = _batch_scores(graph, 4, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LPSparseMAPConvergenceWarning)
        solutions = lp_sparsemap_batch(graph, eta_u, eta_v, options=options)
        references = _references(graph, eta_u, eta_v, options)
    _assert_same(solutions, references, graph)


def test_one_warning_for_the_examples_stopped_at_the_cap():
    graph = tree_budget(3)
    eta_u, eta_v = _batch_scores(graph, 5, seed=4)
    # max_iter between the examples' iteration counts: some stop at the cap, some converge.
    counts = sorted(s.iterations for s in lp_sparsemap_batch(graph, eta_u, eta_v))
    options = LPSparseMAPOptions(max_iter=counts[2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solutions = lp_sparsemap_batch(graph, eta_u, eta_v, options=options)
    stopped = sum(not s.converged for s in solutions)
    assert 0 < stopped < len(solutions)
    assert all(s.iterations == counts[2] for s in solutions if not s.converged)
    relevant = [w for w in caught if issubclass(w.category, LPSparseMAPConvergenceWarning)]
    assert len(relevant) == 1
    assert f"on {stopped} of 5 problems" in str(relevant[0].message)
    assert relevant[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LPSparseMAPConvergenceWarning)
        _assert_same(solutions, _references(graph, eta_u, eta_v, options), graph)


def test_batch_scores_are_checked_and_cast():
    graph = sequence_pair_chain()
    eta_u, eta_v = _batch_scores(graph, 3, seed=5)
    assert lp_sparsemap_batch(graph, eta_u[:0], eta_v[:0]) == []
    single = lp_sparsemap_batch(graph, eta_u.astype(np.float32), eta_v.astype(np.float32))
    exact = lp_sparsemap_batch(graph, eta_u.astype(np.float32).astype(np.float64), eta_v.astype(np.float32))
    assert single[0].u.dtype == np.float64
    np.testing.assert_array_equal(single[1].u, exact[1].u)
    with pytest.raises(ValueError, match=r"eta_u must have shape \(batch, 6\)"):
        lp_sparsemap_batch(graph, eta_u[0], eta_v)
    with pytest.raises(ValueError, match=rf"eta_v must have shape \(batch, {graph.v_size}\)"):
        lp_sparsemap_batch(graph, eta_u, eta_v[:, :1])
    bad = eta_u.copy()
    bad[2, 1] = np.inf
    with pytest.raises(ValueError, match="Example 2 of the batch: eta_u must be finite"):
        lp_sparsemap_batch(graph, bad, eta_v)


# ------------------------------------------------------------------- the vectorised pieces

LOGIC_KINDS = [
    lambda v, n: Xor(v, negated=n),
    lambda v, n: Or(v, negated=n),
    lambda v, n: AtMostOne(v, negated=n),
    lambda v, n: Imply(v, negated=n),
    lambda v, n: XorOut(v, negated=n),
    lambda v, n: OrOut(v, negated=n),
    lambda v, n: AndOut(v, negated=n),
    lambda v, n: Budget(v, 2, negated=n),
    lambda v, n: Budget(v, 2, exact=True, negated=n),
]


@pytest.mark.parametrize("kind", range(len(LOGIC_KINDS)))
def test_stacked_projection_equals_each_factor_alone(kind):
    """One call over (examples, factors) equals each factor's projection of each example."""
    rng = np.random.default_rng(kind)
    factors = [LOGIC_KINDS[kind](np.arange(4), rng.random(4) < 0.4) for _ in range(5)]
    assert len({factor.group_key() for factor in factors}) == 1
    a = rng.normal(size=(7, 5, 4)) * 1.5
    x, z = factors[0].project_many(a, np.zeros((7, 5, 0)), np.stack([f.flipped for f in factors]))
    for b in range(7):
        for f, factor in enumerate(factors):
            np.testing.assert_array_equal(x[b, f], factor.project(a[b, f], np.zeros(0))[0])
    assert z.shape == (7, 5, 0)


def test_stacked_pair_projection_equals_each_pair_alone():
    rng = np.random.default_rng(0)
    pairs = [Pair(0, 1), Pair(2, 3), Pair(1, 2)]
    a, s = rng.normal(size=(6, 3, 2)), rng.normal(size=(6, 3, 1)) * 2
    x, z = pairs[0].project_many(a, s, np.stack([p.flipped for p in pairs]))
    for b in range(6):
        for f, pair in enumerate(pairs):
            expected = pair.project(a[b, f], s[b, f])
            np.testing.assert_array_equal(x[b, f], expected[0])
            np.testing.assert_array_equal(z[b, f], expected[1])


@pytest.mark.parametrize("size", [3, PAIRWISE_COUNT + 8], ids=["pairwise", "merge"])
def test_sorted_counts_equal_searchsorted(size):
    rng = np.random.default_rng(size)
    ordered = np.sort(rng.integers(0, 5, size=(20, size)).astype(float), axis=-1)  # with ties
    points = np.sort(rng.integers(-1, 6, size=(20, 2 * size)).astype(float), axis=-1)
    for inclusive, side in [(True, "right"), (False, "left")]:
        expected = np.stack([np.searchsorted(o, p, side=side) for o, p in zip(ordered, points, strict=True)])
        np.testing.assert_array_equal(_count_sorted(ordered, points, inclusive), expected)


def test_layout_sums_each_variables_links_in_factor_order():
    graph = logic_graph()
    layout = GraphLayout(graph)
    seen = np.zeros(graph.num_variables, int)
    for j, (variables, positions) in enumerate(layout.slots):
        np.testing.assert_array_equal(layout.links[positions], variables)
        assert np.unique(variables).size == variables.size
        # The j-th slot holds each variable's (j+1)-th link, and links come in factor order.
        assert (seen[variables] == j).all()
        seen[variables] += 1
    np.testing.assert_array_equal(seen, graph.degrees)
    assert sorted(np.concatenate([g.links.ravel() for g in layout.groups]).tolist()) == list(
        range(layout.links.size)
    )


def test_active_set_restart_equals_a_fresh_solve_in_fewer_map_calls():
    structure = SimplexStructure()
    rng = np.random.default_rng(0)

    def best(scores):
        codes = structure.map(scores[None], None)
        m, n = structure.indicators(codes, (8,), (0,))
        return m[0], n[0], codes[0]

    def run(solver):
        while not solver.done:
            solver.step(*best(solver.map_scores()))
        return solver

    eta = rng.normal(size=8)
    warm = run(ActiveSetSolver(eta, np.zeros(0), *best(eta), tol=1e-12))
    moved = eta + 0.01 * rng.normal(size=8)
    warm.restart(moved, np.zeros(0), tol=1e-12, exact=True)
    run(warm)
    fresh = run(ActiveSetSolver(moved, np.zeros(0), *best(moved), tol=1e-12))
    assert warm.converged and fresh.converged
    np.testing.assert_allclose(warm.u, fresh.u, atol=1e-12)
    assert warm.map_calls < fresh.map_calls


@pytest.mark.parametrize(
    "structure, u_shape",
    [
        (SimplexStructure(), (8,)),
        (SequenceStructure(), (12, 4)),
        (DependencyTreeStructure(), (21, 21)),  # the kernel's own order of the arcs
        (MatchingStructure(), (5, 6)),
    ],
    ids=["simplex", "sequence", "tree", "matching"],
)
def test_compiled_warm_start_equals_a_fresh_solve_in_fewer_map_calls(structure, u_shape):
    v_shape = structure.v_shape(u_shape)
    compiled = structure.compiled_oracle(u_shape, v_shape)
    rng = np.random.default_rng(0)
    eta_u = rng.normal(size=(4, int(np.prod(u_shape))))
    eta_v = 0.3 * rng.normal(size=(4, int(np.prod(v_shape))))
    first = solve_compiled(compiled, eta_u, eta_v, None, 1e-12, 1000)
    moved = eta_u + 0.01 * rng.normal(size=eta_u.shape)
    warm = solve_compiled(compiled, moved, eta_v, None, 1e-12, 1000, starts=first)
    fresh = solve_compiled(compiled, moved, eta_v, None, 1e-12, 1000)
    for w, f in zip(warm, fresh, strict=True):
        assert w.status == f.status == CONVERGED
        np.testing.assert_allclose(w.u, f.u, rtol=0, atol=1e-10)
        np.testing.assert_allclose(w.v, f.v, rtol=0, atol=1e-10)
        assert w.objective == pytest.approx(f.objective, abs=1e-10)
        # The supports (not unique) span the same face: equal Jacobians M^T K^-1 M.
        np.testing.assert_allclose(_jacobian(w), _jacobian(f), rtol=0, atol=1e-9)
    assert sum(w.map_calls for w in warm) < sum(f.map_calls for f in fresh)


def _jacobian(result) -> np.ndarray:
    m = dense_rows(result.m_indices, result.m_values, result.u.size)
    return m.T @ result.weight_jacobian @ m


def _python_sequence() -> CustomStructure:
    """The sequence structure's oracle behind :class:`CustomStructure` (no compiled kernel)."""
    sequence = SequenceStructure()

    def best(scores):
        codes = sequence.map(scores, np.zeros((scores.shape[0], scores.shape[1] - 1, 3, 3)))
        return sequence.indicators(codes, scores.shape[1:], (scores.shape[1] - 1, 3, 3))[0]

    return CustomStructure(best, batched=True)


def test_structure_factors_agree_on_the_compiled_and_the_python_paths():
    n = 6
    tags = np.arange(n * 3).reshape(n, 3)
    pairs = [Pair(tags[i, 1], tags[i + 1, 2]) for i in range(n - 1)]
    compiled = FactorGraph(n * 3, [StructureFactor(SequenceStructure(), tags), *pairs])
    python = FactorGraph(n * 3, [StructureFactor(_python_sequence(), tags), *pairs])
    assert compiled.factors[0].compiled_oracle is not None and python.factors[0].compiled_oracle is None
    rng = np.random.default_rng(3)
    eta_u = rng.normal(size=(5, n * 3))
    eta_v_pairs = rng.normal(size=(5, n - 1))
    # The transitions of the compiled sequence at zero: the custom structure has none.
    eta_v = np.concatenate([np.zeros((5, compiled.v_size - (n - 1))), eta_v_pairs], axis=1)
    solutions = lp_sparsemap_batch(compiled, eta_u, eta_v)
    for a, b in zip(solutions, lp_sparsemap_batch(python, eta_u, eta_v_pairs), strict=True):
        assert a.converged and b.converged and a.polished and b.polished
        np.testing.assert_allclose(a.u, b.u, rtol=0, atol=1e-9)
        g_u = rng.normal(size=n * 3)
        np.testing.assert_allclose(a.vjp(g_u)[0], b.vjp(g_u)[0], rtol=0, atol=1e-9)


def test_examples_unpolished_at_tol_iterate_further_and_are_polished_exactly(monkeypatch):
    """At tol=1e-6 the faces read on some of these 32 trees of 50 words with a budget of 2
    root arcs give the polish an infeasible point (4 or 5 of them on the machines seen; which
    ones depends on the machine's rounding); iterating on at tol/10 polishes each, to the
    solution of a 1000 times tighter solve, with a Jacobian matching finite differences."""
    graph = tree_budget(50, 2)
    rng = np.random.default_rng(0)
    eta_u, eta_v = rng.standard_normal((32, graph.num_variables)), np.zeros((32, 0))
    solutions = lp_sparsemap_batch(graph, eta_u, eta_v)
    assert all(s.converged and s.polished for s in solutions)
    with monkeypatch.context() as patch:
        patch.setattr(lp_batch, "POLISH_RETRIES", 0)
        first = lp_sparsemap_batch(graph, eta_u, eta_v)
    unpolished = [b for b, s in enumerate(first) if not s.polished]
    assert unpolished, "no example needed a retry: the test no longer reaches the retry"
    tight_options = LPSparseMAPOptions(tol=1e-9)
    tight = lp_sparsemap_batch(graph, eta_u[unpolished], eta_v[unpolished], options=tight_options)
    for b, reference in zip(unpolished, tight, strict=True):
        assert solutions[b].iterations > first[b].iterations
        np.testing.assert_allclose(solutions[b].u, reference.u, rtol=0, atol=1e-9)
    b = unpolished[0]
    g_u, d_u = rng.standard_normal((2, graph.num_variables))
    no_v = [np.zeros(0)] * 2
    expected = _directional_difference(graph, eta_u[b], no_v, g_u, no_v, d_u, no_v)
    assert solutions[b].vjp(g_u)[0] @ d_u == pytest.approx(expected, abs=1e-6)


def test_a_failed_polish_is_retried_at_a_tenth_of_the_tolerance(monkeypatch):
    """Whatever the machine's rounding: an example whose first polish fails (forced here)
    iterates on at tol/10 and is polished, to its solution; the other examples are not
    touched again."""
    graph = tree_budget(8, 2)
    rng = np.random.default_rng(1)
    eta_u, eta_v = rng.standard_normal((4, graph.num_variables)), np.zeros((4, 0))
    expected = lp_sparsemap_batch(graph, eta_u, eta_v)
    real_finish, calls = lp_batch.admm.finish, []

    def finish_failing_once(*args, **kwargs):
        solution = real_finish(*args, **kwargs)
        calls.append(kwargs["iterations"])
        return dataclasses.replace(solution, polished=False) if len(calls) == 3 else solution

    monkeypatch.setattr(lp_batch.admm, "finish", finish_failing_once)
    solutions = lp_sparsemap_batch(graph, eta_u, eta_v)
    assert len(calls) == 5 and calls[4] > calls[2]  # four examples, then example 2 once more
    for solution, reference in zip(solutions, expected, strict=True):
        assert solution.converged and solution.polished
        np.testing.assert_allclose(solution.u, reference.u, rtol=0, atol=1e-9)
    assert solutions[2].iterations > expected[2].iterations
