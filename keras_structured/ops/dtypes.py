"""Dtype helpers shared by the ops."""

from __future__ import annotations

import tensorflow as tf


def compute_dtype(x: tf.Tensor) -> tf.DType:
    """float32 for half-precision inputs (solvers need the range), else x's dtype."""
    if x.dtype in (tf.float16, tf.bfloat16):
        return tf.float32
    if not x.dtype.is_floating:
        raise TypeError(f"Expected a floating-point tensor. Received: dtype={x.dtype.name}")
    return x.dtype


def integer_lengths(lengths, dtype: tf.DType = tf.int32) -> tf.Tensor:
    """``lengths`` as a ``dtype`` tensor, refused at trace time unless of an integer dtype.

    Casting fractional lengths would truncate them silently (``2.5`` positions becomes 2),
    so float (and bool) lengths are refused whatever their values, as Keras refuses a
    float index.

    Args:
        lengths: per-example numbers of positions: a tensor, array or nested list.
        dtype: the integer dtype returned.

    Returns:
        The lengths cast to ``dtype``.

    Raises:
        ValueError: for lengths whose dtype is not an integer dtype.

    Example:
        >>> integer_lengths([3, 2]).numpy()
        array([3, 2], dtype=int32)
    """
    lengths = tf.convert_to_tensor(lengths)
    if not lengths.dtype.is_integer:
        raise ValueError(
            "lengths must have an integer dtype: whole numbers of positions, not truncated. Cast them "
            "with tf.cast(lengths, 'int32') if their values are whole, or declare "
            f"keras.Input(shape=(), dtype='int32'). Received: lengths.dtype={lengths.dtype.name}"
        )
    return tf.cast(lengths, dtype)
