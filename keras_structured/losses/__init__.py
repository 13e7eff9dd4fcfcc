"""Structured Fenchel-Young losses: sparsemax, SparseMAP, margin, hinge, perceptron and CRF."""

from keras_structured.losses.fenchel_young import SparsemaxLoss, sparsemax_loss
from keras_structured.losses.structured import (
    LinearChainCRFLoss,
    MarginSparseMAPLoss,
    SparseMAPLoss,
    StructuredHingeLoss,
    StructuredPerceptronLoss,
    TreeCRFLoss,
)

__all__ = [
    "LinearChainCRFLoss",
    "MarginSparseMAPLoss",
    "SparseMAPLoss",
    "SparsemaxLoss",
    "StructuredHingeLoss",
    "StructuredPerceptronLoss",
    "TreeCRFLoss",
    "sparsemax_loss",
]
