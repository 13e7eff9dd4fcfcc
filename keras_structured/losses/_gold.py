"""The gold structures' indicator vectors, read from the label codes by one host call per batch.

The structured losses need ``(m, n)``, the indicator vectors of the gold structures. Only the
structure can read its codes (:meth:`~keras_structured.engine.Structure.indicators`, after
:meth:`~keras_structured.engine.Structure.validate_codes`), in numpy, so the codes of a batch
cross to the host once, without gradient (labels are constants), by the backend's host call:

* TensorFlow: ``tf.numpy_function``, which also takes shapes known only at run time;
* JAX: ``jax.pure_callback``, under ``jax.jit`` too (the Keras JAX trainer jits its steps);
  ``jax.vmap`` calls it once per mapped element (``vmap_method="sequential"``);
* PyTorch: the custom op ``keras_structured::gold_indicators``, whose fake kernel gives the
  result shapes without a host call (``torch.compile``, Keras's shape inference on the
  ``meta`` device).

Invalid codes raise :class:`~keras_structured.ops.invalid_inputs.InvalidScoresError` from the
host function: ``tf.errors.InvalidArgumentError`` on TensorFlow, the same error on PyTorch, and
on JAX inside the ``JaxRuntimeError`` of the callback, its message included.
"""

from __future__ import annotations

import functools
import threading

import keras
import numpy as np

from keras_structured.engine import Structure
from keras_structured.ops.host_call._host import _structure_key
from keras_structured.ops.invalid_inputs import raising_invalid_scores


def _indicators(structure: Structure, codes: np.ndarray, u_shape, sizes=None, *, dtype) -> tuple:
    """``(m, n)`` of ``(batch, ...)`` codes, in ``dtype``, after checking the codes."""
    u_shape = tuple(int(d) for d in u_shape)
    codes, sizes = np.asarray(codes), None if sizes is None else np.asarray(sizes)  # JAX passes its arrays
    structure.validate_codes(codes, u_shape, sizes, name="y_true")
    codes = codes.astype(structure.code_dtype)
    m, n = structure.indicators(codes, u_shape, structure.v_shape(u_shape), sizes)
    return m.astype(dtype), n.astype(dtype)


def gold_indicators(structure: Structure, codes, scores_u, lengths=None) -> tuple:
    """``(lengths, m, n)``: the indicator vectors ``(m, n)`` of the structures whose codes
    are ``codes``, and their lengths.

    Args:
        structure: the :class:`~keras_structured.engine.Structure` that reads the codes.
        codes: ``(batch, ...)`` codes in the structure's format: integers (or rounded
            floats, cast on the host, where the backend has no int64).
        scores_u: ``(batch, *u_shape)`` scores whose shape and float dtype ``m`` takes.
        lengths: optional ``(batch,)`` integer sizes, for structures that read them.

    Returns:
        ``(lengths, m, n)``: the lengths as given (on TensorFlow, made to wait for the check
        of the codes, since lengths read from invalid codes can be invalid too), ``m`` and
        ``n`` of shapes ``(batch, *u_shape)`` and ``(batch, *v_shape)`` in the dtype of
        ``scores_u``, constants (no gradient).

    Raises:
        InvalidScoresError: at run time, for codes that are not the codes of structures.

    Example:
        >>> from keras_structured.engine import SequenceStructure
        >>> _, m, n = gold_indicators(SequenceStructure(), np.array([[1, 0]]), keras.ops.zeros((1, 2, 2)))
        >>> keras.ops.convert_to_numpy(m)[0].tolist()
        [[0.0, 1.0], [1.0, 0.0]]
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _on_tensorflow(structure, codes, scores_u, lengths)
    if backend == "jax":
        return (lengths, *_on_jax(structure, codes, scores_u, lengths))
    if backend == "torch":
        return (lengths, *_on_torch(structure, codes, scores_u, lengths))
    raise ValueError(
        "The structured losses run on the TensorFlow, JAX and PyTorch backends. "
        f"Received: backend={backend!r}"
    )


def _on_tensorflow(structure: Structure, codes, scores_u, lengths) -> tuple:
    import tensorflow as tf

    dtype = scores_u.dtype
    function = functools.partial(_indicators, structure, dtype=dtype.as_numpy_dtype)
    inputs = [codes, tf.shape(scores_u)[1:]] + ([] if lengths is None else [tf.cast(lengths, tf.int64)])
    m, n = tf.numpy_function(
        raising_invalid_scores(function), inputs, [dtype, dtype], stateful=False, name="gold_indicators"
    )
    m.set_shape(scores_u.shape)
    n.set_shape(scores_u.shape[:1].concatenate(structure.v_shape(tuple(scores_u.shape[1:]))))
    if lengths is not None:
        with tf.control_dependencies([m]):
            lengths = tf.identity(lengths)
    return lengths, m, n


def _on_jax(structure: Structure, codes, scores_u, lengths) -> tuple:
    import jax

    u_shape, dtype = tuple(scores_u.shape[1:]), np.dtype(scores_u.dtype)

    def host(codes, sizes=None):
        return _indicators(structure, codes, u_shape, sizes, dtype=dtype)

    results = (
        jax.ShapeDtypeStruct(scores_u.shape, scores_u.dtype),
        jax.ShapeDtypeStruct(scores_u.shape[:1] + tuple(structure.v_shape(u_shape)), scores_u.dtype),
    )
    arrays = (codes,) if lengths is None else (codes, lengths)
    return jax.pure_callback(raising_invalid_scores(host), results, *arrays, vmap_method="sequential")


# The structures that the PyTorch op reads codes for, by index (an op takes no Python objects).
_STRUCTURES: list[Structure] = []
_STRUCTURE_INDEX: dict[tuple, int] = {}
_STRUCTURES_LOCK = threading.Lock()


def _structure_index(structure: Structure) -> int:
    """The index of ``structure`` in :data:`_STRUCTURES`, added on first use (equal library
    structures share one; others are kept, for the process's life, by identity)."""
    key = _structure_key(structure)
    with _STRUCTURES_LOCK:
        if key not in _STRUCTURE_INDEX:
            _STRUCTURE_INDEX[key] = len(_STRUCTURES)
            _STRUCTURES.append(structure)
        return _STRUCTURE_INDEX[key]


def _on_torch(structure: Structure, codes, scores_u, lengths) -> tuple:
    # _torch_op() only after keras.config.set_backend("torch"): torch.compile would trace it.
    op, structure_index = _TORCH_OP or _torch_op()
    return tuple(op(codes, scores_u.detach(), lengths, structure_index(structure)))


@functools.cache
def _torch_op() -> tuple:
    """Registers the custom op ``keras_structured::gold_indicators``; returns it and
    :func:`_structure_index` as ``torch.compile`` traces it: a constant of the graph."""
    import torch

    schema = "(Tensor codes, Tensor template, Tensor? lengths, int structure) -> (Tensor, Tensor)"

    @torch.library.custom_op("keras_structured::gold_indicators", mutates_args=(), schema=schema)
    def op(codes, template, lengths, structure):
        dtype = np.dtype(str(template.dtype).removeprefix("torch."))
        function = raising_invalid_scores(functools.partial(_indicators, _STRUCTURES[structure], dtype=dtype))
        sizes = None if lengths is None else lengths.cpu().numpy()
        m, n = function(codes.cpu().numpy(), tuple(template.shape[1:]), sizes)
        return torch.from_numpy(m).to(template.device), torch.from_numpy(n).to(template.device)

    @op.register_fake
    def _(codes, template, lengths, structure):
        v_shape = _STRUCTURES[structure].v_shape(tuple(template.shape[1:]))
        return torch.empty_like(template), template.new_empty((template.shape[0], *v_shape))

    structure_index = torch.compiler.assume_constant_result(_structure_index)
    return torch.ops.keras_structured.gold_indicators, structure_index


# Registered at import on PyTorch (as the host-call adapters are imported), not on first call,
# which torch.compile would have to trace.
_TORCH_OP = _torch_op() if keras.backend.backend() == "torch" else None
