"""The CRF losses for ``model.compile``: linear chains and dependency trees.

Structured Fenchel-Young losses with the entropy regulariser (see
:mod:`keras_structured.losses.structured` for the family): ``log Z(eta) - <eta, a>`` for the
gold structure's indicator vectors ``a``, with gradient ``marginals - a``. The linear chain
is pure TensorFlow and the tree CRF runs a compiled kernel, or its pure TensorFlow
elimination inside XLA: both compile with XLA. Labels are tag sequences ``(batch, n)`` and
head vectors ``(batch, n + 1)``, ``-1`` marking the root and the padding at the end;
invalid labels raise ``tf.errors.InvalidArgumentError`` from assertions, naming the first
invalid example.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_structured.losses.per_example import PerExampleLoss, check_labels, inner, lengths_from_codes
from keras_structured.ops.crf import linear_chain_crf_log_partition, tree_crf_log_partition
from keras_structured.ops.dtypes import compute_dtype
from keras_structured.ops.sequence_scores import unpack_sequence_scores


def _labels(y_true) -> tf.Tensor:
    """Integer codes from labels that Keras cast to float."""
    return tf.cast(tf.round(tf.convert_to_tensor(y_true)), tf.int32)


def _checked_labels(labels: tf.Tensor, valid: tf.Tensor, expected: str) -> tf.Tensor:
    """``labels`` once ``valid`` (a boolean per example) holds, else ``InvalidArgumentError``.

    An assertion, so that the CRF losses stay pure TensorFlow: it runs in graph mode
    too, and XLA drops it. The message names the first invalid example.
    """
    invalid = ~valid
    check = tf.debugging.Assert(
        tf.reduce_all(valid),
        [
            f"y_true must hold {expected}. Received: y_true[i] for the first invalid example i =",
            tf.where(invalid)[:1, 0],
            ":",
            tf.boolean_mask(labels, invalid)[:1],
        ],
        summarize=1000,
    )
    with tf.control_dependencies([check]):
        return tf.identity(labels)


def _checked_tags(tags: tf.Tensor, num_labels) -> tf.Tensor:
    """``(batch, n)`` tags checked to be in ``[0, num_labels)``, with ``-1`` padding only at the end."""
    in_length = tf.range(tf.shape(tags)[1])[None, :] < lengths_from_codes(tags)[:, None]
    valid = (in_length == (tags >= 0)) & (tags >= -1) & (tags < num_labels)
    return _checked_labels(
        tags,
        tf.reduce_all(valid, axis=1),
        "labels in [0, K) per example, with -1 only as padding at the end",
    )


def _checked_heads(heads: tf.Tensor, single_root: bool) -> tf.Tensor:
    """``(batch, n + 1)`` head vectors checked to be trees (as ``DependencyTreeStructure.validate_codes``)."""
    size = tf.shape(heads)[1]
    words = tf.minimum(lengths_from_codes(heads), size - 1)[:, None]
    position = tf.range(size)[None, :]
    is_word = (position >= 1) & (position <= words)
    valid = tf.where(is_word, (heads >= 0) & (heads <= words) & (heads != position), heads == -1)
    # Pointer doubling: after k steps every position points at its 2^k-th ancestor
    # (the root and padding point at 0), so words off a cycle end at the root.
    ancestors = tf.where(valid, tf.maximum(heads, 0), 0)
    _, ancestors = tf.while_loop(
        lambda reach, _: reach < size,
        lambda reach, ancestors: (2 * reach, tf.gather(ancestors, ancestors, batch_dims=1)),
        (1, ancestors),
    )
    trees = tf.reduce_all(valid & (ancestors == 0), axis=1)
    expected = (
        "head vectors: -1 at the root (position 0) and past the last word, and for every "
        "word the root (0) or another word, with no cycle"
    )
    if single_root:
        trees &= tf.reduce_sum(tf.cast(heads == 0, tf.int32), axis=1) == tf.minimum(words[:, 0], 1)
        expected += " and exactly one word attached to the root"
    return _checked_labels(heads, trees, expected)


def linear_chain_crf_loss(y_true, y_pred) -> tf.Tensor:
    """Linear-chain CRF loss per example: the negative log-likelihood ``log Z(eta) - <eta, a>``.

    ``log Z`` is computed by the forward algorithm
    (:func:`keras_structured.ops.crf.linear_chain_crf_log_partition`); the gradient
    is the CRF marginals minus the gold indicators. Pure TensorFlow.

    Args:
        y_true: ``(batch, n)`` gold labels, ``-1`` past each sequence's length.
        y_pred: packed ``(batch, n, K, K + 1)`` scores
            (:func:`keras_structured.ops.pack_sequence_scores`).

    Returns:
        The loss of every example, shape ``(batch,)``.

    Raises:
        ValueError: at trace time, for labels or scores of the wrong shape.
        tf.errors.InvalidArgumentError: at run time, for labels out of range or
            ``-1`` inside a sequence.

    Example:
        >>> from keras_structured.ops import pack_sequence_scores
        >>> scores = pack_sequence_scores(tf.zeros([1, 3, 2]), tf.zeros([2, 2]))
        >>> round(float(linear_chain_crf_loss([[0, 1, -1]], scores)[0]), 4)  # log(2 ** 2)
        1.3863
    """
    scores = tf.convert_to_tensor(y_pred)
    unary, pairwise = unpack_sequence_scores(tf.cast(scores, compute_dtype(scores)))
    tags = _labels(y_true)
    check_labels(tags, unary.shape[1], scores)
    tags = _checked_tags(tags, tf.shape(unary)[-1])
    lengths = lengths_from_codes(tags)
    gold_m = tf.one_hot(tags, tf.shape(unary)[-1], dtype=unary.dtype)
    gold_n = gold_m[:, :-1, :, None] * gold_m[:, 1:, None, :]
    log_z = linear_chain_crf_log_partition(unary, pairwise, lengths=lengths)
    return tf.maximum(log_z - inner(unary, gold_m) - inner(pairwise, gold_n), 0.0)


def tree_crf_loss(y_true, y_pred, single_root: bool = False) -> tf.Tensor:
    """Dependency-tree CRF loss per example: ``log Z(eta) - sum_{(h, m) in gold} eta[h, m]``.

    ``log Z`` sums over all non-projective trees by the matrix-tree theorem
    (:func:`keras_structured.ops.crf.tree_crf_log_partition`); the gradient is the
    arc marginals minus the gold arcs. XLA compiles it (see that function).

    Args:
        y_true: ``(batch, n + 1)`` gold heads, ``-1`` at the root and past each
            sentence's length.
        y_pred: ``(batch, n + 1, n + 1)`` arc scores ``[head, modifier]``.
        single_root: normalise over trees with exactly one word attached to the root.

    Returns:
        The loss of every example, shape ``(batch,)``.

    Raises:
        ValueError: at trace time, for labels or scores of the wrong shape.
        tf.errors.InvalidArgumentError: at run time, for heads that are not trees.

    Example:
        >>> round(float(tree_crf_loss([[-1, 0, 1]], tf.zeros([1, 3, 3]))[0]), 4)  # log(3)
        1.0986
    """
    single_root = bool(single_root)
    scores = tf.convert_to_tensor(y_pred)
    scores = tf.cast(scores, compute_dtype(scores))
    heads = _labels(y_true)
    check_labels(heads, scores.shape[-1], scores)
    heads = _checked_heads(heads, single_root)
    gold = tf.linalg.matrix_transpose(tf.one_hot(heads, tf.shape(scores)[-1], dtype=scores.dtype))
    log_z = tree_crf_log_partition(scores, lengths_from_codes(heads), single_root=single_root)
    return tf.maximum(log_z - inner(scores, gold), 0.0)


@keras.saving.register_keras_serializable(package="keras_structured")
class LinearChainCRFLoss(PerExampleLoss):
    """Linear-chain CRF loss: the negative log-likelihood ``log Z(eta) - <eta, a>``.

    ``log Z`` is computed by the forward algorithm
    (:func:`keras_structured.ops.crf.linear_chain_crf_log_partition`); the
    gradient is the CRF marginals minus the gold indicators. ``L > 0``, and it
    tends to zero as the gold sequence's score margin grows. Pure TensorFlow. The
    loss of each example is :func:`linear_chain_crf_loss`.

    Args:
        reduction, name, dtype: as for ``keras.losses.Loss``.

    Call arguments:
        y_true: ``(batch, n)`` gold labels, ``-1`` past each sequence's length.
        y_pred: packed ``(batch, n, K, K + 1)`` scores (start and end scores, if
            any, added to the first and last unary scores), e.g. the output of
            :class:`keras_structured.SequenceScores`; a Keras mask on it is not applied
            (the labels mark the padding).

    Returns:
        The reduced loss (a scalar for the default reduction), float32 for
        half-precision scores.

    Raises:
        ValueError: at trace time, for labels or scores of the wrong shape.
        tf.errors.InvalidArgumentError: at run time, for labels out of range or ``-1``
            inside a sequence.

    Example:
        >>> from keras_structured.ops import pack_sequence_scores
        >>> scores = pack_sequence_scores(tf.zeros([1, 3, 2]), tf.zeros([2, 2]))
        >>> round(float(LinearChainCRFLoss()([[0, 1, -1]], scores)), 4)  # log(2 ** 2)
        1.3863
    """

    def __init__(
        self, reduction: str = "sum_over_batch_size", name: str = "linear_chain_crf_loss", dtype=None
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        return linear_chain_crf_loss(y_true, y_pred)


@keras.saving.register_keras_serializable(package="keras_structured")
class TreeCRFLoss(PerExampleLoss):
    """Dependency-tree CRF loss: ``log Z(eta) - sum_{(h, m) in gold} eta[h, m]``.

    ``log Z`` sums over all non-projective trees by the matrix-tree theorem
    (:func:`keras_structured.ops.crf.tree_crf_log_partition`); the gradient is
    the arc marginals minus the gold arcs. XLA compiles it. The loss of each
    example is :func:`tree_crf_loss`.

    Args:
        single_root: normalise over trees with exactly one word attached to the root.
        reduction, name, dtype: as for ``keras.losses.Loss``.

    Call arguments:
        y_true: ``(batch, n + 1)`` gold heads, ``-1`` at the root and past each
            sentence's length.
        y_pred: ``(batch, n + 1, n + 1)`` arc scores ``[head, modifier]``.

    Returns:
        The reduced loss (a scalar for the default reduction), float32 for
        half-precision scores.

    Raises:
        ValueError: at trace time, for labels or scores of the wrong shape.
        tf.errors.InvalidArgumentError: at run time, for heads that are not trees.

    Example:
        >>> round(float(TreeCRFLoss()([[-1, 0, 1]], tf.zeros([1, 3, 3]))), 4)  # log(3)
        1.0986
    """

    def __init__(
        self,
        single_root: bool = False,
        reduction: str = "sum_over_batch_size",
        name: str = "tree_crf_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.single_root = bool(single_root)

    def call(self, y_true, y_pred):
        return tree_crf_loss(y_true, y_pred, self.single_root)

    def get_config(self):
        config = super().get_config()
        config.update(single_root=self.single_root)
        return config
