"""``-inf`` scores mark forbidden parts of a structure (an arc, a transition, a pair).

They are replaced by a finite penalty so large that the MAP oracle picks a
structure containing a forbidden part only when no allowed structure exists; the
solution is then checked to contain none. NaN and ``+inf`` are errors.
"""

from __future__ import annotations

import numpy as np


def replace_forbidden(
    name: str, scores: np.ndarray, finite_mass: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``(batch, d)`` scores and swap ``-inf`` for a per-example penalty.

    Args:
        name: the argument's name, for error messages.
        scores: ``(batch, d)`` scores.
        finite_mass: ``(batch,)`` bound on ``|score|`` of any allowed structure.

    Returns:
        ``(scores, forbidden)``: finite scores and the boolean mask of ``-inf``.
    """
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise ValueError(
            f"SparseMAP scores must not be NaN or +inf. Received: {name} with NaN or +inf values"
        )
    forbidden = np.isneginf(scores)
    if forbidden.any():
        penalty = -(4.0 * finite_mass + 1.0)
        scores = np.where(forbidden, penalty[:, None], scores)
    return scores, forbidden


def finite_mass(*flat_scores: np.ndarray) -> np.ndarray:
    """Per-example bound on the score magnitude of any structure avoiding ``-inf`` parts."""
    return sum(np.where(np.isfinite(s), np.abs(s), 0.0).sum(axis=1) + s.shape[1] for s in flat_scores)


def raise_if_forbidden(touches: np.ndarray) -> None:
    """Raise ``ValueError`` naming the first example whose solution uses a forbidden part.

    Args:
        touches: ``(batch,)`` booleans, True where the solution uses a ``-inf`` part,
            which only happens when every structure of that example contains one.
    """
    if touches.any():
        raise ValueError(
            f"Every structure of example {int(np.argmax(touches))} contains a forbidden (-inf) part, "
            "so it has no feasible structure. Received: scores whose -inf entries rule out all structures"
        )


def check_allowed(examples, forbidden_u: np.ndarray, forbidden_v: np.ndarray) -> None:
    """Raise ``ValueError`` if a solution (:class:`ExampleSolution`) puts weight on a forbidden part."""
    touches = np.zeros(len(examples), dtype=bool)
    for b, e in enumerate(examples):
        used = (e.weights > 0)[:, None]
        touches_u = forbidden_u[b][e.m_indices] & (e.m_values != 0) & used
        touches_v = forbidden_v[b][e.n_indices] & (e.n_values != 0) & used
        touches[b] = touches_u.any() or touches_v.any()
    raise_if_forbidden(touches)
