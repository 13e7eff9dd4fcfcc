"""The tree CRF's host functions: the compiled matrix-tree kernel, one call a batch, its scores checked.

:func:`checked_factorize` runs :func:`keras_structured.engine.matrix_tree.factorize` in float64
after checking the scores that the sentences use, raising
:class:`~keras_structured.ops.invalid_inputs.InvalidScoresError` for NaN or ``+inf`` (the
kernel would give a finite ``log Z`` for them): TensorFlow calls it by ``tf.numpy_function``
(in :mod:`keras_structured.ops.crf`), which passes the kernel's factors to the backward pass.
:data:`TREE_CRF`, the host function of JAX and PyTorch, also runs
:func:`~keras_structured.engine.matrix_tree.marginals` and returns ``log Z`` and the arc
marginals in the dtype of the scores, by the generic host call
(:func:`keras_structured.ops.host_call.call`: ``jax.pure_callback`` on JAX, the custom op
``keras_structured::tree_crf_marginals`` on PyTorch). It carries no gradient:
:mod:`keras_structured.ops.crf` attaches the marginals as the gradient with
``keras.ops.custom_gradient``. Under ``jax.vmap`` it makes one host call
(``vmap_method="broadcast_all"``), its mapped dimensions folded into the batch.

The results have static shapes (``(batch,)`` and the scores' shape), so nothing stays on the
host between the forward and the backward call: unlike SparseMAP's active sets, the
marginals are returned by the forward call itself.
"""

from __future__ import annotations

import numpy as np

from keras_structured.engine import matrix_tree
from keras_structured.ops import host_call
from keras_structured.ops.invalid_inputs import InvalidScoresError


def _check_arc_scores(scores: np.ndarray, lengths: np.ndarray) -> None:
    """Raises ``InvalidScoresError`` naming the first sentence with a NaN or ``+inf`` score on
    one of its arcs (from the root or a word to another word, of its ``lengths`` words)."""
    position = np.arange(scores.shape[-1])
    heads = position[None, :] <= lengths[:, None]
    modifiers = heads & (position[None, :] >= 1)
    arcs = heads[:, :, None] & modifiers[:, None, :] & (position[:, None] != position[None, :])
    bad = arcs & (np.isnan(scores) | np.isposinf(scores))
    counts = bad.sum(axis=(1, 2))
    if counts.any():
        first = int(np.argmax(counts > 0))
        raise InvalidScoresError(
            "Tree CRF arc scores must not be NaN or +inf on the arcs of a sentence (-inf forbids an "
            f"arc). Received: scores[{first}] with {counts[first]} NaN or +inf arc scores, and "
            f"{int((counts > 0).sum())} such sentences in the batch"
        )


def checked_factorize(scores: np.ndarray, lengths: np.ndarray, single_root: bool) -> tuple:
    """:func:`keras_structured.engine.matrix_tree.factorize` of ``(batch, n + 1, n + 1)`` scores
    (computed in float64) once they are checked.

    Raises:
        InvalidScoresError: for NaN or ``+inf`` scores on an arc of a sentence.

    Example:
        >>> log_z = checked_factorize(np.zeros((1, 3, 3)), np.array([2]), False)[0]
        >>> round(float(np.exp(log_z[0])), 6)
        3.0
    """
    lengths = np.asarray(lengths, np.int32)
    _check_arc_scores(scores, lengths)
    return matrix_tree.factorize(scores.astype(np.float64), lengths, single_root)


def log_partition_and_marginals(scores: np.ndarray, lengths: np.ndarray, *, single_root: bool) -> tuple:
    """``(log Z, marginals)`` of arc scores with any leading dimensions, in their dtype.

    Args:
        scores: ``(*leading, n + 1, n + 1)`` float arc scores (computed in float64).
        lengths: integer numbers of words, broadcast to ``leading``.
        single_root: count only the trees with one word attached to the root.

    Returns:
        ``log Z`` of shape ``leading`` and the marginals shaped like ``scores``.

    Raises:
        InvalidScoresError: for NaN or ``+inf`` scores on an arc of a sentence.

    Example:
        >>> log_z, mu = log_partition_and_marginals(np.zeros((1, 3, 3)), np.array([2]), single_root=True)
        >>> round(float(np.exp(log_z[0])), 6), mu[0, 0].round(6).tolist()
        (2.0, [0.0, 0.5, 0.5])
    """
    leading, size = scores.shape[:-2], scores.shape[-1]
    flat_lengths = np.reshape(np.broadcast_to(lengths, leading), (-1,)).astype(np.int32)
    factors = checked_factorize(np.reshape(scores, (-1, size, size)), flat_lengths, single_root)
    log_z = np.reshape(factors[0], leading).astype(scores.dtype)
    mu = matrix_tree.marginals(*factors, flat_lengths)
    return log_z, np.reshape(mu, scores.shape).astype(scores.dtype)


def _specs(scores, lengths, *, single_root: bool) -> list:
    return [(tuple(scores.shape[:-2]), scores.dtype), (tuple(scores.shape), scores.dtype)]


#: ``host_call.call(TREE_CRF, scores, lengths, single_root=...)``: ``[log_z, marginals]``.
TREE_CRF = host_call.host_function(
    "tree_crf_marginals", log_partition_and_marginals, _specs, vmap_method="broadcast_all"
)
