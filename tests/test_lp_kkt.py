"""The KKT system on the faces (:mod:`keras_structured.engine.lp.kkt`): solutions at which no
constraint is tight, on a face, and at a vertex, for every logic factor and mixtures, against
a QP over vertices enumerated from the factors' definitions; and a system that keeps no
SuperLU object between its solves (they leak when freed in another thread, scipy#15921)."""

from __future__ import annotations

import gc
import itertools
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from scipy.sparse.linalg import SuperLU

from keras_structured.engine import SequenceStructure
from keras_structured.engine.lp import (
    AndOut,
    AtMostOne,
    Budget,
    FactorGraph,
    Imply,
    LogicFactor,
    Or,
    OrOut,
    Pair,
    StructureFactor,
    Xor,
    XorOut,
    lp_sparsemap,
    lp_sparsemap_batch,
)
from tests.test_lp_sparsemap_engine import _directional_difference, local_polytope_qp

# What each logic factor allows, from its definition (not from its inequalities): a predicate
# of the assignment ``w`` it sees (``x`` with the user's negations applied).
ALLOWED = {
    Budget: lambda factor, w: w.sum() == factor.k if factor.exact else w.sum() <= factor.k,
    XorOut: lambda factor, w: w[:-1].sum() == w[-1],
    Or: lambda factor, w: w.any(),
    Imply: lambda factor, w: not (w[:-1].all() and not w[-1]),
    AndOut: lambda factor, w: w[:-1].all() == bool(w[-1]),
    OrOut: lambda factor, w: w[:-1].any() == bool(w[-1]),
}


def definition_vertices(factor: LogicFactor) -> tuple[np.ndarray, np.ndarray]:
    """``(M, N)``: the assignments ``factor`` allows and their additional parts (a Pair's
    product), enumerated from the definitions of :data:`ALLOWED`."""
    if isinstance(factor, Pair):
        m = np.array(list(itertools.product([0.0, 1.0], repeat=2)))
        return m, m.prod(axis=1, keepdims=True)
    allowed = next(ALLOWED[kind] for kind in type(factor).__mro__ if kind in ALLOWED)  # Imply is an Or
    points = np.array(list(itertools.product([0, 1], repeat=factor.variables.size)), bool)
    m = np.array([x for x in points if allowed(factor, x ^ factor.negated)], float)
    return m, np.zeros((len(m), 0))


FACTORS = [
    AtMostOne([0, 1]),
    AtMostOne([0, 1, 2], negated=[False, True, False]),
    Budget([0, 1, 2], 2),
    Budget([0, 1, 2, 3], 2, exact=True),
    Xor([0, 1, 2]),
    XorOut([0, 1, 2]),
    Or([0, 1, 2]),
    Or([0, 1, 2], negated=[True, False, False]),
    Imply([0, 1, 2]),
    OrOut([0, 1, 2]),
    AndOut([0, 1, 2]),
    Pair(0, 1),
]

MIXTURES = {
    "logic": lambda: FactorGraph(4, [AtMostOne([0, 1]), Or([1, 2, 3]), Imply([0, 3]), Pair(2, 3)]),
    "logic_out": lambda: FactorGraph(5, [OrOut([0, 1, 2]), Budget([1, 2, 3, 4], 3), AndOut([3, 4, 0])]),
    "sequence_budget": lambda: FactorGraph(
        6, [StructureFactor(SequenceStructure(), np.arange(6).reshape(3, 2)), Budget([1, 3, 5], 2)]
    ),
}


def _graphs():
    for factor in FACTORS:
        yield repr(factor), FactorGraph(int(factor.variables.max()) + 1, [factor])
    for name, build in MIXTURES.items():
        yield name, build()


GRAPHS = dict(_graphs())


def _relative_interior(graph: FactorGraph) -> np.ndarray:
    """A point strictly inside every factor's polytope but for its equalities: the mean of the
    QP's solutions at scores pointing to every vertex of every factor (averages of points of
    a convex set stay in it, and a mean of all vertices is in its relative interior)."""
    points = []
    for factor, link in zip(graph.factors, graph.links, strict=True):
        m, _ = definition_vertices(factor) if isinstance(factor, LogicFactor) else (None, None)
        for vertex in m if m is not None else np.eye(link.size):
            eta_u = np.zeros(graph.num_variables)
            eta_u[link] = 8.0 * (2 * vertex - 1)
            points.append(lp_sparsemap(graph, eta_u).u)
    return np.mean(points, axis=0)


def _scores(graph: FactorGraph, where: str, rng) -> tuple[np.ndarray, list[np.ndarray]]:
    """Scores whose solution is in the relative interior (zero additional scores: a Pair's
    product then moves freely), on a face (scores near the polytope), or at a vertex."""
    if where == "interior":
        return _relative_interior(graph), [np.zeros(shape) for shape in graph.v_shapes]
    scale = {"face": 0.7, "vertex": 6.0}[where]
    eta_u = 0.5 + rng.normal(size=graph.num_variables) * scale
    return eta_u, [rng.normal(size=shape) * scale for shape in graph.v_shapes]


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("where", ["interior", "face", "vertex"])
def test_solutions_equal_the_qp_over_the_definitions(name, where):
    """LP-SparseMAP equals the QP over the vertices the factors' definitions allow, and its
    vector-Jacobian products equal central differences; where no inequality is tight, ``u``
    is ``eta_u`` and the Jacobian the identity on ``u``."""
    graph = GRAPHS[name]
    rng = np.random.default_rng(0)
    for _ in range(1 if where == "interior" else 3):
        eta_u, eta_v = _scores(graph, where, rng)
        solution = lp_sparsemap(graph, eta_u, eta_v)
        assert solution.converged and solution.polished
        u, objective = local_polytope_qp(graph, eta_u, eta_v, logic_vertices=definition_vertices)
        np.testing.assert_allclose(solution.u, u, atol=1e-6)
        assert solution.objective == pytest.approx(objective, abs=1e-8)
        if where == "interior" and all(isinstance(f, LogicFactor) for f in graph.factors):
            np.testing.assert_allclose(solution.u, eta_u, atol=1e-12)
        g_u, g_v = rng.normal(size=graph.num_variables), [rng.normal(size=s) for s in graph.v_shapes]
        d_u, d_v = rng.normal(size=graph.num_variables), [rng.normal(size=s) for s in graph.v_shapes]
        grad_u, grad_v = solution.vjp(g_u, g_v)
        if where == "interior" and graph.v_size:
            # At eta_v = 0 a Pair's product is not unique: its closed form puts it at a bound,
            # whose face ties u (the Jacobian's limit as eta_v -> 0+, not the difference at 0).
            continue
        expected = _directional_difference(graph, eta_u, eta_v, g_u, g_v, d_u, d_v)
        product = grad_u @ d_u + sum(np.sum(g * d) for g, d in zip(grad_v, d_v, strict=True))
        assert product == pytest.approx(expected, abs=1e-6)
        if where == "interior" and not any(face.b.size for face in solution.faces):  # J = I on u
            np.testing.assert_allclose(grad_u, g_u, atol=1e-12)


@pytest.mark.parametrize(
    "factor, eta_u",
    [
        (Budget([0, 1, 2], 2), [0.5, 0.5, 0.5]),
        (Or([0, 1, 2]), [0.5, 0.5, 0.5]),
        (AtMostOne([0, 1]), [0.3, 0.2]),
        (Imply([0, 1]), [0.6, 0.7]),
        (OrOut([0, 1, 2]), [0.3, 0.4, 0.5]),
        (AndOut([0, 1, 2]), [0.6, 0.7, 0.5]),
    ],
    ids=repr,
)
def test_no_tight_constraint_gives_the_scores_and_the_identity(factor, eta_u):
    """The issue's examples: strictly inside the polytope, ``u = eta_u`` and ``J = I``."""
    graph = FactorGraph(len(eta_u), [factor])
    eta_u = np.array(eta_u)
    (solution,) = lp_sparsemap_batch(graph, eta_u[None])
    assert solution.converged and solution.polished
    assert solution.faces[0].b.size == 0
    np.testing.assert_array_equal(solution.u, eta_u)
    for i in range(eta_u.size):
        np.testing.assert_allclose(solution.vjp(np.eye(eta_u.size)[i])[0], np.eye(eta_u.size)[i], atol=1e-15)


def test_the_system_keeps_no_superlu_factors():
    """Nothing of SuperLU outlives a solve: a solution made by a forward host call is freed by
    the backward one, in another thread, where SciPy never releases a SuperLU object."""
    graph = MIXTURES["sequence_budget"]()
    solution = lp_sparsemap(graph, np.random.default_rng(1).normal(size=6))
    assert not [value for value in vars(solution.system).values() if isinstance(value, SuperLU)]


def _resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_solutions_freed_in_another_thread_give_their_memory_back():
    """Solved in one thread and freed in another (a forward and a backward host call), 150
    batches of 32 examples keep the resident memory within a few MiB (they held 0.75 MiB
    each when the solutions kept their SuperLU factors)."""
    graph = FactorGraph(4, [Budget([0, 1, 2, 3], 2), Pair(0, 1), Xor([2, 3])])
    rng = np.random.default_rng(2)
    with ThreadPoolExecutor(1) as forward, ThreadPoolExecutor(1) as backward:

        def step():
            eta_u, eta_v = rng.normal(size=(32, 4)), rng.normal(size=(32, graph.v_size))
            solutions = forward.submit(lp_sparsemap_batch, graph, eta_u, eta_v).result()
            backward.submit(lambda: [s.vjp(np.ones(4)) for s in solutions] and solutions.clear()).result()

        for _ in range(20):  # warm-up
            step()
        gc.collect()
        before = _resident_mib()
        for _ in range(150):
            step()
        gc.collect()
        assert _resident_mib() - before < 10
