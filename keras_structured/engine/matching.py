"""Bipartite matchings (linear assignment) as a structure (Niculae et al. 2018, sections 2.2 and 5.2)."""

from __future__ import annotations

import numba as nb
import numpy as np

from keras_structured.engine.compiled_active_set import CompiledOracle
from keras_structured.engine.structure import Structure, raise_for_invalid_codes


@nb.njit(cache=True, nogil=True)
def _max_assignment(scores):
    """Column of every row in a maximum-score assignment of ``scores`` (rows <= columns).

    The Hungarian algorithm with potentials (Kuhn-Munkres, O(rows^2 columns)).
    """
    rows, cols = scores.shape
    row_potential, col_potential = np.zeros(rows + 1), np.zeros(cols + 1)
    owner, way = np.zeros(cols + 1, np.int64), np.zeros(cols + 1, np.int64)
    for i in range(1, rows + 1):
        owner[0], j0 = i, 0
        # np.empty and int64 flags: array constructors the solver compiles anyway
        slack, used = np.empty(cols + 1), np.zeros(cols + 1, np.int64)
        slack[:] = np.inf
        while True:
            used[j0] = 1
            i0, delta, j1 = owner[j0], np.inf, 0
            for j in range(1, cols + 1):
                if not used[j]:
                    reduced = -scores[i0 - 1, j - 1] - row_potential[i0] - col_potential[j]
                    if reduced < slack[j]:
                        slack[j], way[j] = reduced, j0
                    if slack[j] < delta:
                        delta, j1 = slack[j], j
            for j in range(cols + 1):
                if used[j]:
                    row_potential[owner[j]] += delta
                    col_potential[j] -= delta
                else:
                    slack[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0 != 0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    assignment = np.empty(rows, np.int64)
    assignment[:] = -1
    for j in range(1, cols + 1):
        if owner[j] > 0:
            assignment[owner[j] - 1] = j - 1
    return assignment


@nb.njit(cache=True, nogil=True)
def _matching_oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
    """Compiled matching MAP on one example's flat ``(m, n)`` scores (see :class:`CompiledOracle`)."""
    rows, cols, partial = params[0], params[1], params[2]
    threshold = params[3:4].view(np.float64)[0]  # unmatched_score (0 without it), as bits
    used_rows = rows if length[0] < 0 else length[0]
    used_cols = cols if length[0] < 0 else length[1]
    code[:] = -1
    if used_rows == 0 or used_cols == 0:
        return np.int64(0), np.int64(0)
    scores = scores_u.reshape(rows, cols)[:used_rows, :used_cols] - threshold
    if partial:
        scores = np.maximum(scores, 0.0)
    if used_rows <= used_cols:
        for i, j in enumerate(_max_assignment(scores)):
            code[i] = j
    else:
        for j, i in enumerate(_max_assignment(scores.T.copy())):
            code[i] = j
    for i in range(used_rows):
        if code[i] >= 0 and partial and scores_u[i * cols + code[i]] <= threshold:
            code[i] = -1
    return _matching_parts(code, params, m_indices, m_values, n_indices, n_values)


@nb.njit(cache=True, nogil=True)
def _matching_parts(code, params, m_indices, m_values, n_indices, n_values):
    """The pairs ``(i, code[i])`` of a matching (see :class:`CompiledOracle`)."""
    cols, count = params[1], 0
    for i in range(code.shape[0]):
        if code[i] >= 0:
            m_indices[count], m_values[count] = i * cols + code[i], 1.0
            count += 1
    return count, np.int64(0)


class MatchingStructure(Structure):
    """Matchings between the ``m`` rows and ``n`` columns of a score matrix.

    A structure is a set ``P`` of row-column pairs using every row and every
    column at most once; ``m_s`` (shape ``(m, n)``) has a one at every pair of
    ``P``, and there is no higher-order part. The MAP oracle (the Hungarian algorithm
    with potentials, compiled, one call per example) solves

    * with ``unmatched_score=None``: ``argmax_P sum_{(i, j) in P} s_ij`` over the
      matchings of size ``min(m, n)``: permutation matrices when ``m == n``, and
      otherwise every item of the smaller side matched (partial matching);
    * with ``unmatched_score=t``: ``argmax_P sum_{(i, j) in P} (s_ij - t)`` over all
      matchings, so a pair is used only when its score beats ``t`` (ties leave it
      unused). This is exact: extending any matching to one of size
      ``min(m, n)`` shows it equals the assignment on the gains
      ``max(s_ij - t, 0)``, keeping only the pairs with a positive gain.

    SparseMAP over this structure returns ``u`` in the Birkhoff polytope (square,
    ``unmatched_score=None``) or the polytope of (partial) matchings: a sparse
    combination of a few matchings. The solvers require the MAP to maximise
    ``<eta_u, m_s>`` exactly, so they accept ``unmatched_score`` ``None`` or ``0``
    only. SparseMAP with threshold ``t`` is SparseMAP over ``eta_u - t`` with
    ``unmatched_score=0.0``: pass those scores (the solver's MAP is then the one above).

    Codes are ``(batch, m)`` int64: the column matched to each row, or -1.
    Optional ``lengths`` ``(batch, 2)`` give each example's ``(rows, columns)``
    for inputs padded at the end: padded rows and columns are never matched and
    padded rows get code -1. ``-inf`` pairs (forbidden) are never used when a
    matching avoiding them exists; with ``unmatched_score`` one always does.

    Args:
        unmatched_score: ``None`` for matchings of maximal size, or the score
            ``t`` a pair must beat to be used.

    Example:
        >>> scores = np.array([[[1.0, 3.0], [2.0, 0.0]]])
        >>> MatchingStructure().map(scores, np.zeros((1, 0)))
        array([[1, 0]])
        >>> MatchingStructure(unmatched_score=2.5).map(scores, np.zeros((1, 0)))
        array([[ 1, -1]])
    """

    def __init__(self, unmatched_score: float | None = None):
        if unmatched_score is not None:
            unmatched_score = float(unmatched_score)
            if not np.isfinite(unmatched_score):
                raise ValueError(f"unmatched_score must be finite or None. Received: {unmatched_score}")
        self.unmatched_score = unmatched_score

    def validate_codes(
        self, codes: np.ndarray, u_shape: tuple, lengths: np.ndarray | None = None, name: str = "codes"
    ) -> None:
        rows, cols = u_shape
        expected = (
            f"per example the column matched to each of the {rows} rows, or -1, each column at most once"
        )
        if self.unmatched_score is None:
            expected += ", and every row or every column matched (unmatched_score=None)"
        raise_for_invalid_codes(codes.shape[1:] != (rows,), codes, name, expected)
        sizes = np.broadcast_to((rows, cols), (len(codes), 2)) if lengths is None else lengths
        used_rows, used_cols = sizes[:, :1], sizes[:, 1:]
        in_range = np.where(np.arange(rows) < used_rows, (codes >= -1) & (codes < used_cols), codes == -1)
        # Sorted, a column used twice shows up as two equal neighbours.
        ordered = np.sort(np.where(in_range, codes, -1), axis=1)
        repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
        invalid = ~in_range.all(axis=1) | repeated.any(axis=1)
        if self.unmatched_score is None:
            invalid |= (codes >= 0).sum(axis=1) != sizes.min(axis=1)
        raise_for_invalid_codes(invalid, codes, name, expected)

    def compiled_oracle(self, u_shape, v_shape):
        threshold = np.array([self.unmatched_score or 0.0]).view(np.int64)[0]
        params = np.array(
            [u_shape[0], u_shape[1], self.unmatched_score is not None, threshold], dtype=np.int64
        )
        return CompiledOracle(
            _matching_oracle, params, (u_shape[0],), min(u_shape), one_hot_codes=True, parts=_matching_parts
        )

    def validate_shapes(self, u_shape: tuple, v_shape: tuple) -> None:
        if len(u_shape) != 2:
            raise ValueError(
                "MatchingStructure expects pair scores of per-example shape (m, n). "
                f"Received: eta_u per-example shape={tuple(u_shape)}"
            )
        if self.unmatched_score not in (None, 0.0):
            raise ValueError(
                "SparseMAP needs a MAP oracle maximising <eta_u, m_s>; a nonzero unmatched_score "
                "shifts it. Pass eta_u - unmatched_score with MatchingStructure(unmatched_score=0.0). "
                f"Received: unmatched_score={self.unmatched_score}"
            )
        super().validate_shapes(u_shape, v_shape)

    def validate_lengths(self, lengths: np.ndarray, u_shape: tuple) -> None:
        if lengths.ndim != 2 or lengths.shape[1] != 2 or np.any(lengths < 0) or np.any(lengths > u_shape):
            raise ValueError(
                f"Matching lengths must have shape (batch, 2): (rows, columns) within {tuple(u_shape)}. "
                f"Received: lengths={lengths.tolist()}"
            )

    def get_config(self) -> dict:
        return {"unmatched_score": self.unmatched_score}
