"""keras-structured: Keras layers whose outputs obey structure and convex constraints."""

from keras_structured import engine, ops, polynomial, projections
from keras_structured._registration import register_string_identifiers
from keras_structured.engine import SolverOptions
from keras_structured.layers import (
    SequenceScores,
    SparseMAP,
    SparseMAPBudget,
    SparseMAPDependencyTree,
    SparseMAPMatching,
    SparseMAPSequence,
    Sparsemax,
)
from keras_structured.layers.lp_sparsemap_layer import LPSparseMAP
from keras_structured.losses import (
    LinearChainCRFLoss,
    MarginSparseMAPLoss,
    SparseMAPLoss,
    SparsemaxLoss,
    StructuredHingeLoss,
    StructuredPerceptronLoss,
    TreeCRFLoss,
    linear_chain_crf_loss,
    margin_sparsemap_loss,
    sparsemap_loss,
    sparsemax_loss,
    structured_hinge_loss,
    structured_perceptron_loss,
    tree_crf_loss,
)
from keras_structured.losses.lp_sparsemap_loss import LPSparseMAPLoss, lp_sparsemap_loss
from keras_structured.ops import map_decode, sparsemap, sparsemap_sequence, sparsemax
from keras_structured.ops.lp_sparsemap_op import lp_sparsemap
from keras_structured.polynomial import FactorizationMachine, PolynomialNetwork

__version__ = "0.1.0"

register_string_identifiers(
    layers=(
        Sparsemax,
        SparseMAP,
        SparseMAPSequence,
        SparseMAPDependencyTree,
        SparseMAPMatching,
        SparseMAPBudget,
        SequenceScores,
        LPSparseMAP,
        PolynomialNetwork,
        FactorizationMachine,
        projections.InterpolationProjection,
        projections.GaussianProjection,
    ),
    losses=(
        SparsemaxLoss,
        SparseMAPLoss,
        MarginSparseMAPLoss,
        StructuredHingeLoss,
        StructuredPerceptronLoss,
        LinearChainCRFLoss,
        TreeCRFLoss,
        LPSparseMAPLoss,
    ),
)

__all__ = [
    "FactorizationMachine",
    "PolynomialNetwork",
    "polynomial",
    "LPSparseMAP",
    "LPSparseMAPLoss",
    "LinearChainCRFLoss",
    "MarginSparseMAPLoss",
    "SparseMAPLoss",
    "StructuredHingeLoss",
    "StructuredPerceptronLoss",
    "TreeCRFLoss",
    "map_decode",
    "SparseMAP",
    "SparseMAPBudget",
    "SparseMAPDependencyTree",
    "SparseMAPMatching",
    "SparseMAPSequence",
    "SequenceScores",
    "SolverOptions",
    "Sparsemax",
    "SparsemaxLoss",
    "engine",
    "ops",
    "projections",
    "sparsemap",
    "sparsemap_sequence",
    "sparsemax",
    "sparsemax_loss",
    "linear_chain_crf_loss",
    "lp_sparsemap",
    "lp_sparsemap_loss",
    "margin_sparsemap_loss",
    "sparsemap_loss",
    "structured_hinge_loss",
    "structured_perceptron_loss",
    "tree_crf_loss",
]
