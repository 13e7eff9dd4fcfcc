"""Basis vector selection: ``max_{||h||_2 <= 1} ||g_h||_p`` with ``g_hc = h^T Gamma_c h`` (paper eq. 9).

``Gamma_c = X^T diag(D[:, c]) X`` is never formed: it is applied as
``Gamma_c h = X^T (D[:, c] * (X h))``, and the ``m`` outputs are handled as one block
(``X @ H`` with ``H (d, m)``), so every step costs ``O(nnz(X) m)``. ``X`` may be a dense
array or a ``scipy.sparse`` matrix.

* :func:`power_method`: the dominant (largest ``|eigenvalue|``) eigenvector of every
  ``Gamma_c`` at once; it solves the ``l1`` case ``p = inf`` (paper eq. 11).
* :func:`refine_basis`: the generalized power method of the group-sparse cases ``p = 2``
  and ``p = 1`` (paper eq. 13-16): conditional gradient over the unit ball on
  ``f_2(h) = ||g_h||_2^2 / 2`` or on the Huber-smoothed ``f_1(h) = sum_c huber(g_hc)``,
  with the Armijo rule for the step ``eta``.
* :func:`select_basis`: the whole step (initialise from the best power-method
  eigenvector, refine for the group penalties, keep the refined vector only if it
  improves the true criterion).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from keras_structured.polynomial.penalties import Penalty


def quadratic_forms(z: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``G[j, c] = sum_i d[i, c] z[i, j]^2`` from the projections ``z = X H`` ``(n, q)``.

    With ``z = X h_j``, row ``j`` is ``g_{h_j} = (h_j^T Gamma_c h_j)_c``.

    Example:
        >>> quadratic_forms(np.array([[1.0], [2.0]]), np.array([[1.0, -1.0], [0.5, 0.0]]))
        array([[ 3., -1.]])
    """
    return (z**2).T @ d


def power_method(
    x: np.ndarray | sp.spmatrix,
    d: np.ndarray,
    n_iter: int = 100,
    tol: float = 1e-6,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Dominant eigenpairs of ``Gamma_c = X^T diag(d[:, c]) X`` for all ``c``, as one block.

    Iterates ``h_c <- Gamma_c h_c / ||Gamma_c h_c||`` for all columns together until every
    residual ``||Gamma_c h_c - lambda_c h_c||`` is at most ``tol ||Gamma_c h_c||``, with the
    Rayleigh quotient ``lambda_c = h_c^T Gamma_c h_c`` (whose error is of the order of the
    squared residual).
    The power method converges to the eigenvalue of largest magnitude (``|lambda|``).

    Args:
        x: ``(n, d)`` dense array or ``scipy.sparse`` matrix.
        d: ``(n, m)`` diagonal weights, one column per matrix.
        n_iter: maximum number of iterations.
        tol: relative tolerance on the eigen-residuals.
        rng: random generator of the starting vectors (default: seed 0).

    Returns:
        ``(h, eigenvalues)``: unit eigenvectors ``(d, m)`` (column ``c`` for ``Gamma_c``) and
        their Rayleigh quotients ``(m,)``.

    Example:
        >>> h, lam = power_method(np.eye(3), np.array([[1.0], [-4.0], [2.0]]))
        >>> round(float(lam[0]), 6), np.round(np.abs(h[:, 0]), 3).tolist()
        (-4.0, [0.0, 1.0, 0.0])
    """
    rng = np.random.default_rng(0) if rng is None else rng
    h = rng.standard_normal((x.shape[1], d.shape[1]))
    h /= np.linalg.norm(h, axis=0)
    for iteration in range(n_iter):
        z = x @ h
        weighted = d * z
        eigenvalues = np.einsum("ic,ic->c", weighted, z)
        gamma_h = x.T @ weighted
        norms = np.linalg.norm(gamma_h, axis=0)
        residuals = np.linalg.norm(gamma_h - eigenvalues * h, axis=0)
        if np.all(residuals <= tol * norms) or iteration == n_iter - 1:
            break
        h = np.where(norms > 0, gamma_h / np.where(norms > 0, norms, 1.0), h)
    return h, eigenvalues


def _smoothed_criterion(g: np.ndarray, exponent: float, huber_delta: float) -> tuple[float, np.ndarray]:
    """``f_p(g)`` and ``df_p/dg``: ``||g||_2^2 / 2`` for ``p = 2``, ``sum_c huber(g_c)`` for ``p = 1``."""
    if exponent == 2:
        return 0.5 * float(g @ g), g
    magnitude = np.abs(g)
    huber = np.where(magnitude <= huber_delta, 0.5 * g**2 / huber_delta, magnitude - 0.5 * huber_delta)
    return float(huber.sum()), np.clip(g / huber_delta, -1.0, 1.0)


def refine_basis(
    x: np.ndarray | sp.spmatrix,
    d: np.ndarray,
    h: np.ndarray,
    exponent: float,
    n_iter: int = 100,
    tol: float = 1e-6,
    huber_delta: float = 1.0,
    armijo: float = 1e-4,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized power method: conditional gradient for ``max_{||h||_2 <= 1} f_p(g_h)``.

    ``f_2(g) = ||g||_2^2 / 2`` (the ``l1/l2`` criterion) or ``f_1(g) = sum_c huber(g_c)``
    with ``huber(t) = t^2 / (2 delta)`` if ``|t| <= delta`` else ``|t| - delta / 2`` (a
    smooth ``l1/linf`` criterion). Since ``g_hc = h^T Gamma_c h``, the gradient is
    ``2 X^T ((D f_p'(g_h)) * (X h))``; the update is ``h <- h + eta (s - h)`` with
    ``s = grad / ||grad||`` (the linear maximiser over the unit ball) and ``eta``
    from the Armijo rule (halving from 1; with ``m = 1`` and ``eta = 1`` this is the
    power method). Stops when the Frank-Wolfe gap ``<grad, s - h>`` is at most
    ``tol^2 ||grad|| / 2``: for a unit ``h``, when the sine of the angle between ``h`` and the
    gradient is about ``tol``, the stopping rule of :func:`power_method`. Since ``g_h`` is
    quadratic in ``h``, the result is rescaled onto the unit sphere (``g_h`` by ``1/||h||^2``),
    which can only increase ``||g_h||_p``.

    Args:
        x: ``(n, d)`` dense array or ``scipy.sparse`` matrix.
        d: ``(n, m)`` diagonal weights of ``Gamma_1..Gamma_m``.
        h: starting unit vector ``(d,)``.
        exponent: ``2`` or ``1``.
        n_iter: maximum number of iterations.
        tol: tolerance on the angle between ``h`` and the gradient.
        huber_delta: Huber smoothing parameter (``p = 1``; the paper uses 1).
        armijo: sufficient-increase constant of the Armijo rule.

    Returns:
        ``(h, g_h)``: the refined unit vector ``(d,)`` and its row ``g_h`` ``(m,)``.

    Example:
        >>> x = np.eye(2)
        >>> d = np.array([[1.0, 1.0], [0.0, 3.0]])
        >>> h, g = refine_basis(x, d, np.array([0.6, 0.8]), exponent=2)
        >>> np.round(np.abs(h), 3).tolist(), np.round(g, 3).tolist()
        ([0.0, 1.0], [0.0, 3.0])
    """
    exponent = float(exponent)
    if exponent not in (1.0, 2.0):
        raise ValueError(f"exponent must be 1 or 2. Received: exponent={exponent}")
    z = x @ h
    g = quadratic_forms(z[:, None], d)[0]
    value, weights = _smoothed_criterion(g, exponent, huber_delta)
    for _ in range(n_iter):
        grad = 2.0 * (x.T @ ((d @ weights) * z))
        grad_norm = np.linalg.norm(grad)
        gap = grad_norm - grad @ h
        if grad_norm == 0 or gap <= 0.5 * tol**2 * grad_norm:
            break
        s = grad / grad_norm
        z_s = x @ s
        eta = 1.0
        while eta > 1e-10:
            z_new = z + eta * (z_s - z)
            g_new = quadratic_forms(z_new[:, None], d)[0]
            new_value, new_weights = _smoothed_criterion(g_new, exponent, huber_delta)
            if new_value >= value + armijo * eta * gap:
                break
            eta *= 0.5
        else:
            break
        h, z, g, value, weights = h + eta * (s - h), z_new, g_new, new_value, new_weights
    norm = np.linalg.norm(h)
    return (h / norm, g / norm**2) if norm > 0 else (h, g)


def select_basis(
    x: np.ndarray | sp.spmatrix,
    d: np.ndarray,
    penalty: Penalty,
    n_iter: int = 100,
    tol: float = 1e-6,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """An approximate maximiser of the selection criterion ``max_{||h||_2 <= 1} ||g_h||_p``.

    Initialisation (paper eq. 14): the eigenvector, among the dominant eigenvectors of
    ``Gamma_1..Gamma_m`` (:func:`power_method`), with the largest ``||g_h||_p``; this is a
    ``(1 - eps)``, ``(1 - eps) / sqrt(m)`` or ``(1 - eps) / m`` approximation for
    ``p = inf, 2, 1``. For ``p = 2, 1`` it is refined by :func:`refine_basis`, kept only
    if it increases ``||g_h||_p``.

    Args:
        x: ``(n, d)`` dense array or ``scipy.sparse`` matrix.
        d: ``(n, m)`` diagonal weights: the negative loss gradient w.r.t. the outputs.
        penalty: the penalty, which fixes ``p`` (its dual exponent).
        n_iter: iteration cap of the power method and of the refinement.
        tol: their relative tolerance.
        rng: random generator of the power method's starting vectors.

    Returns:
        ``(h, g_h)``: the unit basis vector ``(d,)`` and its gradient row ``(m,)``.

    Example:
        >>> from keras_structured.polynomial.penalties import get_penalty
        >>> x = np.eye(2)
        >>> d = np.array([[1.0, 1.0], [0.0, 3.0]])
        >>> h, g = select_basis(x, d, get_penalty("l1"))
        >>> np.round(np.abs(h), 3).tolist(), np.round(g, 3).tolist()
        ([0.0, 1.0], [0.0, 3.0])
    """
    candidates, _ = power_method(x, d, n_iter=n_iter, tol=tol, rng=rng)
    rows = quadratic_forms(x @ candidates, d)
    criteria = penalty.row_norms(rows)
    best = int(np.argmax(criteria))
    h, g = candidates[:, best], rows[best]
    if np.isfinite(penalty.dual_exponent):
        refined_h, refined_g = refine_basis(x, d, h, penalty.dual_exponent, n_iter=n_iter, tol=tol)
        if penalty.row_norms(refined_g)[0] > criteria[best]:
            h, g = refined_h, refined_g
    return h, g
