"""Bipartite matchings (linear assignment) as a structure (Niculae et al. 2018, sections 2.2 and 5.2)."""

from __future__ import annotations

import numba as nb
import numpy as np

from keras_structured.engine.compiled_oracle import CompiledOracle
from keras_structured.engine.structure import Structure, raise_for_invalid_codes


@nb.njit(cache=True, nogil=True)
def _reduce_columns(scores, u, v, owner, assignment):
    """Start a square assignment: ``v_j = max_i scores[i, j]``, ``u_i = max_j scores[i, j] - v_j``
    (feasible duals), and every column matched to its best row where that pair is tight
    and the row still free. Writes ``u``, ``v``, ``owner`` and ``assignment`` in place."""
    rows, cols = scores.shape
    for j in range(cols - 1, -1, -1):
        best, best_row = -np.inf, 0
        for i in range(rows):
            if scores[i, j] > best:
                best, best_row = scores[i, j], i
        v[j] = best
        if assignment[best_row] < 0:
            assignment[best_row], owner[j] = j, best_row
    for i in range(rows):
        u[i] = -np.inf
        for j in range(cols):
            u[i] = max(u[i], scores[i, j] - v[j])
        j = assignment[i]
        if j >= 0 and scores[i, j] - v[j] != u[i]:
            assignment[i], owner[j] = -1, -1


@nb.njit(cache=True, nogil=True)
def _max_assignment(scores, assignment):
    """A maximum-score assignment of every row of ``scores`` to its own column (rows <= columns).

    Solves ``max_sigma sum_i scores[i, sigma(i)]`` over one-to-one ``sigma`` by
    shortest augmenting paths (Jonker and Volgenant 1987, in the form of Crouse
    2016 that scipy's ``linear_sum_assignment`` uses), O(rows^2 columns). Row by
    row, a Dijkstra search over the reduced scores ``u_i + v_j - scores[i, j] >= 0``
    (dual potentials ``u``, ``v``) finds the best way to fit the row in, and the
    potentials are updated so that every matched pair keeps a reduced score of 0.
    Every step of the search scans all the columns in branch-free passes (settled
    columns are masked by ``+inf``), which the compiler vectorizes. Square problems
    start from the column reduction of Jonker and Volgenant, which matches many rows
    without a search.

    Args:
        scores: ``(rows, columns)`` C-contiguous float64 scores.
        assignment: ``(rows,)`` int64 output: the column of every row.

    Returns:
        False if the search met no finite reduced score where it needed one (``-inf``
        or NaN scores left no finite way to match a row): ``assignment`` is then
        incomplete.
    """
    rows, cols = scores.shape
    u, v, distance = np.zeros(rows), np.zeros(cols), np.empty(cols)
    # The search's tentative distances, and +inf on the columns it has settled.
    tentative, settled_mask = np.full(cols, np.inf), np.zeros(cols)
    owner, previous, settled = np.full(cols, -1), np.empty(cols, np.int64), np.empty(cols, np.int64)
    reached = np.empty(rows, np.int64)  # the rows the search went through, in order
    assignment[:] = -1
    if rows == cols:
        _reduce_columns(scores, u, v, owner, assignment)
    for row in range(rows):
        if assignment[row] >= 0:
            continue
        steps, i, path_length, sink = 0, row, 0.0, -1
        while sink < 0:
            reached[steps] = i
            base, row_scores = path_length + u[i], scores[i]
            for j in range(cols):
                through_i = base + v[j] - row_scores[j] + settled_mask[j]
                shorter = through_i < tentative[j]
                tentative[j] = through_i if shorter else tentative[j]
                previous[j] = i if shorter else previous[j]
            closest = np.inf
            for j in range(cols):
                closest = min(closest, tentative[j])
            if not closest < np.inf:
                return False
            # The first closest column; a free one on ties (it ends the search).
            j = -1
            for k in range(cols):
                if tentative[k] == closest:
                    if owner[k] < 0:
                        j = k
                        break
                    j = k if j < 0 else j
            distance[j], tentative[j], settled_mask[j], settled[steps] = closest, np.inf, np.inf, j
            steps += 1
            path_length = closest
            if owner[j] < 0:
                sink = j
            else:
                i = owner[j]
        # New potentials: reduced scores stay >= 0, and 0 on the pairs of the new assignment.
        u[row] -= path_length
        for k in range(1, steps):
            u[reached[k]] -= path_length - distance[assignment[reached[k]]]
        for k in range(steps):
            j = settled[k]
            v[j] += path_length - distance[j]
            settled_mask[j] = 0.0
        tentative[:] = np.inf
        # Augment along the path back from the sink.
        j = sink
        while True:
            i = previous[j]
            owner[j] = i
            assignment[i], j = j, assignment[i]
            if i == row:
                break
    return True


@nb.njit(cache=True, nogil=True)
def _replace_non_finite(scores):
    """Swap the non-finite entries of ``scores`` (in place) for a penalty ``-(2 F + 1)``,
    ``F`` the sum of the finite ``|scores|``: an assignment then uses as few of them as
    possible and, with as many, scores best on the others."""
    mass = 0.0
    for value in scores.ravel():
        if np.isfinite(value):
            mass += abs(value)
    for i in range(scores.shape[0]):
        for j in range(scores.shape[1]):
            if not np.isfinite(scores[i, j]):
                scores[i, j] = -(2.0 * mass + 1.0)


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
    scores = scores_u.reshape(rows, cols)[:used_rows, :used_cols]
    # The assignment runs along the smaller side, on a contiguous copy.
    transposed = used_rows > used_cols
    along = np.ascontiguousarray(scores.T if transposed else scores)
    if partial:
        along = np.maximum(along - threshold, 0.0)  # the gains over the threshold
    assigned = np.empty(along.shape[0], np.int64)
    if not _max_assignment(along, assigned):
        _replace_non_finite(along)  # -inf: forbidden pairs; NaN: garbage in, a matching out
        _max_assignment(along, assigned)
    for k in range(along.shape[0]):
        j = assigned[k]
        if j >= 0 and (not partial or along[k, j] > 0.0):  # a pair is used only for a positive gain
            code[j if transposed else k] = k if transposed else j
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
    ``P``, and there is no higher-order part. The MAP oracle (a Hungarian-type
    algorithm: Jonker-Volgenant shortest augmenting paths, compiled, one call per
    example) solves

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
