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
"""

from __future__ import annotations

import numpy as np


def project_capped_simplex(c: np.ndarray, k: float) -> np.ndarray:
    """Project ``c`` onto ``{w in [0, 1]^d : sum(w) = k}``, ``0 <= k <= d``.

    The solution is ``clip(c - tau, 0, 1)``; ``g(tau) = sum(clip(c - tau, 0, 1))`` is
    nonincreasing and linear between the breakpoints ``c_i - 1`` and ``c_i``. The segment
    where ``g`` crosses ``k`` gives the sets ``F = {c_i - tau >= 1}`` and ``I = {0 < c_i -
    tau < 1}``, and ``tau = (sum_I c_i + |F| - k) / |I|``.

    Args:
        c: ``(d,)`` scores.
        k: the sum, in ``[0, d]``.

    Returns:
        ``(d,)`` projection.

    Example:
        >>> project_capped_simplex(np.array([0.5, 0.3, -1.0]), 1.0)
        array([0.6, 0.4, 0. ])
    """
    breakpoints = np.sort(np.concatenate([c - 1.0, c]))
    ordered = np.sort(c)
    prefix = np.concatenate([[0.0], np.cumsum(ordered)])
    low = np.searchsorted(ordered, breakpoints, side="right")
    high = np.searchsorted(ordered, breakpoints + 1.0, side="left")
    sums = c.size - high + prefix[high] - prefix[low] - (high - low) * breakpoints
    j = min(int(np.count_nonzero(sums >= k)), breakpoints.size - 1)
    middle = 0.5 * (breakpoints[max(j - 1, 0)] + breakpoints[j])
    inner = (c > middle) & (c < middle + 1.0)
    full = c >= middle + 1.0
    tau = (
        middle if not inner.any() else (c[inner].sum() + np.count_nonzero(full) - k) / np.count_nonzero(inner)
    )
    return np.clip(c - tau, 0.0, 1.0)


def project_budget(c: np.ndarray, k: int, exact: bool) -> np.ndarray:
    """Project ``c`` onto ``{w in [0, 1]^d : sum(w) <= k}`` (``= k`` when ``exact``).

    Example:
        >>> project_budget(np.array([0.9, 0.8, 0.1]), 1, exact=False)
        array([0.55, 0.45, 0.  ])
        >>> project_budget(np.array([0.2, 0.1, -0.5]), 1, exact=False)
        array([0.2, 0.1, 0. ])
    """
    box = np.clip(c, 0.0, 1.0)
    if not exact and box.sum() <= k:
        return box
    return project_capped_simplex(c, k)


def project_cover(c: np.ndarray) -> np.ndarray:
    """Project ``c`` onto ``{w in [0, 1]^d : sum(w) >= 1}`` (the OR polytope).

    Example:
        >>> project_cover(np.array([0.2, -0.4]))
        array([0.8, 0.2])
    """
    box = np.clip(c, 0.0, 1.0)
    if box.sum() >= 1.0:
        return box
    return project_capped_simplex(c, 1.0)


def project_or_out(c: np.ndarray, b: float) -> tuple[np.ndarray, float]:
    """Project ``(c, b)`` onto ``{(w, y) : 0 <= w_i <= y <= 1, y <= sum_i w_i}`` (OR-out).

    First onto the larger set without ``y <= sum_i w_i``: for a fixed ``y``, ``w =
    clip(c, 0, y)``, and ``y`` minimises the convex ``(y - b)^2 / 2 + sum_{c_i > y} (c_i -
    y)^2 / 2`` over ``[0, 1]``: the root of ``y - b = sum_i max(c_i - y, 0)``, clipped. If
    that point has ``y > sum(w)``, the projection lies on ``y = sum(w)``, the XOR-out
    polytope ``{w >= 0, sum(w) + (1 - y) = 1}``: a simplex projection of ``(c, 1 - b)``.

    Args:
        c: ``(d,)`` input scores.
        b: output score.

    Returns:
        ``(w, y)``.

    Example:
        >>> project_or_out(np.array([0.9, 0.2]), 0.1)
        (array([0.5, 0.2]), 0.5)
    """
    ordered = np.sort(c)[::-1]
    counts = np.arange(c.size + 1)
    roots = (b + np.concatenate([[0.0], np.cumsum(ordered)])) / (1.0 + counts)
    upper = np.concatenate([[np.inf], ordered])
    lower = np.concatenate([ordered, [-np.inf]])
    valid = (upper >= roots) & (roots >= lower)
    y = float(np.clip(roots[np.argmax(valid)], 0.0, 1.0))
    w = np.clip(c, 0.0, y)
    if y <= w.sum():
        return w, y
    joint = project_capped_simplex(np.append(c, 1.0 - b), 1.0)
    return joint[:-1], float(1.0 - joint[-1])


def project_pair(c1: float, c2: float, s: float) -> tuple[float, float, float]:
    """Solve ``max c1 w1 + c2 w2 + s z - (w1^2 + w2^2) / 2`` over the pair polytope.

    The polytope is the convex hull of ``(w1, w2, w1 w2)`` for binary ``w``: ``z >= 0``,
    ``z <= w1``, ``z <= w2``, ``z >= w1 + w2 - 1``. For ``s >= 0`` the best ``z`` is
    ``min(w1, w2)``, and the concave objective ``c1 w1 + c2 w2 + s min(w1, w2) - ...`` has
    its unconstrained maximiser on one of three pieces (``w1 < w2``, ``w1 > w2``, the
    diagonal); clipping it to the box gives the solution (the objective is separable plus
    a supermodular term). For ``s < 0``, flipping ``w2`` (``z' = w1 - z``, the product of
    ``w1`` and ``1 - w2``) gives the case ``-s > 0`` with scores ``(c1 + s, 1 - c2)``.

    Returns:
        ``(w1, w2, z)``; for ``s = 0``, ``z = min(w1, w2)``.

    Example:
        >>> project_pair(0.2, 0.9, 1.0)
        (1.0, 1.0, 1.0)
        >>> project_pair(0.6, 0.6, -1.0)
        (0.5, 0.5, 0.0)
    """
    if s < 0:
        w1, flipped, z = project_pair(c1 + s, 1.0 - c2, -s)
        return w1, 1.0 - flipped, w1 - z
    if c1 + s <= c2:
        w1, w2 = c1 + s, c2
    elif c2 + s <= c1:
        w1, w2 = c1, c2 + s
    else:
        w1 = w2 = 0.5 * (c1 + c2 + s)
    w1, w2 = min(max(w1, 0.0), 1.0), min(max(w2, 0.0), 1.0)
    return w1, w2, min(w1, w2)
