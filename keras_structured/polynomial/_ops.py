"""Shared maths of polynomial networks and factorization machines, for dense and sparse inputs.

Every function takes ``inputs`` as a dense tensor ``(..., d)`` or a ``tf.SparseTensor``
``(batch, d)`` and never forms a ``d x d`` matrix: both models cost ``O(d k)`` per example
(``O(nnz k)`` for sparse inputs) with ``k`` basis vectors.
"""

from __future__ import annotations

import tensorflow as tf

Inputs = tf.Tensor | tf.SparseTensor


def matmul(inputs: Inputs, kernel: tf.Tensor) -> tf.Tensor:
    """``inputs @ kernel`` for a ``(d, n)`` kernel, over the last axis of ``inputs``."""
    if isinstance(inputs, tf.SparseTensor):
        return tf.sparse.sparse_dense_matmul(inputs, kernel)
    return tf.matmul(inputs, kernel)


def square(inputs: Inputs) -> Inputs:
    """Element-wise square; a sparse tensor keeps its sparsity pattern."""
    if isinstance(inputs, tf.SparseTensor):
        return tf.SparseTensor(inputs.indices, tf.square(inputs.values), inputs.dense_shape)
    return tf.square(inputs)


def project(inputs: Inputs, basis: tf.Tensor, augment: bool = False) -> tf.Tensor:
    """``<h_r, x>`` for each row ``h_r`` of ``basis``: shape ``(..., k)``.

    With ``augment`` the input is ``[1, x]``: the first column of ``basis`` is added as a
    constant, so sparse inputs never need densifying or concatenating.
    """
    if augment:
        return matmul(inputs, tf.transpose(basis[:, 1:])) + basis[:, 0]
    return matmul(inputs, tf.transpose(basis))


def polynomial_network(
    inputs: Inputs, basis: tf.Tensor, output_weights: tf.Tensor, augment: bool = False
) -> tf.Tensor:
    """``o_c(x) = sum_r V[r, c] <h_r, x>^2 = x^T H^T diag(v_c) H x`` (``x <- [1, x]`` if ``augment``)."""
    return tf.matmul(tf.square(project(inputs, basis, augment)), output_weights)


def anova(inputs: Inputs, basis: tf.Tensor) -> tf.Tensor:
    """Degree-2 ANOVA kernel ``sum_{i<j} h_i x_i h_j x_j = ((h.x)^2 - sum_i h_i^2 x_i^2) / 2`` per row."""
    return 0.5 * (tf.square(project(inputs, basis)) - project(square(inputs), tf.square(basis)))


def factorization_machine(
    inputs: Inputs,
    basis: tf.Tensor,
    output_weights: tf.Tensor,
    kernel: tf.Tensor | None = None,
    bias: tf.Tensor | None = None,
) -> tf.Tensor:
    """``o_c(x) = b_c + w_c . x + sum_r V[r, c] ANOVA2(h_r, x)``; ``kernel``/``bias`` optional."""
    outputs = tf.matmul(anova(inputs, basis), output_weights)
    if kernel is not None:
        outputs += matmul(inputs, kernel)
    if bias is not None:
        outputs += bias
    return outputs
