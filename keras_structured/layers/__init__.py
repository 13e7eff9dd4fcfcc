"""Keras layers."""

from keras_structured.layers.sequence_scores import SequenceScores
from keras_structured.layers.sparsemap_layers import (
    SparseMAP,
    SparseMAPBudget,
    SparseMAPDependencyTree,
    SparseMAPMatching,
    SparseMAPSequence,
)
from keras_structured.layers.sparsemax_layer import Sparsemax

__all__ = [
    "SparseMAP",
    "SparseMAPBudget",
    "SparseMAPDependencyTree",
    "SparseMAPMatching",
    "SparseMAPSequence",
    "SequenceScores",
    "Sparsemax",
]
