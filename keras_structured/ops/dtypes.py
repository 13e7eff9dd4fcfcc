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
