"""LP-SparseMAP of a batch of examples on one graph: the ADMM of
:mod:`~keras_structured.engine.lp.admm`, vectorised over the examples.

Every example of a batch has the same factors, so one iteration is done for all the
examples still running at once, on ``(examples, links)`` arrays:

* the logic factors of one kind (:meth:`~keras_structured.engine.lp.logic.LogicFactor.group_key`)
  are projected, for all examples and all factors of the kind, by one vectorised closed form
  (:class:`~keras_structured.engine.lp.blocks.LogicGroup`);
* each structure factor's subproblems are solved side by side, one warm-started active set
  per example, in one call of the compiled kernel (or with batched MAP calls for a Python
  oracle; :func:`~keras_structured.engine.lp.blocks.solve_structure_blocks`);
* the consensus step, the multipliers, the residuals, the stopping test and ``rho`` (one per
  example) are array operations; an example leaves the batch when it converges or
  reaches ``max_iter``.

Each example's arithmetic does not depend on the others (the structure factors' solves are
per example, the array operations row by row), so an example solved in a batch equals it
solved alone (:func:`~keras_structured.engine.lp.admm.lp_sparsemap`, a batch of one) up to
the rounding of the residuals' sums. Each example is then finished (final exact solves,
faces, polish; :func:`~keras_structured.engine.lp.admm.finish`).

The polish reads the faces at the last iterate, within ``tol`` of the solution: a vertex
whose weight vanishes at the solution can still be active there, or a logic inequality
not yet tight, and the QP on those faces then has an infeasible solution (at ``tol=1e-6``,
about 1 in 32 sequences of 30 words with Pair factors and 4 or 5 in 32 trees of 50 words with
a budget; which examples depends on the machine's rounding). Such examples go on iterating
at a tolerance ten times smaller and are polished again, up to ``POLISH_RETRIES`` times (one
retry polished all of those). ``converged`` stays the flag of ``tol``.
"""

from __future__ import annotations

import numpy as np

from keras_structured.engine.lp import admm
from keras_structured.engine.lp.blocks import GraphLayout, LogicBlock, StructureBlock, solve_structure_blocks
from keras_structured.engine.lp.graph import FactorGraph
from keras_structured.engine.options import DEFAULT_MAX_ITER

# Times an example that converged without a polished solution goes on iterating at a
# tolerance ten times smaller (see the module docstring).
POLISH_RETRIES = 3


class _Iterates:
    """The ADMM's state for a batch: per example its iterate, multipliers, penalty,
    residuals and iterations, and its absent variables; per structure factor one block per
    example and the structures' lengths."""

    def __init__(self, graph: FactorGraph, layout: GraphLayout, eta_u: np.ndarray, mask, options):
        batch = eta_u.shape[0]
        self.blocks = {f: [StructureBlock(graph.factors[f]) for _ in range(batch)] for f in layout.structures}
        self.absent = None if mask is None or mask.all() else ~mask
        self.lengths = {
            f: None if self.absent is None else graph.factors[f].lengths(mask) for f in layout.structures
        }
        self.u = np.clip(eta_u, 0.0, 1.0)
        if self.absent is not None:
            self.u[self.absent] = 0.0
        self.multipliers = np.zeros((batch, layout.links.size))
        self.rho = np.full(batch, float(options.rho))
        self.primal, self.dual = np.full(batch, np.inf), np.full(batch, np.inf)
        self.iterations = np.zeros(batch, np.int64)


def solve_batch(graph: FactorGraph, eta_u: np.ndarray, eta_v: np.ndarray, options, mask=None) -> list:
    """ADMM and the polish of a batch of problems on one graph (checked float64 scores).

    Args:
        graph: the graph.
        eta_u: ``(batch, num_variables)`` variable scores.
        eta_v: ``(batch, v_size)`` additional scores, flat in factor order.
        options: :class:`~keras_structured.engine.lp.admm.LPSparseMAPOptions`.
        mask: None, or ``(batch, num_variables)`` booleans, False for the variables an example
            lacks: they are held at zero (the consensus step sets them to zero, the polish and
            the Jacobian add ``u_i = 0``) and the structure factors over them run at the
            lengths that leave them out.

    Returns:
        One :class:`~keras_structured.engine.lp.admm.LPSparseMAPSolution` per example.
    """
    layout = GraphLayout(graph)
    batch = eta_u.shape[0]
    if batch == 0:
        return []
    state = _Iterates(graph, layout, eta_u, mask, options)
    converged = _iterate(graph, layout, state, eta_u, eta_v, np.arange(batch), options.tol, options)
    solutions = _finish(graph, layout, state, eta_u, eta_v, np.arange(batch), converged, options)
    tol = options.tol
    for _ in range(POLISH_RETRIES if options.polish else 0):
        retry = np.array(
            [
                b
                for b, solution in enumerate(solutions)
                if solution.converged and not solution.polished and state.iterations[b] < options.max_iter
            ],
            np.int64,
        )
        if not retry.size:
            break
        tol /= 10
        _iterate(graph, layout, state, eta_u, eta_v, retry, tol, options)
        again = _finish(graph, layout, state, eta_u, eta_v, retry, converged, options)
        for b, solution in zip(retry, again, strict=True):
            solutions[b] = solution
    return solutions


def _iterate(graph, layout, state: _Iterates, eta_u, eta_v, running: np.ndarray, tol: float, options):
    """ADMM iterations of the examples ``running`` until each reaches ``tol`` or ``max_iter``
    iterations in all; returns the ``(batch,)`` flags of those that reached ``tol``."""
    reached = np.zeros(eta_u.shape[0], bool)
    num_links = layout.links.size
    while running.size:
        state.iterations[running] += 1
        rho_r, u_r, multipliers_r = state.rho[running], state.u[running], state.multipliers[running]
        a = u_r[:, layout.links] - multipliers_r / rho_r[:, None]
        s = eta_v[running] / rho_r[:, None]
        copies = np.empty_like(a)
        for group in layout.groups:
            group.solve(a, s, copies)
        inner = np.ones(running.size, bool)
        for f in layout.structures:
            links, parts = layout.factor_links[f], layout.factor_parts[f]
            running_blocks = [state.blocks[f][b] for b in running]
            lengths = state.lengths[f]
            copies[:, links], _, done = solve_structure_blocks(
                running_blocks,
                a[:, links],
                s[:, parts],
                admm.INNER_TOL,
                options.max_inner_iter,
                lengths=None if lengths is None else lengths[running],
            )
            inner &= done
        contributions = multipliers_r + rho_r[:, None] * copies
        total = eta_u[running]
        for variables, positions in layout.slots:
            total[:, variables] += contributions[:, positions]
        previous = u_r
        u_r = total / (1.0 + rho_r[:, None] * graph.degrees)
        if state.absent is not None:
            u_r[state.absent[running]] = 0.0
        difference = copies - u_r[:, layout.links]
        multipliers_r += rho_r[:, None] * difference
        primal_r = np.sqrt(np.einsum("bl,bl->b", difference, difference) / num_links)
        dual_r = rho_r * np.sqrt((u_r - previous) ** 2 @ graph.degrees / num_links)
        done = (primal_r <= tol) & (dual_r <= tol) & inner
        if options.adapt_rho:
            raise_rho = ~done & (primal_r > admm.RHO_BALANCE * dual_r)
            lower_rho = ~done & ~raise_rho & (dual_r > admm.RHO_BALANCE * primal_r)
            rho_r = np.where(raise_rho, np.minimum(rho_r * admm.RHO_FACTOR, admm.RHO_MAX), rho_r)
            rho_r = np.where(lower_rho, np.maximum(rho_r / admm.RHO_FACTOR, admm.RHO_MIN), rho_r)
        state.u[running], state.multipliers[running], state.rho[running] = u_r, multipliers_r, rho_r
        state.primal[running], state.dual[running], reached[running] = primal_r, dual_r, done
        running = running[~done & (state.iterations[running] < options.max_iter)]
    return reached


def _finish(graph, layout, state: _Iterates, eta_u, eta_v, which: np.ndarray, converged, options) -> list:
    """The solutions of the examples ``which``: the final exact solves (the structure
    factors' side by side), faces and polish (:func:`~keras_structured.engine.lp.admm.finish`)."""
    rho = state.rho[which]
    a = state.u[which][:, layout.links] - state.multipliers[which] / rho[:, None]
    s = eta_v[which] / rho[:, None]
    copies, parts = np.empty_like(a), np.empty_like(s)
    for group in layout.groups:
        group.solve(a, s, copies, parts)
    for f in layout.structures:
        lengths = state.lengths[f]
        solve_structure_blocks(
            [state.blocks[f][b] for b in which],
            a[:, layout.factor_links[f]],
            s[:, layout.factor_parts[f]],
            admm.INNER_TOL,
            DEFAULT_MAX_ITER,
            True,
            None if lengths is None else lengths[which],
        )
    solutions = []
    for j, b in enumerate(which):
        example_blocks = []
        for f, factor in enumerate(graph.factors):
            if f in state.blocks:
                example_blocks.append(state.blocks[f][b])
            else:
                x, z = copies[j, layout.factor_links[f]], parts[j, layout.factor_parts[f]]
                example_blocks.append(LogicBlock(factor, x, z))
        scores_v = [eta_v[b, positions] for positions in layout.factor_parts]
        solutions.append(
            admm.finish(
                graph,
                example_blocks,
                eta_u[b],
                scores_v,
                state.u[b],
                options,
                absent=None if state.absent is None else np.flatnonzero(state.absent[b]),
                converged=bool(converged[b]),
                iterations=int(state.iterations[b]),
                primal=float(state.primal[b]),
                dual=float(state.dual[b]),
                rho=float(state.rho[b]),
            )
        )
    return solutions
