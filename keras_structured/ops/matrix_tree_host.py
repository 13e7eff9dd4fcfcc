"""The tree CRF's host function on JAX and PyTorch: the compiled matrix-tree kernel, one call a batch.

:data:`TREE_CRF` runs :func:`keras_structured.engine.matrix_tree.factorize` and
:func:`~keras_structured.engine.matrix_tree.marginals` on the host, in float64, and returns
``log Z`` and the arc marginals in the dtype of the scores, by the generic host call
(:func:`keras_structured.ops.host_call.call`: ``jax.pure_callback`` on JAX, the custom op
``keras_structured::tree_crf_marginals`` on PyTorch). It carries no gradient:
:mod:`keras_structured.ops.crf` attaches the marginals as the gradient with
``keras.ops.custom_gradient``. Under ``jax.vmap`` it makes one host call
(``vmap_method="broadcast_all"``), its mapped dimensions folded into the batch.

The results have static shapes (``(batch,)`` and the scores' shape), so nothing stays on the
host between the forward and the backward call: unlike SparseMAP's active sets, the
marginals are returned by the forward call itself. TensorFlow keeps its own call
(``tf.numpy_function``, in :mod:`keras_structured.ops.crf`), which passes the kernel's
factors to the backward pass instead.
"""

from __future__ import annotations

import numpy as np

from keras_structured.engine import matrix_tree
from keras_structured.ops import host_call


def log_partition_and_marginals(scores: np.ndarray, lengths: np.ndarray, *, single_root: bool) -> tuple:
    """``(log Z, marginals)`` of arc scores with any leading dimensions, in their dtype.

    Args:
        scores: ``(*leading, n + 1, n + 1)`` float arc scores (computed in float64).
        lengths: integer numbers of words, broadcast to ``leading``.
        single_root: count only the trees with one word attached to the root.

    Returns:
        ``log Z`` of shape ``leading`` and the marginals shaped like ``scores``.

    Example:
        >>> log_z, mu = log_partition_and_marginals(np.zeros((1, 3, 3)), np.array([2]), single_root=True)
        >>> round(float(np.exp(log_z[0])), 6), mu[0, 0].round(6).tolist()
        (2.0, [0.0, 0.5, 0.5])
    """
    leading, size = scores.shape[:-2], scores.shape[-1]
    flat_scores = np.reshape(scores, (-1, size, size)).astype(np.float64)
    flat_lengths = np.reshape(np.broadcast_to(lengths, leading), (-1,)).astype(np.int32)
    factors = matrix_tree.factorize(flat_scores, flat_lengths, single_root)
    log_z = np.reshape(factors[0], leading).astype(scores.dtype)
    mu = matrix_tree.marginals(*factors, flat_lengths)
    return log_z, np.reshape(mu, scores.shape).astype(scores.dtype)


def _specs(scores, lengths, *, single_root: bool) -> list:
    return [(tuple(scores.shape[:-2]), scores.dtype), (tuple(scores.shape), scores.dtype)]


#: ``host_call.call(TREE_CRF, scores, lengths, single_root=...)``: ``[log_z, marginals]``.
TREE_CRF = host_call.host_function(
    "tree_crf_marginals", log_partition_and_marginals, _specs, vmap_method="broadcast_all"
)
