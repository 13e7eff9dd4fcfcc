"""TensorFlow ops: sparsemax, SparseMAP, CRF marginals and MAP decoding, with closed-form gradients."""

from keras_structured.ops.crf import (
    linear_chain_crf_log_partition,
    linear_chain_crf_marginals,
    tree_crf_log_partition,
    tree_crf_marginals,
)
from keras_structured.ops.decode import map_decode
from keras_structured.ops.sequence_scores import pack_sequence_scores, unpack_sequence_scores
from keras_structured.ops.sparsemap_op import sparsemap, sparsemap_sequence
from keras_structured.ops.sparsemax_op import sparsemax

__all__ = [
    "linear_chain_crf_log_partition",
    "linear_chain_crf_marginals",
    "map_decode",
    "pack_sequence_scores",
    "sparsemap",
    "sparsemap_sequence",
    "sparsemax",
    "tree_crf_log_partition",
    "tree_crf_marginals",
    "unpack_sequence_scores",
]
