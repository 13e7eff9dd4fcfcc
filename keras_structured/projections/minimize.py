"""Constrained minimisation by gradient descent through the interpolation projection.

Problem: ``min_x f(x)`` subject to ``h(x) <= 0`` (``h`` convex), given a strictly
feasible anchor ``x0`` (``h(x0) < 0``). With the interpolation projection

    g(x) = x                    if h(x) <= 0
    g(x) = x0 + t (x - x0)      otherwise, t = h(x0) / (h(x0) - h(x)),

Algorithm 1 of "Convex Optimization with an Interpolation-based Projection and its
Application to Deep Learning" (Akrour et al.) runs plain gradient descent on the
*unconstrained* composition ``f o g`` and returns the average of the projected iterates
``g(x_k)``, which is always feasible (``C`` is convex). For a linear ``f`` and a convex,
Lipschitz ``h`` the paper proves an ``O(1/sqrt(K))`` rate on ``f(average) - f*``.

:func:`projected_interpolation_descent` is the naive baseline of the paper's Figure 1:
a gradient step on ``f`` followed by ``g`` (projected gradient descent with ``g`` in
place of the Euclidean projection), which stalls on the line along which it first
leaves ``C`` instead of reaching the optimum.

These solvers run on the TensorFlow backend only: they differentiate ``f o g`` with
``tf.GradientTape`` inside a ``tf.function`` loop. The projections they call run on every
backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import keras
import tensorflow as tf

from keras_structured.ops.dtypes import compute_dtype
from keras_structured.projections.constraints import LOGITS, Constraint, Intersection
from keras_structured.projections.interpolate import interpolation_coefficient, mix
from keras_structured.validation import check_integer

__all__ = ["default_step_size", "minimize", "projected_interpolation_descent"]


def _identity_prepare(constraint: Constraint) -> bool:
    """Whether ``prepare`` returns its inputs: the default one, on points or probabilities."""
    if isinstance(constraint, Intersection):
        return all(_identity_prepare(part) for part in constraint.constraints)
    return type(constraint).prepare is Constraint.prepare and constraint.input_space != LOGITS


def _setup(constraint: Constraint, x_init, anchor):
    """Batched iterate, anchor (prepared space), ``|h(x0)|`` and whether a batch axis was added."""
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise NotImplementedError(
            "minimize, projected_interpolation_descent and default_step_size run on the TensorFlow "
            "backend only (they differentiate with tf.GradientTape in a tf.function loop); the "
            f"projections themselves run on every backend. Received: backend={backend!r}"
        )
    if not isinstance(constraint, Constraint):
        raise ValueError(f"constraint must be a Constraint. Received: constraint={constraint!r}")
    if constraint.needs_reference:
        raise ValueError(f"Constraints that need a reference are not supported. Received: {constraint!r}")
    x = tf.convert_to_tensor(x_init)
    dtype = compute_dtype(x)
    x = tf.cast(x, dtype)
    unbatched = x.shape.rank == 1
    if unbatched:
        x = x[None]
    if x.shape.rank is None or x.shape.rank < 2:
        raise ValueError(f"x_init must have shape (d,) or (batch, ...). Received: shape={x.shape}")
    prepared, _ = constraint.prepare(x)
    if anchor is None:
        x0 = constraint.anchor(prepared)
    else:
        x0 = tf.broadcast_to(tf.cast(tf.convert_to_tensor(anchor), dtype), tf.shape(prepared))
    x0 = constraint.check_anchor(x0, strict=True)  # no round-off slack: |h(x0)| is the scale
    scale = -constraint.h(x0)  # (batch,), > 0: h / scale has h(x0) = -1
    return x, x0, scale, unbatched


def _project(constraint: Constraint, x, x0, scale):
    """``(g(x), normalised h(prepare(x)))`` with the paper's convexity coefficient."""
    p, _ = constraint.prepare(x)
    h_tilde = constraint.h(p) / scale
    coefficient = interpolation_coefficient(h_tilde, -tf.ones_like(h_tilde))
    return mix(p, x0, coefficient), h_tilde


def _values(objective: Callable, points) -> tf.Tensor:
    """Per-row objective values, shape ``(batch,)``."""
    values = tf.convert_to_tensor(objective(points))
    if values.shape.rank == 0:
        values = tf.reshape(values, [1])
    return values


def _per_row_norm(v: tf.Tensor) -> tf.Tensor:
    return tf.norm(tf.reshape(v, [tf.shape(v)[0], -1]), axis=-1)


def default_step_size(objective: Callable, constraint: Constraint, x_init, anchor=None, steps: int = 1000):
    """The default ``beta = R / (L (1 + R H) sqrt(K))`` of :func:`minimize`, per batch row.

    ``L = ||grad f(g(x_init))||`` (exact for a linear ``f``), ``R`` is the distance from
    ``g(x_init)`` to the boundary of ``C`` along ``-grad f`` (found by doubling a probe
    and applying ``g``) and ``H = ||grad h~||`` at that boundary point, with ``h~`` the
    renormalised constraint (``h~(x0) = -1``). These are estimates of the constants of
    assumptions A1, A2 and A4 of the paper, not bounds. Only for constraints whose
    ``prepare`` is the identity (pass ``step_size`` otherwise).

    Args:
        objective: ``f``, mapping ``(batch, ...)`` points to ``(batch,)`` values.
        constraint: a :class:`Constraint`.
        x_init: starting point(s), ``(d,)`` or ``(batch, ...)``.
        anchor: optional strictly feasible anchor (default: ``constraint.anchor``).
        steps: the number of iterations ``K``.

    Returns:
        ``beta`` with shape ``(batch,)``.

    Example:
        >>> from keras_structured.projections import L2Ball
        >>> beta = default_step_size(lambda x: tf.reduce_sum(x, -1), L2Ball(1.0), [0.0, 0.0], steps=100)
        >>> np.round(beta.numpy(), 4)  # R = 1, L = sqrt(2), H = 1
        array([0.0354], dtype=float32)
    """
    if not _identity_prepare(constraint):
        raise ValueError(
            f"default_step_size needs a constraint acting on its inputs directly; {constraint!r} maps "
            "them first (from_logits). Pass step_size explicitly."
        )
    x, x0, scale, _ = _setup(constraint, x_init, anchor)
    start, _ = _project(constraint, x, x0, scale)
    with tf.GradientTape() as tape:
        tape.watch(start)
        total = tf.reduce_sum(_values(objective, start))
    grad = tape.gradient(total, start)
    lipschitz_f = _per_row_norm(grad)
    shape = tf.concat([tf.shape(grad)[:1], tf.ones([grad.shape.rank - 1], tf.int32)], axis=0)
    direction = -grad / tf.reshape(tf.maximum(lipschitz_f, 1e-12), shape)
    length = tf.ones_like(lipschitz_f)
    for _ in range(60):  # double until the probe leaves C (or give up on unbounded sets)
        _, h_probe = _project(constraint, start + tf.reshape(length, shape) * direction, x0, scale)
        if bool(tf.reduce_all(h_probe > 0)):
            break
        length = tf.where(h_probe > 0, length, 2.0 * length)
    boundary, _ = _project(constraint, start + tf.reshape(length, shape) * direction, x0, scale)
    radius = _per_row_norm(boundary - start)
    with tf.GradientTape() as tape:
        tape.watch(boundary)
        h_boundary = tf.reduce_sum(constraint.h(boundary) / scale)
    lipschitz_h = _per_row_norm(tape.gradient(h_boundary, boundary))
    radius = tf.maximum(radius, 1e-6)
    return radius / (tf.maximum(lipschitz_f, 1e-12) * (1.0 + radius * lipschitz_h) * math.sqrt(steps))


def _beta(objective, constraint, x_init, anchor, steps, step_size, batch, dtype):
    if step_size is None:
        beta = default_step_size(objective, constraint, x_init, anchor, steps)
    else:
        beta = tf.convert_to_tensor(step_size, dtype)
        if not bool(tf.reduce_all(beta > 0)):
            raise ValueError(f"step_size must be > 0. Received: step_size={step_size!r}")
    return tf.broadcast_to(tf.cast(beta, dtype), [batch])


def minimize(
    objective: Callable,
    constraint: Constraint,
    x_init,
    anchor=None,
    steps: int = 1000,
    step_size=None,
    return_history: bool = False,
):
    """Algorithm 1: gradient descent on ``f o g`` returning the average of ``g(x_k)``.

    Solves ``min f(x) s.t. h(x) <= 0`` for each batch row. ``h`` is first renormalised
    to ``h~ = h / |h(x0)|`` so that ``h~(x0) = -1`` (this leaves ``g`` unchanged and
    fixes the scale of the step sizes); then, for ``k = 0 .. K-1``,

        x_{k+1} = x_k - alpha_k grad (f o g)(x_k),
        alpha_k = beta                        if h~(x_k) <= 0 (inside C),
        alpha_k = beta (1 + h~(x_k)) = beta / t_k     otherwise,

    and the output is ``(1/K) sum_k g(x_k)``. Outside ``C`` the gradient
    ``t_k (grad f(g_k) - (grad f(g_k) . (g_k - x0)) grad h~(x_k))`` shrinks with
    ``t_k``; dividing the step by ``t_k`` makes the step of the projected point
    independent of how far ``x_k`` has left ``C``. The spec text available here does not
    give the constants of Algorithm 1, so ``beta`` follows the standard ``O(1/sqrt(K))``
    sub-gradient schedule: ``beta = R / (L (1 + R H) sqrt(K))`` with ``L``, ``R`` and
    ``H`` (Lipschitz constant of ``f``, distance to the optimum, Lipschitz constant of
    ``h~``) estimated by :func:`default_step_size`, or ``beta = step_size`` if given.

    Args:
        objective: ``f``, a TF function of points ``(batch, ...)`` (in the constraint's
            prepared space, e.g. probabilities) returning ``(batch,)`` values.
        constraint: a :class:`Constraint`. With ``from_logits=True`` the iterates are
            logits and ``g(x) = interpolation of softmax(x)`` (pass ``step_size``).
        x_init: the starting iterate, shape ``(d,)`` or ``(batch, ...)``.
        anchor: strictly feasible ``x0`` broadcastable to the iterates (default:
            ``constraint.anchor``).
        steps: number of iterations ``K``.
        step_size: ``beta`` (scalar or ``(batch,)``); default from
            :func:`default_step_size`.
        return_history: also return ``f`` of the running average after each step.

    Returns:
        The averaged projected iterate, shaped like ``x_init`` (feasible), and with
        ``return_history`` a tensor ``(K, batch)`` (``(K,)`` for unbatched input) with
        ``f((1/k) sum_{j<k} g(x_j))`` for ``k = 1 .. K``.

    Example:
        >>> from keras_structured.projections import L2Ball
        >>> f = lambda x: tf.reduce_sum(x * [1.0, 1.0], axis=-1)
        >>> x = minimize(f, L2Ball(1.0), [0.0, 0.0], steps=2000)
        >>> bool(f(x) + np.sqrt(2.0) < 0.05)  # optimum: -sqrt(2) at -(1, 1) / sqrt(2)
        True
    """
    steps = check_integer("steps", steps, minimum=1)
    x, x0, scale, unbatched = _setup(constraint, x_init, anchor)
    beta = _beta(objective, constraint, x_init, anchor, steps, step_size, tf.shape(x)[0], x.dtype)
    step_shape = tf.concat([tf.shape(x)[:1], tf.ones([x.shape.rank - 1], tf.int32)], axis=0)

    @tf.function
    def run(x, x0, scale, beta):
        total = tf.zeros_like(x0)
        history = tf.TensorArray(x.dtype, size=steps)
        for k in tf.range(steps):
            with tf.GradientTape() as tape:
                tape.watch(x)
                projected, h_tilde = _project(constraint, x, x0, scale)
                value = tf.reduce_sum(_values(objective, projected))
            grad = tape.gradient(value, x)
            total += projected
            if return_history:
                history = history.write(k, _values(objective, total / tf.cast(k + 1, x.dtype)))
            alpha = tf.where(h_tilde > 0, beta * (1.0 + h_tilde), beta)
            x = x - tf.reshape(alpha, step_shape) * grad
        return total / tf.cast(steps, x.dtype), history.stack() if return_history else tf.zeros([0])

    average, history = run(x, x0, scale, beta)
    if unbatched:
        average = average[0]
        history = history[:, 0] if return_history else history
    return (average, history) if return_history else average


def projected_interpolation_descent(
    objective: Callable,
    constraint: Constraint,
    x_init,
    anchor=None,
    steps: int = 1000,
    step_size=None,
    return_history: bool = False,
):
    """Naive baseline (Figure 1): ``x_{k+1} = g(x_k - alpha grad f(x_k))``, constant ``alpha``.

    Projected gradient descent with the interpolation ``g`` in place of the Euclidean
    projection. It does not differentiate through ``g`` and, as the paper shows, stalls
    on the line along which it first leaves ``C`` (for a linear ``f`` started at the
    anchor, at the boundary point of the ray ``x0 - t grad f``), away from the optimum
    unless that ray happens to hit it. With ``from_logits`` constraints the iterate is
    kept as logits: ``z_{k+1} = log g(softmax(z_k - alpha grad_z f(softmax(z_k))))``.

    Args:
        objective: ``f`` on points ``(batch, ...)`` of the prepared space, ``(batch,)`` values.
        constraint: a :class:`Constraint`.
        x_init: starting point, ``(d,)`` or ``(batch, ...)``; projected first.
        anchor: strictly feasible ``x0`` (default: ``constraint.anchor``).
        steps: number of iterations.
        step_size: constant ``alpha`` (default: ``beta * sqrt(steps)`` of
            :func:`default_step_size`, i.e. ``R / (L (1 + R H))``).
        return_history: also return ``f(x_k)`` after each step.

    Returns:
        The last (feasible) iterate, in the prepared space, shaped like ``x_init``; with
        ``return_history`` also a ``(K, batch)`` (or ``(K,)``) tensor of ``f(x_k)``.

    Example:
        >>> from keras_structured.projections import Halfspace
        >>> f = lambda x: tf.reduce_sum(x**2, axis=-1)  # sphere, minimum outside C
        >>> C = Halfspace([1.0, 1.0], -1.0, interior_point=[-2.0, -0.5])
        >>> x = projected_interpolation_descent(f, C, [-2.0, -0.5], steps=200, step_size=0.1)
        >>> np.round(x.numpy(), 3)  # stalls on the segment to the origin, optimum is (-0.5, -0.5)
        array([-0.8, -0.2], dtype=float32)
    """
    steps = check_integer("steps", steps, minimum=1)
    x, x0, scale, unbatched = _setup(constraint, x_init, anchor)
    logits = not _identity_prepare(constraint)
    if step_size is None:
        step_size = default_step_size(objective, constraint, x_init, anchor, steps) * math.sqrt(steps)
    alpha = _beta(objective, constraint, x_init, anchor, steps, step_size, tf.shape(x)[0], x.dtype)
    step_shape = tf.concat([tf.shape(x)[:1], tf.ones([x.shape.rank - 1], tf.int32)], axis=0)
    start, _ = _project(constraint, x, x0, scale)
    if logits:
        start = tf.math.log(start)

    @tf.function
    def run(x, x0, scale, alpha):
        history = tf.TensorArray(x.dtype, size=steps)
        for k in tf.range(steps):
            with tf.GradientTape() as tape:
                tape.watch(x)
                point, _ = constraint.prepare(x)
                value = tf.reduce_sum(_values(objective, point))
            x, _ = _project(
                constraint, x - tf.reshape(alpha, step_shape) * tape.gradient(value, x), x0, scale
            )
            if logits:
                point, x = x, tf.math.log(x)
            else:
                point = x
            if return_history:
                history = history.write(k, _values(objective, point))
        return x, history.stack() if return_history else tf.zeros([0])

    last, history = run(start, x0, scale, alpha)
    if logits:
        last = tf.exp(last)
    if unbatched:
        last = last[0]
        history = history[:, 0] if return_history else history
    return (last, history) if return_history else last
