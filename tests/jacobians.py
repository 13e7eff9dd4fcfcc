"""Jacobians of functions that treat the rows of their batch independently, for
finite-difference checks that take one batched call instead of one call per coordinate."""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf


def row_jacobians(fn, x, *row_args, delta: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """The ``(batch * d, batch * d)`` Jacobian of ``fn(x, *row_args)`` at ``x`` (float64,
    ``d`` the size of a row): from the tape, and by central differences.

    The differences come from one call of ``fn`` on every row of ``x`` moved by
    ``+-delta`` along each of its coordinates, the ``row_args`` (per-row arrays, or None)
    repeated to match; they hold no cross-row terms, so the tape's Jacobian (one traced
    ``tf.function``, across rows included) is checked to have none either.

    Args:
        fn: ``(x, *row_args) -> (batch, ...)`` with output rows of ``x``'s row size.
        x: ``(batch, ...)`` float64 inputs.
        row_args: per-row arguments (leading dimension ``batch``), or None.
        delta: the step.
    """
    x = tf.convert_to_tensor(x)
    batch, d = x.shape[0], int(np.prod(x.shape[1:]))
    theoretical = _tape_jacobian(fn)(x, *row_args).numpy().reshape(batch * d, batch * d)
    steps = np.concatenate([np.eye(d), -np.eye(d)]) * delta  # (2d, d)
    moved = (x.numpy().reshape(batch, 1, d) + steps).reshape((batch * 2 * d,) + tuple(x.shape[1:]))
    tiled = [None if arg is None else np.repeat(np.asarray(arg), 2 * d, axis=0) for arg in row_args]
    values = np.asarray(fn(tf.constant(moved), *tiled)).reshape(batch, 2, d, d)
    numerical = np.zeros((batch * d, batch * d))
    for b in range(batch):
        # numerical[(b, i), (b, j)] = (out_i(x + delta e_j) - out_i(x - delta e_j)) / (2 delta)
        numerical[b * d : (b + 1) * d, b * d : (b + 1) * d] = (values[b, 0] - values[b, 1]).T / (2 * delta)
    return theoretical, numerical


@functools.cache
def _tape_jacobian(fn):
    """``(x, *row_args) -> d fn(x, *row_args) / dx``, one ``tf.function`` per ``fn``: traced once
    for all the calls of a test with the same shapes (a loop over the outputs, which traces
    faster than ``pfor`` where ``fn`` is itself a gradient)."""

    @tf.function(reduce_retracing=True)
    def jacobian(x, *row_args):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = fn(x, *row_args)
        return tape.jacobian(out, x, experimental_use_pfor=False)

    return jacobian
