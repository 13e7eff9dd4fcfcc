"""Fenchel-Young losses (Blondel et al., 2018; Niculae et al., 2018, section 4).

For a regulariser ``Omega`` with prediction map ``p(z) = argmax_p <z, p> - Omega(p)``,

    L(z; y) = Omega*(z) + Omega(y) - <z, y>,   grad_z L = p(z) - y.

With ``Omega = ||p||^2 / 2`` on the simplex, ``p`` is sparsemax and ``L`` the
sparsemax loss.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_structured.ops.sparsemax_op import sparsemax


@tf.custom_gradient
def _sparsemax_loss_last_axis(logits, labels):
    shifted = logits - tf.reduce_max(logits, axis=-1, keepdims=True)
    probs = sparsemax(shifted)
    loss = tf.reduce_sum(shifted * (probs - labels), axis=-1)
    loss += 0.5 * (tf.reduce_sum(tf.square(labels), axis=-1) - tf.reduce_sum(tf.square(probs), axis=-1))
    loss = tf.maximum(loss, 0.0)

    def grad(upstream):
        upstream = upstream[..., None]
        return upstream * (probs - labels), upstream * (labels - shifted)

    return loss, grad


def sparsemax_loss(labels, logits, axis: int = -1) -> tf.Tensor:
    """Sparsemax (Fenchel-Young) loss ``max_p [<z, p> - ||p||^2/2] + ||y||^2/2 - <z, y>``.

    Nonnegative, zero exactly when ``sparsemax(z) == y``, with gradient
    ``sparsemax(z) - y`` with respect to the logits.

    Args:
        labels: distributions on the simplex, same shape as ``logits``.
        logits: scores.
        axis: the class axis.

    Returns:
        The loss, with ``axis`` reduced.

    Raises:
        ValueError: at trace time, for mismatched shapes or an empty class axis.
        tf.errors.InvalidArgumentError: at run time, for logits that
            :func:`keras_structured.sparsemax` rejects (NaN, ``+inf``, all ``-inf``).

    Example:
        >>> float(sparsemax_loss([[0.0, 1.0]], [[0.0, 5.0]])[0])
        0.0
    """
    logits = tf.convert_to_tensor(logits)
    dtype = tf.float32 if logits.dtype in (tf.float16, tf.bfloat16) else logits.dtype
    logits = tf.cast(logits, dtype)
    labels = tf.cast(tf.convert_to_tensor(labels), dtype)
    if labels.shape.rank is not None and logits.shape.rank is not None:
        if not labels.shape.is_compatible_with(logits.shape):
            raise ValueError(
                "labels and logits must have the same shape. "
                f"Received: labels.shape={labels.shape}, logits.shape={logits.shape}"
            )
    rank = logits.shape.rank
    axis = axis % rank
    if axis != rank - 1:
        logits = tf.experimental.numpy.moveaxis(logits, axis, -1)
        labels = tf.experimental.numpy.moveaxis(labels, axis, -1)
    return _sparsemax_loss_last_axis(logits, labels)


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
            trailing axis of size 1). Integer labels outside ``[0, K)`` raise
            ``tf.errors.InvalidArgumentError`` at run time.
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
        tf.errors.InvalidArgumentError: at run time, for integer labels outside
            ``[0, K)`` or scores that :func:`keras_structured.sparsemax` rejects.

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
        scores = getattr(y_pred, "_keras_logits", None)
        if not self.from_logits and scores is not None and self.dtype is not None:
            # Keras casts y_pred to the loss dtype (float32 under mixed_float16), and a
            # cast tensor no longer carries the scores that sparsemax attached: cast here
            # and attach them again, the Keras mask too.
            mask = getattr(y_pred, "_keras_mask", None)
            y_pred = tf.cast(y_pred, self.dtype)
            y_pred._keras_logits = scores
            if mask is not None:
                y_pred._keras_mask = mask
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        if self.from_logits:
            logits = tf.convert_to_tensor(y_pred)
        else:
            logits = getattr(y_pred, "_keras_logits", None)
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
        y_true = tf.convert_to_tensor(y_true)
        if self._labels_are_sparse(y_true, logits):
            if y_true.shape.rank == logits.shape.rank:
                y_true = tf.squeeze(y_true, axis=self.axis)
            labels, num_classes = tf.cast(y_true, tf.int32), tf.shape(logits)[self.axis]
            message = "y_true must hold class indices in [0, K), K the size of the class axis of y_pred."
            checks = [
                tf.debugging.assert_non_negative(labels, message=message),
                tf.debugging.assert_less(labels, num_classes, message=message),
            ]
            with tf.control_dependencies(checks):
                y_true = tf.one_hot(labels, num_classes, axis=self.axis, dtype=logits.dtype)
        return sparsemax_loss(y_true, logits, axis=self.axis)

    def _labels_are_sparse(self, y_true, logits) -> bool:
        if self.sparse_labels is not None:
            return self.sparse_labels
        if y_true.shape.rank == logits.shape.rank - 1:
            return True
        same_rank = y_true.shape.rank == logits.shape.rank
        return same_rank and y_true.shape[self.axis] == 1 != logits.shape[self.axis]

    def get_config(self):
        config = super().get_config()
        config.update(from_logits=self.from_logits, sparse_labels=self.sparse_labels, axis=self.axis)
        return config
