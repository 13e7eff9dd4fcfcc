"""LP-SparseMAP as a differentiable op, on the TensorFlow, JAX and PyTorch backends of Keras.

Solves, for every example of a batch, SparseMAP over the *local polytope* ``L`` of a factor
graph (Niculae and Martins, ICML 2020):

    (u, v) = argmax_{(u, v) in L}  <eta_u, u> + <eta_v, v> - ||u||^2 / 2,

where ``u`` are the graph's variables and ``v`` the factors' additional parts (a
:class:`~keras_structured.engine.lp.Pair`'s product, a sequence factor's transitions), flat
and in factor order: ``v[:, graph.v_offsets[f]:graph.v_offsets[f + 1]]`` belongs to factor
``f`` (:meth:`~keras_structured.engine.lp.FactorGraph.split_additional` reshapes them). The
numpy core (:mod:`keras_structured.engine.lp`) solves each example by ADMM on the host, one
host call per batch (:mod:`keras_structured.ops.lp_sparsemap_host`); the gradient is the
core's exact vector-Jacobian product at the solution, one more host call. Everything on the host is
float64 whatever the input dtype; the results are cast to it once, at the end, and float32
gradients are the float64 ones rounded once.
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from keras_structured.engine.lp import FactorGraph, LPSparseMAPOptions
from keras_structured.ops import host_call
from keras_structured.ops.dtypes import compute_dtype
from keras_structured.ops.lp_sparsemap_host import INFO, LP_SPARSEMAP
from keras_structured.ops.portable_sparsemap import solver_dtype
from keras_structured.ops.xla import OP_FIX, refuse_xla

__all__ = [
    "INFO_KEYS",
    "SOLVER_SETTINGS",
    "broadcast_rows",
    "check_batch",
    "check_graph",
    "lp_sparsemap",
    "prepare_scores",
    "split_packed_scores",
]

#: The solver settings that the layer and the loss take as arguments, with their defaults.
SOLVER_SETTINGS = {field.name: field.default for field in dataclasses.fields(LPSparseMAPOptions)}

#: The keys of the info dict of :func:`lp_sparsemap`.
INFO_KEYS = tuple(name for name, _ in INFO)


def check_graph(graph, owner: str) -> FactorGraph:
    """``graph`` (a :class:`FactorGraph`, or its config dict rebuilt), or ``ValueError``."""
    if isinstance(graph, dict):
        graph = FactorGraph.from_config(graph)
    if not isinstance(graph, FactorGraph):
        raise ValueError(
            f"{owner} needs a keras_structured.engine.lp.FactorGraph (or its config dict). "
            f"Received: graph={graph!r}"
        )
    return graph


def _shape(x) -> tuple:
    return tuple(x.shape)


def _check_width(name: str, x, width: int, what: str) -> None:
    shape = _shape(x)
    if len(shape) != 2 or shape[1] != width:
        raise ValueError(f"{name} must have shape (batch, {width}): {what}. Received: {name}.shape={shape}")


def check_batch(name: str, x, eta_u) -> None:
    """``ValueError`` unless ``x`` has the batch size of ``eta_u`` (where both are static)."""
    batch, other = _shape(x)[0], _shape(eta_u)[0]
    if None not in (batch, other) and batch != other:
        raise ValueError(
            f"{name} must have the same batch size as the scores ({other}). "
            f"Received: {name}.shape={_shape(x)}, scores' shape={_shape(eta_u)}"
        )


def broadcast_rows(x, row):
    """``row`` ``(width,)`` repeated ``(batch, width)`` for ``x`` ``(batch, ...)``, in ``x``'s
    dtype (also where the batch size is not static)."""
    return ops.zeros_like(x[:, :1]) + ops.cast(row, x.dtype)


def split_packed_scores(graph: FactorGraph, scores, name: str = "scores") -> tuple:
    """``(eta_u, eta_v)`` of scores packed as ``(batch, num_variables + v_size)`` (``eta_v``
    last), or of ``(batch, num_variables)`` variable scores alone (``eta_v`` None).

    Raises:
        ValueError: for scores of another shape.

    Example:
        >>> from keras_structured.engine.lp import Pair
        >>> eta_u, eta_v = split_packed_scores(FactorGraph(2, [Pair(0, 1)]), np.ones((4, 3)))
        >>> tuple(eta_u.shape), tuple(eta_v.shape)
        ((4, 2), (4, 1))
    """
    scores = ops.convert_to_tensor(scores)
    shape, n = _shape(scores), graph.num_variables
    if len(shape) != 2 or shape[1] not in (n, n + graph.v_size):
        raise ValueError(
            f"{name} must have shape (batch, {n}) (the variables' scores) or (batch, {n + graph.v_size}) "
            f"(then the {graph.v_size} additional parts' scores, flat in factor order). "
            f"Received: {name}.shape={shape}"
        )
    if shape[1] == n:
        return scores, None
    return scores[:, :n], scores[:, n:]


def prepare_scores(graph: FactorGraph, eta_u, eta_v) -> tuple:
    """``(dtype, eta_u, eta_v)``: the scores checked and cast to the solver's dtype, a missing
    ``eta_v`` as zeros, and the dtype of the results (``eta_u``'s)."""
    eta_u = ops.convert_to_tensor(eta_u)
    _check_width("eta_u", eta_u, graph.num_variables, "one score per variable of the graph")
    dtype = keras.backend.standardize_dtype(eta_u.dtype)
    compute_dtype(eta_u)  # a TypeError for scores that are not floats
    wide = solver_dtype()
    eta_u = ops.cast(eta_u, wide)
    if eta_v is None:
        return dtype, eta_u, broadcast_rows(eta_u, ops.zeros((graph.v_size,)))
    eta_v = ops.convert_to_tensor(eta_v)
    _check_width("eta_v", eta_v, graph.v_size, "the graph's additional parts, flat in factor order")
    compute_dtype(eta_v)
    check_batch("eta_v", eta_v, eta_u)
    return dtype, eta_u, ops.cast(eta_v, wide)


def lp_sparsemap(
    graph: FactorGraph,
    eta_u,
    eta_v=None,
    *,
    mask=None,
    options: LPSparseMAPOptions | None = None,
    return_info: bool = False,
):
    """Batched LP-SparseMAP with its exact gradient.

    Solves ``max_{(u, v) in L} <eta_u, u> + <eta_v, v> - ||u||^2 / 2`` over the local
    polytope ``L`` of ``graph`` for every example (see the module docstring).

    Args:
        graph: a :class:`keras_structured.engine.lp.FactorGraph`.
        eta_u: ``(batch, num_variables)`` variable scores (float16/32/64), finite.
        eta_v: ``(batch, graph.v_size)`` scores of the factors' additional parts, flat in
            factor order, finite; None for zeros.
        mask: None, or ``(batch, num_variables)`` booleans (or numbers 0 and 1), False for
            the variables an example lacks (padding): they are held at zero with zero
            gradients, and structure factors over them run at the lengths that leave them
            out, so that each example's solution is that of the graph without them
            (:func:`~keras_structured.engine.lp.lp_sparsemap_batch`).
        options: the solver settings, a :class:`keras_structured.engine.lp.LPSparseMAPOptions`
            (default: its defaults: ADMM to residuals of 1e-6, at most 1000 iterations, then
            an exact polish).
        return_info: also return a dict with ``converged`` (bool), ``iterations`` and
            ``map_calls`` (int32), one per example; no gradient.

    Returns:
        ``(u, v)`` with the shapes and dtype of ``(eta_u, eta_v)`` (``v`` in ``eta_u``'s
        dtype, shape ``(batch, v_size)``), plus the info dict when ``return_info``. Examples
        that stop at ``options.max_iter`` have ``converged`` False and trigger one
        :class:`~keras_structured.engine.lp.LPSparseMAPConvergenceWarning` per batch.

    Raises:
        ValueError: at trace time, for a graph that is not one, scores or a mask of the wrong
            shapes (or batch sizes), bad options, or a call inside an XLA-compiled function
            (the solver runs in Python, see :mod:`keras_structured.ops.xla`).
        TypeError: for scores that are not floats.
        tf.errors.InvalidArgumentError: at run time, for NaN or infinite scores, naming the
            example, or mask values other than 0 and 1 (an
            :class:`~keras_structured.ops.invalid_inputs.InvalidScoresError`, also a
            ``ValueError``; on PyTorch the same error; on JAX inside the runtime error of the
            host callback).

    Example: three labels, at most two on, the first two coupled by a Pair whose score
    makes them repel (-1: they share their mass) or attract (+1: both on, ``v = u_0 u_1 = 1``):

        >>> from keras_structured.engine.lp import Budget, Pair
        >>> graph = FactorGraph(3, [Budget([0, 1, 2], 2), Pair(0, 1)])
        >>> u, v = lp_sparsemap(graph, [[1.0, 0.9, 0.2]] * 2, [[-1.0], [1.0]])
        >>> u.numpy().round(6), v.numpy()
        (array([[0.55, 0.45, 0.2 ],
               [1.  , 1.  , 0.  ]], dtype=float32), array([[0.],
               [1.]], dtype=float32))
    """
    refuse_xla("keras_structured.lp_sparsemap", OP_FIX)
    graph = check_graph(graph, "lp_sparsemap")
    options = LPSparseMAPOptions() if options is None else options
    if not isinstance(options, LPSparseMAPOptions):
        raise ValueError(f"options must be an LPSparseMAPOptions or None. Received: options={options!r}")
    dtype, eta_u, eta_v = prepare_scores(graph, eta_u, eta_v)
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
        _check_width("mask", mask, graph.num_variables, "one flag per variable of the graph")
        check_batch("mask", mask, eta_u)
        if keras.backend.standardize_dtype(mask.dtype) != "bool":  # the host checks its 0s and 1s
            mask = ops.cast(mask, eta_u.dtype)
    u, v, *info = host_call.call(LP_SPARSEMAP, eta_u, eta_v, mask, graph=graph, options=options)
    u, v = ops.cast(u, dtype), ops.cast(v, dtype)
    if not return_info:
        return u, v
    return u, v, dict(zip(INFO_KEYS, info, strict=True))
