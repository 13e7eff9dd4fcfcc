"""Smooth convex multi-output losses ``l(y, o)`` and their gradients w.r.t. the outputs ``o``.

The conditional-gradient trainer minimises ``F = sum_i l(y_i, o_i)`` over the network
outputs ``O (n, m)``; the gradient ``dF/dO (n, m)`` defines the matrices
``Gamma_c = X^T D_c X`` of the basis selection (with ``D_c = -diag(dF/dO_{:,c})``).
Targets are given as a matrix ``Y (n, m)``: one-hot rows for the classification losses
(paper Appendix A), real values for the squared loss, and 0/1 indicators for the binary
logistic loss used by the ordinal reduction. All values are sums over the rows.
"""

from __future__ import annotations

import abc

import numpy as np
from scipy.special import expit

from keras_structured.polynomial.penalties import project_simplex


class Loss(abc.ABC):
    """A smooth convex loss ``sum_i l(y_i, o_i)`` on ``(n, m)`` targets and outputs."""

    name: str
    smoothness: float
    """A Lipschitz constant of ``o -> grad l(y, o)`` (largest Hessian eigenvalue)."""

    @abc.abstractmethod
    def value(self, y: np.ndarray, o: np.ndarray) -> float:
        """``sum_i l(y_i, o_i)``."""

    @abc.abstractmethod
    def gradient(self, y: np.ndarray, o: np.ndarray) -> np.ndarray:
        """``d/dO sum_i l(y_i, o_i)``, shape ``(n, m)``."""

    def value_and_gradient(self, y: np.ndarray, o: np.ndarray) -> tuple[float, np.ndarray]:
        """``(value, gradient)``; losses override it when both share work."""
        return self.value(y, o), self.gradient(y, o)


class SquaredLoss(Loss):
    """``l(y, o) = ||o - y||^2 / 2``; gradient ``o - y``.

    Example:
        >>> SquaredLoss().value(np.array([[1.0, 0.0]]), np.array([[0.0, 2.0]]))
        2.5
    """

    name = "squared"
    smoothness = 1.0

    def value(self, y, o):
        return 0.5 * float(np.sum((o - y) ** 2))

    def gradient(self, y, o):
        return o - y


class LogisticLoss(Loss):
    """Multinomial logistic ``l(y, o) = log sum_c exp(o_c) - <y, o>``; gradient ``softmax(o) - y``.

    Targets ``y`` are distributions (rows summing to 1, e.g. one-hot).

    Example:
        >>> round(LogisticLoss().value(np.array([[1.0, 0.0]]), np.zeros((1, 2))), 6)
        0.693147
    """

    name = "logistic"
    smoothness = 0.5

    def value(self, y, o):
        return self.value_and_gradient(y, o)[0]

    def gradient(self, y, o):
        return self.value_and_gradient(y, o)[1]

    def value_and_gradient(self, y, o):
        # One exponential for both; y's rows sum to 1, so -<y, log_softmax(o)> = lse(o) - <y, o>.
        # In place: every new (n, m) array costs fresh pages, more than the arithmetic.
        work = o - o.max(axis=-1, keepdims=True)
        inner = float(np.einsum("ic,ic->", y, work))
        np.exp(work, out=work)
        totals = work.sum(axis=-1, keepdims=True)
        work *= 1.0 / totals
        work -= y
        return float(np.sum(np.log(totals))) - inner, work


class SmoothedHingeLoss(Loss):
    """Smoothed multi-class hinge ``l(y, o) = max_{p in simplex} <p, o + 1 - y> - ||p||^2/2 - <y, o> + 1/2``.

    The maximiser is ``p* = sparsemax(o + 1 - y)`` and the gradient is ``p* - y``. The loss
    is 0 exactly when the true score beats every other one by a margin of 2, and grows
    linearly (like the hinge ``max_c (1 - y_c + o_c) - o_y``) for large violations.

    Example:
        >>> SmoothedHingeLoss().value(np.array([[1.0, 0.0]]), np.array([[2.0, 0.0]]))
        0.0
    """

    name = "smoothed_hinge"
    smoothness = 1.0

    def value(self, y, o):
        z = o + 1.0 - y
        p = project_simplex(z)
        return float(np.sum(p * z) - 0.5 * np.sum(p**2) - np.sum(y * o)) + 0.5 * o.shape[0]

    def gradient(self, y, o):
        return project_simplex(o + 1.0 - y) - y


class BinaryLogisticLoss(Loss):
    """Independent logistic losses ``l(y, o) = sum_c log(1 + exp(o_c)) - y_c o_c``, ``y in {0,1}^m``.

    The gradient is ``sigmoid(o) - y``.

    Example:
        >>> round(BinaryLogisticLoss().value(np.array([[1.0, 0.0]]), np.zeros((1, 2))), 6)
        1.386294
    """

    name = "binary_logistic"
    smoothness = 0.25

    def value(self, y, o):
        return float(np.sum(np.logaddexp(0.0, o) - y * o))

    def gradient(self, y, o):
        return expit(o) - y


_LOSSES = {loss.name: loss for loss in (SquaredLoss, LogisticLoss, SmoothedHingeLoss, BinaryLogisticLoss)}


def get_loss(name: str) -> Loss:
    """The loss called ``name``: ``"squared"``, ``"logistic"``, ``"smoothed_hinge"``, ``"binary_logistic"``.

    Example:
        >>> get_loss("squared").gradient(np.array([[1.0]]), np.array([[3.0]]))
        array([[2.]])
    """
    if name not in _LOSSES:
        raise ValueError(f"loss must be one of {sorted(_LOSSES)}. Received: loss={name!r}")
    return _LOSSES[name]()
