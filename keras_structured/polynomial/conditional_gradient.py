"""Conditional-gradient (Frank-Wolfe) training of multi-output polynomial networks (paper Alg. 1).

The network ``o_c(x) = sum_r V[r, c] (h_r . x)^2`` (with ``x <- [1, x]`` when
``augment=True``) is learned as the row-sparse infinite matrix ``U`` of paper eq. (5)::

    min_U  F(U) = sum_i l(y_i, o(x_i; U))   s.t.  Omega(U) <= tau,

over basis vectors ``||h||_2 <= 1``. Every iteration

1. computes ``D = -dF/dO (n, m)`` and selects ``h ~ argmax ||g_h||_p`` with
   ``g_hc = h^T X^T diag(D[:, c]) X h`` (:func:`~keras_structured.polynomial.basis_selection.select_basis`),
   with a lower and an upper bound on the maximum ``Omega*(G)``;
2. checks the Frank-Wolfe duality gap ``tau Omega*(G) - <D, O>``, an upper bound on
   ``F(U) - F(U*)``: the trainer records the upper bound ``tau upper_bound - <D, O>``
   (``gap_history``; the stopping test uses it) and the gap of the selected vector
   ``tau ||g_h||_p - <D, O>`` (``lower_gap_history``, a lower bound on the gap);
3. steps ``U <- (1 - gamma) U + gamma tau s e_h`` with ``s`` the dual-norm subgradient row
   and ``gamma`` from an exact line search;
4. refits (corrective step) ``V`` for the fixed basis ``H`` by the spectral projected gradient
   on ``{Omega(V) <= tau}`` (``refit="V"``, :func:`refit_output_weights`; loosely while the
   gap is large, tightly after the last basis vector), optionally followed by a joint non-convex
   projected-gradient refit of ``H`` (rows in the unit ball) and ``V`` (``refit="HV"``), and
   drops the basis vectors whose output weights became zero.

What the gap certifies depends on the penalty and on the number of features
(:mod:`~keras_structured.polynomial.basis_selection`): with at most ``dense_max_features``
features the ``Gamma_c`` are formed and ``gap_history`` is a certified upper bound on
``F(U) - F(U*)`` (up to rounding); it equals the exact gap for ``l1`` and for ``l1/linf`` with
at most 10 outputs, and is a relaxation (possibly loose) for ``l1/l2`` and for ``l1/linf`` with
more outputs. With more features, eigenpairs come from Lanczos and the bounds are estimates.

All steps are numpy/scipy; ``X`` may be ``scipy.sparse``. The matrices ``X^T diag(D) X``
are squared along the way (norms of the rows ``g_h``, ``sum_c Gamma_c^2``), so their entries,
bounded by ``max |D| sum_i ||x_i||^2``, must stay below :data:`MAX_GRAM_SCALE`: larger
features are refused by :func:`check_features`, larger gradients at the iteration where they
appear, with a message saying what to scale, instead of failing inside LAPACK.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from keras_structured.polynomial.basis_selection import select_basis
from keras_structured.polynomial.gamma_operators import gamma_operators
from keras_structured.polynomial.losses import Loss
from keras_structured.polynomial.penalties import Penalty

REFIT_GAP_FRACTION = 0.5
"""The refit of ``V`` stops once its own gap is this fraction of the current Frank-Wolfe gap: the
Frank-Wolfe step alone guarantees convergence, so the refit only needs to be accurate relative
to the progress still to be made (and its cost was most of the fit)."""
FINAL_REFIT_FACTOR = 10
"""The refit after the last basis vector (``max_basis`` or ``max_iter`` reached) gives the returned
``V``: it runs up to this many times ``refit_iter`` steps, to a gap of ``0.1 tol F(0)``."""
MAX_GRAM_SCALE = 1e150
"""The largest ``max |D| sum_i ||x_i||^2`` trained on (a bound on the entries of ``X^T diag(D) X``):
the trainer squares such entries, and float64 overflows above ``1.8e308``."""


class ConvergenceWarning(UserWarning):
    """The trainer stopped at ``max_iter`` before the Frank-Wolfe gap reached ``tol``."""


class TrainingResult(NamedTuple):
    """What :func:`conditional_gradient` returns."""

    basis: np.ndarray
    """``H (k, d_aug)``, rows in the unit ball."""
    output_weights: np.ndarray
    """``V (k, m)`` with ``Omega(V) <= tau``."""
    gap_history: np.ndarray
    """Upper bound on the Frank-Wolfe gap, hence on ``F(U) - F(U*)``, at every iterate (first: ``U = 0``)."""
    lower_gap_history: np.ndarray
    """Gap of the selected basis vector at every iterate: a lower bound on the Frank-Wolfe gap."""
    objective_history: np.ndarray
    """``F`` at every iterate (the first is ``F(0)``); non-increasing."""
    converged: bool
    """Whether the upper bound on the gap reached ``tol F(0)``."""
    certified: bool
    """Whether the bounds came from a dense eigensolver (certified) rather than Lanczos (estimates)."""


def check_features(x: np.ndarray | sp.spmatrix, augment: bool) -> np.ndarray | sp.csr_matrix:
    """Validates ``x`` (dense or ``scipy.sparse``, finite, not too large) and prepends a column of ones.

    Args:
        x: the features ``(n, d)``.
        augment: prepend the constant feature 1.

    Returns:
        A float64 ``(n, d + augment)`` array, or a CSR matrix for sparse input.

    Raises:
        ValueError: for ``x`` that is not 2-D, has NaN or infinite entries, or has
            ``sum_i ||x_i||^2`` above :data:`MAX_GRAM_SCALE` (features so large that
            training would overflow float64: scale them).

    Example:
        >>> check_features(np.array([[2.0, 3.0]]), augment=True)
        array([[1., 2., 3.]])
    """
    if sp.issparse(x):
        x = sp.csr_matrix(x, dtype=np.float64)
        values = x.data
    else:
        x = np.asarray(x, dtype=np.float64)
        values = x
    if x.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features). Received: X.shape={x.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError("X must contain only finite values. Received: X with NaN or inf entries")
    log_scale = _log10_gram_scale(values)
    if log_scale > math.log10(MAX_GRAM_SCALE):
        raise ValueError(
            "X has entries too large for a polynomial network: sum_i ||x_i||^2 = "
            f"1e{log_scale:.1f} exceeds {MAX_GRAM_SCALE:.0e}, and training squares such sums "
            "(float64 overflows above 1.8e308). Scale the features, e.g. with "
            "sklearn.preprocessing.StandardScaler or MaxAbsScaler. "
            f"Received: max(abs(X))={float(np.max(np.abs(values))):.3e}"
        )
    if not augment:
        return x
    ones = np.ones((x.shape[0], 1))
    return sp.hstack([sp.csr_matrix(ones), x], format="csr") if sp.issparse(x) else np.hstack([ones, x])


def _log10_gram_scale(values: np.ndarray) -> float:
    """``log10 sum x^2`` over the entries ``values`` of ``X``, without overflow (``-inf`` for zeros)."""
    largest = float(np.max(np.abs(values), initial=0.0))
    if largest == 0.0:
        return -math.inf
    return 2.0 * math.log10(largest) + math.log10(float(np.sum(np.square(values / largest))))


def network_outputs(x: np.ndarray | sp.spmatrix, basis: np.ndarray, output_weights: np.ndarray) -> np.ndarray:
    """``O = (X H^T)^2 V``: ``o_c(x_i) = sum_r V[r, c] (h_r . x_i)^2``, shape ``(n, m)``.

    Example:
        >>> network_outputs(np.array([[1.0, 2.0]]), np.array([[1.0, 1.0]]), np.array([[0.5, -1.0]]))
        array([[ 4.5, -9. ]])
    """
    return ((x @ basis.T) ** 2) @ output_weights


def column_major_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` stored column by column (Fortran order).

    The losses reduce every row of an ``(n, m)`` array with few columns ``m``; numpy runs those
    reductions 2-3x faster on column-major arrays.

    Example:
        >>> column_major_product(np.eye(2), np.ones((2, 3))).flags.f_contiguous
        True
    """
    return (b.T @ a.T).T


def _line_search(
    loss: Loss, y: np.ndarray, o: np.ndarray, direction: np.ndarray, tol: float = 1e-8
) -> float:
    """``argmin_{gamma in [0, 1]} F(o + gamma direction)``: the root of the increasing slope.

    Regula falsi with the Illinois modification (superlinear; a few loss gradients).
    """

    def slope(gamma):
        return float(np.sum(loss.gradient(y, o + gamma * direction) * direction))

    low, high = 0.0, 1.0
    slope_low, slope_high = slope(low), slope(high)
    if slope_low >= 0:
        return 0.0
    if slope_high <= 0:
        return 1.0
    side = 0
    while high - low > tol:
        gamma = (low * slope_high - high * slope_low) / (slope_high - slope_low)
        value = slope(gamma)
        if value == 0:
            return gamma
        if value < 0:
            low, slope_low = gamma, value
            slope_high *= 0.5 if side == -1 else 1.0
            side = -1
        else:
            high, slope_high = gamma, value
            slope_low *= 0.5 if side == 1 else 1.0
            side = 1
    return low


def refit_output_weights(
    features: np.ndarray,
    y: np.ndarray,
    output_weights: np.ndarray,
    loss: Loss,
    penalty: Penalty,
    tau: float,
    n_iter: int = 300,
    gap_tol: float = 0.0,
    memory: int = 10,
    armijo: float = 1e-4,
) -> np.ndarray:
    """Convex corrective step ``min_{Omega(V) <= tau} f(V) = sum_i l(y_i, Phi_i V)``.

    ``Phi = (X H^T)^2 (n, k)`` are the hidden activations, often nearly collinear, so the
    solver is the spectral projected gradient method (Birgin, Martinez and Raydan, 2000)
    rather than projected gradient with a ``1 / L`` step: direction
    ``P(V - alpha grad f(V)) - V`` with the Barzilai-Borwein step
    ``alpha = <s, s> / <s, grad change>``, and a non-monotone Armijo backtracking on the
    largest of the last ``memory`` objective values. Every iterate is feasible (a convex
    combination of feasible points). Stops after ``n_iter`` steps or once the Frank-Wolfe gap
    ``<grad f(V), V> + tau Omega*(grad f(V))`` (a bound on ``f(V) - min f``) is at most
    ``gap_tol``. Returns the best iterate, so the objective never increases from
    ``output_weights``.

    Example:
        >>> from keras_structured.polynomial.losses import get_loss
        >>> from keras_structured.polynomial.penalties import get_penalty
        >>> phi = np.array([[1.0], [2.0]])
        >>> refit_output_weights(phi, np.array([[2.0], [4.0]]), np.zeros((1, 1)),
        ...                      get_loss("squared"), get_penalty("l1"), tau=10.0).round(6)
        array([[2.]])
    """

    def value_and_gradient(weights):
        value, residual = loss.value_and_gradient(y, column_major_product(features, weights))
        return value, features.T @ residual

    lipschitz = loss.smoothness * np.linalg.eigvalsh(features.T @ features)[-1]
    if lipschitz <= 0:
        return output_weights
    current = best = output_weights
    value, grad = value_and_gradient(current)
    best_value, recent = value, [value]
    alpha = 1.0 / lipschitz
    for _ in range(n_iter):
        if np.sum(grad * current) + tau * penalty.dual_norm(grad) <= gap_tol:
            break
        direction = penalty.project(current - alpha * grad, tau) - current
        slope = np.sum(grad * direction)
        if slope >= 0:
            break
        reference, step = max(recent[-memory:]), 1.0
        new_value, new_grad = value_and_gradient(current + direction)
        while new_value > reference + armijo * step * slope and step > 1e-10:
            step *= 0.5
            new_value, new_grad = value_and_gradient(current + step * direction)
        change, grad_change = step * direction, new_grad - grad
        curvature = np.sum(change * grad_change)
        alpha = np.sum(change * change) / curvature if curvature > 0 else 1e3 / lipschitz
        current, value, grad = current + change, new_value, new_grad
        recent.append(value)
        if value < best_value:
            best, best_value = current, value
    return best


def _project_rows_unit_ball(basis: np.ndarray) -> np.ndarray:
    return basis / np.maximum(np.linalg.norm(basis, axis=1, keepdims=True), 1.0)


def refit_jointly(
    x: np.ndarray | sp.spmatrix,
    y: np.ndarray,
    basis: np.ndarray,
    output_weights: np.ndarray,
    loss: Loss,
    penalty: Penalty,
    tau: float,
    n_iter: int = 100,
    tol: float = 1e-9,
) -> tuple[np.ndarray, np.ndarray]:
    """Non-convex corrective step: ``min_{H, V} sum_i l(y_i, o(x_i; H, V))`` on the constraint set.

    The constraints are ``||h_r||_2 <= 1`` for every basis vector and ``Omega(V) <= tau``.

    Alternating projected-gradient steps on ``H`` and on ``V``, each with its own
    backtracking step size (sufficient decrease ``F(new) <= F - ||new - old||^2 / (2 step)``),
    so the objective never increases. Gradients: ``dF/dV = Phi^T R`` and
    ``dF/dH = 2 ((X H^T) * (R V^T))^T X`` with ``R = dF/dO``.

    Returns:
        The refitted ``(H, V)``.
    """

    def objective(activations, weights):
        return loss.value(y, activations @ weights)

    def basis_objective(candidate, weights):
        return objective((x @ candidate.T) ** 2, weights)

    z = x @ basis.T
    value = start_value = objective(z**2, output_weights)
    basis_step = weights_step = 1.0
    for _ in range(n_iter):
        previous_value = value
        residual = loss.gradient(y, (z**2) @ output_weights)
        basis_grad = 2.0 * (x.T @ (z * (residual @ output_weights.T))).T
        basis, value, basis_step = _backtracking_step(
            basis,
            basis_grad,
            basis_step,
            _project_rows_unit_ball,
            functools.partial(basis_objective, weights=output_weights),
            value,
        )
        z = x @ basis.T
        phi = z**2
        output_weights, value, weights_step = _backtracking_step(
            output_weights,
            phi.T @ loss.gradient(y, phi @ output_weights),
            weights_step,
            lambda v: penalty.project(v, tau),
            functools.partial(objective, phi),
            value,
        )
        if previous_value - value <= tol * max(abs(start_value), 1e-12):
            break
    return basis, output_weights


def _backtracking_step(point, grad, step, project, objective, value):
    """One projected-gradient step, step size doubled then halved until
    ``objective(new) <= value - ||new - point||^2 / (2 step)``; returns ``(point, value, step)``."""
    step *= 2.0
    while step > 1e-16:
        candidate = project(point - step * grad)
        candidate_value = objective(candidate)
        if candidate_value <= value - np.sum((candidate - point) ** 2) / (2.0 * step):
            return candidate, candidate_value, step
        step *= 0.5
    return point, value, step


def conditional_gradient(
    x: np.ndarray | sp.spmatrix,
    y: np.ndarray,
    loss: Loss,
    penalty: Penalty,
    tau: float,
    max_iter: int = 100,
    max_basis: int | None = None,
    tol: float = 1e-3,
    refit: str | None = "V",
    refit_iter: int = 50,
    dense_max_features: int = 500,
    rng: np.random.Generator | None = None,
    verbose: bool = False,
    callback: Callable[[int, np.ndarray, np.ndarray], object] | None = None,
) -> TrainingResult:
    """Algorithm 1: conditional gradient with basis selection and corrective refitting.

    Solves ``min_U sum_i l(y_i, o(x_i; U)) s.t. Omega(U) <= tau`` (see the module docstring).

    Args:
        x: ``(n, d)`` features, already augmented (dense or ``scipy.sparse`` CSR).
        y: ``(n, m)`` targets as the loss expects them.
        loss: the loss.
        penalty: the penalty ``Omega``.
        tau: the budget ``tau > 0``.
        max_iter: maximum number of Frank-Wolfe steps.
        max_basis: stop (without warning) once the network has this many basis vectors.
        tol: stop when the upper bound on the gap is at most ``tol F(0)``.
        refit: ``None``, ``"V"`` (convex refit of ``V``) or ``"HV"`` (then joint refit).
        refit_iter: iteration cap of each refit.
        dense_max_features: form the ``Gamma_c`` (certified bounds) up to this many columns of
            ``x``; beyond, use Lanczos.
        rng: random generator of the Lanczos starting vectors.
        verbose: print the objective and gap bounds at every iteration.
        callback: called as ``callback(iteration, H, V)`` at every iterate, once its gap bounds
            (``gap_history[iteration]``, ``lower_gap_history[iteration]``) are computed.

    Returns:
        A :class:`TrainingResult`. Warns :class:`ConvergenceWarning`, with the final gap,
        when ``max_iter`` steps did not reach the tolerance.

    Raises:
        ValueError: when the loss gradients ``D`` are not finite or ``max |D| sum_i ||x_i||^2``
            exceeds :data:`MAX_GRAM_SCALE` (targets or features too large), before LAPACK
            would fail on the overflowed matrices.

    Example:
        >>> from keras_structured.polynomial.losses import get_loss
        >>> from keras_structured.polynomial.penalties import get_penalty
        >>> x = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, -1.0]])
        >>> y = np.array([[0.0], [1.0], [1.0]])
        >>> result = conditional_gradient(x, y, get_loss("squared"), get_penalty("l1"), tau=2.0)
        >>> result.converged, np.round(network_outputs(x, result.basis, result.output_weights), 3)
        (True, array([[0.],
               [1.],
               [1.]]))
    """
    n, m = y.shape
    y = np.asfortranarray(y)  # see column_major_product
    basis = np.zeros((0, x.shape[1]))
    output_weights = np.zeros((0, m))
    projections = np.zeros((n, 0))  # X H^T, kept up to date
    outputs = np.zeros((n, m), order="F")
    initial_value = loss.value(y, outputs)
    gaps, lower_gaps, objectives = [], [], [initial_value]
    certified = converged = False
    log_gram_scale = _log10_gram_scale(x.data if sp.issparse(x) else x)
    for iteration in range(max_iter + 1):
        d = -loss.gradient(y, outputs)
        largest_gradient = float(np.max(np.abs(d), initial=0.0))  # NaN if D has one
        log_scale = math.log10(largest_gradient) + log_gram_scale if largest_gradient != 0.0 else -math.inf
        if not log_scale <= math.log10(MAX_GRAM_SCALE):
            raise ValueError(
                f"Training would overflow float64 at iteration {iteration}: max |D| sum_i ||x_i||^2 = "
                f"1e{log_scale:.1f} (D the loss gradients; it bounds the entries of X^T diag(D) X) exceeds "
                f"{MAX_GRAM_SCALE:.0e}. Scale the targets y or the features X (e.g. with "
                "sklearn.preprocessing.StandardScaler), or lower tau. "
                f"Received: max(abs(D))={largest_gradient:.3e}"
            )
        gammas = gamma_operators(x, d, dense_max_features=dense_max_features, rng=rng)
        inner = float(np.sum(d * outputs))
        # The upper bound only needs refining when it decides the stopping test gap <= tol F(0).
        selection = select_basis(gammas, penalty, basis, target=(inner + tol * initial_value) / tau)
        # The true gap is >= 0, so clipping keeps both bounds valid (they cross 0 only by rounding).
        gaps.append(max(tau * selection.upper_bound - inner, 0.0))
        lower_gaps.append(max(tau * selection.value - inner, 0.0))
        certified = gammas.certified
        if callback is not None:
            callback(iteration, basis, output_weights)
        if verbose:
            print(
                f"iteration {iteration:4d}  objective {objectives[-1]:.6e}  gap {gaps[-1]:.3e} "
                f"(selected {lower_gaps[-1]:.3e})  basis {basis.shape[0]}"
            )
        converged = gaps[-1] <= tol * initial_value
        if converged or iteration == max_iter or (max_basis is not None and basis.shape[0] >= max_basis):
            break
        atom = tau * penalty.dual_row(selection.g)
        z_h = x @ selection.h
        atom_outputs = np.asfortranarray((z_h**2)[:, None] * atom[None, :])
        gamma = _line_search(loss, y, outputs, atom_outputs - outputs)
        basis = np.vstack([basis, selection.h])
        projections = np.hstack([projections, z_h[:, None]])
        output_weights = np.vstack([(1.0 - gamma) * output_weights, gamma * atom])
        if refit is not None:
            last = iteration == max_iter - 1 or (max_basis is not None and basis.shape[0] >= max_basis)
            output_weights = refit_output_weights(
                projections**2, y, output_weights, loss, penalty, tau,
                n_iter=FINAL_REFIT_FACTOR * refit_iter if last else refit_iter,
                gap_tol=0.1 * tol * initial_value if last else REFIT_GAP_FRACTION * lower_gaps[-1],
            )  # fmt: skip
        if refit == "HV":
            basis, output_weights = refit_jointly(
                x, y, basis, output_weights, loss, penalty, tau, n_iter=refit_iter
            )
            projections = x @ basis.T
        keep = np.any(output_weights != 0, axis=1) & np.any(basis != 0, axis=1)
        basis, output_weights, projections = basis[keep], output_weights[keep], projections[:, keep]
        outputs = column_major_product(projections**2, output_weights)
        objectives.append(loss.value(y, outputs))
    if not converged and iteration == max_iter:
        warnings.warn(
            f"Conditional gradient did not converge in max_iter={max_iter} iterations: final "
            f"Frank-Wolfe gap bound {gaps[-1]:.3e} > tol * F(0) = {tol * initial_value:.3e}. "
            "Increase max_iter or tol.",
            ConvergenceWarning,
            stacklevel=2,
        )
    return TrainingResult(
        basis,
        output_weights,
        np.asarray(gaps),
        np.asarray(lower_gaps),
        np.asarray(objectives),
        converged,
        certified,
    )
