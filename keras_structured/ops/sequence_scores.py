"""Packing of linear-chain scores into one tensor, for losses and model outputs.

A Keras loss sees one ``y_pred`` tensor, so sequence scores travel packed as
``(batch, n, K, K + 1)``: ``[..., 0]`` holds the unary scores ``(batch, n, K)``
and ``[:, i, :, 1:]`` the transition scores from position ``i`` to ``i + 1``
(from-label first); the last position's transition block is ignored. The
structure itself reads this layout
(:meth:`keras_structured.engine.SequenceStructure.split_scores`).
"""

from __future__ import annotations

import tensorflow as tf

from keras_structured.engine.sequence import SequenceStructure


def pack_sequence_scores(unary, transitions) -> tf.Tensor:
    """Pack ``unary`` ``(batch, n, K)`` and transitions into ``(batch, n, K, K + 1)``.

    Args:
        unary: ``(batch, n, K)`` label scores.
        transitions: ``(K, K)``, ``(batch, K, K)`` or ``(batch, n - 1, K, K)``.

    Returns:
        The packed scores.

    Example:
        >>> pack_sequence_scores(tf.zeros([2, 5, 3]), tf.ones([3, 3])).shape
        TensorShape([2, 5, 3, 4])
    """
    unary = tf.convert_to_tensor(unary)
    transitions = tf.cast(tf.convert_to_tensor(transitions), unary.dtype)
    if unary.shape.rank != 3:
        raise ValueError(f"unary must have shape (batch, n, K). Received: unary.shape={unary.shape}")
    if transitions.shape.rank == 3:
        transitions = transitions[:, None]
    if transitions.shape.rank == 4 and transitions.shape[1] != 1:
        transitions = tf.pad(transitions, [[0, 0], [0, 1], [0, 0], [0, 0]])
    shape = tf.shape(unary)
    pairwise = tf.broadcast_to(transitions, [shape[0], shape[1], shape[2], shape[2]])
    return tf.concat([unary[..., None], pairwise], axis=-1)


def unpack_sequence_scores(packed) -> tuple[tf.Tensor, tf.Tensor]:
    """Inverse of :func:`pack_sequence_scores`: ``(unary, pairwise (batch, n - 1, K, K))``.

    The layout is :meth:`keras_structured.engine.SequenceStructure.split_scores`, which
    this calls; it raises ``ValueError`` unless ``packed`` is ``(batch, n, K, K + 1)``.

    Example:
        >>> unary, pairwise = unpack_sequence_scores(tf.zeros([2, 5, 3, 4]))
        >>> unary.shape, pairwise.shape
        (TensorShape([2, 5, 3]), TensorShape([2, 4, 3, 3]))
    """
    return SequenceStructure().split_scores(tf.convert_to_tensor(packed))
