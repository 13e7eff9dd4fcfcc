"""Keras masks of right-padded sequences: a shape check worded as Keras's, and lengths.

Written with ``keras.ops``, for every backend.
"""

from __future__ import annotations

from keras import ops


def _static_shape(x) -> tuple | None:
    """``x``'s shape as a tuple (None for unknown dimensions), or None when its rank is unknown."""
    if getattr(x.shape, "rank", 0) is None:  # a TensorFlow shape of unknown rank
        return None
    return tuple(x.shape)


def check_position_mask(owner: str, mask, inputs) -> None:
    """Trace-time check that a Keras mask is ``(batch, n)``: the first two dimensions of ``inputs``.

    Worded like ``keras.layers.Softmax``'s mask errors; a dimension unknown at trace time
    matches anything.

    Raises:
        ValueError: for a mask of another rank or shape.
    """
    if mask is None:
        return
    mask_shape, input_shape = _static_shape(mask), _static_shape(inputs)
    if mask_shape is None or input_shape is None:
        return
    expected = input_shape[:2]
    compatible = len(mask_shape) == len(expected) and all(
        a is None or b is None or a == b for a, b in zip(mask_shape, expected, strict=True)
    )
    if len(mask_shape) != 2 or not compatible:
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
    return ops.sum(ops.cast(mask, "int32"), axis=-1) - offset
