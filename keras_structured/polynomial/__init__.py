"""Multi-output polynomial networks and factorization machines with a shared low-rank basis.

Keras layers (:class:`PolynomialNetwork`, :class:`FactorizationMachine`) for training by
gradient descent, and the conditional-gradient estimators of Blondel et al. (2017), which
add one shared basis vector (hidden unit) per iteration under a group-sparse budget.

The estimators (:class:`PolynomialNetworkClassifier`, :class:`PolynomialNetworkRegressor`,
:class:`OrdinalPolynomialNetwork`) are scikit-learn estimators: they need the ``polynomial``
extra (``pip install keras-structured[polynomial]``) and are imported on first use, so that
``import keras_structured`` never imports scikit-learn.
"""

import importlib

from keras_structured.polynomial.conditional_gradient import ConvergenceWarning, conditional_gradient
from keras_structured.polynomial.layers import FactorizationMachine, PolynomialNetwork

_ESTIMATORS = {
    "PolynomialNetworkClassifier": "keras_structured.polynomial.estimators",
    "PolynomialNetworkRegressor": "keras_structured.polynomial.estimators",
    "OrdinalPolynomialNetwork": "keras_structured.polynomial.ordinal",
}


def __getattr__(name: str):
    if name in _ESTIMATORS:
        return getattr(importlib.import_module(_ESTIMATORS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConvergenceWarning",
    "FactorizationMachine",
    "OrdinalPolynomialNetwork",
    "PolynomialNetwork",
    "PolynomialNetworkClassifier",
    "PolynomialNetworkRegressor",
    "conditional_gradient",
]
