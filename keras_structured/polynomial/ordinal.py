"""Ordinal regression (ordered labels) as a multi-output polynomial network (paper section 6).

Paper section 6 (recommender systems) combines the conditional-gradient algorithm with a
reduction from ordinal regression to a multi-output problem, so that the outputs share one
basis (hidden units). We use the all-threshold (cumulative) reduction: with the ``R`` sorted
labels ``classes_[0] < ... < classes_[R-1]`` (e.g. ratings ``1..5``), output ``c = 1..R-1``
answers "is the label above ``classes_[c-1]``?", with targets ``t_ic = [y_i > classes_[c-1]]``,
and all ``R - 1`` outputs share the basis vectors::

    min_U  sum_i sum_{c<R} l_bin(t_ic, o_c(x_i; U))   s.t.  Omega(U) <= tau,

with ``l_bin`` the binary logistic loss (``loss="logistic"``; ``P(y > classes_[c-1]) = sigmoid(o_c)``)
or the squared loss on ``2 t - 1`` (``loss="squared"``;
``P(y > classes_[c-1]) ~ clip((o_c + 1) / 2, 0, 1)``). Predictions:

* the predicted label ``classes_[#{c : o_c(x) > 0}]`` (:meth:`OrdinalPolynomialNetwork.predict`);
* for numeric labels, the expected label
  ``classes_[0] + sum_c (classes_[c] - classes_[c-1]) P(y > classes_[c-1])``
  (:meth:`OrdinalPolynomialNetwork.predict_expected`; ``1 + sum_c P(y > c)`` for ratings
  ``1..R``), which minimises the squared error (RMSE) when the probabilities are calibrated.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import ClassifierMixin

from keras_structured.polynomial.estimators import PolynomialNetworkEstimator, encode_classes
from keras_structured.polynomial.losses import Loss, get_loss


def cumulative_targets(levels: np.ndarray, n_levels: int) -> np.ndarray:
    """The indicators ``t[i, c] = [levels_i > c]`` for ``c = 0..n_levels-2`` (levels ``0..n_levels-1``).

    Example:
        >>> cumulative_targets(np.array([0, 2]), 4)
        array([[0., 0., 0.],
               [1., 1., 0.]])
    """
    return (levels[:, None] > np.arange(n_levels - 1)[None, :]).astype(np.float64)


class OrdinalPolynomialNetwork(ClassifierMixin, PolynomialNetworkEstimator):
    """Ordinal regression with a multi-output polynomial network (all-threshold reduction).

    The labels are ordered by ``numpy.unique`` (at least two); see the module docstring for
    the optimisation problem. ``score`` is the accuracy of :meth:`predict`.

    Args:
        loss: ``"logistic"`` (binary logistic per threshold, default) or ``"squared"``
            (squared loss on the ``+-1`` threshold targets).
        **kwargs: the other arguments of
            :class:`~keras_structured.polynomial.estimators.PolynomialNetworkEstimator`.

    Example:
        >>> x = np.linspace(-1.0, 1.0, 9)[:, None]
        >>> ratings = np.array([1, 1, 2, 2, 3, 3, 3, 3, 3])
        >>> model = OrdinalPolynomialNetwork(tau=10.0).fit(x, ratings)
        >>> model.predict(x).tolist()
        [1, 1, 2, 2, 3, 3, 3, 3, 3]
        >>> np.round(model.predict_expected(x[[0, -1]]), 1).tolist()
        [1.1, 3.0]
    """

    _losses = ("logistic", "squared")

    def _training_loss(self) -> Loss:
        return get_loss("binary_logistic" if self._loss_name() == "logistic" else "squared")

    def _targets(self, y):
        self.classes_, levels = encode_classes(y, "Ordinal regression")
        targets = cumulative_targets(levels, self.classes_.size)
        return targets if self._loss_name() == "logistic" else 2.0 * targets - 1.0

    def predict_cumulative(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """``P(y > classes_[c] | x)`` for ``c = 0..R-2``, shape ``(n, R - 1)``."""
        outputs = self._outputs(X)
        return expit(outputs) if self._loss_name() == "logistic" else np.clip(0.5 * (outputs + 1.0), 0.0, 1.0)

    def predict_expected(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The expected label ``classes_[0] + sum_c (classes_[c+1] - classes_[c]) P(y > classes_[c])``.

        For numeric labels only; ``1 + sum_c P(y > c)`` for the ratings ``1..R``.
        """
        cumulative = self.predict_cumulative(X)
        return self.classes_[0] + cumulative @ np.diff(self.classes_.astype(np.float64))

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """The predicted label ``classes_[#{c : o_c(x) > 0}]``, shape ``(n,)``."""
        outputs = self._outputs(X)
        return self.classes_[np.sum(outputs > 0, axis=1)]
