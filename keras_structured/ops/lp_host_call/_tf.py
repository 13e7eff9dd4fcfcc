"""The TensorFlow adapter: ``tf.numpy_function`` under ``tf.custom_gradient``.

The forward call returns ``(u, v)``, handles to the solutions kept on the host and the info;
the gradient is a second ``tf.numpy_function`` that passes the handles (and the scores, to
solve again should the store have dropped them) with the cotangents. XLA cannot compile
either (see :mod:`keras_structured.ops.xla`).
"""

from __future__ import annotations

import types

import numpy as np
import tensorflow as tf

from keras_structured.ops.lp_host_call._host import LPHost


def _numpy_function(function, inputs, specs, name: str) -> list[tf.Tensor]:
    """``tf.numpy_function`` whose results get the static parts of ``specs``' shapes."""
    outputs = tf.numpy_function(
        function, inputs, [tf.as_dtype(dtype) for _, dtype in specs], stateful=False, name=name
    )
    outputs = outputs if isinstance(outputs, list) else [outputs]  # eagerly, one result comes alone
    for output, (shape, _) in zip(outputs, specs, strict=True):
        output.set_shape(shape)
    return outputs


def _static(tensor: tf.Tensor) -> types.SimpleNamespace:
    """The static shape (None for unknown dimensions) and numpy dtype of ``tensor``, for the
    specs of :class:`LPHost`."""
    return types.SimpleNamespace(shape=tuple(tensor.shape), dtype=np.dtype(tensor.dtype.as_numpy_dtype))


def solve(host: LPHost, eta_u: tf.Tensor, eta_v: tf.Tensor, differentiable: bool) -> list[tf.Tensor]:
    """``[u, v, converged, iterations, map_calls]``; ``(u, v)`` differentiable when asked."""
    specs = host.result_specs(_static(eta_u), _static(eta_v))
    if not differentiable:
        return _numpy_function(host.values, [eta_u, eta_v], specs, "lp_sparsemap_values")
    handle = host.handle_spec(_static(eta_u))
    u, v, handles, *info = _numpy_function(
        host.forward, [eta_u, eta_v], [*specs[:2], handle, *specs[2:]], "lp_sparsemap_forward"
    )

    @tf.custom_gradient
    def attach_gradient(scores_u, scores_v):
        def gradient(g_u, g_v):
            g_u = tf.zeros_like(u) if g_u is None else g_u
            g_v = tf.zeros_like(v) if g_v is None else g_v
            return _numpy_function(
                host.backward, [handles, eta_u, eta_v, g_u, g_v], specs[:2], "lp_sparsemap_backward"
            )

        return (tf.identity(u), tf.identity(v)), gradient

    return [*attach_gradient(eta_u, eta_v), *info]


def gold(host: LPHost, gold_u: tf.Tensor) -> tf.Tensor:
    """The flat additional parts of the gold variables (no gradient)."""
    return _numpy_function(host.gold, [gold_u], [host.gold_spec(_static(gold_u))], "lp_sparsemap_gold")[0]
