"""MAP decoding as an op of every Keras backend: the highest-scoring structure of every example."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_structured.engine import Structure
from keras_structured.ops import host_call, portable_sparsemap
from keras_structured.ops.sparsemap_op import prepare_scores
from keras_structured.ops.xla import OP_FIX, refuse_xla


def map_decode(structure: Structure, eta_u, eta_v=None, lengths=None):
    """MAP inference: ``argmax_{s} <eta_u, m_s> + <eta_v, n_s>`` for every example.

    Runs the structure's MAP oracle on the whole batch in one host call
    (:func:`keras_structured.ops.host_call.decode`: ``tf.numpy_function`` on TensorFlow,
    ``jax.pure_callback`` on JAX, under ``jax.jit`` too, a ``torch.library`` custom op on
    PyTorch). The result is piecewise constant in the scores: the op has no gradient
    (zero gradients on JAX and PyTorch).

    Args:
        structure: a :class:`keras_structured.engine.Structure`.
        eta_u: ``(batch, *u_shape)`` unary scores (float16/32/64); ``-inf`` forbids
            a part (the decoded structure never contains it).
        eta_v: ``(batch, *v_shape)`` higher-order scores; may be None when the
            structure's higher-order part is empty (or has a static shape: zeros).
        lengths: optional integer per-example sizes of padded inputs, as the
            structure expects (shape ``(batch,)`` or ``(batch, d)``).

    Returns:
        ``(codes, m, n)``: the codes of the decoded structures ``(batch, ...)``, of
        the structure's ``code_dtype`` (int64 unless it says otherwise),
        and their indicator vectors ``m`` ``(batch, *u_shape)`` and ``n``
        ``(batch, *v_shape)`` in the dtype of ``eta_u``. Shapes are static where
        the score shapes are (the code shape then comes from the structure's
        :meth:`~keras_structured.engine.Structure.code_shape`). On JAX without 64-bit
        types, int64 codes come as int32 (and float64 ones as float32).

    Raises:
        ValueError: at trace time, for shapes that do not fit the structure, lengths of
            a non-integer dtype, or a call inside an XLA-compiled function (see
            :mod:`keras_structured.ops.xla`).
        tf.errors.InvalidArgumentError: at run time, for NaN or +inf scores, bad
            lengths, or when ``-inf`` scores rule out every structure of an example
            (an :class:`~keras_structured.ops.sparsemap_op.InvalidScoresError`,
            also a ``ValueError``, in eager mode; on PyTorch and eagerly on JAX the same
            error; under ``jax.jit``, inside the ``JaxRuntimeError`` of the host callback).

    Example:
        >>> from keras_structured.engine import SequenceStructure
        >>> codes, m, n = map_decode(SequenceStructure(), [[[1.0, 0.0], [0.0, 1.0]]], tf.zeros([1, 1, 2, 2]))
        >>> codes.numpy(), m.numpy()[0].tolist()
        (array([[0, 1]]), [[1.0, 0.0], [0.0, 1.0]])
    """
    if keras.backend.backend() != "tensorflow":
        return portable_sparsemap.map_decode(structure, eta_u, eta_v, lengths)
    refuse_xla("keras_structured.map_decode", OP_FIX)
    eta_u = tf.convert_to_tensor(eta_u)
    inputs = prepare_scores(structure, eta_u, eta_v, lengths)
    codes, m, n = host_call.decode(structure, *inputs)
    return codes, tf.cast(m, eta_u.dtype), tf.cast(n, eta_u.dtype)
