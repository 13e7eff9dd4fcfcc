"""Polyhedral constraints ``max_i (A x - b)_i <= 0``: half-spaces, polytopes, monotone outputs.

``h`` is a maximum of affine rows ``r_i(x) = (A x - b)_i``, so the step along the segment
from the anchor has a closed form, the boundary crossing: ``t = min`` over the rows
that become violated of ``-(r_i(x0) + s + rho_i) / (r_i(x) - r_i(x0))``, with
``s = margin |h(x0)|``. Up to ``rho_i`` it is never smaller than the generic convexity
bound, so outputs touch the boundary.

``rho_i = roundoff(|r_i|(x) + |r_i|(x0))`` is a few ulps of the magnitudes
``|r_i|(x) = (|A| |x| + |b|)_i`` of the row's terms, which bound the round-off of the
output and of its rows. Without it, the exact crossing rounded to the dtype lands
outside the set about half of the time, by up to an ulp of the output (8e-5 at
``|x| ~ 1e3`` in float32); stopping ``rho_i`` short of it keeps the output feasible in
its own dtype, whether ``h`` is then evaluated in that dtype (as ``validate_args`` does)
or exactly.
"""

from __future__ import annotations

import abc
import warnings

import keras
import numpy as np
from keras import ops

from keras_structured.projections._tensors import broadcast_like, constant, mean, rows_shape
from keras_structured.projections.constraints import Constraint, check_array, roundoff
from keras_structured.validation import check_number


def affine_rows_interpolation_coefficient(rows_x, rows_x0, margin: float = 0.0, rho=0.0):
    """Largest ``t`` in ``[0, 1]`` with ``r_i(x0 + t (x - x0)) <= -s - rho_i`` for every row,
    ``s = margin |max_i r_i(x0)|``, or 1 where ``x`` itself meets ``max_i r_i(x) <= -s``.

    Rows already within ``rho_i`` of the target at the anchor stop the step at 0, so an
    anchor that round-off put on (or just past) the boundary is returned unchanged.

    Args:
        rows_x: affine row values at ``x``, shape ``(batch, m)``.
        rows_x0: row values at the anchor, negative (up to ``rho``).
        margin: in ``[0, 1)``.
        rho: a non-negative scalar or ``(batch, m)`` tensor: how far short of the
            boundary the blocking rows stop (the round-off of the rows, see the module
            docstring).

    Returns:
        ``t`` of shape ``(batch,)``, exactly 1 where no row is violated.

    Example:
        >>> ops.convert_to_numpy(affine_rows_interpolation_coefficient([[3.0, -1.0]], [[-1.0, -1.0]]))
        array([0.25], dtype=float32)
    """
    margin = check_number("margin", margin, minimum=0, maximum=1, open_maximum=True)
    rows_x = ops.convert_to_tensor(rows_x)
    rows_x0 = ops.cast(ops.convert_to_tensor(rows_x0), rows_x.dtype)
    rho = ops.cast(ops.convert_to_tensor(rho), rows_x.dtype)
    slack = margin * ops.abs(ops.max(rows_x0, axis=-1, keepdims=True))  # margin |h(x0)|
    violated = ops.any(rows_x + slack > 0, axis=-1)
    start = rows_x0 + slack + rho
    blocking = rows_x + slack + rho > 0
    crossing = ops.logical_and(blocking, start < 0)  # implies rows_x > rows_x0: a positive slope
    slope = ops.where(crossing, rows_x - rows_x0, ops.ones_like(rows_x))
    t = ops.where(
        crossing, ops.clip(-start / slope, 0.0, 1.0), ops.cast(ops.logical_not(blocking), rows_x.dtype)
    )
    return ops.where(violated, ops.min(t, axis=-1), ops.ones_like(violated, rows_x.dtype))


def affine_rows_eta(rows_x, rows_x0, margin: float = 0.0, rho=0.0):
    """Deprecated: :func:`affine_rows_interpolation_coefficient`."""
    warnings.warn(
        "affine_rows_eta is deprecated; use affine_rows_interpolation_coefficient.",
        DeprecationWarning,
        stacklevel=2,
    )
    return affine_rows_interpolation_coefficient(rows_x, rows_x0, margin, rho)


def _matvec(matrix, x):
    """``matrix x`` for each row of ``x`` (``(m, d)`` by ``(batch, d)``: ``(batch, m)``)."""
    return ops.squeeze(matrix @ ops.expand_dims(x, -1), -1)


def _number(value: float, dtype):
    """A Python float as a scalar tensor of ``dtype``, through float32 (as ``tf.cast`` rounds it)."""
    return ops.cast(np.float32(value), dtype)


class _AffineRows(Constraint):
    @abc.abstractmethod
    def rows(self, x):
        """Affine row values ``(A x - b)_i``, shape ``(batch, m)``; ``h = max`` of them."""

    @abc.abstractmethod
    def row_magnitudes(self, x):
        """The magnitudes ``(|A| |x| + |b|)_i`` of the terms of each row, shape ``(batch, m)``."""

    def h(self, x, reference=None):
        return ops.max(self.rows(ops.convert_to_tensor(x)), axis=-1)

    def magnitude(self, x, reference=None):
        return ops.max(self.row_magnitudes(ops.convert_to_tensor(x)), axis=-1)

    def interpolation_coefficient(self, x, x0, reference=None, margin=0.0):
        rho = roundoff(self.row_magnitudes(x) + self.row_magnitudes(x0))
        return affine_rows_interpolation_coefficient(self.rows(x), self.rows(x0), margin, rho)


@keras.saving.register_keras_serializable(package="keras_structured")
class Polytope(_AffineRows):
    """``A x <= b`` on rows ``x`` of shape ``(batch, d)``; anchor: ``interior_point``.

    Args:
        A: matrix of shape ``(m, d)``.
        b: vector of shape ``(m,)``.
        interior_point: a point with ``A x0 < b`` strictly (checked).

    Example:
        >>> box = Polytope([[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0], interior_point=[0.0, 0.0])
        >>> out = box.project(np.array([[4.0, 2.0]], "float32"))
        >>> np.round(ops.convert_to_numpy(out), 4)  # a few ulps inside
        array([[1. , 0.5]], dtype=float32)
    """

    def __init__(self, A, b, interior_point):
        self.A = check_array("A", A)
        self.b = check_array("b", b)
        if self.A.ndim != 2 or self.b.shape != (self.A.shape[0],):
            raise ValueError(
                "A must have shape (m, d) and b shape (m,). "
                f"Received: A.shape={self.A.shape}, b.shape={self.b.shape}"
            )
        self.interior_point = check_array("interior_point", interior_point)
        if self.interior_point.shape != (self.A.shape[1],):
            raise ValueError(
                f"interior_point must have shape ({self.A.shape[1]},). "
                f"Received: interior_point.shape={self.interior_point.shape}"
            )
        slack = self.A @ self.interior_point - self.b
        if not np.all(slack < 0):
            raise ValueError(
                f"interior_point must be strictly inside the polytope (A x0 < b). "
                f"Received: max(A x0 - b)={slack.max()!r}"
            )

    def rows(self, x):
        return _matvec(constant(self.A, x.dtype), x) - constant(self.b, x.dtype)

    def row_magnitudes(self, x):
        return _matvec(constant(np.abs(self.A), x.dtype), ops.abs(x)) + constant(np.abs(self.b), x.dtype)

    def anchor(self, x, reference=None):
        return broadcast_like(constant(self.interior_point, x.dtype), x)

    def get_config(self):
        return {"A": self.A.tolist(), "b": self.b.tolist(), "interior_point": self.interior_point.tolist()}


@keras.saving.register_keras_serializable(package="keras_structured")
class Halfspace(Polytope):
    """``a . x <= b`` on rows of shape ``(batch, d)``.

    Args:
        a: non-zero normal vector of shape ``(d,)``.
        b: offset.
        interior_point: optional strictly feasible point; defaults to
            ``a (b - ||a||) / ||a||^2`` (at distance 1 inside the boundary).

    Example:
        >>> halfspace = Halfspace([1.0, 1.0], 1.0, interior_point=[0.0, 0.0])
        >>> out = halfspace.project(np.array([[2.0, 2.0]], "float32"))
        >>> np.round(ops.convert_to_numpy(out), 4)  # a few ulps inside
        array([[0.5, 0.5]], dtype=float32)
    """

    def __init__(self, a, b: float, interior_point=None):
        a = check_array("a", a)
        b = check_number("b", b)
        norm = float(np.linalg.norm(a)) if a.ndim == 1 else 0.0
        if a.ndim != 1 or norm == 0:
            raise ValueError(f"a must be a non-zero vector. Received: a={a.tolist()!r}")
        if interior_point is None:
            interior_point = a * (b - norm) / norm**2
        super().__init__(a[None, :], [b], interior_point)

    def get_config(self):
        return {
            "a": self.A[0].tolist(),
            "b": float(self.b[0]),
            "interior_point": self.interior_point.tolist(),
        }


@keras.saving.register_keras_serializable(package="keras_structured")
class Monotone(_AffineRows):
    """Ordered last axis: ``x_i + spacing <= x_{i+1}``, i.e. ``h = max_i (x_i - x_{i+1} + spacing)``.

    The anchor is the row mean of ``x`` plus an evenly spaced, centred ramp with step
    ``spacing + anchor_gap`` (strictly feasible: ``h(x0) = -anchor_gap``). It depends
    on ``x``, and gradients flow through it too.

    Args:
        spacing: minimum gap between consecutive entries (may be negative).
        anchor_gap: positive extra step of the anchor ramp.

    Example:
        >>> np.round(ops.convert_to_numpy(Monotone().project(np.array([[1.0, 0.0, 2.0]], "float32"))), 4)
        array([[0.5, 0.5, 2. ]], dtype=float32)
    """

    def __init__(self, spacing: float = 0.0, anchor_gap: float = 1.0):
        self.spacing = check_number("spacing", spacing)
        self.anchor_gap = check_number("anchor_gap", anchor_gap, minimum=0.0, open_minimum=True)

    def _check_size(self, x):
        if x.shape[-1] is not None and x.shape[-1] < 2:
            raise ValueError(
                f"Monotone needs at least 2 entries on the last axis. Received: x.shape={x.shape}"
            )

    def rows(self, x):
        self._check_size(x)
        rows = x[..., :-1] - x[..., 1:] + _number(self.spacing, x.dtype)
        return ops.reshape(rows, rows_shape(x, -1))

    def row_magnitudes(self, x):
        self._check_size(x)
        magnitudes = ops.abs(x[..., :-1]) + ops.abs(x[..., 1:]) + _number(abs(self.spacing), x.dtype)
        return ops.reshape(magnitudes, rows_shape(x, -1))

    def anchor(self, x, reference=None):
        self._check_size(x)
        size = ops.shape(x)[-1]
        ramp = ops.arange(size, dtype=x.dtype) - ops.cast(size - 1, x.dtype) / 2.0
        step = _number(self.spacing + self.anchor_gap, x.dtype)
        return mean(x, axis=-1, keepdims=True) + step * ramp

    def get_config(self):
        return {"spacing": self.spacing, "anchor_gap": self.anchor_gap}
