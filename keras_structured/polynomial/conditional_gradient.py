"""Conditional-gradient (Frank-Wolfe) training of multi-output polynomial networks (paper Alg. 1).

The network ``o_c(x) = sum_r V[r, c] (h_r . x)^2`` (with ``x <- [1, x]`` when
``augment=True``) is learned as the row-sparse infinite matrix ``U`` of paper eq. (5)::

    min_U  F(U) = sum_i l(y_i, o(x_i; U))   s.t.  Omega(U) <= tau,

over basis vectors ``||h||_2 <= 1``. Every iteration

1. computes ``D = -dF/dO (n, m)`` and selects ``h ~ argmax ||g_h||_p`` with
   ``g_hc = h^T X^T diag(D[:, c]) X h`` (:func:`~keras_structured.polynomial.basis_selection.select_basis`);
2. checks the Frank-Wolfe duality gap ``tau ||g_h||_p - <D, O>`` (an upper bound on
   ``F(U) - F(U*)`` up to the approximation factor of step 1);
3. steps ``U <- (1 - gamma) U + gamma tau s e_h`` with ``s`` the dual-norm subgradient row
   and ``gamma`` from an exact line search;
4. refits (corrective step) ``V`` for the fixed basis ``H`` by projected FISTA on
   ``{Omega(V) <= tau}`` (``refit="V"``), optionally followed by a joint non-convex
   projected-gradient refit of ``H`` (rows in the unit ball) and ``V`` (``refit="HV"``), and
   drops the basis vectors whose output weights became zero.

All steps are numpy/scipy, linear in ``nnz(X)``; ``X`` may be ``scipy.sparse``.
"""

from __future__ import annotations

import abc
import functools
import warnings
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.special import softmax

from keras_structured._validation import check_integer
from keras_structured.polynomial.basis_selection import select_basis
from keras_structured.polynomial.losses import Loss, get_loss
from keras_structured.polynomial.penalties import Penalty, get_penalty

if TYPE_CHECKING:
    import keras


class ConvergenceWarning(UserWarning):
    """The trainer stopped at ``max_iter`` before the Frank-Wolfe gap reached ``tol``."""


class TrainingResult(NamedTuple):
    """What :func:`conditional_gradient` returns."""

    basis: np.ndarray
    """``H (k, d_aug)``, rows in the unit ball."""
    output_weights: np.ndarray
    """``V (k, m)`` with ``Omega(V) <= tau``."""
    gap_history: np.ndarray
    """Frank-Wolfe gap at every iterate (the first is at ``U = 0``)."""
    objective_history: np.ndarray
    """``F`` at every iterate (the first is ``F(0)``); non-increasing."""
    converged: bool
    """Whether the relative gap reached ``tol``."""


def check_features(x: np.ndarray | sp.spmatrix, augment: bool) -> np.ndarray | sp.csr_matrix:
    """Validates ``x`` (dense or ``scipy.sparse``, finite) and prepends a column of ones.

    Returns:
        A float64 ``(n, d + augment)`` array, or a CSR matrix for sparse input.

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
    if not augment:
        return x
    ones = np.ones((x.shape[0], 1))
    return sp.hstack([sp.csr_matrix(ones), x], format="csr") if sp.issparse(x) else np.hstack([ones, x])


def network_outputs(x: np.ndarray | sp.spmatrix, basis: np.ndarray, output_weights: np.ndarray) -> np.ndarray:
    """``O = (X H^T)^2 V``: ``o_c(x_i) = sum_r V[r, c] (h_r . x_i)^2``, shape ``(n, m)``.

    Example:
        >>> network_outputs(np.array([[1.0, 2.0]]), np.array([[1.0, 1.0]]), np.array([[0.5, -1.0]]))
        array([[ 4.5, -9. ]])
    """
    return ((x @ basis.T) ** 2) @ output_weights


def _line_search(loss: Loss, y: np.ndarray, o: np.ndarray, direction: np.ndarray) -> float:
    """``argmin_{gamma in [0, 1]} F(o + gamma direction)`` by bisection on the derivative."""

    def slope(gamma):
        return float(np.sum(loss.gradient(y, o + gamma * direction) * direction))

    if slope(0.0) >= 0:
        return 0.0
    if slope(1.0) <= 0:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(50):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if slope(mid) < 0 else (low, mid)
    return low


def refit_output_weights(
    features: np.ndarray,
    y: np.ndarray,
    output_weights: np.ndarray,
    loss: Loss,
    penalty: Penalty,
    tau: float,
    n_iter: int = 300,
    tol: float = 1e-9,
) -> np.ndarray:
    """Convex corrective step ``min_{Omega(V) <= tau} sum_i l(y_i, Phi_i V)`` by projected FISTA.

    ``Phi = (X H^T)^2 (n, k)`` are the hidden activations. Step ``1 / L`` with
    ``L = beta ||Phi||_2^2`` (``beta`` the loss smoothness), gradient-based adaptive restart
    (O'Donoghue and Candes, 2015); returns the best iterate, so the objective never
    increases from ``output_weights``.

    Example:
        >>> phi = np.array([[1.0], [2.0]])
        >>> refit_output_weights(phi, np.array([[2.0], [4.0]]), np.zeros((1, 1)),
        ...                      get_loss("squared"), get_penalty("l1"), tau=10.0).round(6)
        array([[2.]])
    """
    lipschitz = loss.smoothness * np.linalg.eigvalsh(features.T @ features)[-1]
    if lipschitz <= 0:
        return output_weights
    best = output_weights
    best_value = loss.value(y, features @ best)
    previous = momentum_point = best
    t = 1.0
    for _ in range(n_iter):
        grad = features.T @ loss.gradient(y, features @ momentum_point)
        current = penalty.project(momentum_point - grad / lipschitz, tau)
        value = loss.value(y, features @ current)
        if value < best_value:
            best, best_value = current, value
        step = current - previous
        if np.sum((momentum_point - current) * step) > 0:
            t = 1.0
        t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        momentum_point = current + (t - 1.0) / t_next * step
        previous, t = current, t_next
        if np.linalg.norm(step) <= tol * max(np.linalg.norm(current), 1e-12):
            break
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
    power_iter: int = 100,
    refit_iter: int = 300,
    rng: np.random.Generator | None = None,
    verbose: bool = False,
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
        tol: stop when the gap is at most ``tol F(0)``.
        refit: ``None``, ``"V"`` (convex refit of ``V``) or ``"HV"`` (then joint refit).
        power_iter: iteration cap of the power method / generalized power method.
        refit_iter: iteration cap of each refit.
        rng: random generator of the power method.
        verbose: print the objective and gap at every iteration.

    Returns:
        A :class:`TrainingResult`. Warns :class:`ConvergenceWarning`, with the final gap,
        when ``max_iter`` steps did not reach the tolerance.

    Example:
        >>> x = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, -1.0]])
        >>> y = np.array([[0.0], [1.0], [1.0]])
        >>> result = conditional_gradient(x, y, get_loss("squared"), get_penalty("l1"), tau=2.0)
        >>> result.converged, np.round(network_outputs(x, result.basis, result.output_weights), 3)
        (True, array([[0.],
               [1.],
               [1.]]))
    """
    n, m = y.shape
    basis = np.zeros((0, x.shape[1]))
    output_weights = np.zeros((0, m))
    projections = np.zeros((n, 0))  # X H^T, kept up to date
    outputs = np.zeros((n, m))
    initial_value = loss.value(y, outputs)
    gaps, objectives = [], [initial_value]
    converged = False
    for iteration in range(max_iter + 1):
        d = -loss.gradient(y, outputs)
        h, g = select_basis(x, d, penalty, n_iter=power_iter, rng=rng)
        gaps.append(tau * float(penalty.row_norms(g)[0]) - float(np.sum(d * outputs)))
        if verbose:
            print(
                f"iteration {iteration:4d}  objective {objectives[-1]:.6e}  gap {gaps[-1]:.3e}  "
                f"basis {basis.shape[0]}"
            )
        converged = gaps[-1] <= tol * initial_value
        if converged or iteration == max_iter or (max_basis is not None and basis.shape[0] >= max_basis):
            break
        atom = tau * penalty.dual_row(g)
        z_h = x @ h
        atom_outputs = (z_h**2)[:, None] * atom[None, :]
        gamma = _line_search(loss, y, outputs, atom_outputs - outputs)
        basis = np.vstack([basis, h])
        projections = np.hstack([projections, z_h[:, None]])
        output_weights = np.vstack([(1.0 - gamma) * output_weights, gamma * atom])
        if refit is not None:
            output_weights = refit_output_weights(
                projections**2, y, output_weights, loss, penalty, tau, n_iter=refit_iter
            )
        if refit == "HV":
            basis, output_weights = refit_jointly(
                x, y, basis, output_weights, loss, penalty, tau, n_iter=refit_iter
            )
            projections = x @ basis.T
        keep = np.any(output_weights != 0, axis=1) & np.any(basis != 0, axis=1)
        basis, output_weights, projections = basis[keep], output_weights[keep], projections[:, keep]
        outputs = (projections**2) @ output_weights
        objectives.append(loss.value(y, outputs))
    if not converged and iteration == max_iter:
        warnings.warn(
            f"Conditional gradient did not converge in max_iter={max_iter} iterations: final "
            f"Frank-Wolfe gap {gaps[-1]:.3e} > tol * F(0) = {tol * initial_value:.3e}. "
            "Increase max_iter or tol.",
            ConvergenceWarning,
            stacklevel=2,
        )
    return TrainingResult(basis, output_weights, np.asarray(gaps), np.asarray(objectives), converged)


class PolynomialNetworkEstimator(abc.ABC):
    """Shared fitting logic of the conditional-gradient estimators (see :func:`conditional_gradient`).

    Subclasses choose the allowed losses and turn ``y`` into the ``(n, m)`` loss targets.

    Args:
        loss: loss name, one of the estimator's ``_losses`` (default: the first).
        penalty: ``"l1"``, ``"l1/l2"`` (default: shares basis vectors across outputs) or
            ``"l1/linf"``.
        tau: the budget ``Omega(U) <= tau``, > 0.
        max_iter: maximum number of Frank-Wolfe steps (basis vector additions).
        max_basis: optional cap on the number of basis vectors (hidden units).
        tol: relative Frank-Wolfe gap (``gap <= tol F(0)``) at which training stops.
        refit: ``"V"`` (convex refit of the output weights), ``"HV"`` (also a joint
            non-convex refit of basis and output weights) or ``None``.
        augment: prepend a constant feature 1 (linear and constant terms).
        power_iter: iteration cap of the (generalized) power method.
        refit_iter: iteration cap of each refit.
        random_state: seed of the power method's starting vectors.
        verbose: print the objective, gap and number of basis vectors every iteration.
    """

    _losses: tuple[str, ...] = ()

    def __init__(
        self,
        loss: str | None = None,
        penalty: str = "l1/l2",
        tau: float = 1.0,
        max_iter: int = 100,
        max_basis: int | None = None,
        tol: float = 1e-3,
        refit: str | None = "V",
        augment: bool = True,
        power_iter: int = 100,
        refit_iter: int = 300,
        random_state: int | None = None,
        verbose: bool = False,
    ):
        loss = self._losses[0] if loss is None else loss
        if loss not in self._losses:
            raise ValueError(f"loss must be one of {list(self._losses)}. Received: loss={loss!r}")
        get_penalty(penalty)
        if isinstance(tau, bool) or not isinstance(tau, (int, float, np.floating)) or not 0 < tau < np.inf:
            raise ValueError(f"tau must be a finite number > 0. Received: tau={tau!r}")
        if refit not in (None, "V", "HV"):
            raise ValueError(f"refit must be None, 'V' or 'HV'. Received: refit={refit!r}")
        if not tol >= 0:
            raise ValueError(f"tol must be >= 0. Received: tol={tol!r}")
        for name, value in (("max_iter", max_iter), ("power_iter", power_iter), ("refit_iter", refit_iter)):
            check_integer(name, value, minimum=1)
        check_integer("max_basis", max_basis, minimum=1, allow_none=True)
        self.loss = loss
        self.penalty = penalty
        self.tau = tau
        self.max_iter = max_iter
        self.max_basis = max_basis
        self.tol = tol
        self.refit = refit
        self.augment = augment
        self.power_iter = power_iter
        self.refit_iter = refit_iter
        self.random_state = random_state
        self.verbose = verbose

    def _training_loss(self) -> Loss:
        return get_loss(self.loss)

    @abc.abstractmethod
    def _targets(self, y: np.ndarray) -> np.ndarray:
        """The ``(n, m)`` loss targets of the training labels ``y``; sets label attributes."""

    def fit(self, X: np.ndarray | sp.spmatrix, y: np.ndarray) -> PolynomialNetworkEstimator:
        """Trains the network on ``X (n, d)`` (dense or ``scipy.sparse``) and ``y``.

        Returns:
            ``self``.
        """
        x = check_features(X, self.augment)
        y = np.asarray(y)
        if y.shape[:1] != (x.shape[0],):
            raise ValueError(
                f"X and y must have the same number of samples. Received: X with {x.shape[0]} rows, "
                f"y with shape {y.shape}"
            )
        result = conditional_gradient(
            x,
            self._targets(y),
            self._training_loss(),
            get_penalty(self.penalty),
            float(self.tau),
            max_iter=self.max_iter,
            max_basis=self.max_basis,
            tol=self.tol,
            refit=self.refit,
            power_iter=self.power_iter,
            refit_iter=self.refit_iter,
            rng=np.random.default_rng(self.random_state),
            verbose=self.verbose,
        )
        self.n_features_in_ = x.shape[1] - int(self.augment)
        self.basis_ = result.basis
        self.output_weights_ = result.output_weights
        self.n_basis_ = result.basis.shape[0]
        self.gap_history_ = result.gap_history
        self.objective_history_ = result.objective_history
        self.converged_ = result.converged
        self.n_iter_ = len(result.objective_history) - 1
        return self

    def decision_function(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The network outputs ``o(x) (n, m)``."""
        if not hasattr(self, "basis_"):
            raise ValueError(f"This {type(self).__name__} is not fitted yet: call fit(X, y) first.")
        x = check_features(X, self.augment)
        if x.shape[1] - int(self.augment) != self.n_features_in_:
            raise ValueError(
                f"X must have {self.n_features_in_} features, as in fit. "
                f"Received: X with {x.shape[1] - int(self.augment)} features"
            )
        return network_outputs(x, self.basis_, self.output_weights_)

    def to_keras(self, **layer_kwargs) -> keras.layers.Layer:
        """A built ``PolynomialNetwork`` layer holding the learned ``H`` and ``V``.

        Its outputs equal :meth:`decision_function` (up to the layer's float precision;
        pass ``dtype="float64"`` for an exact match).

        Args:
            **layer_kwargs: extra keyword arguments of the layer (e.g. ``name``, ``dtype``).
        """
        from keras_structured.polynomial import PolynomialNetwork

        if getattr(self, "n_basis_", 0) == 0:
            raise ValueError(
                "to_keras needs a fitted network with at least one basis vector. "
                f"Received: n_basis_={getattr(self, 'n_basis_', None)}"
            )
        layer = PolynomialNetwork(
            units=self.output_weights_.shape[1], rank=self.n_basis_, augment=self.augment, **layer_kwargs
        )
        layer.build((None, self.n_features_in_))
        layer.set_weights([self.basis_, self.output_weights_])
        return layer


class PolynomialNetworkClassifier(PolynomialNetworkEstimator):
    """Multi-class polynomial network trained by conditional gradient (paper Alg. 1).

    Solves ``min_U sum_i l(y_i, o(x_i; U)) s.t. Omega(U) <= tau`` with
    ``o_c(x) = sum_r U[h_r, c] (h_r . [1, x])^2`` and predicts ``argmax_c o_c(x)``. Labels are
    the integers ``0..m-1``; the targets of the losses are one-hot.

    Args:
        loss: ``"logistic"`` (multinomial, default), ``"smoothed_hinge"`` or ``"squared"``
            (on one-hot targets).
        **kwargs: the other arguments of :class:`PolynomialNetworkEstimator`.

    Example:
        >>> x = np.array([[-2.0], [-1.0], [1.0], [2.0]])
        >>> clf = PolynomialNetworkClassifier(tau=10.0, random_state=0).fit(x, [0, 1, 1, 0])
        >>> clf.predict(x).tolist(), clf.n_basis_ <= 2
        ([0, 1, 1, 0], True)
    """

    _losses = ("logistic", "smoothed_hinge", "squared")

    def _targets(self, y):
        if y.ndim != 1 or y.size == 0:
            raise ValueError(f"y must be a non-empty 1-D array of labels. Received: y.shape={y.shape}")
        labels = y.astype(np.int64) if np.issubdtype(y.dtype, np.number) else None
        if labels is None or np.any(labels != y) or labels.min() < 0:
            bad = y[0] if labels is None else y[(labels != y) | (labels < 0)][0]
            raise ValueError(f"Labels must be integers in 0..m-1. Received: label={bad.item()!r}")
        self.classes_ = np.arange(labels.max() + 1)
        return np.eye(self.classes_.size)[labels]

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The predicted classes ``argmax_c o_c(x)``, shape ``(n,)``."""
        outputs = self.decision_function(X)
        return self.classes_[np.argmax(outputs, axis=1)]

    def predict_proba(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """Class probabilities ``softmax(o(x))`` (``loss="logistic"`` only), shape ``(n, m)``."""
        if self.loss != "logistic":
            raise ValueError(f"predict_proba needs loss='logistic'. Received: loss={self.loss!r}")
        return softmax(self.decision_function(X), axis=1)


class PolynomialNetworkRegressor(PolynomialNetworkEstimator):
    """Multi-output polynomial network regression (squared loss) trained by conditional gradient.

    Solves ``min_U sum_i ||y_i - o(x_i; U)||^2 / 2 s.t. Omega(U) <= tau``; ``y`` is
    ``(n,)`` (one output) or ``(n, m)``.

    Args:
        loss: ``"squared"``.
        **kwargs: the other arguments of :class:`PolynomialNetworkEstimator`.

    Example:
        >>> x = np.array([[-1.0], [0.0], [1.0], [2.0]])
        >>> reg = PolynomialNetworkRegressor(tau=10.0, random_state=0).fit(x, x[:, 0] ** 2)
        >>> np.allclose(reg.predict(x), [1.0, 0.0, 1.0, 4.0], atol=1e-3)
        True
    """

    _losses = ("squared",)

    def _targets(self, y):
        if y.ndim not in (1, 2) or not np.issubdtype(y.dtype, np.number) or not np.all(np.isfinite(y)):
            raise ValueError(f"y must be a finite (n,) or (n, m) array. Received: y with shape {y.shape}")
        self.n_outputs_ = None if y.ndim == 1 else y.shape[1]
        return y.reshape(y.shape[0], -1).astype(np.float64)

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The outputs ``o(x)``: ``(n,)`` if ``y`` was 1-D in fit, else ``(n, m)``."""
        outputs = self.decision_function(X)
        return outputs[:, 0] if self.n_outputs_ is None else outputs
