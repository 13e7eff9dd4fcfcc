"""Fenchel-Young losses (Blondel et al., 2018; Niculae et al., 2018, section 4).

For a regulariser ``Omega`` with prediction map ``p(z) = argmax_p <z, p> - Omega(p)``,

    L(z; y) = Omega*(z) + Omega(y) - <z, y>,   grad_z L = p(z) - y.

With ``Omega = ||p||^2 / 2`` on the simplex, ``p`` is sparsemax and ``L`` the
sparsemax loss.
"""

from __future__ import annotations

import keras
from keras import ops
from keras.src.backend import get_keras_mask, in_symbolic_scope, set_keras_mask

from keras_structured.ops.dtypes import compute_dtype
from keras_structured.ops.invalid_inputs import checked
from keras_structured.ops.sparsemax_op import attach_logits, attached_logits, class_axis, sparsemax

_LABELS_OUT_OF_RANGE = "y_true must hold class indices in [0, K), K the size of the class axis of y_pred."


@ops.custom_gradient
def _sparsemax_loss_last_axis(shifted, labels, probs):
    """The loss of scores whose maximum is 0, given their sparsemax ``probs``."""
    loss = ops.sum(shifted * (probs - labels), axis=-1)
    loss += 0.5 * (ops.sum(ops.square(labels), axis=-1) - ops.sum(ops.square(probs), axis=-1))
    loss = ops.relu(loss)  # not ops.maximum, which computes float64 in float32 on PyTorch

    def grad(*args, upstream=None):
        # TensorFlow and JAX call grad(upstream); PyTorch grad(*inputs, upstream=upstream).
        if upstream is None:
            (upstream,) = args
        upstream = upstream[..., None]
        return upstream * (probs - labels), upstream * (labels - shifted), None

    return loss, grad


def sparsemax_loss(labels, logits, axis: int = -1):
    """Sparsemax (Fenchel-Young) loss ``max_p [<z, p> - ||p||^2/2] + ||y||^2/2 - <z, y>``.

    Nonnegative, zero exactly when ``sparsemax(z) == y``, with gradient
    ``sparsemax(z) - y`` with respect to the logits. Runs on every Keras backend.

    Args:
        labels: distributions on the simplex, same shape as ``logits``.
        logits: scores.
        axis: the class axis.

    Returns:
        The loss, with ``axis`` reduced.

    Raises:
        ValueError: at trace time, for mismatched shapes or an empty class axis.
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for logits that
            :func:`keras_structured.sparsemax` rejects (NaN, ``+inf``, all ``-inf``);
            ``ValueError`` on JAX and PyTorch, NaN losses where no check can run.

    Example:
        >>> float(sparsemax_loss([[0.0, 1.0]], [[0.0, 5.0]])[0])
        0.0
    """
    logits = ops.convert_to_tensor(logits)
    dtype = compute_dtype(logits)
    logits = ops.cast(logits, dtype)
    labels = ops.cast(ops.convert_to_tensor(labels), dtype)
    shape, axis = class_axis(logits, axis)
    labels_shape = tuple(labels.shape)
    fits = len(labels_shape) == len(shape) and all(
        a is None or b is None or a == b for a, b in zip(labels_shape, shape, strict=True)
    )
    if not fits:
        raise ValueError(
            "labels and logits must have the same shape. "
            f"Received: labels.shape={labels_shape}, logits.shape={shape}"
        )
    if 0 in shape:  # an empty batch (and Keras refuses max over nothing)
        return ops.zeros(shape[:axis] + shape[axis + 1 :], dtype)
    logits, labels = ops.moveaxis(logits, axis, -1), ops.moveaxis(labels, axis, -1)
    # Shift-invariant: no gradient through the maximum, and sparsemax (which checks the
    # logits) outside the closed-form gradient.
    shifted = logits - ops.stop_gradient(ops.max(logits, axis=-1, keepdims=True))
    probs = sparsemax(ops.stop_gradient(shifted))
    return _sparsemax_loss_last_axis(shifted, labels, probs)


@keras.saving.register_keras_serializable(package="keras_structured")
class SparsemaxLoss(keras.losses.Loss):
    """Sparsemax loss for classification, usable in ``model.compile``.

    Args:
        from_logits: if True (default) ``y_pred`` are scores. If False, ``y_pred``
            must be the output of :func:`keras_structured.sparsemax` or the
            :class:`keras_structured.Sparsemax` layer, whose scores it recovers (the
            loss is defined on scores, which probabilities do not determine).
        sparse_labels: True for integer class labels, False for distributions,
            None to infer from the label rank (one less than ``y_pred``, or a
            trailing axis of size 1). Integer labels outside ``[0, K)`` raise at run
            time (see Raises).
        axis: the class axis.
        reduction, name, dtype: as for ``keras.losses.Loss``.

    Call arguments:
        y_true: class indices (``sparse_labels``) or distributions on the simplex.
        y_pred: scores, or with ``from_logits=False`` the output of ``Sparsemax``
            without a mask, as it is or cast to another float dtype (Keras casts it
            to float32 under ``mixed_float16``).

    Returns:
        The reduced loss (a scalar for the default reduction), in the loss dtype.

    Raises:
        ValueError: at trace time, for ``from_logits=False`` with a ``y_pred`` that is
            not a ``Sparsemax`` output, or for labels and scores of shapes that do
            not fit.
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for integer labels
            outside ``[0, K)`` or scores that :func:`keras_structured.sparsemax` rejects.
            On JAX and PyTorch the same inputs raise ``ValueError`` eagerly; where no
            check can run (under ``jax.jit``, as in ``model.fit`` on JAX) their losses
            are NaN.

    Example:
        >>> loss = SparsemaxLoss(sparse_labels=True)
        >>> float(loss([1], [[0.0, 5.0, 0.0]]))
        0.0
    """

    def __init__(
        self,
        from_logits: bool = True,
        sparse_labels: bool | None = None,
        axis: int = -1,
        reduction: str = "sum_over_batch_size",
        name: str = "sparsemax_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.from_logits = from_logits
        self.sparse_labels = sparse_labels
        self.axis = axis

    def __call__(self, y_true, y_pred, sample_weight=None):
        scores = attached_logits(y_pred)
        if not self.from_logits and scores is not None and self.dtype is not None:
            # Keras casts y_pred to the loss dtype (float32 under mixed_float16), and a
            # cast tensor no longer carries the scores that sparsemax attached: cast here
            # and attach them again, the Keras mask too.
            mask = get_keras_mask(y_pred)
            y_pred = ops.cast(y_pred, self.dtype)
            attach_logits(y_pred, scores)
            if mask is not None:
                set_keras_mask(y_pred, mask)
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        if self.from_logits:
            logits = ops.convert_to_tensor(y_pred)
        else:
            logits = attached_logits(y_pred)
            if logits is None and in_symbolic_scope():
                # Keras infers the loss's output from placeholders (on JAX and PyTorch before
                # the first step): a placeholder y_pred stands for the scores as well.
                logits = y_pred
            if logits is None:
                raise ValueError(
                    "SparsemaxLoss(from_logits=False) needs y_pred to be the output of "
                    "keras_structured.sparsemax or of a Sparsemax layer without a mask (cast "
                    "or not), because the loss is defined on scores and recovers them from "
                    "that output. Either make the Sparsemax output (unmasked, not processed "
                    "further) the model output, or output the scores (the input of Sparsemax) "
                    "and use SparsemaxLoss(from_logits=True). "
                    f"Received: y_pred={y_pred!r}"
                )
            logits = ops.convert_to_tensor(logits)
        y_true = ops.convert_to_tensor(y_true)
        if not self._labels_are_sparse(y_true, logits):
            return sparsemax_loss(y_true, logits, axis=self.axis)
        if len(y_true.shape) == len(logits.shape):
            y_true = ops.squeeze(y_true, axis=self.axis)
        labels, num_classes = ops.cast(y_true, "int32"), ops.shape(logits)[self.axis]
        in_range = ops.logical_and(labels >= 0, labels < num_classes)
        labels = checked(labels, ops.all(in_range), _LABELS_OUT_OF_RANGE)
        dtype = compute_dtype(logits)
        one_hot = ops.one_hot(labels, num_classes, axis=self.axis, dtype=dtype)
        loss = sparsemax_loss(one_hot, logits, axis=self.axis)
        # Where the check cannot raise (under jax.jit or XLA), a label out of range gives NaN.
        return ops.where(in_range, loss, float("nan"))

    def _labels_are_sparse(self, y_true, logits) -> bool:
        if self.sparse_labels is not None:
            return self.sparse_labels
        if len(y_true.shape) == len(logits.shape) - 1:
            return True
        same_rank = len(y_true.shape) == len(logits.shape)
        return same_rank and y_true.shape[self.axis] == 1 != logits.shape[self.axis]

    def get_config(self):
        config = super().get_config()
        config.update(from_logits=self.from_logits, sparse_labels=self.sparse_labels, axis=self.axis)
        return config
