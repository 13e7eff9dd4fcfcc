"""The matrices ``Gamma_c = X^T diag(D[:, c]) X`` of basis selection and their top eigenpairs.

Basis selection (:mod:`~keras_structured.polynomial.basis_selection`) only ever needs the
largest eigenpair of weighted sums ``Gamma(w) = sum_c w_c Gamma_c`` for a few weight vectors
``w`` (the rows of ``W (S, m)``), and a bound on ``lambda_max(sum_c Gamma_c^2)``. Two
implementations give them:

* :class:`DenseGammas` forms the ``m`` matrices ``(d, d)`` once (``O(n d^2 m)``) and calls
  LAPACK's symmetric eigensolver (``numpy.linalg.eigh``, batched over ``S``): eigenvalues
  exact up to rounding (``~ d eps ||Gamma||``), so bounds derived from them are
  **certified**.
* :class:`LanczosGammas` never forms ``Gamma_c``: it applies ``Gamma(w) v = X^T ((D w) * (X v))``
  (``O(nnz(X))``) inside ARPACK's implicitly restarted Lanczos (``scipy.sparse.linalg.eigsh``).
  It returns the Ritz value plus the residual norm ``||Gamma(w) v - theta v||`` as its upper
  estimate; that is within the residual of *an* eigenvalue, and Lanczos from a random start
  finds the extreme one with high probability but without proof, so these bounds are
  **estimates, not certificates**.

:func:`gamma_operators` picks the dense path when ``d <= dense_max_features``.
"""

from __future__ import annotations

import abc
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh


class SearchEffort(NamedTuple):
    """Defaults of :func:`~keras_structured.polynomial.basis_selection.select_basis`, per kind of operator."""

    starts: int
    """Candidates improved by alternating maximisation."""
    rounds: int
    """Rounds of alternating maximisation."""
    vertices: int
    """Largest number of row-ball vertices enumerated."""
    evaluations: int
    """Eigenproblems of the ``l1/l2`` branch and bound."""


class GammaOperators(abc.ABC):
    """``Gamma_1..Gamma_m`` for ``x (n, d)`` and weights ``d (n, m)``; see the module docstring."""

    certified: bool
    """Whether the eigenvalues are exact up to rounding (dense) rather than Lanczos estimates."""
    search_effort: SearchEffort
    """How many eigenproblems basis selection may solve with these operators."""

    def __init__(self, x: np.ndarray | sp.spmatrix, d: np.ndarray):
        self.x, self.d = x, d
        self.n_features, self.n_outputs = x.shape[1], d.shape[1]

    def rows(self, h: np.ndarray) -> np.ndarray:
        """``g[s, c] = h_s^T Gamma_c h_s`` for the columns ``h_s`` of ``h (d, S)``: shape ``(S, m)``."""
        return ((self.x @ h) ** 2).T @ self.d

    @abc.abstractmethod
    def top_eigenpairs(
        self, weights: np.ndarray, starts: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Largest eigenpair of ``Gamma(w_s) = sum_c w_sc Gamma_c`` for every row ``w_s`` of ``weights``.

        Args:
            weights: ``(S, m)``.
            starts: optional ``(d, S)`` starting vectors (used by Lanczos only).

        Returns:
            ``(values (S,), vectors (d, S), upper (S,))``: the eigenvalues, unit eigenvectors and an
            upper bound (dense) or estimate (Lanczos) of ``lambda_max(Gamma(w_s))``.
        """

    @abc.abstractmethod
    def squared_sum_norm(self) -> float:
        """``lambda_max(sum_c Gamma_c^2)`` (an upper bound, or a Lanczos estimate of one)."""


class DenseGammas(GammaOperators):
    """``Gamma_c`` formed explicitly; LAPACK eigenpairs (certified up to rounding).

    Example:
        >>> gammas = DenseGammas(np.eye(2), np.array([[1.0, 0.0], [0.0, -3.0]]))
        >>> values, vectors, _ = gammas.top_eigenpairs(np.array([[0.0, -1.0]]))
        >>> values.tolist(), np.abs(vectors[:, 0]).tolist()
        ([3.0], [0.0, 1.0])
    """

    certified = True
    search_effort = SearchEffort(starts=8, rounds=10, vertices=1024, evaluations=20000)

    def __init__(self, x, d):
        super().__init__(x, d)
        self.matrices = np.stack([_weighted_gram(x, d[:, c]) for c in range(d.shape[1])])

    def rows(self, h):
        return np.einsum("as,cab,bs->sc", h, self.matrices, h, optimize=True)

    def top_eigenpairs(self, weights, starts=None):
        values, vectors = np.linalg.eigh(np.tensordot(weights, self.matrices, axes=1))
        top = values[:, -1]
        return top, vectors[:, :, -1].T, top + _rounding(values)

    def squared_sum_norm(self):
        squares = np.einsum("cab,cbe->ae", self.matrices, self.matrices)
        values = np.linalg.eigvalsh(squares)
        return float(values[-1] + _rounding(values[None])[0])


class LanczosGammas(GammaOperators):
    """``Gamma_c`` applied through ``X`` (``O(nnz(X))`` a product); ARPACK Lanczos estimates.

    Args:
        x: ``(n, d)`` dense array or ``scipy.sparse`` matrix.
        d: ``(n, m)`` weights.
        tol: relative accuracy asked of ARPACK.
        rng: generator of the random starting vectors.

    Example:
        >>> gammas = LanczosGammas(np.eye(3), np.array([[1.0], [-4.0], [2.0]]))
        >>> values, _, _ = gammas.top_eigenpairs(np.array([[-1.0]]))
        >>> round(float(values[0]), 6)
        4.0
    """

    certified = False
    search_effort = SearchEffort(starts=2, rounds=3, vertices=64, evaluations=64)  # each a Lanczos run

    def __init__(self, x, d, tol: float = 1e-6, rng: np.random.Generator | None = None):
        super().__init__(x, d)
        self.tol = tol
        self.rng = np.random.default_rng(0) if rng is None else rng
        self.x_transpose = x.T.tocsr() if sp.issparse(x) else x.T

    def _apply(self, diagonal: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.x_transpose @ (diagonal * (self.x @ v))

    def _top(self, matvec, start: np.ndarray | None) -> tuple[float, np.ndarray, float]:
        size = self.n_features
        if size == 1:
            value = float(matvec(np.ones(1))[0])
            return value, np.ones(1), value
        start = self.rng.standard_normal(size) if start is None or not np.any(start) else start
        operator = LinearOperator((size, size), matvec=matvec, dtype=np.float64)
        values, vectors = eigsh(operator, k=1, which="LA", v0=start, tol=self.tol, maxiter=20 * size)
        vector = vectors[:, 0] / np.linalg.norm(vectors[:, 0])
        value = float(values[0])
        return value, vector, value + float(np.linalg.norm(matvec(vector) - value * vector))

    def top_eigenpairs(self, weights, starts=None):
        results = [
            self._top(
                lambda v, diagonal=self.d @ w: self._apply(diagonal, v),
                None if starts is None else starts[:, s],
            )
            for s, w in enumerate(weights)
        ]
        values, vectors, upper = zip(*results, strict=True)
        return np.array(values), np.stack(vectors, axis=1), np.array(upper)

    def squared_sum_norm(self):
        def matvec(v):
            return sum(self._apply(self.d[:, c], self._apply(self.d[:, c], v)) for c in range(self.n_outputs))

        return self._top(matvec, None)[2]


def _weighted_gram(x: np.ndarray | sp.spmatrix, weights: np.ndarray) -> np.ndarray:
    """``X^T diag(weights) X`` as a dense ``(d, d)`` array."""
    if sp.issparse(x):
        return np.asarray((x.T @ sp.diags(weights) @ x).todense())
    return (x.T * weights) @ x


def _rounding(values: np.ndarray) -> np.ndarray:
    """A bound on the eigenvalue error of a backward-stable symmetric eigensolver, per matrix."""
    return 10.0 * values.shape[-1] * np.finfo(np.float64).eps * np.abs(values).max(axis=-1)


def gamma_operators(
    x: np.ndarray | sp.spmatrix,
    d: np.ndarray,
    dense_max_features: int = 500,
    rng: np.random.Generator | None = None,
) -> GammaOperators:
    """:class:`DenseGammas` if ``x`` has at most ``dense_max_features`` columns, else :class:`LanczosGammas`.

    Example:
        >>> type(gamma_operators(np.eye(3), np.ones((3, 2)))).__name__
        'DenseGammas'
    """
    if x.shape[1] <= dense_max_features:
        return DenseGammas(x, d)
    return LanczosGammas(x, d, rng=rng)
