"""Packing of linear-chain scores into one tensor, for losses and model outputs.

A Keras loss sees one ``y_pred`` tensor, so sequence scores travel packed as
``(batch, n, K, K + 1)``: ``[..., 0]`` holds the unary scores ``(batch, n, K)``
and ``[:, i, :, 1:]`` the transition scores from position ``i`` to ``i + 1``
(from-label first); the last position's transition block is ignored. The
structure itself reads this layout
(:meth:`keras_structured.engine.SequenceStructure.split_scores`). Start and end
scores have no place of their own: :func:`add_boundary_scores` adds them to the first
and last unary scores. The layer :class:`keras_structured.SequenceScores` owns
transition and boundary weights and returns this layout.

Written with ``keras.ops``, for every backend; on TensorFlow the batch and sequence
dimensions may also be unknown until run time (``tf.function`` with an ``input_signature``).
"""

from __future__ import annotations

from keras import ops

from keras_structured.engine.sequence import SequenceStructure
from keras_structured.ops.dtypes import integer_lengths


def pack_sequence_scores(unary, transitions):
    """Pack ``unary`` ``(batch, n, K)`` and transitions into ``(batch, n, K, K + 1)``.

    Args:
        unary: ``(batch, n, K)`` label scores.
        transitions: ``(K, K)``, ``(batch, K, K)`` or ``(batch, n - 1, K, K)``.

    Returns:
        The packed scores, in the dtype of ``unary``.

    Raises:
        ValueError: for unary scores of a rank other than 3.

    Example:
        >>> import keras
        >>> pack_sequence_scores(keras.ops.zeros((2, 5, 3)), keras.ops.ones((3, 3))).shape
        TensorShape([2, 5, 3, 4])
    """
    unary = ops.convert_to_tensor(unary)
    transitions = ops.cast(ops.convert_to_tensor(transitions), unary.dtype)
    if len(unary.shape) != 3:
        raise ValueError(f"unary must have shape (batch, n, K). Received: unary.shape={unary.shape}")
    if len(transitions.shape) == 3:
        transitions = transitions[:, None]
    if len(transitions.shape) == 4 and transitions.shape[1] != 1:
        transitions = ops.pad(transitions, [[0, 0], [0, 1], [0, 0], [0, 0]])
    batch, n, num_labels = ops.shape(unary)
    pairwise = ops.broadcast_to(transitions, (batch, n, num_labels, num_labels))
    return ops.concatenate([unary[..., None], pairwise], axis=-1)


def add_boundary_scores(unary, start=None, end=None, lengths=None):
    """``unary`` with ``start`` added at the first position and ``end`` at the last.

    A label sequence's score counts ``start[y_0]`` and ``end[y_last]`` this way, so
    boundary scores need no place of their own in the structure.

    Args:
        unary: ``(batch, n, K)`` label scores.
        start: optional ``(K,)`` or ``(batch, K)`` scores of the first label.
        end: optional ``(K,)`` or ``(batch, K)`` scores of the last label: the one at
            position ``lengths - 1`` when lengths are given, else ``n - 1``.
        lengths: optional ``(batch,)`` integer lengths of right-padded sequences.

    Returns:
        The unary scores with the boundary scores added, shape and dtype of ``unary``.

    Raises:
        ValueError: for start or end scores of a shape other than ``(K,)`` or ``(batch, K)``,
            or lengths of a dtype other than an integer one.

    Example:
        >>> import keras
        >>> unary = add_boundary_scores(keras.ops.zeros((1, 3, 2)), end=[1.0, 2.0], lengths=[2])
        >>> keras.ops.convert_to_numpy(unary)[0]
        array([[0., 0.],
               [1., 2.],
               [0., 0.]], dtype=float32)
    """
    unary = ops.convert_to_tensor(unary)
    num_labels = unary.shape[-1]
    n = ops.shape(unary)[1]
    last = n - 1 if lengths is None else integer_lengths(lengths) - 1
    positions = ops.arange(n, dtype="int32")
    for scores, position in ((start, 0), (end, last)):
        if scores is None:
            continue
        scores = ops.cast(ops.convert_to_tensor(scores), unary.dtype)
        size = scores.shape[-1] if len(scores.shape) in (1, 2) else -1
        if size == -1 or None not in (size, num_labels) and size != num_labels:
            raise ValueError(
                f"start/end scores must have shape (K,) or (batch, K) with K={num_labels}. "
                f"Received: shape={scores.shape}"
            )
        at_position = ops.cast(ops.equal(positions, ops.reshape(position, (-1, 1))), unary.dtype)
        unary = unary + ops.reshape(scores, (-1, 1, ops.shape(unary)[2])) * at_position[..., None]
    return unary


def unpack_sequence_scores(packed):
    """Inverse of :func:`pack_sequence_scores`: ``(unary, pairwise (batch, n - 1, K, K))``.

    The layout is :meth:`keras_structured.engine.SequenceStructure.split_scores`, which
    this calls; it raises ``ValueError`` unless ``packed`` is ``(batch, n, K, K + 1)``.

    Example:
        >>> import keras
        >>> unary, pairwise = unpack_sequence_scores(keras.ops.zeros((2, 5, 3, 4)))
        >>> unary.shape, pairwise.shape
        (TensorShape([2, 5, 3]), TensorShape([2, 4, 3, 3]))
    """
    return SequenceStructure().split_scores(ops.convert_to_tensor(packed))
