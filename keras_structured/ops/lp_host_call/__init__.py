"""LP-SparseMAP's host call: the numpy core run from a model, on every Keras backend.

The core (:mod:`keras_structured.engine.lp`) runs on the host, in numpy and scipy. A model
reaches it by one host call per batch for the solution and one for the backward pass, which
applies the core's exact vector-Jacobian product (:meth:`LPSparseMAPSolution.vjp
<keras_structured.engine.lp.LPSparseMAPSolution.vjp>`) in float64. The solutions stay on the
host between the two calls (:data:`._host.SOLUTIONS`; the forward call returns handles to
them), since their factorised KKT systems are no tensors. One small adapter per backend makes
the calls, as SparseMAP's (:mod:`keras_structured.ops.host_call`), whose engine-specific
functions these mirror:

* TensorFlow (:mod:`._tf`): ``tf.numpy_function`` under ``tf.custom_gradient``; XLA cannot
  compile it.
* JAX (:mod:`._jax`): ``jax.pure_callback`` inside ``jax.custom_vjp``: runs under ``jax.jit``
  and ``jax.vmap``.
* PyTorch (:mod:`._torch`): ``torch.library.custom_op`` with ``register_autograd`` and
  ``register_fake``.

Importing this package imports the adapter of the backend Keras runs on, and no other.
"""

from __future__ import annotations

import importlib

import keras

from keras_structured.engine.lp import FactorGraph, LPSparseMAPOptions
from keras_structured.ops.lp_host_call._host import INFO, SOLUTIONS, LPHost, SolutionStore, lp_host

__all__ = ["INFO", "SOLUTIONS", "LPHost", "SolutionStore", "gold", "lp_host", "solve"]

_ADAPTERS = {"tensorflow": "_tf", "jax": "_jax", "torch": "_torch"}


def _adapter():
    """The adapter module of the backend Keras runs on."""
    backend = keras.backend.backend()
    if backend not in _ADAPTERS:
        raise ValueError(
            "LP-SparseMAP runs on the TensorFlow, JAX and PyTorch backends of Keras. "
            f"Received: backend={backend!r}"
        )
    return importlib.import_module(f"keras_structured.ops.lp_host_call.{_ADAPTERS[backend]}")


if keras.backend.backend() in _ADAPTERS:  # imported now rather than inside a traced call
    _adapter()


def solve(
    graph: FactorGraph, options: LPSparseMAPOptions, eta_u, eta_v, *, differentiable: bool = True
) -> list:
    """LP-SparseMAP of a batch of scores by one host call, on the backend of Keras.

    Args:
        graph: the :class:`~keras_structured.engine.lp.FactorGraph`.
        options: the :class:`~keras_structured.engine.lp.LPSparseMAPOptions`.
        eta_u: ``(batch, num_variables)`` float scores, tensors of the backend (float64, or
            float32 on JAX without x64: the host solves in float64 whatever it receives).
        eta_v: ``(batch, graph.v_size)`` flat additional scores, of the same dtype.
        differentiable: make ``(u, v)`` differentiable (else the scores get no gradient and
            the host keeps nothing).

    Returns:
        ``[u, v, converged, iterations, map_calls]``: ``u`` and ``v`` shaped and typed like
        the scores, then per example a bool and two int32 (no gradient).

    Raises:
        ValueError: on a backend without an adapter.

    Example:
        >>> from keras_structured.engine.lp import Xor
        >>> graph = FactorGraph(3, [Xor([0, 1, 2])])
        >>> scores = keras.ops.convert_to_tensor([[1.0, 0.5, -1.0]], "float64")
        >>> no_parts = keras.ops.zeros((1, 0), "float64")
        >>> u, v, converged, *_ = solve(graph, LPSparseMAPOptions(), scores, no_parts)
        >>> keras.ops.convert_to_numpy(u), keras.ops.convert_to_numpy(converged)
        (array([[0.75, 0.25, 0.  ]]), array([ True]))
    """
    return _adapter().solve(lp_host(graph, options), eta_u, eta_v, differentiable)


def gold(graph: FactorGraph, gold_u):
    """The flat additional parts ``(batch, graph.v_size)`` of gold variables ``(batch,
    num_variables)`` (zeros and ones), by one host call; no gradient.

    Raises:
        ValueError: on a backend without an adapter. At run time (an
            :class:`~keras_structured.ops.invalid_inputs.InvalidScoresError`): for gold
            variables that are not binary or that a factor does not allow.

    Example:
        >>> from keras_structured.engine.lp import Pair
        >>> graph = FactorGraph(2, [Pair(0, 1)])
        >>> keras.ops.convert_to_numpy(gold(graph, keras.ops.convert_to_tensor([[1.0, 1.0], [1.0, 0.0]])))
        array([[1.],
               [0.]], dtype=float32)
    """
    return _adapter().gold(lp_host(graph, LPSparseMAPOptions()), gold_u)
