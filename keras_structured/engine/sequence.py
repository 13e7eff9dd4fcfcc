"""Linear-chain sequence labelling as a structure, with a batched Viterbi oracle."""

from __future__ import annotations

import numba as nb
import numpy as np

from keras_structured.engine.compiled_oracle import CompiledOracle
from keras_structured.engine.structure import Structure, raise_for_invalid_codes


def viterbi(unary: np.ndarray, pairwise: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
    """Highest-scoring label sequences of a batch of linear chains.

    Solves ``argmax_y sum_i unary[i, y_i] + sum_i pairwise[i, y_i, y_{i+1}]`` for
    every example by the Viterbi algorithm (the oracle of :class:`SequenceStructure`).

    Args:
        unary: ``(batch, n, K)`` label scores.
        pairwise: ``(batch, n - 1, K, K)`` transition scores between positions
            ``i`` and ``i + 1`` (from-label first).
        lengths: optional ``(batch,)`` sequence lengths ``<= n``; positions past
            an example's length are padding and get label ``-1``.

    Returns:
        ``(batch, n)`` integer labels. Ties go to the smallest label.

    Example:
        >>> viterbi(np.array([[[1.0, 0.0], [0.0, 1.0]]]), np.zeros((1, 1, 2, 2)))
        array([[0, 1]])
    """
    return SequenceStructure().map(np.asarray(unary), np.asarray(pairwise), lengths)


@nb.njit(cache=True, nogil=True)
def _viterbi_oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
    """Compiled Viterbi on one example's flat scores (see :class:`CompiledOracle`)."""
    n, num_labels = params[0], params[1]
    size = n if length[0] < 0 else length[0]
    code[:] = -1
    if size == 0:
        return np.int64(0), np.int64(0)
    delta = scores_u[:num_labels].copy()
    backpointers = np.zeros((size, num_labels), np.int64)
    for i in range(1, size):
        updated = np.empty(num_labels)
        for b in range(num_labels):
            best, arg = -np.inf, 0
            for a in range(num_labels):
                value = delta[a] + scores_v[((i - 1) * num_labels + a) * num_labels + b]
                if value > best:
                    best, arg = value, a
            updated[b] = best + scores_u[i * num_labels + b]
            backpointers[i, b] = arg
        delta = updated
    label = np.argmax(delta)
    code[size - 1] = label
    for i in range(size - 1, 0, -1):
        code[i - 1] = backpointers[i, code[i]]
    return _sequence_parts(code, params, m_indices, m_values, n_indices, n_values)


@nb.njit(cache=True, nogil=True)
def _sequence_parts(code, params, m_indices, m_values, n_indices, n_values):
    """The parts of a label sequence (see :class:`CompiledOracle`): a label at every
    labelled position, a transition between consecutive labelled positions."""
    n, num_labels = params[0], params[1]
    count_u = count_v = 0
    for i in range(n):
        if code[i] >= 0:
            m_indices[count_u], m_values[count_u] = i * num_labels + code[i], 1.0
            count_u += 1
            if i + 1 < n and code[i + 1] >= 0:
                n_indices[count_v] = (i * num_labels + code[i]) * num_labels + code[i + 1]
                n_values[count_v] = 1.0
                count_v += 1
    return count_u, count_v


class SequenceStructure(Structure):
    """Label sequences of length ``n`` over ``K`` labels.

    ``m_s`` (shape ``(n, K)``) has a one at every ``(i, y_i)``; ``n_s`` (shape
    ``(n - 1, K, K)``) has a one at every transition ``(i, y_i, y_{i+1})``. So the
    SparseMAP ``u`` are unary marginals and ``v`` transition marginals, and the
    quadratic penalty acts on ``u`` only. Start and end scores are unary scores of
    the first and last positions (see :func:`keras_structured.sparsemap_sequence`).
    Optional ``lengths`` ``(batch,)`` mark the positions past them as padding:
    their marginals are exactly zero. Codes are the ``(n,)`` label sequences, ``-1``
    past the length. A loss receives the scores packed into one ``(batch, n, K, K + 1)``
    tensor (see :meth:`split_scores`).

    Example:
        >>> s = SequenceStructure()
        >>> m, n = s.indicators(np.array([[0, 1]]), (2, 2), (1, 2, 2))
        >>> m[0].tolist(), n[0, 0].tolist()
        ([[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 0.0]])
    """

    lengths_from_codes = True

    def validate_codes(self, codes, u_shape, lengths=None, name="codes"):
        n, num_labels = u_shape
        expected = (
            f"{n} labels in [0, {num_labels}) per example, with -1 only as padding at the end "
            "(past the example's length)"
        )
        raise_for_invalid_codes(codes.shape[1:] != (n,), codes, name, expected)
        sizes = np.full(len(codes), n) if lengths is None else lengths
        labelled = np.arange(n) < sizes[:, None]
        invalid = np.where(labelled, (codes < 0) | (codes >= num_labels), codes != -1).any(axis=1)
        raise_for_invalid_codes(invalid, codes, name, expected)

    def compiled_oracle(self, u_shape, v_shape):
        return CompiledOracle(
            _viterbi_oracle,
            np.array(u_shape, dtype=np.int64),
            (u_shape[0],),
            u_shape[0],
            max(u_shape[0] - 1, 0),
            one_hot_codes=True,
            parts=_sequence_parts,
        )

    def v_shape(self, u_shape):
        n, num_labels = u_shape
        return (None if n is None else max(n - 1, 0), num_labels, num_labels)

    def split_scores(self, y_pred):
        """Unary and transition scores from packed ``(batch, n, K, K + 1)`` scores.

        ``y_pred[..., 0]`` holds the unary scores ``(batch, n, K)`` and
        ``y_pred[:, i, :, 1:]`` the transition scores from position ``i`` to ``i + 1``
        (from-label first); the last position's transition block is ignored
        (:func:`keras_structured.ops.pack_sequence_scores` writes this layout).

        Args:
            y_pred: packed scores, a numpy array or a tensor.

        Returns:
            ``(unary (batch, n, K), pairwise (batch, n - 1, K, K))``.

        Raises:
            ValueError: unless ``y_pred`` has shape ``(batch, n, K, K + 1)``.

        Example:
            >>> unary, pairwise = SequenceStructure().split_scores(np.zeros((2, 5, 3, 4)))
            >>> unary.shape, pairwise.shape
            ((2, 5, 3), (2, 4, 3, 3))
        """
        shape = y_pred.shape
        static = y_pred.ndim == 4 and None not in (shape[-2], shape[-1])
        if y_pred.ndim != 4 or (static and shape[-1] != shape[-2] + 1):
            raise ValueError(
                f"Packed sequence scores must have shape (batch, n, K, K + 1). Received: shape={shape}"
            )
        return y_pred[..., 0], y_pred[:, :-1, :, 1:]

    def validate_shapes(self, u_shape, v_shape):
        if len(u_shape) != 2:
            raise ValueError(
                "SequenceStructure expects unary scores of per-example shape (n, K). "
                f"Received: eta_u per-example shape={tuple(u_shape)}"
            )
        super().validate_shapes(u_shape, v_shape)

    def present_parts(self, lengths, u_shape):
        n, num_labels = u_shape
        positions = np.arange(n)[None, :, None] < np.asarray(lengths)[:, None, None]
        return np.broadcast_to(positions, (len(lengths), n, num_labels))

    def validate_lengths(self, lengths, u_shape):
        if lengths.ndim != 1 or np.any(lengths < 0) or np.any(lengths > u_shape[0]):
            raise ValueError(
                f"Sequence lengths must have shape (batch,) with values in [0, {u_shape[0]}]. "
                f"Received: lengths={lengths.tolist()}"
            )
