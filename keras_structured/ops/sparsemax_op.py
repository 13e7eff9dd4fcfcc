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
    top = tf.reduce_max(tf.where(mask, logits, -float("inf")), axis=-1, keepdims=True)
    finite_top = tf.math.is_finite(top)  # False for +inf, NaN, all -inf, and fully masked slices
    shifted = tf.where(mask, logits - tf.where(finite_top, top, 0.0), tf.cast(_MASKED_OFFSET, logits.dtype))
    ordered = tf.sort(shifted, axis=-1, direction="DESCENDING")
    cumulative = tf.cumsum(ordered, axis=-1)
    # With a finite maximum the shifted logits are <= 0 or -inf, so their sum is NaN
    # exactly when one of them is (a NaN logit that reduce_max skipped).
    has_entries = tf.reduce_any(mask, axis=-1, keepdims=True)
    invalid = (has_entries & ~finite_top) | tf.math.is_nan(cumulative[..., -1:])
    check = tf.debugging.Assert(
        ~tf.reduce_any(invalid) & (tf.shape(logits)[-1] > 0),
        [
            "sparsemax logits must not be NaN or +inf, and every slice along the class axis needs "
            "an unmasked logit that is not -inf (or no unmasked logit at all). Received: logits "
            "with this many invalid slices:",
            tf.reduce_sum(tf.cast(invalid, tf.int32)),
        ],
    )
    ranks = tf.range(1, tf.shape(logits)[-1] + 1, dtype=logits.dtype)
    in_support = 1.0 + ranks * ordered > cumulative
    with tf.control_dependencies([check]):  # an invalid slice has an empty support: no index to gather
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


def _check_mask_shape(mask: tf.Tensor, logits: tf.Tensor) -> None:
    """Trace-time check that ``mask`` broadcasts to ``logits``, worded as ``keras.layers.Softmax``'s."""
    if mask.shape.rank is None or logits.shape.rank is None:
        return
    fits = mask.shape.rank <= logits.shape.rank and all(
        m is None or i is None or m in (1, i)
        for m, i in zip(reversed(mask.shape.as_list()), reversed(logits.shape.as_list()), strict=False)
    )
    if not fits:
        raise ValueError(
            "The mask must be broadcastable to the logits: it must not have more dimensions, and "
            "each mask dimension must be 1 or match the corresponding logits dimension. "
            f"Received: logits.shape={logits.shape}, mask.shape={mask.shape}"
        )


def sparsemax(logits, axis: int = -1, mask=None) -> tf.Tensor:
    """Sparsemax over ``axis``: ``argmin_{p in simplex} ||p - logits||^2``.

    Exact (sort-based), finite for any finite input (shift-invariant: the maximum
    is subtracted first), with a closed-form gradient. A ``-inf`` logit gets
    probability 0, like a masked one.

    Args:
        logits: floating-point scores of any rank >= 1. float16/bfloat16 are
            computed in float32 and cast back.
        axis: the axis that is normalised.
        mask: optional boolean tensor broadcastable to ``logits``; masked (False)
            entries get exactly 0 probability and 0 gradient. A slice whose
            entries are all masked gives all zeros.

    Returns:
        Probabilities with the shape and dtype of ``logits``.

    Raises:
        ValueError: at trace time, for an empty class axis, a bad ``axis``, or a
            ``mask`` whose static shape does not broadcast to ``logits``.
        tf.errors.InvalidArgumentError: at run time, for NaN or ``+inf`` logits, or a
            slice whose unmasked logits are all ``-inf`` (as SparseMAP rejects scores
            that rule out every structure).

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
    if logits.shape[axis] == 0:
        raise ValueError(
            f"sparsemax needs at least one class along axis {axis}. Received: logits.shape={logits.shape}"
        )
    z = tf.cast(logits, dtype)
    masked = mask is not None
    if masked:
        mask = tf.convert_to_tensor(mask)
        _check_mask_shape(mask, logits)
        mask = tf.broadcast_to(tf.cast(mask, tf.bool), tf.shape(z))
    else:
        mask = tf.ones_like(z, dtype=tf.bool)
    if axis != rank - 1:
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        probs = tf.transpose(_sparsemax_last_axis(tf.transpose(z, perm), tf.transpose(mask, perm)), perm)
    else:
        probs = _sparsemax_last_axis(z, mask)
    probs = tf.cast(probs, logits.dtype)
    if not masked:
        # For SparsemaxLoss(from_logits=False), which recovers the scores from its input
        # (as Keras' crossentropy does for softmax). Not under a mask: the loss would
        # then see scores that the mask had hidden.
        probs._keras_logits = logits
    return probs
