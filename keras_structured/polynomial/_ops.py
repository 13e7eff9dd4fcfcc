"""Shared maths of polynomial networks and factorization machines, for dense and sparse inputs.

Written with ``keras.ops``: the same code runs on TensorFlow, JAX and PyTorch. Every function
takes ``inputs`` as a dense tensor ``(..., d)``, or a sparse ``(batch, d)`` one (a
``tf.SparseTensor`` on TensorFlow, a ``jax.experimental.sparse.BCOO`` on JAX), and never
forms a ``d x d`` matrix: both models cost ``O(d k)`` per example (``O(nnz k)`` for sparse
inputs) with ``k`` basis vectors.
"""

from __future__ import annotations

import keras
from keras import ops


def is_sparse(inputs) -> bool:
    """Whether ``inputs`` is a sparse tensor of the backend: a ``tf.SparseTensor`` on
    TensorFlow, a ``jax.experimental.sparse.JAXSparse`` array on JAX (PyTorch: never)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return isinstance(inputs, tf.SparseTensor)
    if backend == "jax":
        from jax.experimental import sparse

        return isinstance(inputs, sparse.JAXSparse)
    return False


def matmul(inputs, kernel):
    """``inputs @ kernel`` for a ``(d, n)`` kernel, over the last axis of ``inputs``.

    A ``tf.SparseTensor`` takes ``tf.sparse.sparse_dense_matmul`` (which XLA cannot compile);
    JAX's sparse arrays go through ``keras.ops.matmul``, which ``jax.jit`` compiles. On
    PyTorch, float64 takes ``torch.matmul``: Keras's computes it in float32 (as of 3.15, its
    type promotion maps 64-bit types to 32-bit ones on every backend but TensorFlow).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow" and is_sparse(inputs):
        import tensorflow as tf

        return tf.sparse.sparse_dense_matmul(inputs, kernel)
    if backend == "torch" and keras.backend.standardize_dtype(inputs.dtype) == "float64":
        import torch

        return torch.matmul(inputs, ops.convert_to_tensor(kernel))
    return ops.matmul(inputs, kernel)


def square(inputs):
    """Element-wise square; a sparse tensor keeps its sparsity pattern.

    ``keras.ops.square`` sums the duplicate entries of a JAX sparse array first, into a number
    of entries that ``jax.jit`` cannot know: here they are summed into as many as there are.
    """
    if keras.backend.backend() == "jax" and is_sparse(inputs):
        from jax.experimental import sparse

        inputs = inputs.sum_duplicates(nse=inputs.nse)
        return sparse.BCOO((ops.square(inputs.data), inputs.indices), shape=inputs.shape)
    return ops.square(inputs)


def project(inputs, basis, augment: bool = False):
    """``<h_r, x>`` for each row ``h_r`` of ``basis``: shape ``(..., k)``.

    With ``augment`` the input is ``[1, x]``: the first column of ``basis`` is added as a
    constant, so sparse inputs never need densifying or concatenating.
    """
    if augment:
        return matmul(inputs, ops.transpose(basis[:, 1:])) + basis[:, 0]
    return matmul(inputs, ops.transpose(basis))


def polynomial_network(inputs, basis, output_weights, augment: bool = False):
    """``o_c(x) = sum_r V[r, c] <h_r, x>^2 = x^T H^T diag(v_c) H x`` (``x <- [1, x]`` if ``augment``)."""
    return matmul(ops.square(project(inputs, basis, augment)), output_weights)


def anova(inputs, basis):
    """Degree-2 ANOVA kernel ``sum_{i<j} h_i x_i h_j x_j = ((h.x)^2 - sum_i h_i^2 x_i^2) / 2`` per row."""
    return 0.5 * (ops.square(project(inputs, basis)) - project(square(inputs), ops.square(basis)))


def factorization_machine(inputs, basis, output_weights, kernel=None, bias=None):
    """``o_c(x) = b_c + w_c . x + sum_r V[r, c] ANOVA2(h_r, x)``; ``kernel``/``bias`` optional."""
    outputs = matmul(anova(inputs, basis), output_weights)
    if kernel is not None:
        outputs = ops.add(outputs, matmul(inputs, kernel))
    if bias is not None:
        outputs = ops.add(outputs, bias)
    return outputs
