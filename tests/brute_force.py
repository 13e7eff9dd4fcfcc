"""Independent references for tests: enumeration of structures and a generic QP solver."""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import minimize

from keras_structured.engine import SequenceStructure, Structure


class EnumeratedStructure(Structure):
    """A structure given by an explicit list of vertices ``(m_s, n_s)``; MAP by enumeration."""

    def __init__(self, vertices_m: np.ndarray, vertices_n: np.ndarray):
        self.vertices_m = np.asarray(vertices_m, dtype=float)
        self.vertices_n = np.asarray(vertices_n, dtype=float)

    def map(self, eta_u, eta_v, lengths=None):
        batch = eta_u.shape[0]
        scores = eta_u.reshape(batch, -1) @ self.vertices_m.T + eta_v.reshape(batch, -1) @ self.vertices_n.T
        return np.argmax(scores, axis=1)

    def indicators(self, codes, u_shape, v_shape, lengths=None):
        return (
            self.vertices_m[codes].reshape((-1,) + tuple(u_shape)),
            self.vertices_n[codes].reshape((-1,) + tuple(v_shape)),
        )

    def v_shape(self, u_shape):
        return (self.vertices_n.shape[1],)


def sequence_vertices(n: int, num_labels: int):
    """All label sequences with their flat indicator vectors ``(codes, M, N)``."""
    codes = np.array(list(itertools.product(range(num_labels), repeat=n)))
    m, pair = SequenceStructure().indicators(codes, (n, num_labels), (n - 1, num_labels, num_labels))
    return codes, m.reshape(len(codes), -1), pair.reshape(len(codes), -1)


def solve_qp(M: np.ndarray, N: np.ndarray, eta_u: np.ndarray, eta_v: np.ndarray):
    """max_{y in simplex} <theta, y> - ||M^T y||^2 / 2 over enumerated vertices, by SLSQP.

    ``M`` is ``(D, du)`` (one row per structure). Returns ``(u, objective)``.
    """
    theta = M @ eta_u + N @ eta_v
    gram = M @ M.T

    def negative(y):
        return -(theta @ y - 0.5 * y @ gram @ y)

    def negative_grad(y):
        return -(theta - gram @ y)

    start = np.full(len(theta), 1.0 / len(theta))
    result = minimize(
        negative,
        start,
        jac=negative_grad,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * len(theta),
        constraints=[{"type": "eq", "fun": lambda y: y.sum() - 1.0, "jac": lambda y: np.ones_like(y)}],
        options={"ftol": 1e-16, "maxiter": 2000},
    )
    y = np.maximum(result.x, 0.0)
    y /= y.sum()
    # Polish: solve the equality-constrained KKT system exactly on SLSQP's support,
    # for a few support thresholds, and keep the best feasible point.
    for threshold in (1e-3, 1e-5, 1e-7, 1e-9):
        support = np.flatnonzero(y > threshold)
        kkt = np.zeros((support.size + 1, support.size + 1))
        kkt[0, 1:] = kkt[1:, 0] = 1.0
        kkt[1:, 1:] = gram[np.ix_(support, support)]
        rhs = np.concatenate([[1.0], theta[support]])
        candidate = _embed(np.linalg.lstsq(kkt, rhs, rcond=None)[0][1:], support, y.size)
        if np.all(candidate >= 0) and negative(candidate) < negative(y):
            y = candidate
    return y @ M, -negative(y)


def _embed(values, support, size):
    y = np.zeros(size)
    y[support] = values
    return y
