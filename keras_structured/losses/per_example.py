"""What the structured losses share: one loss value per example, read from whole structures.

Written with ``keras.ops``: the same on TensorFlow, JAX and PyTorch.
"""

from __future__ import annotations

import keras
from keras import ops
from keras.src.backend import get_keras_mask


def per_example_sum(x):
    """The sum of each example's entries: ``(batch, ...)`` to ``(batch,)`` (also for an empty batch)."""
    return ops.sum(x, axis=tuple(range(1, len(x.shape))))


def inner(scores, indicators):
    """Per-example ``<scores, indicators>``; parts with a zero indicator add 0 even at ``-inf`` scores."""
    product = scores * indicators
    return per_example_sum(ops.where(indicators == 0, ops.zeros_like(product), product))


def lengths_from_codes(codes):
    """Per-example counts of the non-padding (``>= 0``) entries of ``(batch, n)`` codes, int32."""
    return ops.sum(ops.cast(codes >= 0, "int32"), axis=1)


def _rank(x) -> int | None:
    try:
        return len(x.shape)
    except ValueError:  # a TensorFlow tensor of unknown rank
        return None


def check_labels(y_true, size, y_pred) -> None:
    """Trace-time check that the labels are ``(batch, size)``: one code per position of ``y_pred``."""
    if _rank(y_true) != 2 or (None not in (y_true.shape[1], size) and y_true.shape[1] != size):
        raise ValueError(
            f"The labels must have shape (batch, {size}) for scores of shape {y_pred.shape}. "
            f"Received: y_true.shape={y_true.shape}"
        )


class PerExampleLoss(keras.losses.Loss):
    """A loss of whole structures: one value per example, the padding read from the labels.

    Keras applies a mask attached to ``y_pred`` to the values that ``call`` returns,
    which would fail here: a ``(batch, n)`` mask of padded positions (``SequenceScores``
    passes one on) against ``(batch,)`` losses. The labels already mark the padding
    (``-1``), so the mask is left out.
    """

    def __call__(self, y_true, y_pred, sample_weight=None):
        if get_keras_mask(y_pred) is not None:
            y_pred = ops.copy(y_pred)  # the same scores, without the mask
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)
