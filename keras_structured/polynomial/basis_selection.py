"""Basis selection: the linear minimisation step ``max_{||h||_2 <= 1} ||g_h||_p`` (paper eq. 9).

With ``g_hc = h^T Gamma_c h`` and ``Gamma_c = X^T diag(D[:, c]) X``
(:mod:`~keras_structured.polynomial.gamma_operators`), the dual norm of the gradient is

    Omega*(G) = max_{||h|| <= 1} ||g_h||_p = max_{||h|| <= 1} max_{Omega(w) <= 1} <w, g_h>
              = max_{Omega(w) <= 1} lambda_max(Gamma(w)),      Gamma(w) = sum_c w_c Gamma_c,

exchanging the two maxima. ``w -> lambda_max(Gamma(w))`` is convex, so the maximum over the
row ball ``{Omega(w) <= 1}`` is reached at one of its extreme points:

* ``l1`` (``p = inf``): the ``2m`` points ``+-e_c``, i.e. both extreme eigenpairs of every
  ``Gamma_c`` (the largest *and* the most negative eigenvalue, whatever their magnitudes:
  no power method stalls when they nearly cancel). **Exact.**
* ``l1/linf`` (``p = 1``): the ``2^m`` sign vectors ``w in {-1, 1}^m``; enumerated when
  ``2^m <= vertex_limit``. **Exact** then. Otherwise the value is that of the best
  candidate (below) and the upper bound is a relaxation: the sign vectors of the
  ``log2(vertex_limit)`` classes with the largest ``||Gamma_c||`` are enumerated and every
  other class adds ``||Gamma_c||`` (``lambda_max(A + B) <= lambda_max(A) + ||B||``).
* ``l1/l2`` (``p = 2``): the whole unit sphere, where maximising a convex function is hard
  in general (a quartic form on the sphere). The value is that of the best candidate; the
  upper bound is the smaller of ``||(||Gamma_c||_2)_c||_2`` and the Cauchy-Schwarz bound
  ``||g_h||_2^2 = sum_c (h^T Gamma_c h)^2 <= h^T (sum_c Gamma_c^2) h <= lambda_max(sum_c Gamma_c^2)``,
  refined on request (``target``) by branch and bound over the sphere of ``w``
  (:mod:`~keras_structured.polynomial.sphere_bound`), which converges to ``Omega*(G)`` but in
  time exponential in ``m`` at worst.

Candidates, when the vertices are not enumerated: the extreme eigenvectors of every
``Gamma_c`` and the network's current basis vectors (normalised; they guarantee
``tau ||g_h||_p >= <D, O>``, so the lower gap is never negative), each improved by the
alternating maximisation ``w <- dual_row(g_h)``, ``h <- top eigenvector of Gamma(w)``: both
steps maximise ``<w, g_h>`` exactly in one variable, so ``||g_h||_p`` never decreases (for
``m = 1`` and ``p = 2`` this is the generalized power method of paper eq. 13-16, with exact
eigenvectors instead of power steps).

What is certified: with :class:`~keras_structured.polynomial.gamma_operators.DenseGammas`,
``value <= Omega*(G) <= upper_bound`` hold up to rounding (and ``value = upper_bound`` in the
exact cases). With ``LanczosGammas`` (many features) both are Lanczos estimates.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_structured.polynomial.gamma_operators import GammaOperators
from keras_structured.polynomial.penalties import Penalty
from keras_structured.polynomial.sphere_bound import sphere_maximum_bound


class Selection(NamedTuple):
    """What :func:`select_basis` returns."""

    h: np.ndarray
    """The selected unit basis vector ``(d,)``."""
    g: np.ndarray
    """Its row ``g_h (m,)``."""
    value: float
    """``||g_h||_p``, a lower bound on ``Omega*(G)``."""
    upper_bound: float
    """An upper bound on ``Omega*(G)`` (``>= value``)."""
    exact: bool
    """Whether ``value`` is ``Omega*(G)`` (vertices enumerated), up to rounding."""
    certified: bool
    """Whether the bounds are exact up to rounding (dense eigensolver) rather than Lanczos estimates."""


def alternating_maximization(
    gammas: GammaOperators, penalty: Penalty, h: np.ndarray, n_iter: int = 50, tol: float = 1e-6
) -> tuple[np.ndarray, np.ndarray]:
    """Improves every column of ``h (d, S)`` by ``w <- dual_row(g_h)``, ``h <- top eigvec Gamma(w)``.

    Each step solves ``max_w <w, g_h>`` over ``{Omega(w) <= 1}`` or ``max_{||h|| <= 1} h^T Gamma(w) h``
    exactly, so ``||g_h||_p`` never decreases; a column stops once it gains at most ``tol`` (relative
    to the best value), all stop after ``n_iter`` rounds.

    Returns:
        ``(h, g)``: the improved unit vectors ``(d, S)`` and their rows ``(S, m)``.

    Example:
        >>> from keras_structured.polynomial.gamma_operators import DenseGammas
        >>> from keras_structured.polynomial.penalties import get_penalty
        >>> gammas = DenseGammas(np.eye(2), np.array([[1.0, 1.0], [0.0, 3.0]]))
        >>> h, g = alternating_maximization(gammas, get_penalty("l1/l2"), np.array([[0.6], [0.8]]))
        >>> np.round(np.abs(h[:, 0]), 3).tolist(), np.round(g[0], 3).tolist()
        ([0.0, 1.0], [0.0, 3.0])
    """
    g = gammas.rows(h)
    value = penalty.row_norms(g)
    active = np.arange(h.shape[1])
    for _ in range(n_iter):
        _, new_h, _ = gammas.top_eigenpairs(penalty.dual_row(g[active]), starts=h[:, active])
        new_g = gammas.rows(new_h)
        new_value = penalty.row_norms(new_g)
        gain = new_value - value[active]
        better = gain > 0
        h[:, active[better]], g[active[better]] = new_h[:, better], new_g[better]
        value[active[better]] = new_value[better]
        active = active[gain > tol * max(float(value.max()), 1e-300)]
        if not active.size:
            break
    return h, g


def _relaxation_bound(
    gammas: GammaOperators, penalty: Penalty, class_norms: np.ndarray, vertex_limit: int
) -> float:
    """An upper bound on ``Omega*(G)`` when the vertices are not enumerated (module docstring)."""
    bound = float(np.linalg.norm(class_norms, ord=penalty.dual_exponent))
    if penalty.dual_exponent == 2:
        bound = min(bound, float(np.sqrt(max(gammas.squared_sum_norm(), 0.0))))
    if penalty.dual_exponent == 1:
        order = np.argsort(-class_norms)
        enumerated = order[: int(np.log2(vertex_limit))]
        signs = np.zeros((2 ** enumerated.size, gammas.n_outputs))
        signs[:, enumerated] = penalty.vertices(enumerated.size, vertex_limit)
        _, _, upper = gammas.top_eigenpairs(signs)
        bound = min(bound, float(upper.max() + class_norms[order[enumerated.size :]].sum()))
    return bound


def select_basis(
    gammas: GammaOperators,
    penalty: Penalty,
    basis: np.ndarray | None = None,
    target: float = np.inf,
    vertex_limit: int | None = None,
    max_starts: int | None = None,
    n_iter: int | None = None,
    max_evaluations: int | None = None,
) -> Selection:
    """The basis vector ``h ~ argmax_{||h||_2 <= 1} ||g_h||_p`` with bounds on the maximum ``Omega*(G)``.

    See the module docstring for the method and what is exact.

    Args:
        gammas: the matrices ``Gamma_c`` (dense or Lanczos).
        penalty: the penalty, which fixes ``p`` and the row ball.
        basis: the network's current basis vectors ``(k, d)``, extra candidates.
        target: ``l1/l2`` only: when ``value <= target`` but the relaxation bound is above
            ``target``, refine the upper bound by branch and bound
            (:func:`~keras_structured.polynomial.sphere_bound.sphere_maximum_bound`) until it is at
            most ``target`` or ``max_evaluations`` eigenproblems were solved: enough to decide
            whether ``Omega*(G) <= target`` (a stopping test), and no more.
        vertex_limit: enumerate the extreme points of the row ball if there are at most this many.
        max_starts: the number of best candidates improved by :func:`alternating_maximization`.
        n_iter: its iteration cap.
        max_evaluations: the budget of the branch and bound.

    The last four default to ``gammas.search_effort`` (fewer eigenproblems for Lanczos).

    Returns:
        A :class:`Selection`.

    Example:
        >>> from keras_structured.polynomial.gamma_operators import DenseGammas
        >>> from keras_structured.polynomial.penalties import get_penalty
        >>> gammas = DenseGammas(np.eye(2), np.array([[2.0, 0.0], [-3.0, 1.0]]))
        >>> selection = select_basis(gammas, get_penalty("l1"))
        >>> np.abs(selection.h).tolist(), selection.value, selection.exact
        ([0.0, 1.0], 3.0, True)
    """
    m = gammas.n_outputs
    effort = gammas.search_effort
    vertex_limit = effort.vertices if vertex_limit is None else vertex_limit
    max_starts = effort.starts if max_starts is None else max_starts
    n_iter = effort.rounds if n_iter is None else n_iter
    max_evaluations = effort.evaluations if max_evaluations is None else max_evaluations
    vertices = penalty.vertices(m, vertex_limit)
    if vertices is not None:
        _, vectors, upper = gammas.top_eigenpairs(vertices)
        g = gammas.rows(vectors)
        values = penalty.row_norms(g)
        best = int(np.argmax(values))
        return Selection(
            vectors[:, best], g[best], float(values[best]), max(float(upper.max()), float(values[best])),
            gammas.certified, gammas.certified,
        )  # fmt: skip
    axes = np.concatenate([np.eye(m), -np.eye(m)])
    _, candidates, upper = gammas.top_eigenpairs(axes)
    class_norms = np.maximum(upper[:m], upper[m:])
    if basis is not None and basis.size:
        norms = np.linalg.norm(basis, axis=1)
        candidates = np.hstack([candidates, (basis[norms > 0] / norms[norms > 0, None]).T])
    starts = np.argsort(-penalty.row_norms(gammas.rows(candidates)))[:max_starts]
    h, g = alternating_maximization(gammas, penalty, candidates[:, starts].copy(), n_iter=n_iter)
    values = penalty.row_norms(g)
    best = int(np.argmax(values))
    h, g, value = h[:, best], g[best], float(values[best])
    upper_bound = _relaxation_bound(gammas, penalty, class_norms, vertex_limit)
    if penalty.dual_exponent == 2 and value <= target < upper_bound:
        refined, direction = sphere_maximum_bound(
            lambda w: gammas.top_eigenpairs(w)[2], m, target, max_evaluations=max_evaluations
        )
        upper_bound = min(upper_bound, refined)
        found = gammas.top_eigenpairs(direction[None])[1]
        found_g = gammas.rows(found)[0]
        if penalty.row_norms(found_g)[0] > value:
            h, g, value = found[:, 0], found_g, float(penalty.row_norms(found_g)[0])
    return Selection(h, g, value, max(upper_bound, value), False, gammas.certified)
