"""Sparsemax: Euclidean projection of scores onto the probability simplex.

``sparsemax(z) = argmin_{p in simplex} ||p - z||^2`` (Martins & Astudillo, 2016),
computed exactly by sorting, with the closed-form Jacobian
``J = diag(s) - s s^T / |S|`` where ``s`` is the support indicator.
"""

from __future__ import annotations

import tensorflow as tf

from keras_structured.ops.dtypes import compute_dtype

# Masked scores are placed this far below the maximum: anything more than 1 below
# it is outside the support, so masked entries never enter it.
_MASKED_OFFSET = -2.0


def _normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis is out of range for a tensor of rank {rank}. Received: axis={axis}")
    return axis % rank


@tf.custom_gradient
def _sparsemax_last_axis(logits: tf.Tensor, mask: tf.Tensor):
    top = tf.reduce_max(tf.where(mask, logits, logits.dtype.min), axis=-1, keepdims=True)
    shifted = tf.where(mask, logits - top, tf.cast(_MASKED_OFFSET, logits.dtype))
    ordered = tf.sort(shifted, axis=-1, direction="DESCENDING")
    cumulative = tf.cumsum(ordered, axis=-1)
    ranks = tf.range(1, tf.shape(logits)[-1] + 1, dtype=logits.dtype)
    in_support = 1.0 + ranks * ordered > cumulative
    size = tf.reduce_sum(tf.cast(in_support, tf.int32), axis=-1, keepdims=True)
    tau = tf.gather(cumulative, size - 1, batch_dims=len(logits.shape) - 1) - 1.0
    tau = tau / tf.cast(size, logits.dtype)
    probs = tf.where(mask, tf.maximum(shifted - tau, 0.0), tf.zeros_like(logits))

    def grad(upstream):
        support = tf.cast(probs > 0, upstream.dtype)
        count = tf.maximum(tf.reduce_sum(support, axis=-1, keepdims=True), 1.0)
        mean = tf.reduce_sum(upstream * support, axis=-1, keepdims=True) / count
        return support * (upstream - mean), None

    return probs, grad


def sparsemax(logits, axis: int = -1, mask=None) -> tf.Tensor:
    """Sparsemax over ``axis``: ``argmin_{p in simplex} ||p - logits||^2``.

    Exact (sort-based), finite for any finite input (shift-invariant: the maximum
    is subtracted first), with a closed-form gradient.

    Args:
        logits: floating-point scores of any rank >= 1. float16/bfloat16 are
            computed in float32 and cast back.
        axis: the axis that is normalised.
        mask: optional boolean tensor broadcastable to ``logits``; masked (False)
            entries get exactly 0 probability and 0 gradient. A slice whose
            entries are all masked gives all zeros.

    Returns:
        Probabilities with the shape and dtype of ``logits``.

    Example:
        >>> sparsemax([[1.0, 0.5, -1.0]]).numpy()
        array([[0.75, 0.25, 0.  ]], dtype=float32)
    """
    logits = tf.convert_to_tensor(logits)
    dtype = compute_dtype(logits)
    rank = logits.shape.rank
    if rank is None or rank < 1:
        raise ValueError(f"sparsemax needs a tensor of rank >= 1. Received: logits.shape={logits.shape}")
    axis = _normalize_axis(axis, rank)
    z = tf.cast(logits, dtype)
    if mask is None:
        mask = tf.ones_like(z, dtype=tf.bool)
    else:
        mask = tf.broadcast_to(tf.cast(mask, tf.bool), tf.shape(z))
    if axis != rank - 1:
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        probs = tf.transpose(_sparsemax_last_axis(tf.transpose(z, perm), tf.transpose(mask, perm)), perm)
    else:
        probs = _sparsemax_last_axis(z, mask)
    probs = tf.cast(probs, logits.dtype)
    probs._keras_logits = logits
    return probs
