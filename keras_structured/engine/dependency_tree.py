"""Dependency trees (arc-factored) as a structure: SparseMAP over the arborescence polytope."""

from __future__ import annotations

import functools

import numba
import numpy as np

from keras_structured.engine.arborescence import max_arborescence_by_dependent
from keras_structured.engine.compiled_oracle import CompiledOracle
from keras_structured.engine.eisner import max_projective_tree
from keras_structured.engine.forbidden import finite_mass, replace_forbidden
from keras_structured.engine.structure import Structure, raise_for_invalid_codes


@numba.njit(cache=True, nogil=True)
def _tree_oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
    """:class:`CompiledOracle` function: the best non-projective tree of one example's flat
    scores, read by dependent (see :func:`_by_dependent`) and searched in place.

    ``params`` is ``(n + 1, single_root, projective)``; ``length[0] < 0`` means all words.
    """
    size, words = _tree_sizes(params, length, code)
    max_arborescence_by_dependent(scores_u.reshape((size, size)), words, params[1] == 1, code)
    return _tree_parts(code, params, m_indices, m_values, n_indices, n_values)


@numba.njit(cache=True, nogil=True)
def _projective_oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
    """:func:`_tree_oracle` for projective trees (Eisner's algorithm), scores ``[head, dependent]``.
    A function of its own: only structures that ask for projective trees compile it."""
    size, words = _tree_sizes(params, length, code)
    max_projective_tree(scores_u.reshape((size, size)), words, params[1] == 1, code)
    return _tree_parts(code, params, m_indices, m_values, n_indices, n_values)


@numba.njit(cache=True, nogil=True)
def _tree_sizes(params, length, code):
    """``(n + 1, words)`` of one example; clears its heads ``code``."""
    code[:] = -1
    return params[0], params[0] - 1 if length[0] < 0 else length[0]


@numba.njit(cache=True, nogil=True)
def _tree_parts(code, params, m_indices, m_values, n_indices, n_values):
    """The arcs of a tree given by its heads (see :class:`CompiledOracle`), in the oracle's
    order: ``[dependent, head]`` for non-projective trees, ``[head, dependent]`` otherwise."""
    size, projective = params[0], params[2] == 1
    count = 0
    for d in range(1, size):
        if code[d] >= 0:
            m_indices[count] = code[d] * size + d if projective else d * size + code[d]
            m_values[count] = 1.0
            count += 1
    return count, np.int64(0)


@functools.cache  # every batched map and indicators call asks for it
def _by_dependent(size: int) -> np.ndarray:
    """Positions in the flat ``[head, dependent]`` scores of the ``[dependent, head]`` layout
    (read-only: the array is shared)."""
    order = np.arange(size * size).reshape(size, size).T.ravel()
    order.flags.writeable = False
    return order


def best_trees(
    scores: np.ndarray, lengths: np.ndarray | None = None, single_root: bool = False, projective: bool = False
) -> np.ndarray:
    """Highest-scoring dependency tree of every example of a batch.

    Solves ``argmax_T sum_{(h, d) in T} scores[b, h, d]`` over the spanning trees
    ``T`` of words ``1..lengths[b]`` directed away from the root 0: by
    Chu-Liu-Edmonds in O(n^2) per example (Tarjan's dense variant), or by
    Eisner's O(n^3) algorithm over projective trees. ``single_root`` keeps the
    trees with exactly one arc out of the root (exactly, by lexicographic
    weights or a last step of Eisner's algorithm). ``-inf`` scores forbid arcs:
    they are replaced by a penalty larger than the score of any tree, so a tree
    uses them only when every tree does.

    Args:
        scores: ``(batch, n + 1, n + 1)`` arc scores ``[head, dependent]``;
            ``scores[:, :, 0]`` and the diagonal are ignored.
        lengths: optional ``(batch,)`` numbers of words in ``[0, n]``; the others
            are padding. Defaults to ``n``.
        single_root: allow only one arc out of the root.
        projective: allow only projective trees (no crossing arcs).

    Returns:
        ``(batch, n + 1)`` int64 heads; the root and padding words get ``-1``.
        Ties are broken deterministically.

    Example:
        >>> scores = np.array([[[0, 5, 1], [0, 0, 2], [0, 3, 0.0]]])
        >>> best_trees(scores)
        array([[-1,  0,  1]])
        >>> best_trees(scores, single_root=True, projective=True)
        array([[-1,  0,  1]])
    """
    scores = np.ascontiguousarray(scores, dtype=np.float64)
    _check_shape(scores.shape[1:])
    batch, size = scores.shape[:2]
    if not np.isfinite(scores).all():
        flat = scores.reshape(batch, -1)
        scores = replace_forbidden("eta_u", flat, finite_mass(flat))[0].reshape(scores.shape)
    if lengths is None:
        lengths = np.full(batch, size - 1, dtype=np.int64)
    else:
        lengths = np.asarray(lengths)
        _check_lengths(lengths, batch, size - 1)
    structure = DependencyTreeStructure(single_root, projective)
    return structure.map(scores, np.zeros((batch, 0)), lengths.astype(np.int64))


def _check_shape(u_shape: tuple) -> None:
    if len(u_shape) != 2 or (None not in u_shape and (u_shape[0] != u_shape[1] or u_shape[0] < 1)):
        raise ValueError(
            "Dependency trees need arc scores of per-example shape (n + 1, n + 1). "
            f"Received: eta_u per-example shape={tuple(u_shape)}"
        )


def _check_lengths(lengths: np.ndarray, batch: int, words: int) -> None:
    if lengths.shape != (batch,) or np.any(lengths < 0) or np.any(lengths > words):
        raise ValueError(
            f"Dependency tree lengths must have shape ({batch},) with values in [0, {words}]. "
            f"Received: lengths={lengths.tolist()}"
        )


class DependencyTreeStructure(Structure):
    """Dependency trees over ``n`` words plus a root (index 0), with arc scores.

    ``m_s`` (shape ``(n + 1, n + 1)``) has a one at ``[h, d]`` for every arc
    ``h -> d`` of the tree (the columns sum to one over the words, the root
    column is zero); there is no higher-order part. SparseMAP then solves
    ``max_{u in arborescence polytope} <eta_u, u> - ||u||^2 / 2`` and ``u`` are
    sparse arc marginals. Codes are the ``(n + 1,)`` head vectors, ``-1`` for the
    root and for the padding words past ``lengths``.

    Args:
        single_root: only trees with exactly one arc out of the root.
        projective: only projective trees (Eisner's algorithm), else any
            spanning tree (Chu-Liu-Edmonds).

    Example:
        >>> from keras_structured.engine import solve
        >>> scores = np.array([[[0, 2.0, 1.0], [0, 0, 1.0], [0, 1.0, 0]]])
        >>> solve(DependencyTreeStructure(), scores).u
        array([[[0. , 1. , 0.5],
                [0. , 0. , 0.5],
                [0. , 0. , 0. ]]])
    """

    lengths_from_codes = True

    def __init__(self, single_root: bool = False, projective: bool = False):
        self.single_root = bool(single_root)
        self.projective = bool(projective)

    def validate_codes(self, codes, u_shape, lengths=None, name="codes"):
        size = u_shape[0]
        expected = (
            f"{size} heads per example: -1 at the root (position 0) and past the last word, "
            "and for every word the root (0) or another word, with no cycle"
            + (" and exactly one word attached to the root" if self.single_root else "")
        )
        raise_for_invalid_codes(codes.shape[1:] != (size,), codes, name, expected)
        words = np.minimum(size - 1, size - 1 if lengths is None else lengths)[:, None]
        position = np.arange(size)
        is_word = (position >= 1) & (position <= words)
        valid = np.where(is_word, (codes >= 0) & (codes <= words) & (codes != position), codes == -1)
        # Pointer doubling: after k steps every position points at its 2^k-th ancestor
        # (the root and padding point at 0), so words off a cycle end at the root.
        ancestors = np.where(valid, np.maximum(codes, 0), 0)
        reach = 1
        while reach < size:
            ancestors, reach = np.take_along_axis(ancestors, ancestors, axis=1), 2 * reach
        invalid = ~valid.all(axis=1) | ancestors.any(axis=1)
        if self.single_root:
            invalid |= (codes == 0).sum(axis=1) != np.minimum(words[:, 0], 1)
        raise_for_invalid_codes(invalid, codes, name, expected)

    def compiled_oracle(self, u_shape, v_shape):
        params = np.array([u_shape[0], self.single_root, self.projective], dtype=np.int64)
        order = None if self.projective else _by_dependent(u_shape[0])
        return CompiledOracle(
            _projective_oracle if self.projective else _tree_oracle,
            params,
            (u_shape[0],),
            max(u_shape[0] - 1, 0),
            order=order,
            one_hot_codes=True,
            parts=_tree_parts,
        )

    def validate_shapes(self, u_shape, v_shape):
        _check_shape(u_shape)
        super().validate_shapes(u_shape, v_shape)

    def present_parts(self, lengths, u_shape):
        # arc [h, d]: a head h <= L, a dependent 1 <= d <= L, h != d
        words = np.asarray(lengths)[:, None, None]
        heads, dependents = np.arange(u_shape[0])[None, :, None], np.arange(u_shape[1])[None, None, :]
        return (heads <= words) & (dependents >= 1) & (dependents <= words) & (heads != dependents)

    def validate_lengths(self, lengths, u_shape):
        _check_lengths(lengths, len(lengths), u_shape[0] - 1)

    def get_config(self):
        return {"single_root": self.single_root, "projective": self.projective}
