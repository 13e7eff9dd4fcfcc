"""The gold structures' indicator vectors, read from the label codes by one host call per batch.

The structured losses need ``(m, n)``, the indicator vectors of the gold structures. Only the
structure can read its codes (:meth:`~keras_structured.engine.Structure.indicators`, after
:meth:`~keras_structured.engine.Structure.validate_codes`), in numpy, so the codes of a batch
cross to the host once, without gradient (labels are constants), by the generic host call
(:func:`keras_structured.ops.host_call.call`): ``tf.numpy_function`` on TensorFlow, which also
takes shapes known only at run time; ``jax.pure_callback`` on JAX, under ``jax.jit`` too, once
per mapped element under ``jax.vmap``; the custom op ``keras_structured::gold_indicators`` on
PyTorch, whose fake kernel gives the result shapes without a host call (``torch.compile``,
Keras's shape inference on the ``meta`` device).

Invalid codes raise :class:`~keras_structured.ops.invalid_inputs.InvalidScoresError` from the
host function: ``tf.errors.InvalidArgumentError`` on TensorFlow, the same error on PyTorch and
eagerly on JAX, and under ``jax.jit`` inside the ``JaxRuntimeError`` of the callback, its
message included. The lengths come
back out of the same call, so that nothing reads them before the codes they were taken from
are checked.
"""

from __future__ import annotations

import functools

import numpy as np

from keras_structured.engine import Structure
from keras_structured.ops import host_call
from keras_structured.ops.invalid_inputs import raising_invalid_scores


def _indicators(codes, template, sizes=None, *, structure: Structure) -> tuple:
    """``(m, n)`` of ``(batch, ...)`` codes, in the shape ``(batch, *u_shape)`` and dtype of
    ``template``, after checking the codes; then ``sizes`` as they came, when given."""
    u_shape = tuple(template.shape[1:])
    engine_sizes = None if sizes is None else sizes.astype(np.int64)
    structure.validate_codes(codes, u_shape, engine_sizes, name="y_true")
    codes = codes.astype(structure.code_dtype)
    m, n = structure.indicators(codes, u_shape, structure.v_shape(u_shape), engine_sizes)
    indicators = (m.astype(template.dtype), n.astype(template.dtype))
    return indicators if sizes is None else (*indicators, sizes)


def _specs(codes, template, sizes=None, *, structure: Structure) -> list:
    shape = tuple(template.shape)
    specs = [(shape, template.dtype), (shape[:1] + tuple(structure.v_shape(shape[1:])), template.dtype)]
    return specs if sizes is None else [*specs, (tuple(sizes.shape), sizes.dtype)]


def _checked_indicators(codes, template, sizes=None, *, structure: Structure) -> tuple:
    """:func:`_indicators`, its ``ValueError`` raised as ``InvalidScoresError``."""
    indicators = functools.partial(_indicators, structure=structure)
    return raising_invalid_scores(indicators)(codes, template, sizes)


_GOLD = host_call.host_function("gold_indicators", _checked_indicators, _specs)


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
        ``(lengths, m, n)``: the lengths as given (returned by the host call that checks the
        codes, since lengths read from invalid codes can be invalid too), ``m`` and ``n`` of
        shapes ``(batch, *u_shape)`` and ``(batch, *v_shape)`` in the dtype of ``scores_u``,
        constants (no gradient).

    Raises:
        InvalidScoresError: at run time, for codes that are not the codes of structures.

    Example:
        >>> import keras
        >>> from keras_structured.engine import SequenceStructure
        >>> _, m, n = gold_indicators(SequenceStructure(), np.array([[1, 0]]), keras.ops.zeros((1, 2, 2)))
        >>> keras.ops.convert_to_numpy(m)[0].tolist()
        [[0.0, 1.0], [1.0, 0.0]]
    """
    results = host_call.call(_GOLD, codes, scores_u, lengths, structure=structure)
    m, n = results[:2]
    return (results[2] if lengths is not None else None), m, n
