"""TensorFlow ops: sparsemax and SparseMAP with closed-form gradients."""

from keras_structured.ops.sequence_scores import pack_sequence_scores, unpack_sequence_scores
from keras_structured.ops.sparsemap_op import sparsemap, sparsemap_sequence
from keras_structured.ops.sparsemax_op import sparsemax

__all__ = ["pack_sequence_scores", "sparsemap", "sparsemap_sequence", "sparsemax", "unpack_sequence_scores"]
