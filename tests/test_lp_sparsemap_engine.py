"""LP-SparseMAP's numpy core: factor graphs, logic factors, the ADMM solver, its Jacobian.

References: the engine's SparseMAP (single-factor graphs), a direct QP over the local
polytope (structure factors as the convex hull of their enumerated structures, logic factors
by their inequalities; SLSQP, then solved exactly on its active set), the engine's active set
over each logic factor's enumerated vertices, and central finite differences.
"""

from __future__ import annotations

import itertools
import re
import warnings

import numpy as np
import pytest
from scipy.optimize import linprog, minimize

from keras_structured.engine import (
    BudgetStructure,
    DependencyTreeStructure,
    SequenceStructure,
    SimplexStructure,
    solve,
)
from keras_structured.engine.lp import (
    AndOut,
    AtMostOne,
    Budget,
    Factor,
    FactorGraph,
    Imply,
    LogicFactor,
    LPSparseMAPConvergenceWarning,
    LPSparseMAPOptions,
    Or,
    OrOut,
    Pair,
    StructureFactor,
    Xor,
    XorOut,
    lp_sparsemap,
)
from keras_structured.engine.lp.projections import project_pair
from keras_structured.engine.solve import SparseMAPConvergenceWarning
from tests.brute_force import EnumeratedStructure, sequence_vertices
from tests.test_dependency_tree import enumerate_trees

# --------------------------------------------------------------------------- references


def _structure_vertices(factor: StructureFactor) -> tuple[np.ndarray, np.ndarray]:
    """All structures of a (tiny) structure factor: ``(M (k, d), N (k, e))``."""
    structure, shape = factor.structure, factor.variables.shape
    if isinstance(structure, SequenceStructure):
        _, m, n = sequence_vertices(*shape)
        return m, n
    if isinstance(structure, DependencyTreeStructure):
        _, m = enumerate_trees(shape[0] - 1)
        return m, np.zeros((len(m), 0))
    if isinstance(structure, BudgetStructure):
        sizes = [structure.k] if structure.exact else range(structure.k + 1)
        m = np.array(
            [
                np.isin(np.arange(shape[0]), c)
                for k in sizes
                for c in itertools.combinations(range(shape[0]), k)
            ]
        )
        return m.astype(float), np.zeros((len(m), 0))
    if isinstance(structure, SimplexStructure):
        return np.eye(shape[0]), np.zeros((shape[0], 0))
    raise NotImplementedError(type(structure))


def _logic_vertices(factor: LogicFactor) -> tuple[np.ndarray, np.ndarray]:
    """The binary ``(x, z)`` that satisfy a logic factor's inequalities: its vertices."""
    a_x, a_z, b, equality = factor.inequalities()
    d, e = a_x.shape[1], a_z.shape[1]
    points = np.array(list(itertools.product([0.0, 1.0], repeat=d + e)))
    slack = b - points[:, :d] @ a_x.T - points[:, d:] @ a_z.T
    keep = (slack >= -1e-12).all(axis=1) & (np.abs(slack[:, equality]) <= 1e-12).all(axis=1)
    return points[keep, :d], points[keep, d:]


def _local_polytope(graph: FactorGraph, eta_u, eta_v, logic_vertices=None):
    """The QP over the local polytope: ``(c, hessian, a_eq, b_eq, a_in, b_in)`` in the unknowns
    ``(u, p_f or z_f)``: a structure factor's ``u[links] = M^T p``, ``p`` in the simplex; a
    logic factor's ``A_x u[links] + A_z z <= b``, or, with ``logic_vertices`` (a function of
    the factor giving its ``(M, N)``), its vertices as a structure factor's."""
    n = graph.num_variables
    blocks = []  # per factor: ("vertices", M, N) or ("logic", A_x, A_z, b, equality)
    for factor in graph.factors:
        if isinstance(factor, StructureFactor):
            blocks.append(("vertices", *_structure_vertices(factor)))
        elif logic_vertices is not None:
            blocks.append(("vertices", *logic_vertices(factor)))
        else:
            blocks.append(("logic", *factor.inequalities()))
    sizes = [block[1].shape[0] if block[0] == "vertices" else block[2].shape[1] for block in blocks]
    offsets = n + np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    total = int(offsets[-1])
    c = np.zeros(total)
    c[:n] = eta_u
    eq_rows, eq_rhs, in_rows, in_rhs, nonnegative = [], [], [], [], []
    for block, link, start, stop, scores in zip(
        blocks, graph.links, offsets[:-1], offsets[1:], eta_v, strict=True
    ):
        scores = np.ravel(scores)
        if block[0] == "vertices":
            _, m, nn = block
            c[start:stop] = nn @ scores if nn.shape[1] else 0.0
            rows = np.zeros((m.shape[1] + 1, total))
            rows[np.arange(m.shape[1]), link] = 1.0
            rows[: m.shape[1], start:stop] = -m.T
            rows[-1, start:stop] = 1.0
            eq_rows.append(rows)
            eq_rhs.append(np.append(np.zeros(m.shape[1]), 1.0))
            nonnegative.extend(range(start, stop))
        else:
            _, a_x, a_z, b, equality = block
            c[start:stop] = scores
            rows = np.zeros((b.size, total))
            rows[:, link] = a_x
            rows[:, start:stop] = a_z
            eq_rows.append(rows[equality])
            eq_rhs.append(b[equality])
            in_rows.append(rows[~equality])
            in_rhs.append(b[~equality])
    for i in nonnegative:
        row = np.zeros(total)
        row[i] = -1.0
        in_rows.append(row[None])
        in_rhs.append(np.zeros(1))
    hessian = np.diag(np.concatenate([np.ones(n), np.zeros(total - n)]))
    return c, hessian, np.vstack(eq_rows), np.concatenate(eq_rhs), np.vstack(in_rows), np.concatenate(in_rhs)


def local_polytope_is_empty(graph: FactorGraph) -> bool:
    zeros = [np.zeros(shape) for shape in graph.v_shapes]
    c, _, a_eq, b_eq, a_in, b_in = _local_polytope(graph, np.zeros(graph.num_variables), zeros)
    result = linprog(np.zeros(c.size), A_ub=a_in, b_ub=b_in, A_eq=a_eq, b_eq=b_eq, bounds=(None, None))
    return result.status == 2


def local_polytope_qp(graph: FactorGraph, eta_u, eta_v, logic_vertices=None) -> tuple[np.ndarray, float]:
    """LP-SparseMAP by a direct QP (:func:`_local_polytope`, ``logic_vertices`` as there):
    ``(u, objective)``. SLSQP, then the equality QP on its active set (for a few thresholds),
    kept when feasible and no worse."""
    n = graph.num_variables
    c, hessian, a_eq, b_eq, a_in, b_in = _local_polytope(graph, eta_u, eta_v, logic_vertices)
    total = c.size

    def objective(y):
        return c @ y - 0.5 * y @ hessian @ y

    result = minimize(
        lambda y: -objective(y),
        np.full(total, 0.3),
        jac=lambda y: -(c - hessian @ y),
        method="SLSQP",
        constraints=[
            {"type": "eq", "fun": lambda y: a_eq @ y - b_eq, "jac": lambda y: a_eq},
            {"type": "ineq", "fun": lambda y: b_in - a_in @ y, "jac": lambda y: -a_in},
        ],
        options={"ftol": 1e-15, "maxiter": 3000},
    )
    best = result.x
    for threshold in (1e-4, 1e-6, 1e-8):
        active = np.vstack([a_eq, a_in[b_in - a_in @ result.x <= threshold]])
        rhs = np.concatenate([b_eq, b_in[b_in - a_in @ result.x <= threshold]])
        kkt = np.block([[hessian, active.T], [active, np.zeros((len(active), len(active)))]])
        candidate = np.linalg.lstsq(kkt, np.concatenate([c, rhs]), rcond=None)[0][:total]
        feasible = np.abs(a_eq @ candidate - b_eq).max() < 1e-10 and (b_in - a_in @ candidate).min() > -1e-10
        if feasible and objective(candidate) >= objective(best) - 1e-12:
            best = candidate
    return best[:n], objective(best)


# --------------------------------------------------------------------------- graphs


def _random_scores(graph: FactorGraph, rng, scale: float = 1.0):
    eta_u = rng.normal(size=graph.num_variables) * scale
    eta_v = [rng.normal(size=shape) * scale for shape in graph.v_shapes]
    return eta_u, eta_v


def sequence_pair_chain(n: int = 3, labels: int = 2) -> FactorGraph:
    """A tagger whose label-1 indicators are chained by Pair factors (sequence + pairs)."""
    tags = np.arange(n * labels).reshape(n, labels)
    pairs = [Pair(tags[i, 1], tags[i + 1, 1]) for i in range(n - 1)]
    return FactorGraph(n * labels, [StructureFactor(SequenceStructure(), tags), *pairs])


def tree_budget(words: int = 3, k: int = 1) -> FactorGraph:
    """A dependency tree with at most ``k`` arcs out of the root (tree + budget)."""
    arcs = np.arange((words + 1) ** 2).reshape(words + 1, words + 1)
    return FactorGraph(arcs.size, [StructureFactor(DependencyTreeStructure(), arcs), Budget(arcs[0, 1:], k)])


def tree_at_most_one(words: int = 3) -> FactorGraph:
    arcs = np.arange((words + 1) ** 2).reshape(words + 1, words + 1)
    return FactorGraph(arcs.size, [StructureFactor(DependencyTreeStructure(), arcs), AtMostOne(arcs[0, 1:])])


def logic_graph() -> FactorGraph:
    """XOR, OR and Imply over overlapping variables, a Pair and an OR-out."""
    return FactorGraph(
        6,
        [Xor([0, 1, 2]), Or([2, 3, 4]), Imply([0, 3]), Pair(1, 4), OrOut([3, 4, 5]), AtMostOne([1, 5])],
    )


def logic_out_graph() -> FactorGraph:
    """XOR-out, AND-out, negations, an exact budget."""
    return FactorGraph(
        6,
        [
            XorOut([0, 1, 2]),
            AndOut([2, 3, 4]),
            Or([0, 4, 5], negated=[False, True, False]),
            Budget([1, 3, 5], 2, exact=True),
        ],
    )


def random_mix(rng) -> FactorGraph:
    """A sequence of 3 words (2 labels), a simplex over the label-0 indicators, and random logic factors."""
    tags = np.arange(6).reshape(3, 2)
    factors = [StructureFactor(SequenceStructure(), tags), StructureFactor(SimplexStructure(), tags[:, 0])]
    kinds = [Xor, Or, AtMostOne, Imply, OrOut, AndOut, XorOut]
    for _ in range(3):
        variables = rng.choice(6, size=3, replace=False)
        factors.append(kinds[rng.integers(len(kinds))](variables))
    factors.append(Pair(*rng.choice(6, size=2, replace=False)))
    return FactorGraph(6, factors)


def _random_mixes(rng, count: int):
    """``count`` random mixes that the graph accepts (their logic factors agree)."""
    graphs = []
    while len(graphs) < count:
        try:
            graphs.append(random_mix(rng))
        except ValueError:  # contradictory logic factors
            continue
    return graphs


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    "structure, shape",
    [
        (SequenceStructure(), (4, 3)),
        (DependencyTreeStructure(), (5, 5)),
        (BudgetStructure(2), (5,)),
        (SimplexStructure(), (4,)),
    ],
    ids=["sequence", "tree", "budget", "simplex"],
)
def test_single_factor_graph_equals_sparsemap(structure, shape):
    rng = np.random.default_rng(0)
    variables = rng.permutation(int(np.prod(shape))).reshape(shape)  # any arrangement
    factor = StructureFactor(structure, variables)
    graph = FactorGraph(variables.size, [factor])
    for _ in range(3):
        eta_u, eta_v = _random_scores(graph, rng)
        solution = lp_sparsemap(graph, eta_u, eta_v)
        scores_u = eta_u[variables][None]
        reference = solve(structure, scores_u, eta_v[0][None])
        assert solution.converged and solution.polished
        np.testing.assert_allclose(solution.u[variables], reference.u[0], atol=1e-9)
        np.testing.assert_allclose(solution.v[0], reference.v[0], atol=1e-9)
        g_u, g_v = _random_scores(graph, rng)
        grad_u, grad_v = solution.vjp(g_u, g_v)
        jac_u, jac_v = reference.jacobian_product(g_u[variables][None], g_v[0][None])
        np.testing.assert_allclose(grad_u[variables], jac_u[0], atol=1e-9)
        np.testing.assert_allclose(grad_v[0], jac_v[0], atol=1e-9)


GRAPHS = {
    "sequence_pair_chain": sequence_pair_chain,
    "tree_budget": tree_budget,
    "tree_at_most_one": tree_at_most_one,
    "logic": logic_graph,
    "logic_out": logic_out_graph,
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_small_graphs_equal_the_local_polytope_qp(name):
    graph = GRAPHS[name]()
    rng = np.random.default_rng(1)
    for scale in (0.5, 2.0):
        eta_u, eta_v = _random_scores(graph, rng, scale)
        solution = lp_sparsemap(graph, eta_u, eta_v)
        u, objective = local_polytope_qp(graph, eta_u, eta_v)
        assert solution.converged and solution.polished
        np.testing.assert_allclose(solution.u, u, atol=1e-6)
        assert solution.objective == pytest.approx(objective, abs=1e-8)


def test_random_mixed_graphs_equal_the_local_polytope_qp():
    """Feasible mixes match the QP; on an empty local polytope (a contradiction that needs the
    structure factors to show, which the graph cannot check) the solver stops unconverged,
    with the warning."""
    rng = np.random.default_rng(2)
    empty = 0
    for graph in _random_mixes(rng, 6):
        eta_u, eta_v = _random_scores(graph, rng, 1.5)
        if local_polytope_is_empty(graph):
            empty += 1
            options = LPSparseMAPOptions(max_iter=200)
            with pytest.warns(LPSparseMAPConvergenceWarning, match="admit no common point"):
                assert not lp_sparsemap(graph, eta_u, eta_v, options=options).converged
            continue
        solution = lp_sparsemap(graph, eta_u, eta_v)
        u, objective = local_polytope_qp(graph, eta_u, eta_v)
        assert solution.converged and solution.polished
        np.testing.assert_allclose(solution.u, u, atol=1e-6)
        assert solution.objective == pytest.approx(objective, abs=1e-8)
    assert 0 < empty < 6


LOGIC_FACTORS = [
    Xor([0, 1, 2, 3]),
    Or([0, 1, 2]),
    AtMostOne([0, 1, 2]),
    Imply([0, 1, 2]),
    XorOut([0, 1, 2]),
    OrOut([0, 1, 2, 3]),
    AndOut([0, 1, 2]),
    Budget([0, 1, 2, 3], 2),
    Budget([0, 1, 2, 3], 2, exact=True),
    Xor([0, 1, 2], negated=[True, False, True]),
    OrOut([0, 1, 2], negated=[False, True, False]),
    Pair(0, 1),
]


@pytest.mark.parametrize("factor", LOGIC_FACTORS, ids=repr)
def test_logic_projection_equals_active_set_over_its_vertices(factor):
    """The closed form equals SparseMAP by the engine's active set over the enumerated
    vertices, and the MAP oracle the best vertex."""
    m, n = _logic_vertices(factor)
    # (EnumeratedStructure needs a nonempty additional part: a zero column stands in.)
    vertices = EnumeratedStructure(m, n if n.shape[1] else np.zeros((len(m), 1)))
    rng = np.random.default_rng(3)
    for _ in range(40):
        a = rng.normal(size=m.shape[1]) * 1.5
        s = rng.normal(size=n.shape[1]) * 1.5
        x, z = factor.project(a, s)
        reference = solve(vertices, a[None], (s if s.size else np.zeros(1))[None])
        np.testing.assert_allclose(x, reference.u[0], atol=1e-9)
        if n.shape[1]:  # z is unique for s != 0
            np.testing.assert_allclose(z, reference.v[0], atol=1e-9)
        best_x, best_z = factor.map(a, s)
        assert best_x @ a + best_z @ s == pytest.approx((m @ a + n @ s).max(), abs=1e-12)


def test_logic_inequalities_describe_the_vertices():
    # The vertices of each polytope are exactly the assignments the factor allows.
    allowed = {
        "Xor": lambda x: x.sum() == 1,
        "Or": lambda x: x.sum() >= 1,
        "AtMostOne": lambda x: x.sum() <= 1,
        "Imply": lambda x: not (x[:-1].all() and not x[-1]),
        "XorOut": lambda x: x[:-1].sum() == x[-1],
        "OrOut": lambda x: x[:-1].any() == bool(x[-1]),
        "AndOut": lambda x: x[:-1].all() == bool(x[-1]),
    }
    for factor in [Xor([0, 1, 2]), Or([0, 1, 2]), AtMostOne([0, 1, 2]), Imply([0, 1, 2]), XorOut([0, 1, 2])]:
        check = allowed[type(factor).__name__]
        m, _ = _logic_vertices(factor)
        expected = [x for x in itertools.product([0.0, 1.0], repeat=3) if check(np.array(x))]
        assert sorted(map(tuple, m)) == sorted(expected)
    for factor in [OrOut([0, 1, 2]), AndOut([0, 1, 2])]:
        check = allowed[type(factor).__name__]
        m, _ = _logic_vertices(factor)
        assert sorted(map(tuple, m)) == sorted(
            x for x in itertools.product([0.0, 1.0], repeat=3) if check(np.array(x))
        )


def test_pair_closed_form_cases():
    assert project_pair(0.2, 0.9, 1.0) == (1.0, 1.0, 1.0)
    assert project_pair(0.6, 0.6, -1.0) == (0.5, 0.5, 0.0)
    assert project_pair(0.3, 0.4, 0.0) == (0.3, 0.4, 0.3)


def _directional_difference(graph, eta_u, eta_v, g_u, g_v, d_u, d_v, step=1e-6, solve=lp_sparsemap) -> float:
    """Central difference of ``<g_u, u> + sum <g_v, v>`` along the scores' direction ``(d_u, d_v)``
    (``solve(graph, eta_u, eta_v)``: the solver)."""

    def value(sign):
        scores_v = [s + sign * step * d for s, d in zip(eta_v, d_v, strict=True)]
        solution = solve(graph, eta_u + sign * step * d_u, scores_v)
        return g_u @ solution.u + sum(np.sum(g * v) for g, v in zip(g_v, solution.v, strict=True))

    return (value(1.0) - value(-1.0)) / (2 * step)


@pytest.mark.parametrize("name", ["sequence_pair_chain", "tree_budget", "logic", "logic_out"])
def test_vjp_matches_finite_differences(name):
    """``<vjp(g), d>`` equals the central difference along ``d``, for random points, cotangents
    and directions (``d`` one-hot on an ``eta_v`` entry included)."""
    graph = GRAPHS[name]()
    rng = np.random.default_rng(4)
    for _ in range(3):
        eta_u, eta_v = _random_scores(graph, rng)
        g_u, g_v = _random_scores(graph, rng)
        grad_u, grad_v = lp_sparsemap(graph, eta_u, eta_v).vjp(g_u, g_v)
        for direction in range(3):
            d_u, d_v = _random_scores(graph, rng)
            if direction == 0:  # along eta_v only
                d_u = np.zeros_like(d_u)
            expected = _directional_difference(graph, eta_u, eta_v, g_u, g_v, d_u, d_v)
            product = grad_u @ d_u + sum(np.sum(g * d) for g, d in zip(grad_v, d_v, strict=True))
            assert product == pytest.approx(expected, abs=1e-6)


def test_float32_scores_give_float64_solution_and_gradients():
    graph = sequence_pair_chain(4, 3)
    rng = np.random.default_rng(5)
    eta_u, eta_v = _random_scores(graph, rng)
    g_u, g_v = _random_scores(graph, rng)
    exact = lp_sparsemap(
        graph, eta_u.astype(np.float32).astype(np.float64), [v.astype(np.float32) for v in eta_v]
    )
    single = lp_sparsemap(graph, eta_u.astype(np.float32), [v.astype(np.float32) for v in eta_v])
    assert single.u.dtype == np.float64
    np.testing.assert_allclose(single.u, exact.u, atol=1e-12)
    grad32 = single.vjp(g_u.astype(np.float32), [g.astype(np.float32) for g in g_v])
    grad64 = exact.vjp(g_u.astype(np.float32).astype(np.float64), g_v)
    assert grad32[0].dtype == np.float64
    np.testing.assert_allclose(grad32[0], grad64[0], atol=1e-12)


def test_convergence_flag_and_one_warning_at_the_iteration_cap():
    graph = tree_budget(3)
    eta_u, eta_v = _random_scores(graph, np.random.default_rng(6))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solution = lp_sparsemap(graph, eta_u, eta_v, options=LPSparseMAPOptions(max_iter=2))
    assert not solution.converged and not solution.polished
    assert solution.iterations == 2
    relevant = [w for w in caught if issubclass(w.category, LPSparseMAPConvergenceWarning)]
    assert len(relevant) == 1
    assert issubclass(relevant[0].category, SparseMAPConvergenceWarning)
    assert "max_iter=2" in str(relevant[0].message)
    assert relevant[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lp_sparsemap(graph, eta_u, eta_v).converged


def test_options_are_checked():
    with pytest.raises(ValueError, match="Received: tol=0"):
        LPSparseMAPOptions(tol=0)
    with pytest.raises(ValueError, match="Received: max_inner_iter=0"):
        LPSparseMAPOptions(max_inner_iter=0)


def test_bad_graphs_and_scores_raise_clear_errors():
    tags = np.arange(6).reshape(3, 2)
    with pytest.raises(ValueError, match=r"variables in no factor=\[6, 7\]"):
        FactorGraph(8, [StructureFactor(SequenceStructure(), tags)])
    with pytest.raises(ValueError, match="num_variables=6. Received: max index=6"):
        FactorGraph(6, [Xor([4, 5, 6]), StructureFactor(SequenceStructure(), tags)])
    with pytest.raises(ValueError, match="distinct nonnegative indices. Received: variables=\\[1, 1\\]"):
        Xor([1, 1])
    with pytest.raises(ValueError, match="must be a Factor"):
        FactorGraph(2, [SimplexStructure()])
    # Index arrays the structure cannot read, factors the solver has no subproblem for, a
    # factor for the list: numpy's and Python's messages, or an AttributeError at solve time.
    for variables in (np.arange(4), np.arange(8).reshape(2, 2, 2)):
        with pytest.raises(
            ValueError, match=rf"unary scores of SequenceStructure.*{re.escape(str(variables.shape))}"
        ):
            StructureFactor(SequenceStructure(), variables)

    class Unsolvable(Factor):
        def __init__(self, variables):
            super().__init__(np.asarray(variables))

        def v_shape(self):
            return (0,)

    for factor in (Unsolvable([0, 1]), Factor(np.array([0, 1]))):
        with pytest.raises(ValueError, match=r"a StructureFactor, a LogicFactor .* Received: factors\[0\]="):
            FactorGraph(2, [factor])
    with pytest.raises(ValueError, match=r"factors must be a list of factors. Received: factors=Or"):
        FactorGraph(2, Or([0, 1]))
    with pytest.raises(ValueError, match=r"present must hold 2 booleans.*Received: present=\[2, 2\]"):
        FactorGraph(2, [Pair(0, 1)]).additional_parts([1, 1], np.array([2, 2]))
    with pytest.raises(ValueError, match="Received: k=4"):
        Budget([0, 1, 2], 4)
    with pytest.raises(ValueError, match="negated must hold one boolean per variable"):
        Or([0, 1], negated=[True])
    # Contradictions among logic factors: x0 on and off; XOR over a pair whose AND is forced on.
    with pytest.raises(ValueError, match="contradict"):
        FactorGraph(1, [Xor([0]), Xor([0], negated=[True])])
    with pytest.raises(ValueError, match="contradict"):
        FactorGraph(3, [Xor([0, 1]), AndOut([0, 1, 2]), Or([2])])
    graph = sequence_pair_chain()
    eta_u, eta_v = _random_scores(graph, np.random.default_rng(7))
    with pytest.raises(ValueError, match=r"eta_u must have shape \(6,\).*Received: eta_u.shape=\(5,\)"):
        lp_sparsemap(graph, eta_u[:5], eta_v)
    with pytest.raises(
        ValueError, match=r"eta_v\[1\] must have the shape \(1,\).*Received: eta_v\[1\].shape=\(2,\)"
    ):
        lp_sparsemap(graph, eta_u, [eta_v[0], np.zeros(2), eta_v[2]])
    with pytest.raises(ValueError, match="one entry per factor"):
        lp_sparsemap(graph, eta_u, eta_v[:2])
    bad = eta_u.copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="eta_u must be finite. Received: eta_u="):
        lp_sparsemap(graph, bad, eta_v)
    with pytest.raises(ValueError, match=r"eta_v\[0\] must be finite"):
        lp_sparsemap(graph, eta_u, [eta_v[0] * np.inf, *eta_v[1:]])
    with pytest.raises(ValueError, match=r"g_u must have shape \(6,\)"):
        lp_sparsemap(graph, eta_u, eta_v).vjp(np.zeros(3))


def test_graph_config_round_trip():
    graph = FactorGraph(
        9,
        [
            StructureFactor(SequenceStructure(), np.arange(6).reshape(3, 2)),
            Imply([0, 6, 7], negated=[False, True, False]),
            XorOut([2, 7, 8]),
            AndOut([1, 3, 8]),
            Budget([0, 2, 4], 2, exact=True),
            Pair(1, 8),
        ],
    )
    rebuilt = FactorGraph.from_config(graph.get_config())
    assert rebuilt.get_config() == graph.get_config()
    eta_u, eta_v = _random_scores(graph, np.random.default_rng(8))
    np.testing.assert_array_equal(lp_sparsemap(rebuilt, eta_u, eta_v).u, lp_sparsemap(graph, eta_u, eta_v).u)
