"""Multi-output polynomial networks and factorization machines with a shared low-rank basis.

Keras layers (:class:`PolynomialNetwork`, :class:`FactorizationMachine`) for training by
gradient descent, and the conditional-gradient estimators of Blondel et al. (2017), which
add one shared basis vector (hidden unit) per iteration under a group-sparse budget.
"""

from keras_structured.polynomial.conditional_gradient import (
    ConvergenceWarning,
    PolynomialNetworkClassifier,
    PolynomialNetworkRegressor,
    conditional_gradient,
)
from keras_structured.polynomial.layers import FactorizationMachine, PolynomialNetwork
from keras_structured.polynomial.ordinal import OrdinalPolynomialNetwork

__all__ = [
    "ConvergenceWarning",
    "FactorizationMachine",
    "OrdinalPolynomialNetwork",
    "PolynomialNetwork",
    "PolynomialNetworkClassifier",
    "PolynomialNetworkRegressor",
    "conditional_gradient",
]
