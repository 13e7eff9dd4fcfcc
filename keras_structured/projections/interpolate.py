"""Interpolation-based projection onto ``{x : h(x) <= 0}`` for convex ``h``.

Given a strictly feasible anchor ``x0`` (``h(x0) < 0``), the projection is

    g(x) = x                         if h(x) <= 0
    g(x) = x0 + t (x - x0)           otherwise, t = h(x0) / (h(x0) - h(x)),

and convexity of ``h`` gives ``h(g(x)) <= (1 - t) h(x0) + t h(x) = 0``. The interpolation
coefficient ``t`` is the paper's ``eta_x`` (``eta`` is kept for scores elsewhere in the
library). It is not the Euclidean projection, but it is cheap and differentiable almost
everywhere, and gradients of ``f(g(x))`` flow through ``t`` (they mix the gradients of
``f`` and of ``h``), which is what lets gradient descent on ``f o g`` reach constrained
optima.
"""

from __future__ import annotations

import warnings

from keras import ops

from keras_structured.projections._tensors import static_rank
from keras_structured.validation import check_number


def interpolation_coefficient(h_x, h_x0, margin: float = 0.0):
    """The interpolation coefficient ``t`` in ``[0, 1]`` (1 exactly where ``x`` is kept).

    With ``margin = m`` the constraint is tightened to ``h(x) <= -m |h(x0)|``, i.e.
    ``h'(x) = h(x) - m h(x0)``, so ``t = (1 - m) h(x0) / (h(x0) - h(x))`` where
    ``h'(x) > 0`` and 1 elsewhere. Several constraints (a trailing axis of size ``k``
    on ``h_x`` and ``h_x0``) give ``t = min_i t_i`` over the violated ones, which
    is feasible for all of them since the anchor is shared.

    The division only happens where ``h'(x) > 0``, so its denominator is below
    ``(1 - m) h(x0) < 0`` and the unused branch is fed a safe value (double
    ``where``): no infinities and no NaN gradients, even when ``h(x)`` is barely
    positive or infinite.

    Args:
        h_x: ``h(x)``, shape ``(batch,)`` or ``(batch, k)`` for ``k`` constraints.
        h_x0: ``h(x0)``, same shape, all entries strictly negative (not checked here).
        margin: ``m`` in ``[0, 1)``: the output is ``-m |h(x0)|``-feasible.

    Returns:
        ``t`` with shape ``(batch,)``.

    Example:
        >>> ops.convert_to_numpy(interpolation_coefficient([3.0, -0.5], [-1.0, -1.0]))
        array([0.25, 1.  ], dtype=float32)
    """
    margin = check_number("margin", margin, minimum=0, maximum=1, open_maximum=True)
    h_x = ops.convert_to_tensor(h_x)
    h_x0 = ops.cast(ops.convert_to_tensor(h_x0), h_x.dtype)
    shifted_x = h_x - margin * h_x0
    shifted_x0 = (1.0 - margin) * h_x0
    violated = shifted_x > 0
    denominator = ops.where(violated, shifted_x0 - shifted_x, -ops.ones_like(shifted_x))
    numerator = ops.where(violated, shifted_x0, -ops.ones_like(shifted_x))
    coefficient = ops.where(violated, ops.clip(numerator / denominator, 0.0, 1.0), ops.ones_like(h_x))
    if static_rank(coefficient) == 2:
        coefficient = ops.min(coefficient, axis=-1)
    return coefficient


def mix(x, x0, coefficient=None, *, eta=None):
    """``x0 + t (x - x0)`` per batch row, returning ``x`` itself (exactly) where ``t >= 1``.

    Args:
        x: inputs of shape ``(batch, ...)``.
        x0: anchors of the same shape.
        coefficient: the interpolation coefficients ``t``, shape ``(batch,)``.
        eta: deprecated name of ``coefficient``.

    Returns:
        A tensor shaped like ``x``.

    Raises:
        TypeError: if neither or both of ``coefficient`` and ``eta`` are given.

    Example:
        >>> ops.convert_to_numpy(mix([[2.0, 0.0], [0.5, 0.5]], [[0.0, 0.0], [0.0, 0.0]], [0.5, 1.0]))
        array([[1. , 0. ],
               [0.5, 0.5]], dtype=float32)
    """
    if eta is not None:
        if coefficient is not None:
            raise TypeError("mix got both coefficient and its deprecated name eta; pass coefficient only.")
        warnings.warn(
            "mix(..., eta=...) is deprecated; pass coefficient=... (the interpolation coefficient).",
            DeprecationWarning,
            stacklevel=2,
        )
        coefficient = eta
    if coefficient is None:
        raise TypeError("mix() missing the argument coefficient, the interpolation coefficients.")
    x = ops.convert_to_tensor(x)
    x0 = ops.cast(ops.convert_to_tensor(x0), x.dtype)
    t = ops.cast(ops.convert_to_tensor(coefficient), x.dtype)
    t = ops.reshape(t, (-1,) + (1,) * (static_rank(x) - 1))  # (batch, 1, ..., 1)
    return ops.where(t >= 1.0, x, x0 + t * (x - x0))


def interpolate(x, x0, h_x, h_x0, margin: float = 0.0):
    """Interpolation projection from precomputed constraint values.

    Returns ``x`` where ``h(x) <= -margin |h(x0)|`` (all constraints) and
    ``x0 + t (x - x0)`` otherwise, with ``t`` from :func:`interpolation_coefficient`.
    Pass ``h_x``/``h_x0`` computed by differentiable code (``keras.ops``) so gradients flow through
    ``t``. Use :meth:`Constraint.project` to also compute ``h``, the anchor and checks.

    Args:
        x: inputs of shape ``(batch, ...)``.
        x0: strictly feasible anchors, same shape as ``x``.
        h_x: ``h(x)`` with shape ``(batch,)`` or ``(batch, k)`` (``k`` constraints).
        h_x0: ``h(x0)``, same shape as ``h_x``, strictly negative.
        margin: in ``[0, 1)``; outputs satisfy ``h <= -margin |h(x0)|``.

    Returns:
        The projected tensor, shaped like ``x``.

    Example:
        >>> x = ops.array([[3.0, 4.0], [0.3, 0.4]])
        >>> h = lambda v: ops.norm(v, axis=-1) - 1.0  # unit disc
        >>> ops.convert_to_numpy(interpolate(x, ops.zeros_like(x), h(x), h(ops.zeros_like(x))))
        array([[0.6, 0.8],
               [0.3, 0.4]], dtype=float32)
    """
    return mix(x, x0, interpolation_coefficient(h_x, h_x0, margin))
