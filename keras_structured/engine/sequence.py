"""Linear-chain sequence labelling as a structure, with a batched Viterbi oracle."""

from __future__ import annotations

import numpy as np

from keras_structured.engine.structure import Structure


def viterbi(unary: np.ndarray, pairwise: np.ndarray) -> np.ndarray:
    """Highest-scoring label sequences of a batch of linear chains.

    Solves ``argmax_y sum_i unary[i, y_i] + sum_i pairwise[i, y_i, y_{i+1}]`` for
    every example, vectorised over the batch (one Python step per position).

    Args:
        unary: ``(batch, n, K)`` label scores.
        pairwise: ``(batch, n - 1, K, K)`` transition scores between positions
            ``i`` and ``i + 1`` (from-label first).

    Returns:
        ``(batch, n)`` integer labels. Ties go to the smallest label.

    Example:
        >>> viterbi(np.array([[[1.0, 0.0], [0.0, 1.0]]]), np.zeros((1, 1, 2, 2)))
        array([[0, 1]])
    """
    batch, n, num_labels = unary.shape
    labels = np.zeros((batch, n), dtype=np.int64)
    if n == 0:
        return labels
    rows = np.arange(batch)
    backpointers = np.zeros((batch, n, num_labels), dtype=np.int64)
    delta = unary[:, 0]
    for i in range(1, n):
        candidates = delta[:, :, None] + pairwise[:, i - 1]
        backpointers[:, i] = np.argmax(candidates, axis=1)
        delta = np.max(candidates, axis=1) + unary[:, i]
    labels[:, n - 1] = np.argmax(delta, axis=-1)
    for i in range(n - 1, 0, -1):
        labels[:, i - 1] = backpointers[rows, i, labels[:, i]]
    return labels


class SequenceStructure(Structure):
    """Label sequences of length ``n`` over ``K`` labels.

    ``m_s`` (shape ``(n, K)``) has a one at every ``(i, y_i)``; ``n_s`` (shape
    ``(n - 1, K, K)``) has a one at every transition ``(i, y_i, y_{i+1})``. So the
    SparseMAP ``u`` are unary marginals and ``v`` transition marginals, and the
    quadratic penalty acts on ``u`` only. Start and end scores are unary scores of
    the first and last positions (see :func:`keras_structured.engine_sequence`).

    Example:
        >>> s = SequenceStructure()
        >>> m, n = s.indicators(np.array([[0, 1]]), (2, 2), (1, 2, 2))
        >>> m[0].tolist(), n[0, 0].tolist()
        ([[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 0.0]])
    """

    def map(self, eta_u, eta_v):
        return viterbi(eta_u, eta_v)

    def indicators(self, codes, u_shape, v_shape):
        batch, n = codes.shape
        num_labels = u_shape[1]
        m = np.zeros((batch, n, num_labels))
        rows = np.arange(batch)[:, None]
        positions = np.arange(n)[None, :]
        m[rows, positions, codes] = 1.0
        pair = np.zeros((batch, max(n - 1, 0), num_labels, num_labels))
        pair[rows, positions[:, :-1], codes[:, :-1], codes[:, 1:]] = 1.0
        return m, pair

    def v_shape(self, u_shape):
        n, num_labels = u_shape
        return (None if n is None else max(n - 1, 0), num_labels, num_labels)

    def validate_shapes(self, u_shape, v_shape):
        if len(u_shape) != 2:
            raise ValueError(
                "SequenceStructure expects unary scores of per-example shape (n, K). "
                f"Received: eta_u per-example shape={tuple(u_shape)}"
            )
        super().validate_shapes(u_shape, v_shape)
