"""Eisner's O(n^3) algorithm for the best projective dependency tree, compiled by numba.

Spans ``[s, t]`` of the sentence ``0..n`` (0 is the root, at the left end) come
in four kinds: *complete* or *incomplete*, headed at the left end (direction
``_RIGHT``: arcs point rightwards) or at the right end (``_LEFT``). An incomplete
span is an arc between its ends plus the two complete halves below it; a
complete span is an incomplete span plus one more complete span beyond its
dependent.
"""

from __future__ import annotations

import numba
import numpy as np

_LEFT, _RIGHT = 0, 1


@numba.njit(cache=True, nogil=True)
def _fill_charts(scores, n, first):
    """Best scores and split points of all spans inside ``first..n``."""
    size = n + 1
    complete = np.full((size, size, 2), -np.inf)
    incomplete = np.full((size, size, 2), -np.inf)
    complete_split = np.zeros((size, size, 2), dtype=np.int64)
    incomplete_split = np.zeros((size, size), dtype=np.int64)
    for s in range(size):
        complete[s, s, _LEFT] = complete[s, s, _RIGHT] = 0.0
    for width in range(1, n - first + 1):
        for s in range(first, size - width):
            t = s + width
            best, split = -np.inf, s
            for r in range(s, t):
                value = complete[s, r, _RIGHT] + complete[r + 1, t, _LEFT]
                if value > best:
                    best, split = value, r
            incomplete_split[s, t] = split
            incomplete[s, t, _RIGHT] = best + scores[s, t]
            if s > 0:
                incomplete[s, t, _LEFT] = best + scores[t, s]
            best, split = -np.inf, s
            for r in range(s, t):
                value = complete[s, r, _LEFT] + incomplete[r, t, _LEFT]
                if value > best:
                    best, split = value, r
            complete[s, t, _LEFT], complete_split[s, t, _LEFT] = best, split
            best, split = -np.inf, t
            for r in range(s + 1, t + 1):
                value = incomplete[s, r, _RIGHT] + complete[r, t, _RIGHT]
                if value > best:
                    best, split = value, r
            complete[s, t, _RIGHT], complete_split[s, t, _RIGHT] = best, split
    return complete, complete_split, incomplete_split


@numba.njit(cache=True, nogil=True)
def _push(stack, top, s, t, direction, is_complete):
    stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = s, t, direction, is_complete
    return top + 1


@numba.njit(cache=True, nogil=True)
def _backtrack(stack, top, complete_split, incomplete_split, heads):
    """Read the arcs off the split points; ``stack[:top]`` holds spans ``(s, t, direction, complete)``."""
    while top > 0:
        top -= 1
        s, t, direction, is_complete = stack[top]
        if s == t:
            continue
        if is_complete:
            r = complete_split[s, t, direction]
            if direction == _RIGHT:
                top = _push(stack, top, s, r, _RIGHT, 0)
                top = _push(stack, top, r, t, _RIGHT, 1)
            else:
                top = _push(stack, top, s, r, _LEFT, 1)
                top = _push(stack, top, r, t, _LEFT, 0)
        else:
            if direction == _RIGHT:
                heads[t] = s
            else:
                heads[s] = t
            r = incomplete_split[s, t]
            top = _push(stack, top, s, r, _RIGHT, 1)
            top = _push(stack, top, r + 1, t, _LEFT, 1)


@numba.njit(cache=True, nogil=True)
def max_projective_tree(scores: np.ndarray, n: int, single_root: bool, heads: np.ndarray) -> None:
    """Write into ``heads[1..n]`` the heads of the best projective tree rooted at 0.

    Solves ``max_T sum_{(h, d) in T} scores[h, d]`` over the projective spanning
    trees ``T`` of nodes ``0..n`` (no crossing arcs, the root at the left end)
    with Eisner's first-order dynamic program, O(n^3) time and O(n^2) memory.
    With ``single_root`` the root gets exactly one child ``r``, the best of
    ``scores[0, r]`` plus the complete spans ``r -> 1`` and ``r -> n``.
    Ties go to the leftmost split point and root child.

    Args:
        scores: ``(>= n + 1, >= n + 1)`` float64 arc scores ``[head, dependent]``.
        n: number of words.
        single_root: allow only one arc out of the root.
        heads: int64 output of length ``>= n + 1``; ``heads[0]`` is not written.

    Example:
        >>> heads = np.full(4, -1)
        >>> scores = np.zeros((4, 4))
        >>> scores[0, 1] = scores[0, 3] = scores[3, 2] = 1.0
        >>> max_projective_tree(scores, 3, False, heads)
        >>> heads.tolist()
        [-1, 0, 3, 0]
    """
    if n < 0 or heads.shape[0] <= n or scores.shape[0] <= n or scores.shape[1] <= n:
        raise ValueError("max_projective_tree needs scores and heads covering nodes 0..n")
    if n == 0:
        return
    complete, complete_split, incomplete_split = _fill_charts(scores, n, 1 if single_root else 0)
    stack = np.empty((4 * n + 4, 4), dtype=np.int64)
    if single_root:
        best, child = -np.inf, 1
        for r in range(1, n + 1):
            value = scores[0, r] + complete[1, r, _LEFT] + complete[r, n, _RIGHT]
            if value > best:
                best, child = value, r
        heads[child] = 0
        top = _push(stack, 0, 1, child, _LEFT, 1)
        top = _push(stack, top, child, n, _RIGHT, 1)
    else:
        top = _push(stack, 0, 0, n, _RIGHT, 1)
    _backtrack(stack, top, complete_split, incomplete_split, heads)
