"""Keras layers."""

from keras_structured.layers.sparsemax_layer import Sparsemax

__all__ = ["Sparsemax"]
