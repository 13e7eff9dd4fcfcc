"""The CRF losses for ``model.compile``: linear chains and dependency trees, on every backend.

Structured Fenchel-Young losses with the entropy regulariser (see
:mod:`keras_structured.losses.structured` for the family): ``log Z(eta) - <eta, a>`` for the
gold structure's indicator vectors ``a``, with gradient ``marginals - a``. Written with
``keras.ops``: the linear chain runs in the backend's ops, the tree CRF calls a compiled
kernel on the host (or, inside XLA, its elimination in ``keras.ops``); both compile with XLA
on TensorFlow and with ``jax.jit``. Labels are tag sequences ``(batch, n)`` and head vectors
``(batch, n + 1)``, ``-1`` marking the root and the padding at the end. Invalid labels, and
NaN or ``+inf`` scores where a structure uses them, raise ``tf.errors.InvalidArgumentError``
on TensorFlow and ``ValueError`` on JAX and PyTorch (the labels naming the first invalid
example); where values cannot be checked (``jax.jit``, XLA) the loss of an invalid example is
NaN, except that the tree's scores, checked on the host
(:func:`keras_structured.ops.crf.tree_crf_log_partition`), raise under ``jax.jit`` too.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_structured.losses.per_example import PerExampleLoss, check_labels, inner, lengths_from_codes
from keras_structured.ops.crf import linear_chain_crf_log_partition, tree_crf_log_partition
from keras_structured.ops.dtypes import compute_dtype
from keras_structured.ops.invalid_inputs import checked, nan_where_invalid
from keras_structured.ops.sequence_scores import unpack_sequence_scores


def _labels(y_true):
    """Integer codes from labels (which Keras may have cast to float)."""
    y_true = ops.convert_to_tensor(y_true)
    if "int" not in keras.backend.standardize_dtype(y_true.dtype):
        y_true = ops.round(y_true)
    return ops.cast(y_true, "int32")


def _checked_labels(labels, valid, expected: str):
    """``labels`` once ``valid`` (a boolean per example) holds everywhere, else an error naming
    the first invalid example (:func:`keras_structured.ops.invalid_inputs.checked`).

    A check in tensor ops, so that the CRF losses compile: it runs in TensorFlow graphs too,
    and XLA drops it.
    """
    # The number of examples before the first invalid one: its index.
    first = ops.sum(ops.cast(ops.cumsum(ops.cast(ops.logical_not(valid), "int32")) == 0, "int32"))
    message = f"y_true must hold {expected}. Received: y_true[i] invalid for the first invalid example i ="
    return checked(labels, ops.all(valid), message, first)


def _checked_tags(tags, num_labels):
    """``(tags, valid)``: ``(batch, n)`` tags checked to be in ``[0, num_labels)``, with ``-1``
    padding only at the end, and which examples' are."""
    in_length = ops.arange(ops.shape(tags)[1], dtype="int32")[None, :] < lengths_from_codes(tags)[:, None]
    in_range = ops.logical_and(tags >= -1, tags < num_labels)
    valid = ops.all(ops.logical_and(ops.equal(in_length, tags >= 0), in_range), axis=1)
    expected = "labels in [0, K) per example, with -1 only as padding at the end"
    return _checked_labels(tags, valid, expected), valid


def _checked_heads(heads, single_root: bool):
    """``(heads, valid)``: ``(batch, n + 1)`` head vectors checked to be trees (as
    ``DependencyTreeStructure.validate_codes``), and which examples' are."""
    size = ops.shape(heads)[1]
    words = ops.minimum(lengths_from_codes(heads), size - 1)[:, None]
    position = ops.arange(size, dtype="int32")[None, :]
    is_word = ops.logical_and(position >= 1, position <= words)
    is_head = ops.logical_and(ops.logical_and(heads >= 0, heads <= words), ops.not_equal(heads, position))
    valid = ops.where(is_word, is_head, ops.equal(heads, -1))
    # Pointer doubling: after k steps every position points at its 2^k-th ancestor
    # (the root and padding point at 0), so words off a cycle end at the root.
    ancestors = ops.where(valid, ops.maximum(heads, 0), 0)
    if isinstance(size, int):
        # A known size, ceil(log2(size)) steps: a loop Python unrolls, which PyTorch's ``meta``
        # tensors (Keras's shape inference) can run, unlike a loop on a tensor condition.
        for _ in range(max(size - 1, 0).bit_length()):
            ancestors = ops.take_along_axis(ancestors, ancestors, axis=1)
    else:  # a TensorFlow graph's size known only at run time
        _, ancestors = ops.while_loop(
            lambda reach, _: reach < size,
            lambda reach, ancestors: (2 * reach, ops.take_along_axis(ancestors, ancestors, axis=1)),
            (1, ancestors),
        )
    trees = ops.all(ops.logical_and(valid, ops.equal(ancestors, 0)), axis=1)
    expected = (
        "head vectors: -1 at the root (position 0) and past the last word, and for every "
        "word the root (0) or another word, with no cycle"
    )
    if single_root:
        root_children = ops.sum(ops.cast(ops.equal(heads, 0), "int32"), axis=1)
        trees = ops.logical_and(trees, ops.equal(root_children, ops.minimum(words[:, 0], 1)))
        expected += " and exactly one word attached to the root"
    return _checked_labels(heads, trees, expected), trees


def linear_chain_crf_loss(y_true, y_pred):
    """Linear-chain CRF loss per example: the negative log-likelihood ``log Z(eta) - <eta, a>``.

    ``log Z`` is computed by the forward algorithm
    (:func:`keras_structured.ops.crf.linear_chain_crf_log_partition`); the gradient
    is the CRF marginals minus the gold indicators. Runs on every Keras backend.

    Args:
        y_true: ``(batch, n)`` gold labels, ``-1`` past each sequence's length.
        y_pred: packed ``(batch, n, K, K + 1)`` scores
            (:func:`keras_structured.ops.pack_sequence_scores`).

    Returns:
        The loss of every example, shape ``(batch,)``.

    Raises:
        ValueError: at trace time, for labels or scores of the wrong shape.
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for labels out of
            range or ``-1`` inside a sequence, or NaN or ``+inf`` scores inside a sequence
            (``ValueError`` on JAX and PyTorch, where the values are known; elsewhere the
            example's loss is NaN).

    Example:
        >>> from keras_structured.ops import pack_sequence_scores
        >>> scores = pack_sequence_scores(tf.zeros([1, 3, 2]), tf.zeros([2, 2]))
        >>> round(float(linear_chain_crf_loss([[0, 1, -1]], scores)[0]), 4)  # log(2 ** 2)
        1.3863
    """
    scores = ops.convert_to_tensor(y_pred)
    unary, pairwise = unpack_sequence_scores(ops.cast(scores, compute_dtype(scores)))
    tags = _labels(y_true)
    check_labels(tags, unary.shape[1], scores)
    num_labels = ops.shape(unary)[-1]
    tags, valid = _checked_tags(tags, num_labels)
    lengths = lengths_from_codes(tags)
    gold_m = ops.one_hot(tags, num_labels, dtype=unary.dtype)
    gold_n = gold_m[:, :-1, :, None] * gold_m[:, 1:, None, :]
    log_z = linear_chain_crf_log_partition(unary, pairwise, lengths=lengths)
    # relu rather than maximum, which computes float64 in float32 on PyTorch (Keras 3.15).
    losses = ops.relu(log_z - inner(unary, gold_m) - inner(pairwise, gold_n))
    return nan_where_invalid(losses, valid)


def tree_crf_loss(y_true, y_pred, single_root: bool = False):
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
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for heads that are
            not trees (``ValueError`` on JAX and PyTorch, where the values are known;
            elsewhere the example's loss is NaN), and on every backend for NaN or ``+inf``
            scores on an arc of a sentence (an ``InvalidScoresError``, also a
            ``ValueError``; see :func:`keras_structured.ops.crf.tree_crf_log_partition`).

    Example:
        >>> round(float(tree_crf_loss([[-1, 0, 1]], tf.zeros([1, 3, 3]))[0]), 4)  # log(3)
        1.0986
    """
    single_root = bool(single_root)
    scores = ops.convert_to_tensor(y_pred)
    scores = ops.cast(scores, compute_dtype(scores))
    heads = _labels(y_true)
    check_labels(heads, scores.shape[-1], scores)
    heads, valid = _checked_heads(heads, single_root)
    gold = ops.one_hot(heads, ops.shape(scores)[-1], axis=1, dtype=scores.dtype)  # [head, modifier]
    log_z = tree_crf_log_partition(scores, lengths_from_codes(heads), single_root=single_root)
    return nan_where_invalid(ops.relu(log_z - inner(scores, gold)), valid)


@keras.saving.register_keras_serializable(package="keras_structured")
class LinearChainCRFLoss(PerExampleLoss):
    """Linear-chain CRF loss: the negative log-likelihood ``log Z(eta) - <eta, a>``.

    ``log Z`` is computed by the forward algorithm
    (:func:`keras_structured.ops.crf.linear_chain_crf_log_partition`); the
    gradient is the CRF marginals minus the gold indicators. ``L > 0``, and it
    tends to zero as the gold sequence's score margin grows. Runs on every Keras backend. The
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
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for labels out of
            range or ``-1`` inside a sequence, or NaN or ``+inf`` scores inside a sequence
            (``ValueError`` on JAX and PyTorch, where the values are known; elsewhere the
            example's loss is NaN).

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
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for heads that are
            not trees (``ValueError`` on JAX and PyTorch, where the values are known;
            elsewhere the example's loss is NaN), and on every backend for NaN or ``+inf``
            scores on an arc of a sentence (an ``InvalidScoresError``, also a
            ``ValueError``; see :func:`keras_structured.ops.crf.tree_crf_log_partition`).

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
