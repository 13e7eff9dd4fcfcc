"""Closed-form Euclidean projections onto the polytopes of the logic factors.

Every function here solves, for one factor, ``argmin_{w in P} ||w - c||^2 / 2`` (plus a
linear term for :func:`project_pair`), in O(d log d) for ``d`` variables. The polytopes are
written in *w-space*, where negated variables are already flipped (``w = 1 - x``); see
:mod:`keras_structured.engine.lp.logic`. They are the local subproblems of AD3
(Martins et al., JMLR 2015, section 5), rederived here:

* :func:`project_budget`: ``{w in [0, 1]^d : sum(w) <= k}`` (or ``= k``): clip to the box,
  and if the sum constraint is violated, the projection lies on ``sum(w) = k``, where it is
  ``clip(c - tau, 0, 1)`` for the ``tau`` that gives the sum ``k`` (a piecewise-linear
  equation in ``tau``, solved exactly on the segment between two breakpoints);
* :func:`project_cover`: ``{w in [0, 1]^d : sum(w) >= 1}`` (OR), the same argument;
* :func:`project_or_out`: ``{0 <= w_i <= y <= 1, y <= sum_i w_i}`` (OR with output);
* :func:`project_pair`: the marginal polytope of two binary variables and their product.

Each argument "project onto a larger set; if the result violates a half-space, the
projection lies on its boundary" holds because the larger set is convex: were the
projection onto the intersection strictly inside the half-space, it would be a local,
hence global, minimiser over the larger set.

Every function takes arrays with any leading axes (``(..., d)``) and projects each row:
ADMM projects the factors of one kind for a whole batch of examples in one call
(:mod:`~keras_structured.engine.lp.batch`). A row's result does not depend on the other rows.
"""

from __future__ import annotations

import numpy as np

# Rows of at most this many entries are counted by comparing all pairs (one vectorised
# operation), longer ones by a merge (O(d log d) memory and time rather than O(d^2)).
PAIRWISE_COUNT = 32


def _count_sorted(ordered: np.ndarray, points: np.ndarray, inclusive: bool) -> np.ndarray:
    """Per row, how many entries of ``ordered`` are ``<= points`` (``< points`` unless
    ``inclusive``): ``np.searchsorted`` (side ``right`` / ``left``) along the last axis.

    Short rows compare every pair. Longer ones use that both inputs are sorted along the
    last axis: a stable sort of the two merged places the ``j``-th point after the entries
    that precede it (ties: the first array of the merge first), so its position there
    minus ``j`` counts them.

    Example:
        >>> _count_sorted(np.array([[0.0, 1.0, 2.0]]), np.array([[1.0, 3.0]]), inclusive=True)
        array([[2, 3]])
    """
    size = points.shape[-1]
    if ordered.shape[-1] <= PAIRWISE_COUNT:
        below = (
            ordered[..., None, :] <= points[..., None]
            if inclusive
            else ordered[..., None, :] < points[..., None]
        )
        return np.count_nonzero(below, axis=-1)
    merged = (ordered, points) if inclusive else (points, ordered)
    order = np.argsort(np.concatenate(merged, axis=-1), axis=-1, kind="stable")
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(order.shape[-1]), axis=-1)
    first = ordered.shape[-1] if inclusive else 0
    return position[..., first : first + size] - np.arange(size)


def project_capped_simplex(c: np.ndarray, k: float) -> np.ndarray:
    """Project each row of ``c`` onto ``{w in [0, 1]^d : sum(w) = k}``, ``0 <= k <= d``.

    The solution is ``clip(c - tau, 0, 1)``; ``g(tau) = sum(clip(c - tau, 0, 1))`` is
    nonincreasing and linear between the breakpoints ``c_i - 1`` and ``c_i``. The segment
    where ``g`` crosses ``k`` gives the sets ``F = {c_i - tau >= 1}`` and ``I = {0 < c_i -
    tau < 1}``, and ``tau = (sum_I c_i + |F| - k) / |I|``.

    Args:
        c: ``(..., d)`` scores.
        k: the sum, in ``[0, d]``.

    Returns:
        ``(..., d)`` projection.

    Example:
        >>> project_capped_simplex(np.array([0.5, 0.3, -1.0]), 1.0)
        array([0.6, 0.4, 0. ])
    """
    c = np.asarray(c, dtype=np.float64)
    breakpoints = np.sort(np.concatenate([c - 1.0, c], axis=-1), axis=-1)
    ordered = np.sort(c, axis=-1)
    prefix = np.concatenate([np.zeros(c.shape[:-1] + (1,)), np.cumsum(ordered, axis=-1)], axis=-1)
    low = _count_sorted(ordered, breakpoints, inclusive=True)
    high = _count_sorted(ordered, breakpoints + 1.0, inclusive=False)
    sums = (
        c.shape[-1]
        - high
        + np.take_along_axis(prefix, high, axis=-1)
        - np.take_along_axis(prefix, low, axis=-1)
        - (high - low) * breakpoints
    )
    j = np.minimum(np.count_nonzero(sums >= k, axis=-1), breakpoints.shape[-1] - 1)[..., None]
    below = np.take_along_axis(breakpoints, np.maximum(j - 1, 0), axis=-1)
    middle = 0.5 * (below + np.take_along_axis(breakpoints, j, axis=-1))
    inner = (c > middle) & (c < middle + 1.0)
    full = np.count_nonzero(c >= middle + 1.0, axis=-1)[..., None]
    count = np.count_nonzero(inner, axis=-1)[..., None]
    inner_sum = np.where(inner, c, 0.0).sum(axis=-1, keepdims=True)
    tau = np.where(count > 0, (inner_sum + full - k) / np.maximum(count, 1), middle)
    return np.clip(c - tau, 0.0, 1.0)


def project_budget(c: np.ndarray, k: int, exact: bool) -> np.ndarray:
    """Project each row of ``c`` onto ``{w in [0, 1]^d : sum(w) <= k}`` (``= k`` when ``exact``).

    Example:
        >>> project_budget(np.array([0.9, 0.8, 0.1]), 1, exact=False)
        array([0.55, 0.45, 0.  ])
        >>> project_budget(np.array([[0.2, 0.1, -0.5], [2.0, 0.0, 0.0]]), 1, exact=False)
        array([[0.2, 0.1, 0. ],
               [1. , 0. , 0. ]])
    """
    box = np.clip(c, 0.0, 1.0)
    inside = np.zeros(box.shape[:-1], bool) if exact else box.sum(axis=-1) <= k
    return _keep_inside(box, inside, c, k)


def project_cover(c: np.ndarray) -> np.ndarray:
    """Project each row of ``c`` onto ``{w in [0, 1]^d : sum(w) >= 1}`` (the OR polytope).

    Example:
        >>> project_cover(np.array([0.2, -0.4]))
        array([0.8, 0.2])
    """
    box = np.clip(c, 0.0, 1.0)
    return _keep_inside(box, box.sum(axis=-1) >= 1.0, c, 1.0)


def _keep_inside(box: np.ndarray, inside: np.ndarray, c: np.ndarray, k: float) -> np.ndarray:
    """The rows of ``box`` ``inside`` the half-space, and the others on its boundary
    ``sum(w) = k`` (the capped-simplex projection of their ``c``, computed for them only)."""
    if inside.all():
        return box
    outside = ~inside
    box[outside] = project_capped_simplex(c[outside], k)
    return box


def project_or_out(c: np.ndarray, b) -> tuple[np.ndarray, np.ndarray]:
    """Project each ``(c, b)`` onto ``{(w, y) : 0 <= w_i <= y <= 1, y <= sum_i w_i}`` (OR-out).

    First onto the larger set without ``y <= sum_i w_i``: for a fixed ``y``, ``w =
    clip(c, 0, y)``, and ``y`` minimises the convex ``(y - b)^2 / 2 + sum_{c_i > y} (c_i -
    y)^2 / 2`` over ``[0, 1]``: the root of ``y - b = sum_i max(c_i - y, 0)``, clipped. If
    that point has ``y > sum(w)``, the projection lies on ``y = sum(w)``, the XOR-out
    polytope ``{w >= 0, sum(w) + (1 - y) = 1}``: a simplex projection of ``(c, 1 - b)``.

    Args:
        c: ``(..., d)`` input scores.
        b: ``(...)`` output scores.

    Returns:
        ``(w, y)``, of the shapes of ``c`` and ``b``.

    Example:
        >>> w, y = project_or_out(np.array([0.9, 0.2]), 0.1)
        >>> w, float(y)
        (array([0.5, 0.2]), 0.5)
    """
    c, b = np.asarray(c, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ordered = np.flip(np.sort(c, axis=-1), axis=-1)
    counts = np.arange(c.shape[-1] + 1)
    prefix = np.concatenate([np.zeros(c.shape[:-1] + (1,)), np.cumsum(ordered, axis=-1)], axis=-1)
    roots = (b[..., None] + prefix) / (1.0 + counts)
    upper = np.concatenate([np.full(c.shape[:-1] + (1,), np.inf), ordered], axis=-1)
    lower = np.concatenate([ordered, np.full(c.shape[:-1] + (1,), -np.inf)], axis=-1)
    valid = (upper >= roots) & (roots >= lower)
    first = np.argmax(valid, axis=-1)[..., None]
    y = np.clip(np.take_along_axis(roots, first, axis=-1), 0.0, 1.0)
    w = np.clip(c, 0.0, y)
    inside = y[..., 0] <= w.sum(axis=-1)
    if not inside.all():
        joint = project_capped_simplex(np.concatenate([c, 1.0 - b[..., None]], axis=-1), 1.0)
        w = np.where(inside[..., None], w, joint[..., :-1])
        y = np.where(inside[..., None], y, 1.0 - joint[..., -1:])
    return w, y[..., 0]


def project_pair(c1, c2, s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Solve ``max c1 w1 + c2 w2 + s z - (w1^2 + w2^2) / 2`` over the pair polytope, elementwise.

    The polytope is the convex hull of ``(w1, w2, w1 w2)`` for binary ``w``: ``z >= 0``,
    ``z <= w1``, ``z <= w2``, ``z >= w1 + w2 - 1``. For ``s >= 0`` the best ``z`` is
    ``min(w1, w2)``, and the concave objective ``c1 w1 + c2 w2 + s min(w1, w2) - ...`` has
    its unconstrained maximiser on one of three pieces (``w1 < w2``, ``w1 > w2``, the
    diagonal); clipping it to the box gives the solution (the objective is separable plus
    a supermodular term). For ``s < 0``, flipping ``w2`` (``z' = w1 - z``, the product of
    ``w1`` and ``1 - w2``) gives the case ``-s > 0`` with scores ``(c1 + s, 1 - c2)``.

    Args:
        c1, c2, s: arrays (or numbers) of one shape.

    Returns:
        ``(w1, w2, z)``, arrays of that shape; for ``s = 0``, ``z = min(w1, w2)``.

    Example:
        >>> [float(v) for v in project_pair(0.2, 0.9, 1.0)]
        [1.0, 1.0, 1.0]
        >>> [float(v) for v in project_pair(0.6, 0.6, -1.0)]
        [0.5, 0.5, 0.0]
    """
    c1, c2, s = (np.asarray(v, dtype=np.float64) for v in (c1, c2, s))
    flipped = s < 0
    c1, c2, s = np.where(flipped, c1 + s, c1), np.where(flipped, 1.0 - c2, c2), np.abs(s)
    first_below, second_below = c1 + s <= c2, c2 + s <= c1
    diagonal = 0.5 * (c1 + c2 + s)
    w1 = np.where(first_below, c1 + s, np.where(second_below, c1, diagonal))
    w2 = np.where(first_below, c2, np.where(second_below, c2 + s, diagonal))
    w1, w2 = np.clip(w1, 0.0, 1.0), np.clip(w2, 0.0, 1.0)
    z = np.minimum(w1, w2)
    return w1, np.where(flipped, 1.0 - w2, w2), np.where(flipped, w1 - z, z)
