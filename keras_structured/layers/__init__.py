"""Keras layers."""

from keras_structured.layers.sparsemap_layers import SparseMAP, SparseMAPSequence
from keras_structured.layers.sparsemax_layer import Sparsemax

__all__ = ["SparseMAP", "SparseMAPSequence", "Sparsemax"]
