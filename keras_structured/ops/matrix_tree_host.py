"""The tree CRF's host call on JAX and PyTorch: the compiled matrix-tree kernel, one call a batch.

:func:`tree_crf_on_host` runs :func:`keras_structured.engine.matrix_tree.factorize` (and, when
asked, :func:`~keras_structured.engine.matrix_tree.marginals`) on the host, in float64, and
returns ``log Z`` (and the arc marginals) in the dtype of the scores. It carries no gradient:
:mod:`keras_structured.ops.crf` attaches the marginals as the gradient with
``keras.ops.custom_gradient``. The adapters follow SparseMAP's
(:mod:`keras_structured.ops.host_call`):

* JAX: ``jax.pure_callback`` with ``vmap_method="broadcast_all"``
  (:data:`keras_structured.ops.host_call._jax.VMAP_METHOD`), so that it runs under
  ``jax.jit`` and ``jax.vmap`` (one host call per vmapped batch, its mapped dimensions
  folded into the batch);
* PyTorch: two ``torch.library.custom_op``\\ s, ``keras_structured::tree_crf_log_partition``
  and ``keras_structured::tree_crf_marginals``, whose fake kernels give the result shapes
  without running the kernel (``torch.compile`` and Keras's symbolic calls on the ``meta``
  device need nothing more); they copy tensors of any device to the host and back.

The results have static shapes (``(batch,)`` and the scores' shape), so nothing stays on the
host between the forward and the backward call: unlike SparseMAP's active sets, the
marginals are returned by the forward call itself when a gradient is wanted. TensorFlow keeps
its own call (``tf.numpy_function``, in :mod:`keras_structured.ops.crf`), which passes the
kernel's factors to the backward pass instead.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_structured.engine import matrix_tree


def _on_host(scores: np.ndarray, lengths: np.ndarray, single_root: bool, marginals: bool):
    """``log Z`` (and the marginals) of scores with any leading dimensions, in their dtype."""
    leading, size = scores.shape[:-2], scores.shape[-1]
    flat_scores = np.reshape(scores, (-1, size, size)).astype(np.float64)
    flat_lengths = np.reshape(np.broadcast_to(lengths, leading), (-1,)).astype(np.int32)
    factors = matrix_tree.factorize(flat_scores, flat_lengths, single_root)
    log_z = np.reshape(factors[0], leading).astype(scores.dtype)
    if not marginals:
        return log_z
    mu = matrix_tree.marginals(*factors, flat_lengths)
    return log_z, np.reshape(mu, scores.shape).astype(scores.dtype)


def tree_crf_on_host(scores, lengths, single_root: bool, marginals: bool):
    """``log Z`` ``(batch,)``, and the marginals shaped like ``scores`` when ``marginals``.

    Args:
        scores: ``(batch, n + 1, n + 1)`` float arc scores, tensors of the backend (float64
            where the backend has it: the kernel computes in float64 whatever it receives).
        lengths: ``(batch,)`` int32 numbers of words, in ``[0, n]``.
        single_root: count only the trees with one word attached to the root.
        marginals: also return the arc marginals.

    Returns:
        ``log_z``, or ``(log_z, marginals)``, in the dtype of ``scores``, without gradient.

    Raises:
        ValueError: on a backend other than JAX and PyTorch.
    """
    backend = keras.backend.backend()
    if backend == "jax":
        return _jax_call(scores, lengths, single_root, marginals)
    if backend == "torch":
        import torch

        library = torch.ops.keras_structured
        call = library.tree_crf_marginals if marginals else library.tree_crf_log_partition
        return call(scores.detach(), lengths, single_root)
    raise ValueError(
        f"The tree CRF's host call runs on the JAX and PyTorch backends. Received: backend={backend!r}"
    )


def _jax_call(scores, lengths, single_root: bool, marginals: bool):
    import jax

    from keras_structured.ops.host_call._jax import VMAP_METHOD

    log_z = jax.ShapeDtypeStruct(scores.shape[:-2], scores.dtype)
    results = (log_z, jax.ShapeDtypeStruct(scores.shape, scores.dtype)) if marginals else log_z

    def host(scores, lengths):
        return _on_host(np.asarray(scores), np.asarray(lengths), single_root, marginals)

    return jax.pure_callback(host, results, scores, lengths, vmap_method=VMAP_METHOD)


def _register_torch_ops() -> None:
    """The two custom ops and their fake kernels (once, when Keras runs on PyTorch)."""
    import torch

    def numpy(tensor):
        return tensor.detach().cpu().numpy()

    def tensor(array, like):
        return torch.from_numpy(np.ascontiguousarray(array)).to(like.device)

    # Schemas spelled out: the annotations of this module are strings, which torch would
    # evaluate where ``torch`` is not a global.
    @torch.library.custom_op(
        "keras_structured::tree_crf_log_partition",
        mutates_args=(),
        schema="(Tensor scores, Tensor lengths, bool single_root) -> Tensor",
    )
    def log_partition(scores, lengths, single_root):
        return tensor(_on_host(numpy(scores), numpy(lengths), single_root, False), scores)

    @log_partition.register_fake
    def _(scores, lengths, single_root):
        return scores.new_empty(scores.shape[:-2])

    @torch.library.custom_op(
        "keras_structured::tree_crf_marginals",
        mutates_args=(),
        schema="(Tensor scores, Tensor lengths, bool single_root) -> (Tensor, Tensor)",
    )
    def with_marginals(scores, lengths, single_root):
        log_z, mu = _on_host(numpy(scores), numpy(lengths), single_root, True)
        return tensor(log_z, scores), tensor(mu, scores)

    @with_marginals.register_fake
    def _(scores, lengths, single_root):
        return scores.new_empty(scores.shape[:-2]), torch.empty_like(scores)


if keras.backend.backend() == "torch":  # at import: torch.compile would have to trace it
    _register_torch_ops()
