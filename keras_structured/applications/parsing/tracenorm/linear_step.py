r"""Frank-Wolfe's linear step over the ball ``||A||_* + lam ||b||_2 <= C``.

The feasible set is the ball of radius ``C`` of the norm ``N(A, b) = ||A||_* + lam
||b||``, whose dual norm is ``N*(G, g) = max(sigma_max(G), ||g|| / lam)``. The linear
minimisation ``s = argmin_{N(s) <= C} <s, grad F(x)>`` (:func:`linear_minimizer`) therefore
returns a vertex (an :class:`Atom`): the rank-one atom ``(-C u_1 v_1^T, 0)`` from the top
singular pair of ``grad_A`` when ``sigma_max(grad_A) >= ||grad_b|| / lam``, else ``(0,
-(C/lam) grad_b / ||grad_b||)``, and ``<s, grad F> = -C N*(grad F)``, which gives the
Frank-Wolfe (duality) gap ``<x, grad F(x)> + C N*(grad F(x))``.

**Top singular pair** (:func:`top_singular_triplet`): ``"dense"`` forms ``grad_A``
(``d`` products) and calls LAPACK: exact, for ``d <= 256`` (``"auto"``); ``"svds"`` calls
``scipy.sparse.linalg.svds(k=1)`` (ARPACK, Lanczos on ``G^T G``) with a relative tolerance
``svd_tol = 1e-6`` on ``sigma_max`` and a start vector drawn from ``seed`` (so runs repeat
exactly). An approximate linear step is enough for Frank-Wolfe's rate as long as its error
stays below ``O(C_f / k)`` (Jaggi 2013); the gap is then underestimated by at most
``C sigma_max svd_tol``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.sparse.linalg import ArpackError, LinearOperator, svds

from keras_structured.validation import check_number, check_one_of

SVD_METHODS = ("auto", "dense", "svds")
#: Largest ``d`` for which ``svd="auto"`` forms ``grad_A`` and calls LAPACK.
DENSE_SVD_MAX_DIM = 256


def top_singular_triplet(
    operator: LinearOperator | np.ndarray, method: str = "auto", tol: float = 1e-6, seed: int = 0
) -> tuple[float, np.ndarray, np.ndarray]:
    """The largest singular value of a square operator and its singular vectors.

    Solves ``max_{||u|| = ||v|| = 1} u^T G v``.

    Args:
        operator: ``(d, d)`` a linear operator or an array.
        method: ``"dense"`` (form ``G``, LAPACK: exact), ``"svds"`` (ARPACK with relative
            tolerance ``tol``) or ``"auto"`` (dense for ``d <= DENSE_SVD_MAX_DIM``).
        tol: ARPACK's relative tolerance on the singular value, a number >= 0 (0: machine
            precision).
        seed: seeds ARPACK's start vector.

    Returns:
        ``(sigma, u, v)`` with ``G v = sigma u`` (``sigma = 0`` and unit vectors for ``G = 0``).

    Raises:
        ValueError: for an unknown method or a bad ``tol``.

    Example:
        >>> sigma, u, v = top_singular_triplet(np.array([[0.0, 3.0], [1.0, 0.0]]))
        >>> float(sigma), np.abs(u).tolist(), np.abs(v).tolist()
        (3.0, [1.0, 0.0], [0.0, 1.0])
    """
    method = check_one_of("method", method, SVD_METHODS)
    tol = check_number("tol", tol, minimum=0.0)
    d = operator.shape[1]
    if method == "auto":
        method = "dense" if d <= DENSE_SVD_MAX_DIM else "svds"
    if method == "svds" and d >= 3:
        start = np.random.default_rng(seed).standard_normal(d)
        try:
            u, s, vt = svds(operator, k=1, tol=tol, v0=start, solver="arpack")
        except ArpackError:  # G^T G v0 = 0 for a random v0: G = 0
            start /= np.linalg.norm(start)
            return 0.0, start, start
        return float(s[0]), u[:, 0], vt[0]
    matrix = operator if isinstance(operator, np.ndarray) else operator @ np.eye(d)
    u, s, vt = np.linalg.svd(matrix)
    return float(s[0]), u[:, 0], vt[0]


@dataclasses.dataclass(frozen=True)
class Atom:
    """A vertex ``s = argmin_{||A||_* + lam ||b|| <= C} <s, grad F>`` of the ball.

    Attributes:
        kind: ``"A"`` for ``s = (C * left right^T, 0)``, ``"b"`` for ``s = (0, b)``
            (``"eta"`` in the history of checkpoints written before the rename).
        left: ``(d,)`` unit vector (``-u_1``), or None.
        right: ``(d,)`` unit vector (``v_1``), or None.
        distance_weights: ``(15,)`` the ``b`` part of ``s`` (zeros for an ``"A"`` atom).
        sigma: ``sigma_max(grad_A)``.
        dual_norm: ``max(sigma_max(grad_A), ||grad_b|| / lam)``; ``<s, grad F> = -C dual_norm``.
    """

    kind: str
    left: np.ndarray | None
    right: np.ndarray | None
    distance_weights: np.ndarray
    sigma: float
    dual_norm: float


def linear_minimizer(
    grad_A: LinearOperator | np.ndarray,
    grad_distance_weights: np.ndarray,
    C: float,
    lam: float,
    svd: str = "auto",
    svd_tol: float = 1e-6,
    seed: int = 0,
) -> Atom:
    """Frank-Wolfe's linear step: ``argmin <s, grad>`` over ``||A||_* + lam ||b||_2 <= C``.

    The minimum is ``-C max(sigma_max(grad_A), ||grad_b|| / lam)`` (the dual norm), at
    ``(-C u_1 v_1^T, 0)`` or ``(0, -(C / lam) grad_b / ||grad_b||)``, whichever
    term is larger (``A`` on ties).

    Args:
        grad_A: ``(d, d)`` the gradient w.r.t. ``A`` (operator or array).
        grad_distance_weights: ``(15,)`` the gradient ``grad_b`` w.r.t. the distance weights
            ``b`` (the deprecated keyword ``grad_eta=`` is still accepted).
        C: the radius, a number > 0.
        lam: the weight of ``||b||``, a number > 0.
        svd: ``"auto"``, ``"dense"`` or ``"svds"`` (see :func:`top_singular_triplet`).
        svd_tol: ARPACK's relative tolerance.
        seed: seeds ARPACK's start vector.

    Returns:
        An :class:`Atom`.

    Raises:
        ValueError: for ``C <= 0``, ``lam <= 0`` or an unknown ``svd``.

    Example:
        >>> atom = linear_minimizer(np.diag([2.0, 1.0]), np.full(15, 0.1), C=3.0, lam=1.0)
        >>> atom.kind, atom.dual_norm, (3.0 * np.outer(atom.left, atom.right))[0, 0]
        ('A', 2.0, np.float64(-3.0))
    """
    C = check_number("C", C, minimum=0.0, open_minimum=True)
    lam = check_number("lam", lam, minimum=0.0, open_minimum=True)
    sigma, u, v = top_singular_triplet(grad_A, svd, svd_tol, seed)
    norm = float(np.linalg.norm(grad_distance_weights))
    if sigma >= norm / lam:
        return Atom("A", -u, v, np.zeros_like(grad_distance_weights), sigma, sigma)
    return Atom("b", None, None, -(C / lam) * grad_distance_weights / norm, sigma, norm / lam)
