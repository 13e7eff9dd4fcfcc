"""Maximum spanning arborescence (Chu-Liu-Edmonds, Tarjan's dense O(n^2) version), compiled by numba.

The graph is complete on nodes ``0..n``; node 0 is the root. The weight of arc
``h -> d`` is the pair ``(-penalty(h, d), scores[h, d])`` compared
lexicographically, where ``penalty`` is 1 on root arcs when only one root child
is allowed and 0 otherwise. Edmonds' algorithm is exact over any totally ordered
abelian group, so this is the classic "subtract a huge constant from every root
arc" reduction for single-root trees, done without rounding: the optimum has
the fewest root arcs (one) and, among those, the highest score.
"""

from __future__ import annotations

import numba
import numpy as np

_UNTOUCHED, _ON_PATH, _DONE = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def _better(rank: int, weight: float, best_rank: int, best_weight: float) -> bool:
    """Lexicographic ``(rank, weight) > (best_rank, best_weight)``; ties keep the incumbent."""
    return rank > best_rank or (rank == best_rank and weight > best_weight)


@numba.njit(cache=True, nogil=True)
def _initial_tables(scores, n, single_root):
    """Best arc between every two slots: weight, rank and original arc ``head * (n + 1) + dependent``."""
    size = n + 1
    weight = scores[:size, :size].copy()
    rank = np.zeros((size, size), dtype=np.int64)
    if single_root:
        rank[0, :] = -1
    arc = np.empty((size, size), dtype=np.int64)
    for h in range(size):
        for d in range(size):
            arc[h, d] = h * size + d
    return weight, rank, arc


@numba.njit(cache=True, nogil=True)
def _best_entering(target, node_at, weight, rank):
    """Slot of the live node with the best arc into slot ``target`` (smallest slot on ties)."""
    best, best_rank, best_weight = -1, 0, 0.0
    for x in range(node_at.shape[0]):
        if x == target or node_at[x] < 0:
            continue
        if best < 0 or _better(rank[x, target], weight[x, target], best_rank, best_weight):
            best, best_rank, best_weight = x, rank[x, target], weight[x, target]
    return best


@numba.njit(cache=True, nogil=True)
def _contract(cycle, new, node_at, slot_of, weight, rank, arc, in_weight, in_rank, parent):
    """Merge the nodes of ``cycle`` into supernode ``new``, which takes the first one's slot.

    An arc entering the cycle at ``v`` is reweighted by minus the weight of the
    cycle arc into ``v`` (Edmonds' contraction); arcs leaving the cycle keep their
    weights. Only the best arc between ``new`` and each other live node is kept.
    """
    slots = slot_of[cycle]
    for v in cycle:
        parent[v] = new
        node_at[slot_of[v]] = -1
    for x in range(node_at.shape[0]):
        if node_at[x] < 0:
            continue
        s, v = slots[0], cycle[0]
        enter, enter_rank, enter_weight = 0, rank[x, s] - in_rank[v], weight[x, s] - in_weight[v]
        leave, leave_rank, leave_weight = 0, rank[s, x], weight[s, x]
        for i in range(1, len(cycle)):
            s, v = slots[i], cycle[i]
            if _better(rank[x, s] - in_rank[v], weight[x, s] - in_weight[v], enter_rank, enter_weight):
                enter, enter_rank, enter_weight = i, rank[x, s] - in_rank[v], weight[x, s] - in_weight[v]
            if _better(rank[s, x], weight[s, x], leave_rank, leave_weight):
                leave, leave_rank, leave_weight = i, rank[s, x], weight[s, x]
        s, v = slots[enter], cycle[enter]
        weight[x, slots[0]], rank[x, slots[0]] = weight[x, s] - in_weight[v], rank[x, s] - in_rank[v]
        arc[x, slots[0]] = arc[x, s]
        s = slots[leave]
        weight[slots[0], x], rank[slots[0], x], arc[slots[0], x] = weight[s, x], rank[s, x], arc[s, x]
    node_at[slots[0]] = new
    slot_of[new] = slots[0]


@numba.njit(cache=True, nogil=True)
def _expand(n, count, parent, in_arc, heads):
    """Undo the contractions, newest first: the arc entering a supernode replaces the
    cycle arc into the member that contains its original dependent."""
    size = n + 1
    for c in range(count - 1, n, -1):
        member = in_arc[c] % size
        while parent[member] != c:
            member = parent[member]
        in_arc[member] = in_arc[c]
    for d in range(1, size):
        heads[d] = in_arc[d] // size


@numba.njit(cache=True, nogil=True)
def max_arborescence(scores: np.ndarray, n: int, single_root: bool, heads: np.ndarray) -> None:
    """Write into ``heads[1..n]`` the heads of the maximum spanning arborescence rooted at 0.

    Solves ``max_T sum_{(h, d) in T} scores[h, d]`` over the spanning trees ``T``
    of nodes ``0..n`` directed away from root 0 (with exactly one root arc if
    ``single_root``), in O(n^2) time and memory: Tarjan's path-growing
    Chu-Liu-Edmonds on a dense graph, where a contraction costs O(n * cycle
    length) and the cycle lengths sum to less than 2n. Ties go to the first
    candidate met (smallest node).

    Args:
        scores: ``(>= n + 1, >= n + 1)`` float64 arc scores ``[head, dependent]``;
            only ``scores[:n + 1, 1:n + 1]`` off the diagonal is read.
        n: number of words.
        single_root: allow only one arc out of the root.
        heads: int64 output of length ``>= n + 1``; ``heads[0]`` is not written.

    Example:
        >>> heads = np.full(3, -1)
        >>> max_arborescence(np.array([[0, 5, 1], [0, 0, 2], [0, 3, 0.0]]), 2, False, heads)
        >>> heads.tolist()
        [-1, 0, 1]
    """
    if n < 0 or heads.shape[0] <= n or scores.shape[0] <= n or scores.shape[1] <= n:
        raise ValueError("max_arborescence needs scores and heads covering nodes 0..n")
    if n == 0:
        return
    size, capacity = n + 1, 2 * n + 1
    weight, rank, arc = _initial_tables(scores, n, single_root)
    # Nodes (words, then supernodes by creation) live in slots: the rows of the tables.
    node_at, slot_of = np.arange(size), np.full(capacity, -1)
    slot_of[:size] = node_at
    state, parent = np.full(capacity, _UNTOUCHED), np.full(capacity, -1)
    state[0] = _DONE
    in_weight, in_rank, in_arc = (
        np.zeros(capacity),
        np.zeros(capacity, np.int64),
        np.zeros(capacity, np.int64),
    )
    path = np.empty(capacity, dtype=np.int64)
    count, length, start = size, 0, 1
    while True:
        if length == 0:
            while start <= n and state[start] != _UNTOUCHED:
                start += 1
            if start > n:
                break
            path[0], length = start, 1
            state[start] = _ON_PATH
        current = path[length - 1]
        target = slot_of[current]
        best = _best_entering(target, node_at, weight, rank)
        source = node_at[best]
        in_weight[current], in_rank[current] = weight[best, target], rank[best, target]
        in_arc[current] = arc[best, target]
        if state[source] == _DONE:
            for i in range(length):
                state[path[i]] = _DONE
            length = 0
        elif state[source] == _UNTOUCHED:
            state[source] = _ON_PATH
            path[length] = source
            length += 1
        else:
            first = length - 1
            while path[first] != source:
                first -= 1
            _contract(
                path[first:length], count, node_at, slot_of, weight, rank, arc, in_weight, in_rank, parent
            )
            state[count] = _ON_PATH
            path[first], length = count, first + 1
            count += 1
    _expand(n, count, parent, in_arc, heads)
