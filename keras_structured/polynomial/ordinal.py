"""Ordinal regression (ratings ``1..R``) as a multi-output polynomial network (paper section 6).

Paper section 6 (recommender systems) combines the conditional-gradient algorithm with a
reduction from ordinal regression to a multi-output problem, so that the outputs share one
basis (hidden units). We use the all-threshold (cumulative) reduction: output
``c = 1..R-1`` answers "is the rating above ``c``?", with targets ``t_ic = [y_i > c]``, and
all ``R - 1`` outputs share the basis vectors::

    min_U  sum_i sum_{c<R} l_bin(t_ic, o_c(x_i; U))   s.t.  Omega(U) <= tau,

with ``l_bin`` the binary logistic loss (``loss="logistic"``; ``P(y > c) = sigmoid(o_c)``)
or the squared loss on ``2 t - 1`` (``loss="squared"``;
``P(y > c) ~ clip((o_c + 1) / 2, 0, 1)``). Predictions:

* the predicted rating ``1 + #{c : o_c(x) > 0}`` (:meth:`OrdinalPolynomialNetwork.predict`);
* the expected rating ``1 + sum_c P(y > c)`` (:meth:`OrdinalPolynomialNetwork.predict_expected`),
  which minimises the squared error (RMSE) when the ``P(y > c)`` are calibrated.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from keras_structured.polynomial.conditional_gradient import PolynomialNetworkEstimator
from keras_structured.polynomial.losses import Loss, get_loss


def cumulative_targets(ratings: np.ndarray, n_ratings: int) -> np.ndarray:
    """The indicators ``t[i, c - 1] = [ratings_i > c]`` for ``c = 1..n_ratings-1``.

    Example:
        >>> cumulative_targets(np.array([1, 3]), 4)
        array([[0., 0., 0.],
               [1., 1., 0.]])
    """
    return (ratings[:, None] > np.arange(1, n_ratings)[None, :]).astype(np.float64)


class OrdinalPolynomialNetwork(PolynomialNetworkEstimator):
    """Ordinal regression with a multi-output polynomial network (all-threshold reduction).

    Ratings are the integers ``1..R`` (``R`` the largest rating seen in ``fit``); see the
    module docstring for the optimisation problem.

    Args:
        loss: ``"logistic"`` (binary logistic per threshold, default) or ``"squared"``
            (squared loss on the ``+-1`` threshold targets).
        **kwargs: the other arguments of
            :class:`~keras_structured.polynomial.conditional_gradient.PolynomialNetworkEstimator`.

    Example:
        >>> x = np.linspace(-1.0, 1.0, 9)[:, None]
        >>> ratings = np.array([1, 1, 2, 2, 3, 3, 3, 3, 3])
        >>> model = OrdinalPolynomialNetwork(tau=10.0, random_state=0).fit(x, ratings)
        >>> model.predict(x).tolist()
        [1, 1, 2, 2, 3, 3, 3, 3, 3]
        >>> np.round(model.predict_expected(x[[0, -1]]), 1).tolist()
        [1.1, 3.0]
    """

    _losses = ("logistic", "squared")

    def _training_loss(self) -> Loss:
        return get_loss("binary_logistic" if self.loss == "logistic" else "squared")

    def _targets(self, y):
        ratings = y.astype(np.int64) if np.issubdtype(y.dtype, np.number) and y.ndim == 1 else None
        if ratings is None or ratings.size == 0:
            raise ValueError(f"y must be a non-empty 1-D array of ratings. Received: y.shape={y.shape}")
        if np.any(ratings != y) or ratings.min() < 1:
            bad = y[(ratings != y) | (ratings < 1)][0]
            raise ValueError(f"Ratings must be integers >= 1. Received: rating={bad.item()!r}")
        self.n_ratings_ = int(ratings.max())
        if self.n_ratings_ < 2:
            raise ValueError(f"Ratings must go above 1. Received: max rating={self.n_ratings_}")
        targets = cumulative_targets(ratings, self.n_ratings_)
        return targets if self.loss == "logistic" else 2.0 * targets - 1.0

    def predict_cumulative(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """``P(y > c | x)`` for ``c = 1..R-1``, shape ``(n, R - 1)``."""
        outputs = self.decision_function(X)
        return expit(outputs) if self.loss == "logistic" else np.clip(0.5 * (outputs + 1.0), 0.0, 1.0)

    def predict_expected(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The expected rating ``1 + sum_c P(y > c | x)``, shape ``(n,)``."""
        return 1.0 + self.predict_cumulative(X).sum(axis=1)

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The predicted rating ``1 + #{c : o_c(x) > 0}``, shape ``(n,)``."""
        return 1 + np.sum(self.decision_function(X) > 0, axis=1)
