"""What the structured losses share: one loss value per example, read from whole structures."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_structured.ops.sparsemap_op import flatten_examples


def per_example_sum(x: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(flatten_examples(x), axis=1)


def inner(scores: tf.Tensor, indicators: tf.Tensor) -> tf.Tensor:
    """Per-example ``<scores, indicators>``; parts with a zero indicator add 0 even at ``-inf`` scores."""
    return per_example_sum(tf.math.multiply_no_nan(scores, indicators))


def lengths_from_codes(codes: tf.Tensor) -> tf.Tensor:
    """Per-example counts of the non-padding (``>= 0``) entries of ``(batch, n)`` codes."""
    return tf.reduce_sum(tf.cast(codes >= 0, tf.int32), axis=1)


def check_labels(y_true: tf.Tensor, size, y_pred: tf.Tensor) -> None:
    """Trace-time check that the labels are ``(batch, size)``: one code per position of ``y_pred``."""
    if y_true.shape.rank != 2 or (None not in (y_true.shape[1], size) and y_true.shape[1] != size):
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
        if getattr(y_pred, "_keras_mask", None) is not None:
            y_pred = tf.identity(y_pred)  # the same scores, without the mask
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)
