"""The LP-SparseMAP loss: the Fenchel-Young loss of SparseMAP over a factor graph's local polytope.

For scores ``eta = (eta_u, eta_v)`` and a gold assignment ``y = (y_u, y_v)`` of the graph
(a vertex of its local polytope ``L``),

    L(eta; y) = max_{(u, v) in L} [<eta, (u, v)> - ||u||^2 / 2] - [<eta, y> - ||y_u||^2 / 2],

which is nonnegative, zero exactly when LP-SparseMAP returns ``y``, and whose gradient is
``(u*, v*) - y`` (Danskin's theorem: the solver runs under ``stop_gradient`` and is not
differentiated). The gold is given by its variables ``y_u`` (zeros and ones); the additional
parts ``y_v`` follow from them, factor by factor
(:meth:`~keras_structured.engine.lp.FactorGraph.additional_parts`): a
:class:`~keras_structured.engine.lp.Pair`'s is the product of its two variables, a structure
factor's are the higher-order parts of the structure whose unary parts are its variables (a
sequence's transitions). Gold variables that are not binary or that a factor does not allow
(two labels on under an ``AtMostOne``, a sequence position without a label) raise
``tf.errors.InvalidArgumentError`` at run time, naming the example.

The scores ``y_pred`` are ``(batch, num_variables)`` (no additional scores: ``eta_v = 0``) or
packed ``(batch, num_variables + v_size)``, ``eta_v`` flat in factor order after ``eta_u``:
e.g. the output of ``keras.layers.Dense(num_variables + graph.v_size)``, whose last
``v_size`` units score the additional parts of each example. The layer
:class:`keras_structured.LPSparseMAP` predicts from the same packed scores.
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from keras_structured.engine.lp import FactorGraph, LPSparseMAPOptions
from keras_structured.losses.per_example import PerExampleLoss, per_example_sum
from keras_structured.ops import host_call
from keras_structured.ops.dtypes import compute_dtype
from keras_structured.ops.lp_sparsemap_host import ABSENT_GOLD, LP_GOLD, LP_SPARSEMAP
from keras_structured.ops.lp_sparsemap_op import (
    SOLVER_SETTINGS,
    check_batch,
    check_graph,
    prepare_scores,
    split_packed_scores,
)
from keras_structured.ops.xla import LOSS_FIX, refuse_xla


def lp_sparsemap_loss(y_true, y_pred, graph: FactorGraph | dict, options: LPSparseMAPOptions | None = None):
    """LP-SparseMAP loss per example (see the module docstring for the formula).

    Args:
        y_true: ``(batch, num_variables)`` gold variables, zeros and ones; -1 for the
            variables an example lacks (padding), which the solve leaves out (its ``mask``,
            :func:`keras_structured.lp_sparsemap`).
        y_pred: ``(batch, num_variables)`` variable scores, or packed
            ``(batch, num_variables + v_size)`` scores (``eta_v`` last, flat in factor order).
        graph: a :class:`keras_structured.engine.lp.FactorGraph` (or its config dict).
        options: the solver settings, a :class:`keras_structured.engine.lp.LPSparseMAPOptions`.

    Returns:
        The loss of every example, shape ``(batch,)``, in the compute dtype of ``y_pred``
        (float32 for half precision). Computed in float64 and cast once, at the end (it is a
        difference of two large scores); rounding below zero is returned as zero.

    Raises:
        ValueError: at trace time, for a graph that is not one, or labels and scores of
            shapes (or batch sizes) that do not fit.
        tf.errors.InvalidArgumentError: at run time, for gold variables that are not a
            vertex of the local polytope, or non-finite scores.

    Example: two labels coupled by a Pair; the gold turns both on:

        >>> from keras_structured.engine.lp import FactorGraph, Pair
        >>> graph = FactorGraph(2, [Pair(0, 1)])
        >>> lp_sparsemap_loss([[1.0, 1.0], [1.0, 1.0]], [[3.0, 3.0, 0.0], [0.5, 0.0, -1.0]], graph).numpy()
        array([0.   , 1.625], dtype=float32)
    """
    refuse_xla("lp_sparsemap_loss", LOSS_FIX)
    graph = check_graph(graph, "lp_sparsemap_loss")
    options = LPSparseMAPOptions() if options is None else options
    eta_u, eta_v = split_packed_scores(graph, y_pred, name="y_pred")
    dtype = compute_dtype(eta_u)
    gold_u = ops.convert_to_tensor(y_true)
    if tuple(gold_u.shape)[1:] != (graph.num_variables,):
        raise ValueError(
            f"y_true must have shape (batch, {graph.num_variables}): the gold variables, zeros and ones. "
            f"Received: y_true.shape={tuple(gold_u.shape)}"
        )
    check_batch("y_true", gold_u, eta_u)
    # In float64, cast once at the end: the loss is a difference of two large scores.
    _, eta_u, eta_v = prepare_scores(graph, eta_u, eta_v)
    gold_u = ops.cast(gold_u, eta_u.dtype)
    (gold_v,) = host_call.call(LP_GOLD, gold_u, graph=graph)
    present = ops.not_equal(gold_u, ABSENT_GOLD)
    gold_u = ops.where(present, gold_u, 0.0)
    u, v, *_ = host_call.values(LP_SPARSEMAP, eta_u, eta_v, present, graph=graph, options=options)
    loss = (
        per_example_sum(eta_u * (u - gold_u))
        + per_example_sum(eta_v * (v - gold_v))
        + per_example_sum(ops.square(gold_u) - ops.square(u)) / 2
    )
    return ops.cast(ops.where(loss < 0, ops.zeros_like(loss), loss), dtype)


@keras.saving.register_keras_serializable(package="keras_structured")
class LPSparseMAPLoss(PerExampleLoss):
    """LP-SparseMAP loss: the Fenchel-Young loss of SparseMAP over a factor graph's local polytope.

    For scores ``eta`` and a gold assignment ``y = (y_u, y_v)``,

        L = max_{(u, v) in L} [<eta, (u, v)> - ||u||^2 / 2] - [<eta, y> - ||y_u||^2 / 2],

    with gradient ``(u*, v*) - y``; ``y_v`` follows from the gold variables ``y_u`` (see
    :func:`lp_sparsemap_loss`, which computes the loss of each example).

    Args:
        graph: a :class:`keras_structured.engine.lp.FactorGraph` (or its config dict).
        tol, max_iter, rho, adapt_rho, max_inner_iter, polish: the solver settings, as for
            :class:`keras_structured.LPSparseMAP`.
        reduction, name, dtype: as for ``keras.losses.Loss``.

    Raises:
        ValueError: at construction, for a graph that is not one or bad solver settings; as
            for :func:`lp_sparsemap_loss` when called.

    Example:
        >>> from keras_structured.engine.lp import AtMostOne, FactorGraph
        >>> loss = LPSparseMAPLoss(FactorGraph(3, [AtMostOne([0, 1, 2])]))
        >>> float(loss([[0.0, 1.0, 0.0]], [[1.0, 1.0, -1.0]]))  # u* = (0.5, 0.5, 0): 0.75 - 0.5
        0.25
    """

    def __init__(
        self,
        graph: FactorGraph | dict,
        tol: float = SOLVER_SETTINGS["tol"],
        max_iter: int = SOLVER_SETTINGS["max_iter"],
        rho: float = SOLVER_SETTINGS["rho"],
        adapt_rho: bool = SOLVER_SETTINGS["adapt_rho"],
        max_inner_iter: int = SOLVER_SETTINGS["max_inner_iter"],
        polish: bool = SOLVER_SETTINGS["polish"],
        reduction="sum_over_batch_size",
        name: str = "lp_sparsemap_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.graph = check_graph(graph, "LPSparseMAPLoss")
        self.options = LPSparseMAPOptions(
            tol=tol,
            max_iter=max_iter,
            rho=rho,
            adapt_rho=adapt_rho,
            max_inner_iter=max_inner_iter,
            polish=polish,
        )

    def __call__(self, y_true, y_pred, sample_weight=None):
        refuse_xla(type(self).__name__, LOSS_FIX)
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        return lp_sparsemap_loss(y_true, y_pred, self.graph, self.options)

    def get_config(self):
        return {**super().get_config(), "graph": self.graph.get_config(), **dataclasses.asdict(self.options)}
