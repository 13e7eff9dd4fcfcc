"""Row-sparsity penalties ``Omega`` on the output-layer matrix ``V (k, m)`` and their balls.

The conditional-gradient trainer (:mod:`keras_structured.polynomial.conditional_gradient`)
solves ``min F(U) s.t. Omega(U) <= tau`` (paper eq. 5). Each penalty provides the three
pieces the algorithm needs (paper Table 1):

* ``value(V)``: ``Omega(V)``;
* ``row_norms(G)``: the basis selection criterion ``||g_r||_p`` of every row, with the dual
  exponent ``p`` (``inf`` for l1, ``2`` for l1/l2, ``1`` for l1/linf), so that the dual norm
  is ``Omega*(G) = max_r ||g_r||_p``;
* ``dual_row(g)``: the non-zero row ``s`` of a subgradient of ``Omega*`` at a matrix whose
  selected row is ``g``; ``Omega(s) = 1`` and ``<s, g> = ||g||_p`` (vectorised over rows);
* ``vertices(m, limit)``: the extreme points of the row ball ``{s : Omega(s) <= 1}`` when
  they are at most ``limit`` (``2m`` signed unit vectors for l1, the ``2^m`` sign vectors
  for l1/linf, none for the round l1/l2 ball), which makes basis selection exact;
* ``project(V, tau)``: the Euclidean projection onto ``{W : Omega(W) <= tau}``.

Everything is numpy, vectorised over rows.
"""

from __future__ import annotations

import abc

import numpy as np


def project_simplex(z: np.ndarray, radius: float | np.ndarray = 1.0) -> np.ndarray:
    """Euclidean projection of every row of ``z`` onto ``{p >= 0, sum(p) = radius}``.

    Solves ``argmin_{p >= 0, 1^T p = radius} ||p - z_i||^2`` for each row by sorting
    (Held et al., 1974): ``p = max(z_i - theta_i, 0)``.

    Args:
        z: array ``(..., m)``.
        radius: positive scalar or array broadcastable to ``z.shape[:-1]``.

    Returns:
        The projections, same shape as ``z``.

    Example:
        >>> project_simplex(np.array([[0.5, 1.5, -1.0]]))
        array([[0., 1., 0.]])
    """
    z = np.asarray(z, dtype=np.float64)
    m = z.shape[-1]
    sorted_desc = -np.sort(-z, axis=-1)
    cumulative = np.cumsum(sorted_desc, axis=-1) - np.expand_dims(np.asarray(radius, dtype=np.float64), -1)
    ranks = np.arange(1, m + 1)
    support = sorted_desc - cumulative / ranks > 0
    size = np.sum(support, axis=-1, keepdims=True)
    theta = np.take_along_axis(cumulative, size - 1, axis=-1) / size
    return np.maximum(z - theta, 0.0)


def _project_nonnegative_l1_ball(a: np.ndarray, radius: float) -> np.ndarray:
    """Projects the non-negative vector ``a`` onto ``{b >= 0, sum(b) <= radius}``."""
    if a.sum() <= radius:
        return a
    return project_simplex(a, radius)


class Penalty(abc.ABC):
    """A norm ``Omega`` on ``(k, m)`` matrices whose dual norm is ``max_r ||g_r||_p``."""

    name: str
    dual_exponent: float

    @abc.abstractmethod
    def value(self, v: np.ndarray) -> float:
        """``Omega(V)``."""

    def row_norms(self, g: np.ndarray) -> np.ndarray:
        """The selection criterion ``||g_r||_p`` of every row of ``g (k, m)`` (paper eq. 9)."""
        return np.linalg.norm(np.atleast_2d(g), ord=self.dual_exponent, axis=-1)

    def dual_norm(self, g: np.ndarray) -> float:
        """``Omega*(G) = max_{Omega(W) <= 1} <W, G> = max_r ||g_r||_p``."""
        return float(np.max(self.row_norms(g)))

    @abc.abstractmethod
    def dual_row(self, g: np.ndarray) -> np.ndarray:
        """``s = argmax_{Omega(s) <= 1} <s, g>`` for every row of ``g (..., m)``."""

    def vertices(self, m: int, limit: int) -> np.ndarray | None:
        """The extreme points ``(S, m)`` of ``{s : Omega(s) <= 1}``, or None if infinite or ``S > limit``."""
        return None

    @abc.abstractmethod
    def project(self, v: np.ndarray, tau: float) -> np.ndarray:
        """``argmin_{Omega(W) <= tau} ||W - V||_F^2``."""


class L1Penalty(Penalty):
    """``Omega(V) = sum_{r,c} |V_rc|`` (lasso; independent nuclear norms per output).

    Example:
        >>> L1Penalty().project(np.array([[3.0, -2.0], [0.5, 0.0]]), tau=2.0)
        array([[ 1.5, -0.5],
               [ 0. ,  0. ]])
    """

    name = "l1"
    dual_exponent = np.inf

    def value(self, v):
        return float(np.abs(v).sum())

    def dual_row(self, g):
        g = np.asarray(g, dtype=np.float64)
        largest = np.argmax(np.abs(g), axis=-1)[..., None]
        s = np.zeros_like(g)
        np.put_along_axis(s, largest, np.sign(np.take_along_axis(g, largest, axis=-1)), axis=-1)
        return s

    def vertices(self, m, limit):
        return np.concatenate([np.eye(m), -np.eye(m)]) if 2 * m <= limit else None

    def project(self, v, tau):
        magnitudes = _project_nonnegative_l1_ball(np.abs(v).ravel(), tau).reshape(v.shape)
        return np.sign(v) * magnitudes


class L1L2Penalty(Penalty):
    """``Omega(V) = sum_r ||v_r||_2`` (group lasso over the rows).

    The ball projection projects the row norms onto the l1 ball and rescales the rows.

    Example:
        >>> L1L2Penalty().project(np.array([[3.0, 4.0], [0.3, 0.4]]), tau=2.0)
        array([[1.2, 1.6],
               [0. , 0. ]])
    """

    name = "l1/l2"
    dual_exponent = 2.0

    def value(self, v):
        return float(np.linalg.norm(v, axis=-1).sum())

    def dual_row(self, g):
        g = np.asarray(g, dtype=np.float64)
        norm = np.linalg.norm(g, axis=-1, keepdims=True)
        return np.divide(g, norm, out=np.zeros_like(g), where=norm > 0)

    def project(self, v, tau):
        norms = np.linalg.norm(v, axis=-1)
        new_norms = _project_nonnegative_l1_ball(norms, tau)
        scale = np.divide(new_norms, norms, out=np.zeros_like(norms), where=norms > 0)
        return v * scale[:, None]


class L1LinfPenalty(Penalty):
    """``Omega(V) = sum_r ||v_r||_inf``.

    Projection (KKT of ``min ||W - V||^2 s.t. sum_r ||w_r||_inf <= tau``): every row is
    clipped, ``w_r = sign(v_r) min(|v_r|, mu_r)``, where ``mu_r(theta) >= 0`` removes mass
    ``theta`` from the row, ``sum_c (|v_rc| - mu_r)_+ = theta``, in closed form
    ``mu_r(theta) = max(0, max_j (S_rj - theta) / j)`` with ``S_rj`` the sum of the ``j``
    largest ``|v_rc|``; the multiplier ``theta`` solves ``sum_r mu_r(theta) = tau``
    (binary search over the breakpoints of this piecewise-linear equation, then an exact
    linear solve on the piece).

    Example:
        >>> w = L1LinfPenalty().project(np.array([[3.0, -1.0], [1.0, 1.0]]), tau=2.0)
        >>> w.round(4)
        array([[ 1.6667, -1.    ],
               [ 0.3333,  0.3333]])
        >>> round(L1LinfPenalty().value(w), 10)
        2.0
    """

    name = "l1/linf"
    dual_exponent = 1.0

    def value(self, v):
        return float(np.abs(v).max(axis=-1, initial=0.0).sum())

    def dual_row(self, g):
        return np.sign(g).astype(np.float64)

    def vertices(self, m, limit):
        if 2**m > limit:
            return None
        return 1.0 - 2.0 * ((np.arange(2**m)[:, None] >> np.arange(m)) & 1)

    def project(self, v, tau):
        if self.value(v) <= tau:
            return v.copy()
        sorted_abs = -np.sort(-np.abs(v), axis=-1)
        partial_sums = np.cumsum(sorted_abs, axis=-1)
        sizes = np.arange(1, v.shape[-1] + 1)

        def thresholds(theta):
            pieces = (partial_sums - theta) / sizes
            return np.maximum(pieces.max(axis=-1), 0.0), pieces.argmax(axis=-1)

        # total(theta) = sum_r mu_r(theta) is decreasing and linear between the breakpoints
        # theta_rj = S_rj - j a_rj (where mu_r reaches a_rj) and S_rm (where mu_r reaches 0):
        # binary search for the breakpoints around total = tau, then solve on that piece.
        breakpoints = np.unique(np.append(partial_sums - sizes * sorted_abs, partial_sums[:, -1]))
        low, high = 0, breakpoints.size - 1  # total(breakpoints[0] = 0) > tau >= total(max) = 0
        while high - low > 1:
            middle = (low + high) // 2
            if thresholds(breakpoints[middle])[0].sum() > tau:
                low = middle
            else:
                high = middle
        low, high = breakpoints[low], breakpoints[high]
        mu, piece = thresholds(0.5 * (low + high))
        active = mu > 0
        inverse_sizes = 1.0 / sizes[piece[active]]
        theta = (np.sum(partial_sums[active, piece[active]] * inverse_sizes) - tau) / np.sum(inverse_sizes)
        mu = thresholds(theta)[0]
        return np.sign(v) * np.minimum(np.abs(v), mu[:, None])


_PENALTIES = {penalty.name: penalty for penalty in (L1Penalty, L1L2Penalty, L1LinfPenalty)}


def get_penalty(name: str) -> Penalty:
    """The penalty called ``name`` (``"l1"``, ``"l1/l2"`` or ``"l1/linf"``).

    Example:
        >>> get_penalty("l1/l2").value(np.array([[3.0, 4.0]]))
        5.0
    """
    if name not in _PENALTIES:
        raise ValueError(f"penalty must be one of {sorted(_PENALTIES)}. Received: penalty={name!r}")
    return _PENALTIES[name]()
