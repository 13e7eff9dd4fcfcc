"""Maximum spanning arborescence (Chu-Liu-Edmonds, Tarjan's dense O(n^2) version), compiled by numba.

The graph is complete on nodes ``0..n``; node 0 is the root. The weight of arc
``h -> d`` is the pair ``(-penalty(h, d), scores[h, d])`` compared
lexicographically, where ``penalty`` is 1 on root arcs when only one root child
is allowed and 0 otherwise. Edmonds' algorithm is exact over any totally ordered
abelian group, so this is the classic "subtract a huge constant from every root
arc" reduction for single-root trees, done without rounding: the optimum has
the fewest root arcs (one) and, among those, the highest score. Without the
single-root option every penalty is 0 and the ranks are never read.

The tables are stored by dependent: row ``t`` holds the arcs entering slot
``t``. Without ranks, column ``x`` always holds arcs out of original node ``x``
(``owner`` names the live supernode containing it) and row ``t`` holds ``-inf``
at the original nodes inside ``t`` (self-loops), so finding the best entering
arc and merging a cycle are scans of whole contiguous rows; with ranks,
the best arc between two live nodes is kept in their own row and column and the
scans run over a list of the live slots, which shrinks with every contraction.
The weight table is the caller's scores laid out by dependent: a copy for
:func:`max_arborescence`, the scores themselves for
:func:`max_arborescence_by_dependent` (the SparseMAP kernel's scratch copy).
"""

from __future__ import annotations

import numba
import numpy as np

_UNTOUCHED, _ON_PATH, _DONE = 0, 1, 2
# Arcs are packed as head << _HEAD_SHIFT | dependent: shifts and masks, not divisions.
_HEAD_SHIFT = 32
_DEPENDENT_MASK = (1 << _HEAD_SHIFT) - 1


@numba.njit(cache=True, nogil=True)
def _better(rank: int, weight: float, best_rank: int, best_weight: float) -> bool:
    """Lexicographic ``(rank, weight) > (best_rank, best_weight)``; ties keep the incumbent."""
    return rank > best_rank or (rank == best_rank and weight > best_weight)


@numba.njit(cache=True, nogil=True)
def _arc_tables(size, single_root):
    """Rank and original arc (``head << _HEAD_SHIFT | dependent``) of the arcs in the tables,
    indexed ``[dependent slot, head slot]`` as the weights."""
    arc = np.empty((size, size), dtype=np.int64)
    for d in range(size):
        for h in range(size):
            arc[d, h] = h << _HEAD_SHIFT | d
    rank = np.zeros((size if single_root else 1, size), dtype=np.int64)
    if single_root:
        rank[:, 0] = -1
    return rank, arc


@numba.njit(cache=True, nogil=True)
def _best_ranked(target, weight, rank, live, live_count):
    """Live slot of the best ``(rank, weight)`` arc into slot ``target`` (smallest on ties)."""
    best, best_rank, best_weight = -1, 0, 0.0
    for j in range(live_count):
        x = live[j]
        if x != target and (best < 0 or _better(rank[target, x], weight[target, x], best_rank, best_weight)):
            best, best_rank, best_weight = x, rank[target, x], weight[target, x]
    return best


@numba.njit(cache=True, nogil=True)
def _merge_ranked(
    path, first, length, slot_of, node_at, weight, rank, arc, in_weight, in_rank, live, live_count
):
    """Contract the cycle ``path[first:length]`` with lexicographic ``(rank, weight)`` arcs:
    drop its members from the live slots, then keep the best reweighted arc from each
    remaining live slot into the cycle, and the best one out of it towards that slot,
    in row and column ``slot_of[path[first]]``. Returns the new number of live slots."""
    head = path[first]  # the member whose slot the supernode takes
    into, head_rank, head_weight = slot_of[head], in_rank[head], in_weight[head]
    kept = 0
    for j in range(live_count):
        if node_at[live[j]] >= 0 or live[j] == into:
            live[kept] = live[j]
            kept += 1
    for j in range(kept):
        x = live[j]
        if x == into:
            continue
        enter, enter_rank, enter_weight = into, rank[into, x] - head_rank, weight[into, x] - head_weight
        leave, leave_rank, leave_weight = into, rank[x, into], weight[x, into]
        for i in range(first + 1, length):
            s, v = slot_of[path[i]], path[i]
            candidate, candidate_rank = weight[s, x] - in_weight[v], rank[s, x] - in_rank[v]
            if _better(candidate_rank, candidate, enter_rank, enter_weight):
                enter, enter_rank, enter_weight = s, candidate_rank, candidate
            if _better(rank[x, s], weight[x, s], leave_rank, leave_weight):
                leave, leave_rank, leave_weight = s, rank[x, s], weight[x, s]
        weight[into, x], rank[into, x], arc[into, x] = enter_weight, enter_rank, arc[enter, x]
        weight[x, into], rank[x, into], arc[x, into] = leave_weight, leave_rank, arc[x, leave]
    return kept


@numba.njit(cache=True, nogil=True)
def _expand(n, count, parent, in_arc, heads):
    """Undo the contractions, newest first: the arc entering a supernode replaces the
    cycle arc into the member that contains its original dependent."""
    size = n + 1
    for c in range(count - 1, n, -1):
        member = in_arc[c] & _DEPENDENT_MASK
        while parent[member] != c:
            member = parent[member]
        in_arc[member] = in_arc[c]
    for d in range(1, size):
        heads[d] = in_arc[d] >> _HEAD_SHIFT


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
        scores: ``(>= n + 1, >= n + 1)`` finite float64 arc scores ``[head, dependent]``;
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
    _check_sizes(scores, n, heads)
    size = n + 1
    by_dependent = np.empty((size, size))
    for h in range(size):  # the transposition reads rows and writes columns: faster than the reverse
        for d in range(size):
            by_dependent[d, h] = scores[h, d]
    _search(by_dependent, n, single_root, heads)


@numba.njit(cache=True, nogil=True)
def max_arborescence_by_dependent(scores: np.ndarray, n: int, single_root: bool, heads: np.ndarray) -> None:
    """:func:`max_arborescence` of scores laid out ``[dependent, head]``, overwritten.

    The search runs in ``scores[:n + 1, :n + 1]`` itself, which is left holding
    intermediate values: for callers that own a scratch copy (the compiled
    SparseMAP kernel), this saves the copy and transposition of the scores.

    Example:
        >>> heads, scores = np.full(3, -1), np.array([[0, 5, 1], [0, 0, 2], [0, 3, 0.0]])
        >>> max_arborescence_by_dependent(scores.T.copy(), 2, False, heads)
        >>> heads.tolist()
        [-1, 0, 1]
    """
    _check_sizes(scores, n, heads)
    _search(scores, n, single_root, heads)  # only reads and writes scores[:n + 1, :n + 1]


@numba.njit(cache=True, nogil=True)
def _check_sizes(scores, n, heads):
    if n < 0 or heads.shape[0] <= n or scores.shape[0] <= n or scores.shape[1] <= n:
        raise ValueError("max_arborescence needs scores and heads covering nodes 0..n")


@numba.njit(cache=True, nogil=True)
def _search(weight, n, single_root, heads):
    """The search of :func:`max_arborescence` in the ``(n + 1, n + 1)`` table ``weight``
    ``[dependent, head]`` (overwritten).

    Without ranks, the best entering arc and the contraction are written out here
    rather than in helpers: a helper taking arrays costs numba two atomic reference
    count updates per array and call, which were a quarter of the search's time.
    """
    if n == 0:
        return
    size, capacity = n + 1, 2 * n + 1
    for d in range(size):
        weight[d, d] = -np.inf
    rank, arc = _arc_tables(size, single_root)
    # Nodes (words, then supernodes by creation) live in slots: the rows of the tables.
    # The integer arrays share one allocation (they are small: allocations show).
    ints = np.empty(6 * capacity + 6 * size, np.int64)
    slot_of, state = ints[:capacity], ints[capacity : 2 * capacity]
    parent, in_rank = ints[2 * capacity : 3 * capacity], ints[3 * capacity : 4 * capacity]
    in_arc, path = ints[4 * capacity : 5 * capacity], ints[5 * capacity : 6 * capacity]
    nodes = ints[6 * capacity :]
    node_at, live, owner = nodes[:size], nodes[size : 2 * size], nodes[2 * size : 3 * size]
    # The original nodes inside each slot's node, as linked lists: first, last, next.
    first_node, last_node = nodes[3 * size : 4 * size], nodes[4 * size : 5 * size]
    next_node = nodes[5 * size :]
    for x in range(capacity):
        slot_of[x], state[x], parent[x], in_rank[x], in_arc[x] = -1, _UNTOUCHED, -1, 0, 0
    for x in range(size):
        # live: the slots of live nodes, in slot order (ranks only); owner: the slot of
        # the live node that contains each original node.
        node_at[x] = slot_of[x] = live[x] = owner[x] = first_node[x] = last_node[x] = x
        next_node[x] = -1
    state[0] = _DONE
    in_weight = np.zeros(capacity)
    live_count = size
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
        if single_root:
            best = _best_ranked(target, weight, rank, live, live_count)
            in_rank[current] = rank[target, best]
        else:  # column x holds arcs out of original node x (-inf within the node itself)
            best = 0  # the first column of the maximum
            for x in range(1, size):
                if weight[target, x] > weight[target, best]:
                    best = x
        source = node_at[owner[best]]
        in_weight[current], in_arc[current] = weight[target, best], arc[target, best]
        if state[source] == _DONE:
            for i in range(length):
                state[path[i]] = _DONE
            length = 0
            continue
        if state[source] == _UNTOUCHED:
            state[source] = _ON_PATH
            path[length] = source
            length += 1
            continue
        # A cycle, path[first:length]: its nodes merge into supernode `count`, which takes
        # the first one's slot `into`. An arc entering the cycle at v is reweighted by minus
        # the weight of the cycle arc into v (Edmonds' contraction), and only the best one
        # from each node is kept (the first member on ties), in row `into`.
        first = length - 1
        while path[first] != source:
            first -= 1
        into = slot_of[path[first]]
        for i in range(first, length):
            parent[path[i]] = count
            node_at[slot_of[path[i]]] = -1
        if single_root:
            live_count = _merge_ranked(
                path, first, length, slot_of, node_at, weight, rank, arc, in_weight, in_rank, live, live_count
            )
        else:  # whole contiguous rows; arcs leaving the cycle stay in their columns
            shift = in_weight[path[first]]
            for x in range(size):
                weight[into, x] -= shift
            for i in range(first + 1, length):
                s, shift = slot_of[path[i]], in_weight[path[i]]
                for x in range(size):
                    candidate = weight[s, x] - shift
                    if candidate > weight[into, x]:
                        weight[into, x], arc[into, x] = candidate, arc[s, x]
        # The original nodes of the members now belong to `into` (arcs among them are
        # self-loops, -inf); their lists are chained onto its own.
        for i in range(first, length):
            s = slot_of[path[i]]
            x = first_node[s]
            while x >= 0:
                owner[x] = into
                weight[into, x] = -np.inf
                x = next_node[x]
            if s != into:
                next_node[last_node[into]] = first_node[s]
                last_node[into] = last_node[s]
        node_at[into] = count
        slot_of[count] = into
        state[count] = _ON_PATH
        path[first], length = count, first + 1
        count += 1
    _expand(n, count, parent, in_arc, heads)
