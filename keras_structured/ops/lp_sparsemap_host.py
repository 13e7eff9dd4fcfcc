"""LP-SparseMAP's host functions: the numpy core run from a model, on every Keras backend.

The core (:mod:`keras_structured.engine.lp`) runs on the host, in numpy and scipy, by the
generic host call (:mod:`keras_structured.ops.host_call`): one call per batch for the
solution, one for the backward pass, which applies the core's exact vector-Jacobian product
(:meth:`LPSparseMAPSolution.vjp <keras_structured.engine.lp.LPSparseMAPSolution.vjp>`) in
float64. The solutions stay on the host between the two calls (:data:`SOLUTIONS`), since
their KKT systems on the faces are no tensors: differentiated, the forward function returns
handles to them, residuals of the call, which the VJP receives with the scores (to solve
again should the store have dropped them) and the cotangents of ``(u, v)``. The VJP has no
gradient of its own: second derivatives are not supported.

* :data:`LP_SPARSEMAP`: ``(eta_u, eta_v, mask) -> (u, v, converged, iterations, map_calls)``
  (``mask``: booleans shaped like ``eta_u``, False for absent variables, or None);
* :data:`LP_GOLD`: ``gold_u -> gold_v``, the additional parts of gold variables (no gradient).

Their static arguments are the :class:`~keras_structured.engine.lp.FactorGraph`, known by
identity (make it once, as the layer and the loss do, not in every call), and the
:class:`~keras_structured.engine.lp.LPSparseMAPOptions`. The functions take arrays whose last
dimension is the per-example one (``num_variables`` for ``u``, ``graph.v_size`` for the flat
additional parts) after any leading dimensions (the batch, and under ``jax.vmap`` the mapped
ones, which they fold into one batch: ``vmap_method="broadcast_all"``). The solver, its
Jacobian and the products run in float64 whatever the dtype of the arrays; results come back
in that dtype. The examples are solved together by
:func:`~keras_structured.engine.lp.lp_sparsemap_batch` (one ADMM for the batch).
"""

from __future__ import annotations

import math

import numpy as np

from keras_structured.engine.lp import (
    FactorGraph,
    LPSparseMAPOptions,
    LPSparseMAPSolution,
    lp_sparsemap_batch,
)
from keras_structured.ops import host_call
from keras_structured.ops.invalid_inputs import raising_invalid_scores

#: The solutions of the forward calls, kept for their backward calls: a list per batch.
SOLUTIONS = host_call.HandleStore()

#: The gold value of the variables an example lacks (the loss's padding).
ABSENT_GOLD = -1.0

#: The info arrays that follow ``(u, v)``: name, numpy dtype.
INFO = (("converged", np.dtype(bool)), ("iterations", np.dtype(np.int32)), ("map_calls", np.dtype(np.int32)))


def _leading_shape(eta_u) -> tuple:
    """The dimensions of ``eta_u`` before its last (per-example) one."""
    return tuple(eta_u.shape[:-1])


def _flat(parts: list[np.ndarray]) -> np.ndarray:
    """Per-factor additional parts as one flat ``(v_size,)`` vector (a graph has a factor at least)."""
    return np.concatenate([np.ravel(part) for part in parts])


def _like(result: np.ndarray, template) -> np.ndarray:
    return np.asarray(result, dtype=template.dtype).reshape(np.shape(template))


@raising_invalid_scores
def _solve(eta_u, eta_v, mask, graph: FactorGraph, options: LPSparseMAPOptions) -> list[LPSparseMAPSolution]:
    if mask is not None and np.shape(mask) != np.shape(eta_u):  # batch sizes known only now
        raise ValueError(
            f"mask must have the shape of the variables' scores {np.shape(eta_u)}. "
            f"Received: mask.shape={np.shape(mask)}"
        )
    batch = math.prod(_leading_shape(eta_u))
    return lp_sparsemap_batch(
        graph,
        np.reshape(eta_u, (batch, graph.num_variables)),
        np.reshape(eta_v, (batch, graph.v_size)),
        mask=None if mask is None else np.reshape(mask, (batch, graph.num_variables)),
        options=options,
    )


def _results(solutions: list[LPSparseMAPSolution], eta_u, eta_v) -> tuple:
    leading = _leading_shape(eta_u)
    u = np.array([solution.u for solution in solutions]).reshape(eta_u.shape)
    v = np.array([_flat(solution.v) for solution in solutions]).reshape(eta_v.shape)
    info = (
        np.array([getattr(solution, name) for solution in solutions], dtype).reshape(leading)
        for name, dtype in INFO
    )
    return _like(u, eta_u), _like(v, eta_v), *info


def values(eta_u, eta_v, mask=None, *, graph: FactorGraph, options: LPSparseMAPOptions) -> tuple:
    """``(u, v, converged, iterations, map_calls)``, ``u`` and ``v`` shaped like the scores.

    Example:
        >>> from keras_structured.engine.lp import Xor
        >>> graph = FactorGraph(3, [Xor([0, 1, 2])])
        >>> u, v, converged, *_ = values(
        ...     np.array([[1.0, 0.5, -1.0]]), np.zeros((1, 0)), graph=graph, options=LPSparseMAPOptions()
        ... )
        >>> u, converged
        (array([[0.75, 0.25, 0.  ]]), array([ True]))
    """
    return _results(_solve(eta_u, eta_v, mask, graph, options), eta_u, eta_v)


def value_specs(eta_u, eta_v, mask=None, *, graph: FactorGraph, options: LPSparseMAPOptions) -> list:
    """``(shape, dtype)`` of the results of :func:`values`."""
    leading = _leading_shape(eta_u)
    return [(eta_u.shape, eta_u.dtype), (eta_v.shape, eta_v.dtype), *((leading, dtype) for _, dtype in INFO)]


def forward(eta_u, eta_v, mask=None, *, graph: FactorGraph, options: LPSparseMAPOptions) -> tuple:
    """:func:`values`, then ``(*leading, 2)`` handles to the solutions, kept in :data:`SOLUTIONS`."""
    solutions = _solve(eta_u, eta_v, mask, graph, options)
    handles = SOLUTIONS.put(solutions, len(solutions))
    return *_results(solutions, eta_u, eta_v), handles.reshape(_leading_shape(eta_u) + (2,))


def handle_specs(eta_u, eta_v, mask=None, *, graph: FactorGraph, options: LPSparseMAPOptions) -> list:
    """``(shape, dtype)`` of the handles that :func:`forward` returns."""
    return [(_leading_shape(eta_u) + (2,), np.int32)]


def vjp(eta_u, eta_v, mask, handles, g_u, g_v, *, graph: FactorGraph, options: LPSparseMAPOptions) -> tuple:
    """``(grad_eta_u, grad_eta_v)`` of ``<g_u, u> + <g_v, v>`` at the solutions of ``handles``
    (solved again from the scores when :data:`SOLUTIONS` no longer holds them), shaped and
    typed like the cotangents."""
    batch = math.prod(_leading_shape(g_u))
    taken = SOLUTIONS.take(np.reshape(handles, (batch, 2)))
    if taken is None:
        solutions = _solve(eta_u, eta_v, mask, graph, options)
    else:
        kept, examples = taken
        solutions = [kept[example] for example in examples]
    flat_u = np.reshape(g_u, (batch, graph.num_variables))
    flat_v = np.reshape(g_v, (batch, graph.v_size))
    grad_u, grad_v = np.zeros(flat_u.shape), np.zeros(flat_v.shape)
    for example, solution in enumerate(solutions):
        grad_u[example], parts = solution.vjp(flat_u[example], graph.split_additional(flat_v[example]))
        grad_v[example] = _flat(parts)
    return _like(grad_u, g_u), _like(grad_v, g_v)


def gold(gold_u, *, graph: FactorGraph) -> tuple:
    """``(gold_v,)``: the flat additional parts ``(*leading, v_size)`` of gold variables
    ``gold_u`` (zeros and ones; :data:`ABSENT_GOLD` for the variables an example lacks, see
    :func:`~keras_structured.losses.lp_sparsemap_loss`), in their dtype
    (:meth:`~keras_structured.engine.lp.FactorGraph.additional_parts`).

    Raises:
        ValueError: (as :class:`~keras_structured.ops.invalid_inputs.InvalidScoresError`)
            for a ``gold_u`` that is not binary or that a factor does not allow, naming the
            example.

    Example:
        >>> from keras_structured.engine.lp import Pair
        >>> gold(np.array([[1.0, 1.0], [1.0, 0.0]]), graph=FactorGraph(2, [Pair(0, 1)]))
        (array([[1.],
               [0.]]),)
    """
    return (_gold_parts(gold_u, graph),)


@raising_invalid_scores
def _gold_parts(gold_u, graph: FactorGraph) -> np.ndarray:
    leading = _leading_shape(gold_u)
    flat = np.reshape(gold_u, (math.prod(leading), graph.num_variables))
    parts = np.zeros((flat.shape[0], graph.v_size))
    for example, u in enumerate(flat):
        present = u != ABSENT_GOLD
        try:
            parts[example] = _flat(graph.additional_parts(u * present, None if present.all() else present))
        except ValueError as error:
            raise ValueError(f"Example {example} of the gold variables: {error}") from None
    return parts.astype(gold_u.dtype).reshape(leading + (graph.v_size,))


def gold_specs(gold_u, *, graph: FactorGraph) -> list:
    """``(shape, dtype)`` of the result of :func:`gold`."""
    return [(_leading_shape(gold_u) + (graph.v_size,), gold_u.dtype)]


#: ``host_call.call(LP_SPARSEMAP, eta_u, eta_v, graph=..., options=...)``:
#: ``[u, v, converged, iterations, map_calls]``, ``(u, v)`` differentiable in the scores.
LP_SPARSEMAP = host_call.host_function(
    "lp_sparsemap",
    values,
    value_specs,
    forward=forward,
    residual_specs=handle_specs,
    vjp=vjp,
    differentiable=(0, 1),
    differentiable_results=(0, 1),
    vmap_method="broadcast_all",
)

#: ``host_call.call(LP_GOLD, gold_u, graph=...)``: ``[gold_v]``, without gradient.
LP_GOLD = host_call.host_function("lp_sparsemap_gold", gold, gold_specs, vmap_method="broadcast_all")
