"""Certified upper bound on ``max_{||w||_2 <= 1} phi(w)`` for a sublinear ``phi`` (branch and bound).

Used for the ``l1/l2`` basis selection, ``Omega*(G) = max_{||w||_2 <= 1} lambda_max(sum_c w_c Gamma_c)``:
``phi(w) = lambda_max(Gamma(w))`` is convex and positively homogeneous, hence sublinear,
``phi(sum_i a_i u_i) <= sum_i a_i phi(u_i)`` for ``a >= 0``.

The ball is covered by simplicial cones ``{U a : a >= 0}`` with unit vertex directions
``U = [u_1..u_m]`` (the ``2^m`` orthants, or the ``m + 1`` cones over the facets of a regular
simplex when there are too many orthants). On a cone, for ``||w|| <= 1``,
``phi(w) = phi(U a) <= f^T a <= max_{||U a|| <= 1} f^T a = ||U^{-T} f||_2`` with
``f_i = phi(u_i)``; the bound tends to ``max_i f_i`` as the cone shrinks. Branch and bound
pops the cone of largest bound, splits its widest edge at its normalised midpoint and stops
once the largest bound is at most ``target`` (or after ``max_evaluations`` evaluations of
``phi``). Every cone is kept or accounted for, so the returned bound is valid whenever it
stops.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np


def _initial_cones(m: int, max_cones: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Unit vertex directions ``(V, m)`` and cones (tuples of ``m`` vertex indices) covering ``R^m``."""
    if 2**m <= max_cones:
        vertices = np.concatenate([np.eye(m), -np.eye(m)])
        signs = (np.arange(2**m)[:, None] >> np.arange(m)) & 1
        return vertices, [tuple(np.arange(m) + m * row) for row in signs]
    centred = np.eye(m + 1) - 1.0 / (m + 1)
    basis = np.linalg.qr(centred[:, :m])[0]  # orthonormal basis of the hyperplane sum = 0
    vertices = centred @ basis
    vertices /= np.linalg.norm(vertices, axis=1, keepdims=True)
    return vertices, [tuple(j for j in range(m + 1) if j != skip) for skip in range(m + 1)]


def sphere_maximum_bound(
    phi: Callable[[np.ndarray], np.ndarray],
    m: int,
    target: float,
    max_evaluations: int = 2048,
    batch: int = 32,
) -> tuple[float, np.ndarray]:
    """An upper bound on ``max_{||w||_2 <= 1} phi(w)`` for a sublinear ``phi`` (module docstring).

    Args:
        phi: maps directions ``(S, m)`` to upper bounds on ``phi`` at each ``(S,)``.
        m: the dimension.
        target: stop refining once the bound is at most this.
        max_evaluations: budget of evaluations of ``phi`` (the bound stays valid if it runs out).
        batch: cones split per round (one call of ``phi`` per round).

    Returns:
        ``(bound, direction)``: the bound and, among the unit directions evaluated, one with the
        largest ``phi`` (a lower bound on the maximum).

    Example:
        >>> a = np.array([[3.0, 4.0], [-1.0, 0.5]])  # phi(w) = max_j <a_j, w>, maximum ||a_0|| = 5
        >>> bound, w = sphere_maximum_bound(lambda w: (w @ a.T).max(axis=1), 2, target=5.0001)
        >>> bool(5.0 <= bound <= 5.0001), round(float(np.linalg.norm(w)), 6)
        (True, 1.0)
    """
    vertices, cones = _initial_cones(m, max(max_evaluations // 4, 2))
    vertices = list(vertices)
    values = list(phi(np.array(vertices)))

    def bound(cone):
        directions = np.array([vertices[i] for i in cone])
        try:
            return float(np.linalg.norm(np.linalg.solve(directions, [values[i] for i in cone])))
        except np.linalg.LinAlgError:
            return np.inf

    heap = [(-bound(cone), cone) for cone in cones]
    heapq.heapify(heap)
    evaluations = len(values)
    while heap and -heap[0][0] > target and evaluations < max_evaluations:
        popped = []
        while heap and -heap[0][0] > target and len(popped) < batch:
            popped.append(heapq.heappop(heap)[1])
        splits = []
        for cone in popped:
            directions = np.array([vertices[i] for i in cone])
            cosines = directions @ directions.T
            i, j = np.unravel_index(np.argmin(cosines), cosines.shape)
            midpoint = directions[i] + directions[j]
            splits.append((cone, i, j, midpoint / np.linalg.norm(midpoint)))
        new_values = phi(np.array([split[3] for split in splits]))
        evaluations += len(splits)
        for (cone, i, j, midpoint), value in zip(splits, new_values, strict=True):
            vertices.append(midpoint)
            values.append(value)
            for replaced in (i, j):
                child = tuple(len(vertices) - 1 if k == replaced else index for k, index in enumerate(cone))
                heapq.heappush(heap, (-bound(child), child))
    best = int(np.argmax(values))
    largest = max(-heap[0][0], float(values[best])) if heap else float(values[best])
    return largest, vertices[best]
