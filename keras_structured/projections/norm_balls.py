"""Norm balls ``||x - center||_p <= radius`` (p = 1, 2, inf) over each batch row.

The anchor is the center, where ``h = -radius``; since ``h`` is linear along rays from
the center, the interpolation lands exactly on the sphere (radial projection), or at
radius ``(1 - margin) radius`` with a margin. The radius may be a tensor: a scalar for the
batch, or one radius per batch row. Every ball checks its center (finite:
:func:`~keras_structured.projections.constraints.check_array`) and its radius (finite and
``> 0``: :func:`~keras_structured.projections.constraints.check_bound`) the same way.
"""

from __future__ import annotations

import abc

import keras
from keras import ops

from keras_structured.projections._tensors import broadcast_like, constant, rows_shape
from keras_structured.projections.constraints import (
    Bound,
    Constraint,
    _as_config_array,
    bound_config,
    bound_tensor,
    check_array,
    check_bound,
)


class _NormBall(Constraint):
    ord = None

    def __init__(self, radius: Bound, center=None):
        self.radius = check_bound("radius", radius, positive=True)
        self.center = None if center is None else check_array("center", center)

    def _offset(self, x):
        if self.center is None:
            return x
        return x - constant(self.center, x.dtype)

    @abc.abstractmethod
    def _norm(self, d):
        """The norm of every row of ``d`` ``(batch, size)``."""

    def h(self, x, reference=None):
        x = ops.convert_to_tensor(x)
        norms = self._norm(ops.reshape(self._offset(x), rows_shape(x, -1)))
        return norms - bound_tensor(self.radius, norms)

    def anchor(self, x, reference=None):
        if self.center is None:
            return ops.zeros_like(x)
        return broadcast_like(constant(self.center, x.dtype), x)

    def get_config(self):
        return {"radius": bound_config("radius", self.radius), "center": _as_config_array(self.center)}


@keras.saving.register_keras_serializable(package="keras_structured")
class L1Ball(_NormBall):
    """``||x - center||_1 <= radius`` (all non-batch axes); anchor: the center.

    Args:
        radius: positive radius: a number, or a scalar or ``(batch,)`` array or tensor.
        center: optional array broadcastable to one row (default: origin).

    Example:
        >>> ops.convert_to_numpy(L1Ball(1.0).project(np.array([[3.0, -1.0]], "float32")))
        array([[ 0.75, -0.25]], dtype=float32)
    """

    def _norm(self, d):
        return ops.sum(ops.abs(d), axis=-1)


@keras.saving.register_keras_serializable(package="keras_structured")
class L2Ball(_NormBall):
    """``||x - center||_2 <= radius`` (all non-batch axes); anchor: the center.

    The norm has a NaN-free gradient at the center.

    Args:
        radius: positive radius: a number, or a scalar or ``(batch,)`` array or tensor.
        center: optional array broadcastable to one row (default: origin).

    Example:
        >>> ops.convert_to_numpy(L2Ball(1.0, center=[1.0, 0.0]).project(np.array([[4.0, 4.0]], "float32")))
        array([[1.6, 0.8]], dtype=float32)
    """

    def _norm(self, d):
        squared = ops.sum(ops.square(d), axis=-1)
        positive = squared > 0
        return ops.where(positive, ops.sqrt(ops.where(positive, squared, ops.ones_like(squared))), 0.0)


@keras.saving.register_keras_serializable(package="keras_structured")
class LinfBall(_NormBall):
    """``max |x - center| <= radius`` (all non-batch axes); anchor: the center.

    Args:
        radius: positive radius: a number, or a scalar or ``(batch,)`` array or tensor.
        center: optional array broadcastable to one row (default: origin).

    Example:
        >>> ops.convert_to_numpy(LinfBall(1.0).project(np.array([[4.0, -2.0]], "float32")))
        array([[ 1. , -0.5]], dtype=float32)
    """

    def _norm(self, d):
        return ops.max(ops.abs(d), axis=-1)
