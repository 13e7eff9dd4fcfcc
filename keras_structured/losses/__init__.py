"""Structured Fenchel-Young losses: sparsemax, SparseMAP, margin, hinge, perceptron and CRF."""

from keras_structured.losses.crf import LinearChainCRFLoss, TreeCRFLoss, linear_chain_crf_loss, tree_crf_loss
from keras_structured.losses.fenchel_young import SparsemaxLoss, sparsemax_loss
from keras_structured.losses.structured import (
    MarginSparseMAPLoss,
    SparseMAPLoss,
    StructuredHingeLoss,
    StructuredPerceptronLoss,
    margin_sparsemap_loss,
    sparsemap_loss,
    structured_hinge_loss,
    structured_perceptron_loss,
)

__all__ = [
    "LinearChainCRFLoss",
    "MarginSparseMAPLoss",
    "SparseMAPLoss",
    "SparsemaxLoss",
    "StructuredHingeLoss",
    "StructuredPerceptronLoss",
    "TreeCRFLoss",
    "linear_chain_crf_loss",
    "margin_sparsemap_loss",
    "sparsemap_loss",
    "sparsemax_loss",
    "structured_hinge_loss",
    "structured_perceptron_loss",
    "tree_crf_loss",
]
