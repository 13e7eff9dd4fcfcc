"""Per-factor solvers of the ADMM subproblem and the faces they end on.

Every ADMM iteration asks each factor ``f`` for

    argmax_{(x, z) in M_f}  <a, x> + <s, z> - ||x||^2 / 2,

a SparseMAP problem with scores ``(a, s)``. :func:`solve_structure_blocks` solves a structure
factor's, for a batch of examples, with the engine's active-set solver, each example
warm-started from its previous iteration's active set (the scores move little between
iterations, so a few MAP calls suffice): the compiled kernel
(:mod:`~keras_structured.engine.compiled_active_set`) for structures with a compiled
oracle, the Python solver for the others; :class:`LogicGroup` solves the logic factors' by
their closed forms, vectorised over factors and examples
(:mod:`~keras_structured.engine.lp.batch` runs both).

At the solution, each block reports its *face* for the implicit differentiation
(:mod:`~keras_structured.engine.lp.kkt`): a structure factor its active structures
(:class:`VertexFace`, the rows ``[m_s, n_s]`` whose affine hull holds the point), a logic
factor the inequalities tight at its point (:class:`ConstraintFace`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_structured.engine.active_set import ActiveSetSolver
from keras_structured.engine.compiled_active_set import CONVERGED, KernelResult, solve_compiled
from keras_structured.engine.jacobian import dense_rows
from keras_structured.engine.lp.graph import FactorGraph, StructureFactor
from keras_structured.engine.lp.logic import LogicFactor

# A logic inequality counts as tight at a point when it holds within this (absolute) slack;
# the closed forms put their points exactly on the faces they reach, up to rounding.
TIGHT_TOL = 1e-9


class VertexFace(NamedTuple):
    """A face as the affine hull of active vertices: ``(x, z) = [M; N]^T p``, ``sum(p) = 1``.

    Attributes:
        m: ``(k, d)`` unary parts of the active structures.
        n: ``(k, e)`` their additional parts.
        weights: ``(k,)`` their weights at the solution.
    """

    m: np.ndarray
    n: np.ndarray
    weights: np.ndarray


class ConstraintFace(NamedTuple):
    """A face as the tight rows of the factor's inequalities: ``A_x x + A_z z = b``."""

    a_x: np.ndarray
    a_z: np.ndarray
    b: np.ndarray


class StructureBlock:
    """The ADMM subproblem of a :class:`StructureFactor` for one example, by the
    warm-started active set (:func:`solve_structure_blocks`).

    Args:
        factor: the structure factor.
    """

    def __init__(self, factor: StructureFactor):
        self.factor = factor
        # The last solve: a KernelResult (compiled oracle) or an ActiveSetSolver; None until
        # the first.
        self.state: KernelResult | ActiveSetSolver | None = None
        self.map_calls = 0

    def additional(self) -> np.ndarray:
        """The additional marginals ``z`` of the last solution."""
        return self.state.v

    def face(self) -> VertexFace:
        state = self.state
        if isinstance(state, ActiveSetSolver):
            return VertexFace(state.M, state.N, state.y)
        return VertexFace(
            dense_rows(state.m_indices, state.m_values, state.u.size),
            dense_rows(state.n_indices, state.n_values, state.v.size),
            state.weights,
        )


def solve_structure_blocks(
    blocks: list[StructureBlock], a, s, tol: float, max_calls: int, exact: bool = False, lengths=None
):
    """The ADMM subproblems of one structure factor for a batch of examples (a block each), side by side.

    Each block's solve starts from its last active set and weights (the first from the
    MAP structure). With a compiled oracle, the compiled kernel solves the examples, on
    all threads (:func:`~keras_structured.engine.compiled_active_set.solve_compiled`);
    otherwise each block's Python solver is restarted
    (:meth:`~keras_structured.engine.active_set.ActiveSetSolver.restart`) and takes MAP
    structures until done, the MAP calls of the blocks still running being one batched
    call of the structure's oracle per round. Either way each block's arithmetic is that
    of a solve on its own, bit for bit.

    Args:
        blocks: the blocks.
        a: ``(len(blocks), d)`` scores of the factor's variables.
        s: ``(len(blocks), e)`` scores of its additional parts.
        tol: the engine's relative Wolfe-gap tolerance.
        max_calls: most MAP calls.
        exact: go on to the engine's exact termination (the support then spans the
            solution's face; see :func:`keras_structured.engine.solve`).
        lengths: None, or ``(len(blocks),)`` the structures' lengths
            (:meth:`~keras_structured.engine.lp.graph.StructureFactor.lengths`).

    Returns:
        ``(x (len(blocks), d), z (len(blocks), e), converged (len(blocks),))``.
    """
    compiled = blocks[0].factor.compiled_oracle
    if compiled is not None:
        starts = [block.state for block in blocks]
        results = solve_compiled(compiled, a, s, lengths, tol, max_calls, exact, starts)
        for block, result in zip(blocks, results, strict=True):
            block.state = result
            block.map_calls += int(result.map_calls)
        return (
            np.stack([result.u for result in results]),
            np.stack([result.v for result in results]),
            np.array([result.status == CONVERGED for result in results]),
        )
    fresh = [i for i, block in enumerate(blocks) if block.state is None]
    for block, scores_u, scores_v in zip(blocks, a, s, strict=True):
        if block.state is not None:
            block.state.restart(*_own(scores_u, scores_v), tol, exact)
    if fresh:
        m, n, codes = _map(blocks, fresh, a[fresh], s[fresh], lengths)
        for j, i in enumerate(fresh):
            blocks[i].state = ActiveSetSolver(*_own(a[i], s[i], m[j], n[j]), codes[j], tol, exact=exact)
    for _ in range(max_calls):
        pending = [i for i, block in enumerate(blocks) if not block.state.done]
        if not pending:
            break
        scores = np.stack([blocks[i].state.map_scores() for i in pending])
        m, n, codes = _map(blocks, pending, scores, s[pending], lengths)
        for j, i in enumerate(pending):
            blocks[i].state.step(*_own(m[j], n[j]), codes[j])
    solvers = [block.state for block in blocks]
    return (
        np.stack([solver.u for solver in solvers]),
        np.stack([solver.v for solver in solvers]),
        np.array([bool(solver.converged) for solver in solvers]),
    )


def _own(*rows: np.ndarray) -> list[np.ndarray]:
    """Copies of rows of batch arrays, for one solver. A row inside a batch array sits at
    another alignment than an array of its own, and BLAS's products (``M @ x``) then round
    differently; with copies, each block computes exactly what a solve on its own does."""
    return [row.copy() for row in rows]


def _map(blocks: list[StructureBlock], which: list[int], scores_u: np.ndarray, scores_v: np.ndarray, lengths):
    """The MAP structures of ``blocks[i]`` (``i`` in ``which``) at the given scores (and
    ``lengths[which]``), one row each: flat ``(m, n)`` and the codes; counts a MAP call of each."""
    factor = blocks[0].factor
    u_shape, v_shape = factor.variables.shape, factor.v_shape()
    count, lengths = len(which), None if lengths is None else lengths[which]
    codes = factor.structure.map(
        scores_u.reshape((count,) + u_shape), scores_v.reshape((count,) + v_shape), lengths
    )
    m, n = factor.structure.indicators(codes, u_shape, v_shape, lengths)
    for i in which:
        blocks[i].map_calls += 1
    return m.reshape(count, -1), n.reshape(count, -1), codes


class LogicBlock:
    """The solution of a logic factor's ADMM subproblem for one example (solved by a
    :class:`LogicGroup`), and its face.

    Args:
        factor: the logic factor.
        x, z: its solution.
    """

    map_calls = 0

    def __init__(self, factor: LogicFactor, x: np.ndarray, z: np.ndarray):
        self.factor = factor
        self.x, self.z = x, z

    def additional(self) -> np.ndarray:
        """The additional marginals ``z`` of the last solution."""
        return self.z

    def face(self) -> ConstraintFace:
        a_x, a_z, b, equality = self.factor.inequalities()
        tight = equality | (a_x @ self.x + a_z @ self.z >= b - TIGHT_TOL)
        return ConstraintFace(a_x[tight], a_z[tight], b[tight])


class LogicGroup:
    """Logic factors of one :meth:`~keras_structured.engine.lp.logic.LogicFactor.group_key`,
    whose subproblems are solved together, for a batch of examples, by one vectorised
    closed form.

    Args:
        factors: the factors (equal group keys).
        links: per factor, the positions of its variables in the flat vector of all the
            graph's links (the factors' copies ``x_f`` end to end).
        parts: per factor, the positions of its additional parts in the flat ``(v_size,)``
            vector of all of them.
    """

    def __init__(self, factors: list[LogicFactor], links: list[np.ndarray], parts: list[np.ndarray]):
        self.factor = factors[0]
        self.flipped = np.stack([factor.flipped for factor in factors])
        self.links = np.stack(links)
        self.parts = np.stack(parts)

    def solve(self, a: np.ndarray, s: np.ndarray, x: np.ndarray, z: np.ndarray | None = None) -> None:
        """Write the subproblems' solutions into ``x`` (and ``z``).

        Args:
            a: ``(batch, num_links)`` scores of the links.
            s: ``(batch, v_size)`` scores of the additional parts.
            x: ``(batch, num_links)``: the copies, updated at the group's links.
            z: None, or ``(batch, v_size)``: the additional parts, updated at the group's.
        """
        x[:, self.links], parts = self.factor.project_many(a[:, self.links], s[:, self.parts], self.flipped)
        if z is not None:
            z[:, self.parts] = parts


class GraphLayout:
    """A factor graph's links and factors as flat index arrays, for the ADMM's flat
    ``(..., num_links)`` arrays of scores, copies ``x_f`` and multipliers.

    Attributes:
        links: ``(num_links,)`` the variable of every link, factor after factor.
        factor_links: per factor, its positions in ``links``.
        factor_parts: per factor, the positions of its additional parts in the flat
            ``(v_size,)`` vector.
        slots: ``(variables, positions)`` pairs: the ``j``-th pair holds, for every
            variable in at least ``j + 1`` factors, the position of its link to its
            ``(j + 1)``-th factor; adding the pairs in turn sums each variable's links in
            factor order.
        groups: the :class:`LogicGroup` of each kind of logic factor.
        structures: indices of the :class:`StructureFactor` factors.

    Example:
        >>> from keras_structured.engine.lp.logic import Pair, Xor
        >>> layout = GraphLayout(FactorGraph(3, [Xor([0, 1, 2]), Pair(1, 2)]))
        >>> layout.links.tolist(), [positions.tolist() for _, positions in layout.slots]
        ([0, 1, 2, 1, 2], [[0, 1, 2], [3, 4]])
    """

    def __init__(self, graph: FactorGraph):
        self.links = np.concatenate(graph.links)
        ends = np.cumsum([link.size for link in graph.links])
        self.factor_links = [
            np.arange(end - link.size, end) for link, end in zip(graph.links, ends, strict=True)
        ]
        self.factor_parts = [
            np.arange(start, end)
            for start, end in zip(graph.v_offsets[:-1], graph.v_offsets[1:], strict=True)
        ]
        # The occurrence of each link's variable among the links before it: its slot.
        order = np.argsort(self.links, kind="stable")
        first = np.searchsorted(self.links[order], self.links[order])
        occurrence = np.empty_like(order)
        occurrence[order] = np.arange(order.size) - first
        self.slots = [
            (self.links[occurrence == j], np.flatnonzero(occurrence == j))
            for j in range(occurrence.max() + 1)
        ]
        kinds: dict[tuple, list[int]] = {}
        for f, factor in enumerate(graph.factors):
            if not isinstance(factor, StructureFactor):
                kinds.setdefault(factor.group_key(), []).append(f)
        self.groups = [
            LogicGroup(
                [graph.factors[f] for f in members],
                [self.factor_links[f] for f in members],
                [self.factor_parts[f] for f in members],
            )
            for members in kinds.values()
        ]
        self.structures = [f for f, factor in enumerate(graph.factors) if isinstance(factor, StructureFactor)]
