"""MAP decoding as a TensorFlow op: the highest-scoring structure of every example."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_structured.engine import Structure
from keras_structured.engine.forbidden import finite_mass, raise_if_forbidden, replace_forbidden
from keras_structured.ops.sparsemap_op import prepare_scores, raising_invalid_scores
from keras_structured.ops.xla import OP_FIX, refuse_xla


def map_decode(structure: Structure, eta_u, eta_v=None, lengths=None):
    """MAP inference: ``argmax_{s} <eta_u, m_s> + <eta_v, n_s>`` for every example.

    Runs the structure's MAP oracle on the whole batch in one ``tf.numpy_function``
    call. The result is piecewise constant in the scores: the op has no gradient.

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
        :meth:`~keras_structured.engine.Structure.code_shape`).

    Raises:
        ValueError: at trace time, for shapes that do not fit the structure, lengths of
            a non-integer dtype, or a call inside an XLA-compiled function (see
            :mod:`keras_structured.ops.xla`).
        tf.errors.InvalidArgumentError: at run time, for NaN or +inf scores, bad
            lengths, or when ``-inf`` scores rule out every structure of an example
            (an :class:`~keras_structured.ops.sparsemap_op.InvalidScoresError`,
            also a ``ValueError``, in eager mode).

    Example:
        >>> from keras_structured.engine import SequenceStructure
        >>> codes, m, n = map_decode(SequenceStructure(), [[[1.0, 0.0], [0.0, 1.0]]], tf.zeros([1, 1, 2, 2]))
        >>> codes.numpy(), m.numpy()[0].tolist()
        (array([[0, 1]]), [[1.0, 0.0], [0.0, 1.0]])
    """
    refuse_xla("keras_structured.map_decode", OP_FIX)
    eta_u = tf.convert_to_tensor(eta_u)
    inputs = prepare_scores(structure, eta_u, eta_v, lengths)
    scores_u, scores_v = inputs[:2]
    dtype = scores_u.dtype
    u_shape, v_shape = tuple(scores_u.shape[1:]), tuple(scores_v.shape[1:])
    np_dtype = dtype.as_numpy_dtype

    def decode(values_u, values_v, sizes=None):
        batch = values_u.shape[0]
        if batch == 0:  # an empty shard of a distributed batch
            shape = structure.code_shape(values_u.shape[1:], values_v.shape[1:])
            empty_codes = np.zeros((0,) + shape, dtype=structure.code_dtype)
            return empty_codes, values_u.astype(np_dtype), values_v.astype(np_dtype)
        flat_u, flat_v = values_u.reshape(batch, -1), values_v.reshape(batch, -1)
        mass = finite_mass(flat_u, flat_v)
        flat_u, forbidden_u = replace_forbidden("eta_u", flat_u, mass)
        flat_v, forbidden_v = replace_forbidden("eta_v", flat_v, mass)
        if sizes is not None:
            structure.validate_lengths(sizes, values_u.shape[1:])
        codes = structure.map(flat_u.reshape(values_u.shape), flat_v.reshape(values_v.shape), sizes)
        m, n = structure.indicators(codes, values_u.shape[1:], values_v.shape[1:], sizes)
        touches_u = (m.reshape(batch, -1) * forbidden_u).any(axis=1)
        raise_if_forbidden(touches_u | (n.reshape(batch, -1) * forbidden_v).any(axis=1))
        return np.asarray(codes, dtype=structure.code_dtype), m.astype(np_dtype), n.astype(np_dtype)

    codes, m, n = tf.numpy_function(
        raising_invalid_scores(decode),
        inputs,
        [tf.as_dtype(structure.code_dtype), dtype, dtype],
        stateful=False,
        name="map_decode",
    )
    static_code_shape = structure.code_shape(u_shape, v_shape)
    if static_code_shape is not None:
        codes.set_shape((eta_u.shape[0],) + static_code_shape)
    m.set_shape(eta_u.shape)
    n.set_shape(scores_v.shape)
    return codes, tf.cast(m, eta_u.dtype), tf.cast(n, eta_u.dtype)
