"""Structured Fenchel-Young losses."""

from keras_structured.losses.fenchel_young import SparsemaxLoss, sparsemax_loss

__all__ = ["SparsemaxLoss", "sparsemax_loss"]
