"""A Keras layer for LP-SparseMAP over a factor graph.

The layer solves, for every example, SparseMAP over the local polytope ``L`` of its factor
graph (Niculae and Martins, ICML 2020):

    (u, v) = argmax_{(u, v) in L}  <eta_u, u> + <eta_v, v> - ||u||^2 / 2,

and returns the variables' marginals ``u``, differentiable with the exact Jacobian of the
solution (:func:`keras_structured.lp_sparsemap`). The solver runs in Python on the host (one
host call per batch, :mod:`keras_structured.ops.lp_sparsemap_host`): on TensorFlow XLA cannot
compile it, so the layer sets ``supports_jit = False`` there (``model.compile(...,
jit_compile=True)`` falls back to ``jit_compile=False`` with one Keras warning); on JAX and
PyTorch the call is a ``jax.pure_callback`` or a ``torch.library`` custom op, which compile.

No masks or lengths: a factor graph has one fixed set of variables, and padding them would
change its factors (a padded position of a sequence factor must still take a label, a padded
label of a budget must be removed from it). Examples of different sizes are different
graphs: one layer per size, or one graph over the largest size whose extra variables the
scores leave out of every structure the task allows.
"""

from __future__ import annotations

import dataclasses

import keras

from keras_structured.engine.lp import FactorGraph, LPSparseMAPOptions
from keras_structured.ops.lp_sparsemap_op import (
    INFO_KEYS,
    SOLVER_SETTINGS,
    broadcast_rows,
    check_graph,
    lp_sparsemap,
    split_packed_scores,
)
from keras_structured.ops.xla import LAYER_FIX, refuse_xla


@keras.saving.register_keras_serializable(package="keras_structured")
class LPSparseMAP(keras.layers.Layer):
    """LP-SparseMAP over a factor graph: returns the variables' marginals ``u``.

    Solves ``max_{(u, v) in L} <eta_u, u> + <eta_v, v> - ||u||^2 / 2`` over the local
    polytope ``L`` of ``graph``: every factor's variables (and additional parts ``v``) lie in
    its marginal polytope. The scores ``eta_v`` of the additional parts (a
    :class:`~keras_structured.engine.lp.Pair`'s coupling, a sequence factor's transitions)
    are learned weights of the layer, or come with the inputs (packed scores).

    Args:
        graph: a :class:`keras_structured.engine.lp.FactorGraph` (or its config dict).
        tol: stop ADMM when the primal and dual residuals are at most ``tol`` (default 1e-6).
        max_iter: most ADMM iterations per example (default 1000).
        rho: initial ADMM penalty (default 1).
        adapt_rho: adapt ``rho`` by residual balancing (default True).
        max_inner_iter: most MAP calls per structure factor and iteration (default 20).
        polish: solve the problem on the final faces exactly (default True; the gradient is
            then exact).
        additional_initializer: initializer of the learned ``eta_v`` (variable-score inputs
            only).
        return_info: also return the additional marginals and the solver info: the layer
            then returns a dict with ``u``, ``v`` ``(batch, v_size)``, ``converged``,
            ``iterations`` and ``map_calls``.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``(batch, num_variables)`` variable scores ``eta_u`` (the layer then owns a
            trainable ``additional_scores`` weight ``(v_size,)``, ``eta_v`` shared by all
            examples, when the graph has additional parts), or packed
            ``(batch, num_variables + v_size)`` scores ``[eta_u, eta_v]`` (``eta_v`` flat in
            factor order; no weights).
        mask: None, or ``(batch, num_variables)`` booleans, False for the variables an
            example lacks (padding in a graph built for the largest example): they come out
            zero, and each example's marginals are those of the graph without them
            (:func:`keras_structured.lp_sparsemap`). A mask that Keras propagates from an
            earlier layer is used only with this shape (a per-token mask is not a
            per-variable one: build the variables' mask and pass it).

    Returns:
        The marginals ``u`` ``(batch, num_variables)`` in the dtype of the inputs (float16
        under ``mixed_float16``; the solver runs in float64), or the dict of
        ``return_info``. Examples that stop at ``max_iter`` trigger one
        :class:`~keras_structured.engine.lp.LPSparseMAPConvergenceWarning` per batch.

    Raises:
        ValueError: at construction, for a graph that is not one or bad solver settings; at
            build time, for inputs of another shape; at call time inside
            ``tf.function(jit_compile=True)``.
        tf.errors.InvalidArgumentError: at run time, for NaN or infinite scores.

    Example: four labels, at most two on, labels 0 and 1 coupled:

        >>> from keras_structured.engine.lp import Budget, FactorGraph, Pair
        >>> graph = FactorGraph(4, [Budget([0, 1, 2, 3], 2), Pair(0, 1)])
        >>> layer = LPSparseMAP(graph, additional_initializer="ones")
        >>> layer(np.array([[0.8, 0.5, 0.6, -1.0]], "float32")).numpy().round(3)
        array([[0.85, 0.85, 0.3 , 0.  ]], dtype=float32)
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
        additional_initializer="zeros",
        return_info: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # On the instance: Layer.__init__ sets supports_jit = True there. Only XLA through
        # TensorFlow cannot compile the host call (see the module docstring).
        self.supports_jit = keras.backend.backend() != "tensorflow"
        self.graph = check_graph(graph, "LPSparseMAP")
        self.options = LPSparseMAPOptions(
            tol=tol,
            max_iter=max_iter,
            rho=rho,
            adapt_rho=adapt_rho,
            max_inner_iter=max_inner_iter,
            polish=polish,
        )
        self.additional_initializer = keras.initializers.get(additional_initializer)
        self.return_info = bool(return_info)
        self.additional_scores = None

    def build(self, input_shape):
        width = tuple(input_shape)[-1] if len(input_shape) == 2 else None
        n, v_size = self.graph.num_variables, self.graph.v_size
        if width not in (n, n + v_size):
            raise ValueError(
                f"LPSparseMAP expects variable scores (batch, {n}) or packed scores (batch, {n + v_size}) "
                f"(variables, then the {v_size} additional parts). Received: input_shape={tuple(input_shape)}"
            )
        if width == n and v_size:
            self.additional_scores = self.add_weight(
                name="additional_scores", shape=(v_size,), initializer=self.additional_initializer
            )
        self.built = True

    def call(self, inputs, mask=None):
        refuse_xla(type(self).__name__, LAYER_FIX)
        eta_u, eta_v = split_packed_scores(self.graph, inputs, name="inputs")
        if eta_v is None and self.additional_scores is not None:
            eta_v = broadcast_rows(eta_u, self.additional_scores)
        u, v, info = lp_sparsemap(
            self.graph, eta_u, eta_v, mask=mask, options=self.options, return_info=True
        )
        if not self.return_info:
            return u
        return {"u": u, "v": v, **info}

    def compute_mask(self, inputs, mask=None):
        return None  # the marginals of absent variables are zeros, not masked entries

    def compute_output_shape(self, input_shape):
        batch = tuple(input_shape)[0]
        u_shape = (batch, self.graph.num_variables)
        if not self.return_info:
            return u_shape
        return {"u": u_shape, "v": (batch, self.graph.v_size), **{key: (batch,) for key in INFO_KEYS}}

    def get_config(self):
        config = super().get_config()
        config.update(
            graph=self.graph.get_config(),
            **dataclasses.asdict(self.options),
            additional_initializer=keras.initializers.serialize(self.additional_initializer),
            return_info=self.return_info,
        )
        return config
