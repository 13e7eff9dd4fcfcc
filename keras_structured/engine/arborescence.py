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
arc and merging a cycle are branch-free scans of contiguous rows; with ranks,
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
def _best_entering(target, weight, rank, live, live_count, single_root):
    """Column of the best arc into slot ``target`` (smallest on ties): a live slot with
    ranks, an original node (whose live supernode is ``owner[column]``) without."""
    row = weight[target]
    if single_root:
        best, best_rank, best_weight = -1, 0, 0.0
        for j in range(live_count):
            x = live[j]
            if x != target and (best < 0 or _better(rank[target, x], row[x], best_rank, best_weight)):
                best, best_rank, best_weight = x, rank[target, x], row[x]
        return best
    best, best_weight = 0, row[0]
    for x in range(1, row.shape[0]):
        if row[x] > best_weight:
            best, best_weight = x, row[x]
    return best


@numba.njit(cache=True, nogil=True)
def _merge_ranked(cycle, first, slot_of, weight, rank, arc, in_weight, in_rank, live, live_count):
    """The merge of :func:`_contract` with lexicographic ``(rank, weight)`` arcs, over the
    live slots outside the cycle: the best reweighted arc from each into the cycle and out
    of it, kept in row and column ``first``."""
    for j in range(live_count):
        x = live[j]
        if x == first:
            continue
        enter, enter_rank, enter_weight = (
            first,
            rank[first, x] - in_rank[cycle[0]],
            weight[first, x] - in_weight[cycle[0]],
        )
        leave, leave_rank, leave_weight = first, rank[x, first], weight[x, first]
        for i in range(1, len(cycle)):
            s, v = slot_of[cycle[i]], cycle[i]
            candidate, candidate_rank = weight[s, x] - in_weight[v], rank[s, x] - in_rank[v]
            if _better(candidate_rank, candidate, enter_rank, enter_weight):
                enter, enter_rank, enter_weight = s, candidate_rank, candidate
            if _better(rank[x, s], weight[x, s], leave_rank, leave_weight):
                leave, leave_rank, leave_weight = s, rank[x, s], weight[x, s]
        weight[first, x], rank[first, x], arc[first, x] = enter_weight, enter_rank, arc[enter, x]
        weight[x, first], rank[x, first], arc[x, first] = leave_weight, leave_rank, arc[x, leave]


@numba.njit(cache=True, nogil=True)
def _contract(
    cycle,
    new,
    node_at,
    slot_of,
    owner,
    weight,
    rank,
    arc,
    in_weight,
    in_rank,
    parent,
    live,
    live_count,
    single_root,
):
    """Merge the nodes of ``cycle`` into supernode ``new``, which takes the first one's slot.

    An arc entering the cycle at ``v`` is reweighted by minus the weight of the
    cycle arc into ``v`` (Edmonds' contraction), and only the best one from each
    node is kept (the first cycle member on ties), in row ``first``. Arcs leaving
    the cycle keep their weights: without ranks they stay where they are, in the
    columns of the original nodes, which ``owner`` now maps to ``first`` (and
    row ``first`` gets ``-inf`` there: arcs within a supernode are self-loops);
    with ranks the best one towards each live node is kept in column ``first``.
    Returns the number of live slots in ``live`` (only kept up to date with ranks).
    """
    first = slot_of[cycle[0]]
    for i in range(len(cycle)):
        parent[cycle[i]] = new
        node_at[slot_of[cycle[i]]] = -1
    if single_root:
        kept = 0
        for j in range(live_count):
            if node_at[live[j]] >= 0 or live[j] == first:
                live[kept] = live[j]
                kept += 1
        live_count = kept
        _merge_ranked(cycle, first, slot_of, weight, rank, arc, in_weight, in_rank, live, live_count)
    else:
        # Whole contiguous rows (-inf at the members' own nodes never wins).
        shift = in_weight[cycle[0]]
        for x in range(weight.shape[1]):
            weight[first, x] -= shift
        for i in range(1, len(cycle)):
            s, v = slot_of[cycle[i]], cycle[i]
            for x in range(weight.shape[1]):
                candidate = weight[s, x] - in_weight[v]
                if candidate > weight[first, x]:
                    weight[first, x], arc[first, x] = candidate, arc[s, x]
    for x in range(owner.shape[0]):
        if node_at[owner[x]] < 0:  # an original node inside the cycle
            owner[x] = first
            weight[first, x] = -np.inf
    node_at[first] = new
    slot_of[new] = first
    return live_count


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
    if scores.shape[0] == n + 1 and scores.shape[1] == n + 1:  # keeps the contiguous layout
        _search(scores, n, single_root, heads)
    else:
        _search(scores[: n + 1, : n + 1], n, single_root, heads)


@numba.njit(cache=True, nogil=True)
def _check_sizes(scores, n, heads):
    if n < 0 or heads.shape[0] <= n or scores.shape[0] <= n or scores.shape[1] <= n:
        raise ValueError("max_arborescence needs scores and heads covering nodes 0..n")


@numba.njit(cache=True, nogil=True)
def _search(weight, n, single_root, heads):
    """The search of :func:`max_arborescence` in the ``(n + 1, n + 1)`` table ``weight``
    ``[dependent, head]`` (overwritten)."""
    if n == 0:
        return
    size, capacity = n + 1, 2 * n + 1
    for d in range(size):
        weight[d, d] = -np.inf
    rank, arc = _arc_tables(size, single_root)
    # Nodes (words, then supernodes by creation) live in slots: the rows of the tables.
    # The integer arrays share one allocation (they are small: allocations show).
    ints = np.empty(6 * capacity + 3 * size, np.int64)
    slot_of, state = ints[:capacity], ints[capacity : 2 * capacity]
    parent, in_rank = ints[2 * capacity : 3 * capacity], ints[3 * capacity : 4 * capacity]
    in_arc, path = ints[4 * capacity : 5 * capacity], ints[5 * capacity : 6 * capacity]
    nodes = ints[6 * capacity :]
    node_at, live, owner = nodes[:size], nodes[size : 2 * size], nodes[2 * size :]
    for x in range(capacity):
        slot_of[x], state[x], parent[x], in_rank[x], in_arc[x] = -1, _UNTOUCHED, -1, 0, 0
    for x in range(size):
        # live: the slots of live nodes, in slot order (ranks only); owner: the slot of
        # the live node that contains each original node.
        node_at[x] = slot_of[x] = live[x] = owner[x] = x
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
        best = _best_entering(target, weight, rank, live, live_count, single_root)
        source = node_at[owner[best]]
        in_weight[current], in_arc[current] = weight[target, best], arc[target, best]
        if single_root:
            in_rank[current] = rank[target, best]
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
            live_count = _contract(
                path[first:length],
                count,
                node_at,
                slot_of,
                owner,
                weight,
                rank,
                arc,
                in_weight,
                in_rank,
                parent,
                live,
                live_count,
                single_root,
            )
            state[count] = _ON_PATH
            path[first], length = count, first + 1
            count += 1
    _expand(n, count, parent, in_arc, heads)
