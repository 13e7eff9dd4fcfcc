"""Dtype helpers shared by the ops, in ``keras.ops``: the same on every backend."""

from __future__ import annotations

import keras
from keras import ops


def compute_dtype(x) -> str:
    """The dtype to compute in: float32 for half-precision inputs (solvers and projections need
    the range), else x's dtype.

    Args:
        x: a tensor (anything with a ``dtype``) of a floating-point dtype.

    Returns:
        The dtype's name, e.g. ``"float32"``.

    Raises:
        TypeError: for a dtype that is not floating-point.

    Example:
        >>> compute_dtype(keras.ops.ones((2,), "float16")), compute_dtype(np.zeros(2))
        ('float32', 'float64')
    """
    dtype = keras.backend.standardize_dtype(x.dtype)
    if dtype in ("float16", "bfloat16"):
        return "float32"
    if not keras.backend.is_float_dtype(dtype):
        raise TypeError(f"Expected a floating-point tensor. Received: dtype={dtype}")
    return dtype


def integer_lengths(lengths, dtype="int32"):
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
        >>> keras.ops.convert_to_numpy(integer_lengths([3, 2]))
        array([3, 2], dtype=int32)
    """
    lengths = ops.convert_to_tensor(lengths)
    received = keras.backend.standardize_dtype(lengths.dtype)
    if "int" not in received:
        raise ValueError(
            "lengths must have an integer dtype: whole numbers of positions, not truncated. Cast them "
            "with keras.ops.cast(lengths, 'int32') if their values are whole, or declare "
            f"keras.Input(shape=(), dtype='int32'). Received: lengths.dtype={received}"
        )
    return ops.cast(lengths, dtype)
