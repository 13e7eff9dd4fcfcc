"""scikit-learn estimators over the conditional-gradient trainer (:func:`conditional_gradient`).

:class:`PolynomialNetworkClassifier` and :class:`PolynomialNetworkRegressor` (and
:class:`~keras_structured.polynomial.ordinal.OrdinalPolynomialNetwork`) solve

    min_U  sum_i l(y_i, o(x_i; U))   s.t.  Omega(U) <= tau,   o_c(x) = sum_r U[h_r, c] (h_r . [1, x])^2,

and follow the scikit-learn estimator API: ``get_params`` / ``set_params`` (so ``clone``,
``GridSearchCV`` and ``cross_val_score`` work), arguments stored as given and checked in
``fit`` (a value changed after construction is checked too), ``X`` checked by
``sklearn.utils.validation.validate_data`` (dense or ``scipy.sparse``, finite, real, at least
one sample and one feature), ``n_features_in_``, ``NotFittedError`` before ``fit``,
``score`` from the classifier / regressor mixins and arbitrary class labels.

This module imports scikit-learn (the ``polynomial`` extra); the trainer itself does not.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import softmax
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from keras_structured.polynomial.conditional_gradient import (
    check_features,
    conditional_gradient,
    network_outputs,
)
from keras_structured.polynomial.losses import Loss, get_loss
from keras_structured.polynomial.penalties import get_penalty
from keras_structured.validation import check_bool, check_integer, check_number, check_one_of

_PENALTIES = ("l1", "l1/l2", "l1/linf")


class PolynomialNetworkEstimator(BaseEstimator):
    """Shared fitting logic of the conditional-gradient estimators (see :func:`conditional_gradient`).

    Subclasses choose the allowed losses (``_losses``, the first is the default) and turn
    ``y`` into the ``(n, m)`` loss targets (``_targets``).

    Args:
        loss: loss name, one of the estimator's ``_losses``; None for the first.
        penalty: ``"l1"``, ``"l1/l2"`` (default: shares basis vectors across outputs) or
            ``"l1/linf"``.
        tau: the budget ``Omega(U) <= tau``, > 0.
        max_iter: maximum number of Frank-Wolfe steps (basis vector additions).
        max_basis: optional cap on the number of basis vectors (hidden units).
        tol: stop once the upper bound on the Frank-Wolfe gap is at most ``tol F(0)``.
        refit: ``"V"`` (convex refit of the output weights), ``"HV"`` (also a joint
            non-convex refit of basis and output weights) or None.
        augment: prepend a constant feature 1 (linear and constant terms).
        refit_iter: iteration cap of each refit.
        dense_max_features: up to this many features, basis selection forms the ``d x d``
            matrices ``Gamma_c`` and the gap bounds are certified; beyond, Lanczos estimates.
        random_state: seed of the Lanczos starting vectors.
        verbose: print the objective, gap bounds and number of basis vectors every iteration.
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
        refit_iter: int = 50,
        dense_max_features: int = 500,
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.loss = loss
        self.penalty = penalty
        self.tau = tau
        self.max_iter = max_iter
        self.max_basis = max_basis
        self.tol = tol
        self.refit = refit
        self.augment = augment
        self.refit_iter = refit_iter
        self.dense_max_features = dense_max_features
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _check_params(self) -> None:
        """Checks the arguments as they are now (``set_params`` or attribute assignment included)."""
        check_one_of("loss", self._loss_name(), self._losses)
        check_one_of("penalty", self.penalty, _PENALTIES)
        check_number("tau", self.tau, minimum=0.0, open_minimum=True)
        check_number("tol", self.tol, minimum=0.0)
        if self.refit not in (None, "V", "HV"):
            raise ValueError(f"refit must be None, 'V' or 'HV'. Received: refit={self.refit!r}")
        check_bool("augment", self.augment)
        check_bool("verbose", self.verbose)
        for name in ("max_iter", "refit_iter", "dense_max_features"):
            check_integer(name, getattr(self, name), minimum=1)
        check_integer("max_basis", self.max_basis, minimum=1, allow_none=True)
        if self.random_state is not None:
            check_integer("random_state", self.random_state, minimum=0)

    def _loss_name(self) -> str:
        return self._losses[0] if self.loss is None else self.loss

    def _training_loss(self) -> Loss:
        return get_loss(self._loss_name())

    def _targets(self, y: np.ndarray) -> np.ndarray:
        """The ``(n, m)`` loss targets of the training labels ``y``; sets label attributes."""
        raise NotImplementedError

    def _check_training_data(self, X, y):
        """``(X, y)`` checked by scikit-learn's ``validate_data`` (sets ``n_features_in_``)."""
        return validate_data(self, X, y, accept_sparse="csr", dtype=np.float64)

    def fit(self, X: np.ndarray | sp.spmatrix, y: np.ndarray):
        """Trains the network on ``X (n, d)`` (dense or ``scipy.sparse``) and ``y``.

        Returns:
            ``self``.
        """
        self._check_params()
        X, y = self._check_training_data(X, y)
        targets = self._targets(y)
        result = conditional_gradient(
            check_features(X, self.augment),
            targets,
            self._training_loss(),
            get_penalty(self.penalty),
            float(self.tau),
            max_iter=self.max_iter,
            max_basis=self.max_basis,
            tol=self.tol,
            refit=self.refit,
            refit_iter=self.refit_iter,
            dense_max_features=self.dense_max_features,
            rng=np.random.default_rng(self.random_state),
            verbose=self.verbose,
        )
        self.basis_ = result.basis
        self.output_weights_ = result.output_weights
        self.n_basis_ = result.basis.shape[0]
        self.gap_history_ = result.gap_history
        self.lower_gap_history_ = result.lower_gap_history
        self.objective_history_ = result.objective_history
        self.converged_ = result.converged
        self.gap_certified_ = result.certified
        self.n_iter_ = len(result.objective_history) - 1
        return self

    def _outputs(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The network outputs ``o(x) (n, m)``."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return network_outputs(check_features(X, self.augment), self.basis_, self.output_weights_)

    def to_keras(self, **layer_kwargs):
        """A built ``PolynomialNetwork`` layer holding the learned ``H`` and ``V``.

        Its outputs equal the network outputs ``o(x)`` (up to the layer's float precision;
        pass ``dtype="float64"`` for an exact match).

        Args:
            **layer_kwargs: extra keyword arguments of the layer (e.g. ``name``, ``dtype``).
        """
        from keras_structured.polynomial import PolynomialNetwork

        check_is_fitted(self)
        if self.n_basis_ == 0:
            raise ValueError(
                "to_keras needs a fitted network with at least one basis vector. "
                f"Received: n_basis_={self.n_basis_}"
            )
        layer = PolynomialNetwork(
            units=self.output_weights_.shape[1], rank=self.n_basis_, augment=self.augment, **layer_kwargs
        )
        layer.build((None, self.n_features_in_))
        layer.set_weights([self.basis_, self.output_weights_])
        return layer


def encode_classes(y: np.ndarray, model: str) -> tuple[np.ndarray, np.ndarray]:
    """The sorted classes of the labels ``y`` and each label's index among them.

    Raises:
        ValueError: ``y`` is not a classification target, or has fewer than 2 classes
            (``model`` names the estimator in the message).
    """
    check_classification_targets(y)
    classes, indices = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise ValueError(
            f"{model} needs samples of at least 2 classes, got 1 class. "
            f"Received: y with the single class {classes[0].item()!r}"
        )
    return classes, indices


def _has_logistic_loss(estimator: PolynomialNetworkEstimator) -> bool:
    return estimator._loss_name() == "logistic"


class PolynomialNetworkClassifier(ClassifierMixin, PolynomialNetworkEstimator):
    """Multi-class polynomial network trained by conditional gradient (paper Alg. 1).

    Solves ``min_U sum_i l(y_i, o(x_i; U)) s.t. Omega(U) <= tau`` over one output per class
    (one-hot targets), ``o_c(x) = sum_r U[h_r, c] (h_r . [1, x])^2``, and predicts
    ``classes_[argmax_c o_c(x)]``. Labels may be any values ``numpy.unique`` sorts (at least
    two classes).

    Args:
        loss: ``"logistic"`` (multinomial, default), ``"smoothed_hinge"`` or ``"squared"``
            (on one-hot targets).
        **kwargs: the other arguments of :class:`PolynomialNetworkEstimator`.

    Example:
        >>> x = np.array([[-2.0], [-1.0], [1.0], [2.0]])
        >>> clf = PolynomialNetworkClassifier(tau=10.0).fit(x, ["out", "in", "in", "out"])
        >>> clf.predict(x).tolist(), clf.score(x, ["out", "in", "in", "out"])
        (['out', 'in', 'in', 'out'], 1.0)
    """

    _losses = ("logistic", "smoothed_hinge", "squared")

    def _targets(self, y):
        self.classes_, labels = encode_classes(y, "The classifier")
        return np.eye(self.classes_.size)[labels]

    def decision_function(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The outputs ``o(x) (n, m)``; for two classes the margin ``o_1(x) - o_0(x)`` ``(n,)``."""
        outputs = self._outputs(X)
        return outputs[:, 1] - outputs[:, 0] if self.classes_.size == 2 else outputs

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The predicted classes ``classes_[argmax_c o_c(x)]``, shape ``(n,)``."""
        outputs = self._outputs(X)
        return self.classes_[np.argmax(outputs, axis=1)]

    @available_if(_has_logistic_loss)
    def predict_proba(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """Class probabilities ``softmax(o(x))``, shape ``(n, m)`` (``loss="logistic"`` only)."""
        return softmax(self._outputs(X), axis=1)

    @available_if(_has_logistic_loss)
    def predict_log_proba(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """``log predict_proba(X)``."""
        outputs = self._outputs(X)
        return outputs - np.logaddexp.reduce(outputs, axis=1, keepdims=True)


class PolynomialNetworkRegressor(RegressorMixin, PolynomialNetworkEstimator):
    """Multi-output polynomial network regression (squared loss) trained by conditional gradient.

    Solves ``min_U sum_i ||y_i - o(x_i; U)||^2 / 2 s.t. Omega(U) <= tau``; ``y`` is
    ``(n,)`` (one output) or ``(n, m)``.

    Args:
        loss: ``"squared"``.
        **kwargs: the other arguments of :class:`PolynomialNetworkEstimator`.

    Example:
        >>> x = np.array([[-1.0], [0.0], [1.0], [2.0]])
        >>> reg = PolynomialNetworkRegressor(tau=10.0).fit(x, x[:, 0] ** 2)
        >>> np.allclose(reg.predict(x), [1.0, 0.0, 1.0, 4.0], atol=1e-3)
        True
    """

    _losses = ("squared",)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _check_training_data(self, X, y):
        return validate_data(
            self, X, y, accept_sparse="csr", dtype=np.float64, multi_output=True, y_numeric=True
        )

    def _targets(self, y):
        self.n_outputs_ = None if y.ndim == 1 else y.shape[1]
        return y.reshape(y.shape[0], -1).astype(np.float64)

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The outputs ``o(x)``: ``(n,)`` if ``y`` was 1-D in fit, else ``(n, m)``."""
        outputs = self._outputs(X)
        return outputs[:, 0] if self.n_outputs_ is None else outputs
