"""Transition scores of a sequential alignment, binned by jump distance (SparseMAP paper, section 5.2).

The alignment of a premise ``p_1 .. p_m`` to a hypothesis ``h_1 .. h_n`` is a sequence
tagging problem: premise word ``i`` gets the tag ``t_i in {1, .., n}``, the hypothesis word
it aligns to. Besides the word-pair scores ``G[i, t_i]``, a tag sequence is scored by nine
learned scalars ``w``, which say whether the alignment moves monotonically, stays, or jumps,
and whether it starts on the first hypothesis word and ends on the last one:

    score(t) = sum_i G[i, t_i]
               + w_start[ bin_start(t_1) ]                  bins {1, >= 2}
               + sum_{i < m} w_jump[ bin_jump(t_{i+1} - t_i) ]  bins {<= -2, -1, 0, 1, >= 2}
               + w_end[ bin_end(t_m - (n + 1)) ]            bins {<= -2, -1}

(the start and end bins are the jump from a virtual word 0 and to a virtual word ``n + 1``).
This module turns ``w`` into the linear-chain scores of
:func:`keras_structured.sparsemap_sequence`: a ``(K, K)`` transition matrix, a ``(K,)``
start vector and a ``(batch, K)`` end vector (the end bins depend on each example's number
of tags ``n``; ``K`` is the padded number of tags).

The nine scalars are stored in this order (:data:`BIN_NAMES`)::

    index  0      1    2   3    4     5        6         7         8
    bin    <=-2   -1   0   +1   >=+2  start 1  start>=2  end<=-2   end -1
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["BIN_NAMES", "NUM_BINS", "binned_transition_scores"]

#: The names of the nine bins, in the order of the weight vector.
BIN_NAMES = (
    "jump<=-2",
    "jump-1",
    "jump0",
    "jump+1",
    "jump>=+2",
    "start1",
    "start>=2",
    "end<=-2",
    "end-1",
)
NUM_BINS = len(BIN_NAMES)
_JUMP, _START_FIRST, _START_LATER, _END_EARLY, _END_LAST = 0, 5, 6, 7, 8


def binned_transition_scores(weights, num_tags, tag_lengths) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Linear-chain scores of the nine bin weights ``w`` for ``num_tags`` (padded) tags.

    Args:
        weights: ``(9,)`` float weights in the order of :data:`BIN_NAMES`.
        num_tags: ``K``, the padded number of tags (an int or a scalar tensor).
        tag_lengths: ``(batch,)`` integer numbers of real tags ``n <= K`` of each example.

    Returns:
        ``(transitions, start, end)``: ``transitions[a, b] = w_jump[bin(b - a)]`` of shape
        ``(K, K)`` (from-tag first), ``start[a] = w_start[bin(a + 1)]`` of shape ``(K,)``
        and ``end[e, a] = w_end[bin(a + 1 - (n_e + 1))]`` of shape ``(batch, K)``, tags
        counted from 0. Entries of padded tags ``a >= n_e`` are finite and meaningless: the
        caller forbids those tags.

    Example:
        >>> transitions, start, end = binned_transition_scores(tf.range(9.0), 3, [2])
        >>> transitions.numpy().tolist()
        [[2.0, 3.0, 4.0], [1.0, 2.0, 3.0], [0.0, 1.0, 2.0]]
        >>> start.numpy().tolist(), end.numpy().tolist()
        ([5.0, 6.0, 6.0], [[7.0, 8.0, 7.0]])
    """
    weights = tf.convert_to_tensor(weights)
    if weights.shape.rank != 1 or weights.shape[0] not in (None, len(BIN_NAMES)):
        raise ValueError(
            f"weights must have shape ({len(BIN_NAMES)},). Received: weights.shape={weights.shape}"
        )
    tags = tf.range(num_tags, dtype=tf.int32)
    jumps = tf.clip_by_value(tags[None, :] - tags[:, None], -2, 2) + (_JUMP + 2)
    transitions = tf.gather(weights, jumps)
    start = tf.gather(weights, tf.where(tags == 0, _START_FIRST, _START_LATER))
    last = tf.cast(tf.convert_to_tensor(tag_lengths), tf.int32)[:, None] - 1
    end = tf.gather(weights, tf.where(tags[None, :] == last, _END_LAST, _END_EARLY))
    return transitions, start, end
