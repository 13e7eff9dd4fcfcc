"""The three alignments of ESIM's attention step: softmax, sequential SparseMAP, matching SparseMAP.

Given the word-pair scores ``G = a b^T`` of a premise ``a`` (``m`` words) and a hypothesis
``b`` (``n`` words), an alignment returns two attention matrices, ``P2H`` ``(m, n)`` (each
premise word's weights over the hypothesis words) and ``H2P`` ``(n, m)``:

==============  =====================================================================  ==========
attention       problem solved                                                          parameters
==============  =====================================================================  ==========
``softmax``     rows of ``P2H``: ``softmax(G[i, :])``; rows of ``H2P``: ``softmax(G[:, j])``  none
``sequence``    ``P2H = argmax_{u in M_seq(m, n)} <G, u> + <T(w_p), v> - ||u||^2 / 2``,         18
                ``H2P`` the same on ``G^T`` with its own ``w_h`` (SparseMAP over tag
                sequences, one tag per word; the tags are the other sentence's words)
``matching``    ``U = argmax_{u in M_match(m, n)} <G, u> - ||u||^2 / 2``;                       none
                ``P2H = U``, ``H2P = U^T`` (SparseMAP over bipartite matchings)
==============  =====================================================================  ==========

``M_seq`` is the marginal polytope of the linear chain, ``T(w)`` the binned transition
scores of :mod:`keras_structured.applications.nli.transition_bins` (9 scalars a direction), ``M_match``
the matching polytope. A softmax or sequential row sums to one; a matching with ``m != n``
leaves ``|m - n|`` words of the longer sentence unaligned (their rows sum to less than one,
often to zero). The SparseMAP answers are sparse combinations of a few structures, found by
the library's active-set solver (:func:`keras_structured.sparsemap_sequence`, and
:func:`keras_structured.sparsemap` with the structure of
:class:`keras_structured.SparseMAPMatching`); they are differentiable with the closed-form
SparseMAP Jacobian.

Padding: sentences are right-padded and ``premise_lengths``, ``hypothesis_lengths`` give
their sizes. Every attention weight that involves a padded word is exactly zero and carries
exactly zero gradient back to ``G``: the softmax masks with ``tf.where`` (a double ``where``
keeps fully padded rows finite), the sequence forbids padded tags with ``-inf`` scores and
passes the lengths, the matching passes ``(m, n)`` lengths.
"""

from __future__ import annotations

import tensorflow as tf

import keras_structured as ks
from keras_structured.applications.nli.transition_bins import binned_transition_scores
from keras_structured.engine import MatchingStructure
from keras_structured.validation import check_one_of

__all__ = ["ATTENTIONS", "align", "matching_alignment", "sequential_alignment", "softmax_alignment"]

#: The attention variants, by the names of the model's ``attention`` argument.
ATTENTIONS = ("softmax", "sequence", "matching")


def _transpose(x: tf.Tensor) -> tf.Tensor:
    return tf.transpose(x, [0, 2, 1])


def _valid_pairs(scores, premise_lengths, hypothesis_lengths) -> tf.Tensor:
    """``(batch, m, n)`` booleans: both words of the pair are real words."""
    shape = tf.shape(scores)
    rows = tf.sequence_mask(premise_lengths, shape[1])
    columns = tf.sequence_mask(hypothesis_lengths, shape[2])
    return rows[:, :, None] & columns[:, None, :]


def _masked_softmax(scores: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """Softmax over the last axis restricted to ``valid`` entries; zero elsewhere, rows without
    a valid entry included (their logits are set to 0 first, so that nothing is NaN)."""
    any_valid = tf.reduce_any(valid, axis=-1, keepdims=True)
    outside = tf.where(any_valid, tf.constant(float("-inf"), scores.dtype), tf.zeros([], scores.dtype))
    weights = tf.nn.softmax(tf.where(valid, scores, outside), axis=-1)
    return tf.where(valid, weights, tf.zeros([], weights.dtype))


def softmax_alignment(scores, premise_lengths, hypothesis_lengths) -> tuple[tf.Tensor, tf.Tensor]:
    """ESIM's attention: a softmax over each row of ``G`` and over each column.

    Args:
        scores: ``(batch, m, n)`` word-pair scores ``G``.
        premise_lengths: ``(batch,)`` premise lengths ``<= m``.
        hypothesis_lengths: ``(batch,)`` hypothesis lengths ``<= n``.

    Returns:
        ``(p2h (batch, m, n), h2p (batch, n, m))``, zero at padded words.

    Example:
        >>> p2h, h2p = softmax_alignment(tf.zeros([1, 2, 3]), [2], [2])
        >>> p2h.numpy()[0].tolist()
        [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]
    """
    scores = tf.convert_to_tensor(scores)
    valid = _valid_pairs(scores, premise_lengths, hypothesis_lengths)
    return _masked_softmax(scores, valid), _masked_softmax(_transpose(scores), _transpose(valid))


def _solver_info(info: dict) -> dict:
    """The ``(batch, 1)`` structure count and convergence flag of one SparseMAP call's info."""
    structures = tf.reduce_sum(tf.cast(info["weights"] > 0, tf.int32), axis=-1)
    return {"structures": structures[:, None], "converged": tf.cast(info["converged"], tf.bool)[:, None]}


def _merge_info(first: dict, second: dict) -> dict:
    return {key: tf.concat([first[key], second[key]], axis=-1) for key in first}


def _sequence(unary, lengths, tag_lengths, weights, return_info: bool, options):
    """SparseMAP alignment of the ``lengths`` words of one side to the ``tag_lengths`` words of the other."""
    shape = tf.shape(unary)
    transitions, start, end = binned_transition_scores(tf.cast(weights, unary.dtype), shape[2], tag_lengths)
    # The start and end scores are unary scores of the first and last real word, added here
    # rather than by sparsemap_sequence(start=, end=), which needs a static number of tags.
    first = tf.one_hot(tf.zeros_like(lengths), shape[1], dtype=unary.dtype)
    last = tf.one_hot(tf.cast(lengths, tf.int32) - 1, shape[1], dtype=unary.dtype)
    unary = unary + first[:, :, None] * start[None, None, :] + last[:, :, None] * end[:, None, :]
    real_tags = tf.sequence_mask(tag_lengths, shape[2])[:, None, :]
    unary = tf.where(real_tags, unary, tf.constant(float("-inf"), unary.dtype))
    result = ks.sparsemap_sequence(
        unary, transitions, lengths=lengths, return_info=return_info, options=options
    )
    return result[0], (_solver_info(result[2]) if return_info else None)


def sequential_alignment(
    scores,
    premise_lengths,
    hypothesis_lengths,
    premise_weights,
    hypothesis_weights,
    return_info: bool = False,
    options: ks.SolverOptions | None = None,
):
    """Both directions as SparseMAP sequence tagging with binned transitions (18 scalars in all).

    Solves ``P2H = argmax_{u in M_seq} <G, u> + <T(w_p), v> - ||u||^2 / 2`` (premise words
    tagged with hypothesis words) and ``H2P`` likewise on ``G^T`` with ``w_h``.

    Args:
        scores: ``(batch, m, n)`` word-pair scores ``G``.
        premise_lengths: ``(batch,)`` premise lengths ``<= m``.
        hypothesis_lengths: ``(batch,)`` hypothesis lengths ``<= n``.
        premise_weights: ``(9,)`` bin weights of the premise-to-hypothesis direction.
        hypothesis_weights: ``(9,)`` bin weights of the hypothesis-to-premise direction.
        return_info: also return ``{"structures": (batch, 2) int32, "converged": (batch, 2)
            bool}``: the numbers of tag sequences with nonzero weight and whether the solver
            finished, premise-to-hypothesis first.
        options: the solver settings (:class:`keras_structured.SolverOptions`; None: the
            defaults).

    Returns:
        ``(p2h (batch, m, n), h2p (batch, n, m))``, rows summing to one on real words and
        zero at padded words; plus the info dict with ``return_info``.

    Example:
        >>> g = tf.constant([[[3.0, 0.0], [0.0, 3.0]]])
        >>> p2h, h2p = sequential_alignment(g, [2], [2], tf.zeros(9), tf.zeros(9))
        >>> p2h.numpy()[0].tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    scores = tf.convert_to_tensor(scores)
    p2h, info_p = _sequence(
        scores, premise_lengths, hypothesis_lengths, premise_weights, return_info, options
    )
    h2p, info_h = _sequence(
        _transpose(scores), hypothesis_lengths, premise_lengths, hypothesis_weights, return_info, options
    )
    if not return_info:
        return p2h, h2p
    return p2h, h2p, _merge_info(info_p, info_h)


def matching_alignment(
    scores,
    premise_lengths,
    hypothesis_lengths,
    return_info: bool = False,
    options: ks.SolverOptions | None = None,
):
    """One symmetric alignment: SparseMAP over the bipartite matchings of the two sentences.

    Solves ``U = argmax_{u in M_match} <G, u> - ||u||^2 / 2`` over the matchings of size
    ``min(m, n)`` (permutation matrices when ``m == n``), the op behind
    :class:`keras_structured.SparseMAPMatching`.

    Args:
        scores: ``(batch, m, n)`` word-pair scores ``G``.
        premise_lengths: ``(batch,)`` premise lengths ``<= m``.
        hypothesis_lengths: ``(batch,)`` hypothesis lengths ``<= n``.
        return_info: also return ``{"structures": (batch, 1) int32, "converged": (batch, 1)
            bool}``: the number of matchings with nonzero weight, whether the solver finished.
        options: the solver settings (None: the defaults).

    Returns:
        ``(U, U^T)``; plus the info dict with ``return_info``.

    Example:
        >>> p2h, h2p = matching_alignment(tf.constant([[[0.0, 3.0, 0.0], [3.0, 0.0, 0.0]]]), [2], [3])
        >>> p2h.numpy()[0].tolist()
        [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    """
    scores = tf.convert_to_tensor(scores)
    lengths = tf.stack([tf.cast(premise_lengths, tf.int64), tf.cast(hypothesis_lengths, tf.int64)], axis=-1)
    result = ks.sparsemap(
        MatchingStructure(), scores, lengths=lengths, return_info=return_info, options=options
    )
    u = result[0]
    if not return_info:
        return u, _transpose(u)
    return u, _transpose(u), _solver_info(result[2])


def align(
    attention: str,
    scores,
    premise_lengths,
    hypothesis_lengths,
    transition_weights=None,
    return_info: bool = False,
    options: ks.SolverOptions | None = None,
):
    """The alignment called ``attention`` (one of :data:`ATTENTIONS`).

    Args:
        attention: ``"softmax"``, ``"sequence"`` or ``"matching"``.
        scores: ``(batch, m, n)`` word-pair scores ``G``.
        premise_lengths: ``(batch,)`` premise lengths.
        hypothesis_lengths: ``(batch,)`` hypothesis lengths.
        transition_weights: ``(2, 9)`` bin weights of the two directions (``"sequence"`` only).
        return_info: also return ``{"structures", "converged"}``, one column per SparseMAP
            problem of a pair (two for ``"sequence"``, one for ``"matching"``, none for
            ``"softmax"``).
        options: the SparseMAP solver settings (None: the defaults; unused by the softmax).

    Returns:
        ``(p2h, h2p)``, plus the info dict with ``return_info``.

    Example:
        >>> p2h, h2p = align("matching", tf.constant([[[1.0, 0.0], [0.0, 1.0]]]), [2], [2])
        >>> h2p.numpy()[0].tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    check_one_of("attention", attention, ATTENTIONS)
    if attention == "softmax":
        p2h, h2p = softmax_alignment(scores, premise_lengths, hypothesis_lengths)
        if not return_info:
            return p2h, h2p
        batch = tf.shape(p2h)[0]
        info = {"structures": tf.zeros([batch, 0], tf.int32), "converged": tf.zeros([batch, 0], tf.bool)}
        return p2h, h2p, info
    if attention == "matching":
        return matching_alignment(scores, premise_lengths, hypothesis_lengths, return_info, options)
    if transition_weights is None:
        raise ValueError("The sequence attention needs transition_weights (2, 9). Received: None")
    return sequential_alignment(
        scores,
        premise_lengths,
        hypothesis_lengths,
        transition_weights[0],
        transition_weights[1],
        return_info,
        options,
    )
