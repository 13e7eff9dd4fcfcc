"""Multi-output polynomial networks and factorization machines with a shared low-rank basis."""

from keras_structured.polynomial.layers import FactorizationMachine, PolynomialNetwork

__all__ = [
    "FactorizationMachine",
    "PolynomialNetwork",
]
