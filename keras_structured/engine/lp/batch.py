"""LP-SparseMAP of a batch of examples on one graph: the ADMM of
:mod:`~keras_structured.engine.lp.admm`, vectorised over the examples.

Every example of a batch has the same factors, so one iteration is done for all the
examples still running at once, on ``(examples, links)`` arrays:

* the logic factors of one kind (:meth:`~keras_structured.engine.lp.logic.LogicFactor.group_key`)
  are projected, for all examples and all factors of the kind, by one vectorised closed form
  (:class:`~keras_structured.engine.lp.blocks.LogicGroup`);
* each structure factor's subproblems are solved side by side, one warm-started active set
  per example, their MAP calls batched (:func:`~keras_structured.engine.lp.blocks.solve_structure_blocks`);
* the consensus step, the multipliers, the residuals, the stopping test and ``rho`` (one per
  example) are array operations; an example leaves the batch when it converges or
  reaches ``max_iter``.

The consensus step adds the factors' contributions to each variable in factor order, as
the per-example solver does, so the two follow the same iterates up to the rounding of
the residuals' sums (which only decides when a residual lies within rounding of ``tol``,
or of a rho-balancing threshold). Each example is then finished (final exact solves, faces,
polish) as by :func:`~keras_structured.engine.lp.admm.lp_sparsemap`.
"""

from __future__ import annotations

import numpy as np

from keras_structured.engine.lp import admm
from keras_structured.engine.lp.blocks import GraphLayout, LogicBlock, StructureBlock, solve_structure_blocks
from keras_structured.engine.lp.graph import FactorGraph
from keras_structured.engine.options import DEFAULT_MAX_ITER


def solve_batch(graph: FactorGraph, eta_u: np.ndarray, eta_v: np.ndarray, options) -> list:
    """ADMM and the polish of a batch of problems on one graph (checked float64 scores).

    Args:
        graph: the graph.
        eta_u: ``(batch, num_variables)`` variable scores.
        eta_v: ``(batch, v_size)`` additional scores, flat in factor order.
        options: :class:`~keras_structured.engine.lp.admm.LPSparseMAPOptions`.

    Returns:
        One :class:`~keras_structured.engine.lp.admm.LPSparseMAPSolution` per example.
    """
    layout = GraphLayout(graph)
    batch, num_links = eta_u.shape[0], layout.links.size
    if batch == 0:
        return []
    blocks = {f: [StructureBlock(graph.factors[f]) for _ in range(batch)] for f in layout.structures}
    u = np.clip(eta_u, 0.0, 1.0)
    multipliers = np.zeros((batch, num_links))
    rho = np.full(batch, float(options.rho))
    primal, dual = np.full(batch, np.inf), np.full(batch, np.inf)
    converged = np.zeros(batch, bool)
    iterations = np.zeros(batch, np.int64)
    running = np.arange(batch)
    while running.size:
        iterations[running] += 1
        rho_r, u_r, multipliers_r = rho[running], u[running], multipliers[running]
        a = u_r[:, layout.links] - multipliers_r / rho_r[:, None]
        s = eta_v[running] / rho_r[:, None]
        copies = np.empty_like(a)
        for group in layout.groups:
            group.solve(a, s, copies)
        inner = np.ones(running.size, bool)
        for f in layout.structures:
            links, parts = layout.factor_links[f], layout.factor_parts[f]
            running_blocks = [blocks[f][b] for b in running]
            copies[:, links], _, done = solve_structure_blocks(
                running_blocks, a[:, links], s[:, parts], admm.INNER_TOL, options.max_inner_iter
            )
            inner &= done
        contributions = multipliers_r + rho_r[:, None] * copies
        total = eta_u[running]
        for variables, positions in layout.slots:
            total[:, variables] += contributions[:, positions]
        previous = u_r
        u_r = total / (1.0 + rho_r[:, None] * graph.degrees)
        difference = copies - u_r[:, layout.links]
        multipliers_r += rho_r[:, None] * difference
        primal_r = np.sqrt(np.einsum("bl,bl->b", difference, difference) / num_links)
        dual_r = rho_r * np.sqrt((u_r - previous) ** 2 @ graph.degrees / num_links)
        done = (primal_r <= options.tol) & (dual_r <= options.tol) & inner
        if options.adapt_rho:
            raise_rho = ~done & (primal_r > admm.RHO_BALANCE * dual_r)
            lower_rho = ~done & ~raise_rho & (dual_r > admm.RHO_BALANCE * primal_r)
            rho_r = np.where(raise_rho, np.minimum(rho_r * admm.RHO_FACTOR, admm.RHO_MAX), rho_r)
            rho_r = np.where(lower_rho, np.maximum(rho_r / admm.RHO_FACTOR, admm.RHO_MIN), rho_r)
        u[running], multipliers[running], rho[running] = u_r, multipliers_r, rho_r
        primal[running], dual[running], converged[running] = primal_r, dual_r, done
        running = running[~done & (iterations[running] < options.max_iter)]
    return _finish(
        graph, layout, blocks, eta_u, eta_v, u, multipliers, rho, options, converged, iterations, primal, dual
    )


def _finish(
    graph, layout, blocks, eta_u, eta_v, u, multipliers, rho, options, converged, iterations, primal, dual
):
    """Every example's final exact solves (the structure factors' side by side), faces and polish."""
    a = u[:, layout.links] - multipliers / rho[:, None]
    s = eta_v / rho[:, None]
    copies, parts = np.empty_like(a), np.empty_like(s)
    for group in layout.groups:
        group.solve(a, s, copies, parts)
    for f in layout.structures:
        solve_structure_blocks(
            blocks[f],
            a[:, layout.factor_links[f]],
            s[:, layout.factor_parts[f]],
            admm.INNER_TOL,
            DEFAULT_MAX_ITER,
            True,
        )
    solutions = []
    for b in range(eta_u.shape[0]):
        example_blocks = []
        for f, factor in enumerate(graph.factors):
            if f in blocks:
                example_blocks.append(blocks[f][b])
            else:
                x, z = copies[b, layout.factor_links[f]], parts[b, layout.factor_parts[f]]
                example_blocks.append(LogicBlock(factor, x, z))
        scores_v = [eta_v[b, parts] for parts in layout.factor_parts]
        solutions.append(
            admm.finish(
                graph,
                example_blocks,
                eta_u[b],
                scores_v,
                u[b],
                options,
                converged=bool(converged[b]),
                iterations=int(iterations[b]),
                primal=float(primal[b]),
                dual=float(dual[b]),
                rho=float(rho[b]),
            )
        )
    return solutions
