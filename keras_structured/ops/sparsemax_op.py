"""Sparsemax: Euclidean projection of scores onto the probability simplex.

``sparsemax(z) = argmin_{p in simplex} ||p - z||^2`` (Martins & Astudillo, 2016),
computed exactly by sorting, with the closed-form Jacobian
``J = diag(s) - s s^T / |S|`` where ``s`` is the support indicator.

Written with ``keras.ops``: the same code runs on TensorFlow, JAX and PyTorch.
"""

from __future__ import annotations

import weakref

import keras
from keras import ops

from keras_structured.ops.dtypes import compute_dtype
from keras_structured.ops.invalid_inputs import checked

# Masked scores are placed this far below the maximum: anything more than 1 below
# it is outside the support, so masked entries never enter it.
_MASKED_OFFSET = -2.0

_INVALID_LOGITS = (
    "sparsemax logits must not be NaN or +inf, and every slice along the class axis needs "
    "an unmasked logit that is not -inf (or no unmasked logit at all). Received: logits "
    "with this many invalid slices:"
)
# Scores behind sparsemax outputs that take no attributes (JAX arrays), by id.
_ATTACHED_LOGITS: dict[int, object] = {}


def _normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis is out of range for a tensor of rank {rank}. Received: axis={axis}")
    return axis % rank


def _static_shape(x) -> tuple | None:
    """The static shape as a tuple (``None`` for unknown dimensions), ``None`` for an unknown rank."""
    try:
        return tuple(x.shape)
    except ValueError:  # a TensorFlow tensor of unknown rank
        return None


def _cumsum_last_axis(x):
    """``ops.cumsum`` along the last axis, in the dtype of ``x``.

    Keras' own computes float64 in float32 on PyTorch (3.15: its type promotion maps 64-bit
    types to 32-bit ones on every backend but TensorFlow, ``ops.maximum`` too, so this module
    uses ``ops.relu`` and ``ops.where`` instead).
    """
    if keras.backend.backend() == "torch":
        import torch

        return torch.cumsum(x, dim=-1)
    return ops.cumsum(x, axis=-1)


@ops.custom_gradient
def _sparsemax_last_axis(shifted, mask):
    """Sparsemax of scores whose unmasked maximum is 0 (masked ones at ``_MASKED_OFFSET``)."""
    ordered = -ops.sort(-shifted, axis=-1)
    cumulative = _cumsum_last_axis(ordered)
    ranks = ops.arange(1, ops.shape(shifted)[-1] + 1, dtype=shifted.dtype)
    in_support = 1.0 + ranks * ordered > cumulative
    # At least one: the maximum (0, or _MASKED_OFFSET for a fully masked slice) is in the
    # support. Only an invalid slice (NaN, +inf), which never gets here unchecked, has none.
    size = ops.maximum(ops.sum(ops.cast(in_support, "int32"), axis=-1, keepdims=True), 1)
    tau = ops.take_along_axis(cumulative, size - 1, axis=-1) - 1.0
    tau = tau / ops.cast(size, shifted.dtype)
    probs = ops.where(mask, ops.relu(shifted - tau), ops.zeros_like(shifted))

    def grad(*args, upstream=None):
        # TensorFlow and JAX call grad(upstream); PyTorch grad(*inputs, upstream=upstream).
        if upstream is None:
            (upstream,) = args
        support = ops.cast(probs > 0, upstream.dtype)
        count = ops.sum(support, axis=-1, keepdims=True)
        count = ops.where(count > 1.0, count, 1.0)
        mean = ops.sum(upstream * support, axis=-1, keepdims=True) / count
        return support * (upstream - mean), None

    return probs, grad


def _sparsemax_last_axis_checked(z, mask):
    # No gradient through the shift: sparsemax is shift-invariant (J 1 = 0), and the closed
    # form alone is exact where the chain through the maximum would add rounding noise.
    top = ops.stop_gradient(ops.max(ops.where(mask, z, -float("inf")), axis=-1, keepdims=True))
    finite_top = ops.isfinite(top)  # False for +inf, NaN, all -inf, and fully masked slices
    has_entries = ops.any(mask, axis=-1, keepdims=True)
    has_nan = ops.any(ops.logical_and(mask, ops.isnan(z)), axis=-1, keepdims=True)
    invalid = ops.logical_and(has_entries, ops.logical_or(ops.logical_not(finite_top), has_nan))
    ok = ops.logical_and(ops.logical_not(ops.any(invalid)), ops.shape(z)[-1] > 0)
    shifted = ops.where(mask, z - ops.where(finite_top, top, 0.0), _MASKED_OFFSET)
    shifted = checked(shifted, ok, _INVALID_LOGITS, ops.sum(ops.cast(invalid, "int32")))
    probs = _sparsemax_last_axis(shifted, mask)
    # Where the check cannot raise (under jax.jit or XLA), an invalid slice gives NaN.
    return ops.where(invalid, float("nan"), probs)


def _check_mask_shape(mask_shape: tuple | None, logits_shape: tuple | None) -> None:
    """Trace-time check that the mask broadcasts to the logits, worded as ``keras.layers.Softmax``'s."""
    if mask_shape is None or logits_shape is None:
        return
    fits = len(mask_shape) <= len(logits_shape) and all(
        m is None or i is None or m in (1, i)
        for m, i in zip(reversed(mask_shape), reversed(logits_shape), strict=False)
    )
    if not fits:
        raise ValueError(
            "The mask must be broadcastable to the logits: it must not have more dimensions, and "
            "each mask dimension must be 1 or match the corresponding logits dimension. "
            f"Received: logits.shape={logits_shape}, mask.shape={mask_shape}"
        )


def attach_logits(probs, logits) -> None:
    """Records on ``probs`` the scores it came from, for ``SparsemaxLoss(from_logits=False)``.

    As ``keras.activations.softmax`` does for crossentropy. Tensors that take no attributes
    (JAX arrays and tracers) keep them in a table keyed by identity, emptied when they die.
    """
    try:
        probs._keras_logits = logits
    except AttributeError:
        key = id(probs)
        _ATTACHED_LOGITS[key] = logits
        weakref.finalize(probs, _ATTACHED_LOGITS.pop, key, None)


def attached_logits(probs):
    """The scores recorded on ``probs`` by :func:`attach_logits`, or None."""
    logits = getattr(probs, "_keras_logits", None)
    return _ATTACHED_LOGITS.get(id(probs)) if logits is None else logits


def class_axis(logits, axis: int) -> tuple[tuple, int]:
    """The static shape of ``logits`` and ``axis`` made nonnegative, refused at trace time unless
    ``logits`` has a known rank >= 1 and ``axis`` a class in it."""
    shape = _static_shape(logits)
    if shape is None or len(shape) < 1:
        received = "<unknown rank>" if shape is None else shape
        raise ValueError(f"sparsemax needs a tensor of rank >= 1. Received: logits.shape={received}")
    axis = _normalize_axis(axis, len(shape))
    if shape[axis] == 0:
        raise ValueError(
            f"sparsemax needs at least one class along axis {axis}. Received: logits.shape={shape}"
        )
    return shape, axis


def sparsemax(logits, axis: int = -1, mask=None):
    """Sparsemax over ``axis``: ``argmin_{p in simplex} ||p - logits||^2``.

    Exact (sort-based), finite for any finite input (shift-invariant: the maximum
    is subtracted first), with a closed-form gradient. A ``-inf`` logit gets
    probability 0, like a masked one. Runs on every Keras backend, eagerly and
    compiled (``tf.function``, XLA, ``jax.jit``).

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
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for NaN or ``+inf``
            logits, or a slice whose unmasked logits are all ``-inf`` (as SparseMAP
            rejects scores that rule out every structure). On JAX and PyTorch the same
            inputs raise ``ValueError`` eagerly; where no check can run (under
            ``jax.jit``, or XLA on TensorFlow) the offending slices come out NaN.

    Example:
        >>> keras.ops.convert_to_numpy(sparsemax([[1.0, 0.5, -1.0]]))
        array([[0.75, 0.25, 0.  ]], dtype=float32)
    """
    logits = ops.convert_to_tensor(logits)
    dtype = compute_dtype(logits)
    shape, axis = class_axis(logits, axis)
    masked = mask is not None
    if masked:
        mask = ops.convert_to_tensor(mask)
        _check_mask_shape(_static_shape(mask), shape)
    if 0 in shape:  # an empty batch: nothing to project (and Keras refuses max over nothing)
        probs = ops.zeros_like(logits)
    else:
        z = ops.cast(logits, dtype)
        mask = ops.broadcast_to(ops.cast(mask, "bool"), ops.shape(z)) if masked else ops.ones_like(z, "bool")
        z, mask = ops.swapaxes(z, axis, -1), ops.swapaxes(mask, axis, -1)  # no-op for the last axis
        probs = ops.swapaxes(_sparsemax_last_axis_checked(z, mask), axis, -1)
        probs = ops.cast(probs, logits.dtype)
    if not masked:
        # For SparsemaxLoss(from_logits=False), which recovers the scores from its input
        # (as Keras' crossentropy does for softmax). Not under a mask: the loss would
        # then see scores that the mask had hidden.
        attach_logits(probs, logits)
    return probs
