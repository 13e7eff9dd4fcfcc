"""TensorFlow ops: sparsemax and SparseMAP with closed-form gradients."""

from keras_structured.ops.sparsemap_op import sparsemap, sparsemap_sequence
from keras_structured.ops.sparsemax_op import sparsemax

__all__ = ["sparsemap", "sparsemap_sequence", "sparsemax"]
