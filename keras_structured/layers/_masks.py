"""Keras masks of right-padded sequences: a shape check worded as Keras's, and lengths."""

from __future__ import annotations

import tensorflow as tf


def check_position_mask(owner: str, mask, inputs) -> None:
    """Trace-time check that a Keras mask is ``(batch, n)``: the first two dimensions of ``inputs``.

    Worded like ``keras.layers.Softmax``'s mask errors; a dimension unknown at trace time
    matches anything.

    Raises:
        ValueError: for a mask of another rank or shape.
    """
    if mask is None or mask.shape.rank is None or inputs.shape.rank is None:
        return
    expected = inputs.shape[:2]
    if mask.shape.rank != 2 or not mask.shape.is_compatible_with(expected):
        raise ValueError(
            f"The mask of {owner} must have shape (batch, n), the first two dimensions of its "
            "inputs: one entry per position, True for the positions of right-padded "
            f"sequences that are not padding. Received: inputs.shape={inputs.shape}, "
            f"mask.shape={mask.shape}"
        )


def lengths_from_mask(mask, offset: int = 0):
    """Lengths of right-padded inputs from a ``(batch, n)`` Keras mask (None without one)."""
    if mask is None:
        return None
    return tf.reduce_sum(tf.cast(mask, tf.int32), axis=-1) - offset
