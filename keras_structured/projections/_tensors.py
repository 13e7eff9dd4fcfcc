"""What the projections need beyond ``keras.ops``: readable values, value checks, ``xlogy``.

The projections are written with ``keras.ops`` and run on TensorFlow, JAX and PyTorch. This
module holds the few things that depend on the backend:

* :func:`known_values`: a tensor's values, where Python can read them now (eager TensorFlow
  tensors and variables; JAX arrays outside ``jax.jit``; PyTorch tensors outside
  ``torch.compile`` and off the ``meta`` device), else ``None``;
* :func:`ensure`: a check that raises ``ValueError`` naming the offending value where it can
  be read, and otherwise runs with the computation (TensorFlow graphs:
  ``tf.errors.InvalidArgumentError``; nothing under ``jax.jit``, ``torch.compile`` or XLA);
  :func:`check` and :func:`assert_finite`, the run-time checks of
  :mod:`keras_structured.ops.invalid_inputs` (``tf.errors.InvalidArgumentError`` on
  TensorFlow, eagerly too);
* :func:`xlogy`, ``x log y`` with TensorFlow's gradient, which ``keras.ops`` lacks (JAX's and
  PyTorch's own give NaN gradients at ``x = y = 0``).

The arithmetic avoids the ``keras.ops`` functions that compute float64 in float32 on JAX or
PyTorch as of Keras 3.15 (``mean``, ``maximum``, ``minimum``, ``matmul``): Python operators,
``ops.sum`` and ``ops.where`` keep the dtype on every backend.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_structured.ops.invalid_inputs import checked, is_concrete


def is_tensor(value) -> bool:
    """Whether ``value`` is a tensor or a variable (Keras's, or TensorFlow's on TensorFlow)."""
    return isinstance(value, keras.Variable) or ops.is_tensor(value)


def known_values(x) -> np.ndarray | None:
    """The values of the tensor ``x`` as a numpy array, or ``None`` where they are not known yet.

    Example:
        >>> known_values(keras.ops.ones((2,)))
        array([1., 1.], dtype=float32)
    """
    if isinstance(x, keras.Variable):
        x = x.value
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if tf.is_symbolic_tensor(x) or not tf.executing_eagerly():
            return None
    elif not is_concrete(x):
        return None
    return np.asarray(ops.convert_to_numpy(x))


def ensure(x, ok, message: str, value):
    """``x``, once the boolean scalar ``ok`` holds.

    Where ``ok`` is known now, raises ``ValueError(message + repr(float(value)))`` unless it
    holds; otherwise returns ``x`` behind a run-time check
    (:func:`~keras_structured.ops.invalid_inputs.checked`, ``value`` appended to the message).

    Args:
        x: the tensor that must not be used unless the check passes.
        ok: a boolean scalar tensor.
        message: the error message, ending with ``"Received: name="``.
        value: a float scalar tensor, the value the message reports.

    Returns:
        ``x`` (on TensorFlow graphs, with a control dependency on the check).

    Raises:
        ValueError: where ``ok`` is known and False.
    """
    known = known_values(ok)
    if known is None:
        return check(x, ok, message, value)
    if not bool(known):
        shown = known_values(value)
        raise ValueError(message + ("a traced value" if shown is None else repr(float(shown))))
    return x


def check(x, ok, message: str, value=None):
    """``x``, once the boolean scalar ``ok`` holds (:func:`~keras_structured.ops.invalid_inputs.checked`),
    ``value`` appended to the message where it can be read (under ``jax.vjp`` ``ok`` may be
    known while ``value`` is traced)."""
    if value is not None and keras.backend.backend() != "tensorflow" and not is_concrete(value):
        value = None
    return checked(x, ok, message, value)


def assert_finite(x, message: str):
    """``x``, checked to have no NaN or infinite entry (``tf.errors.InvalidArgumentError`` on
    TensorFlow, ``ValueError`` on JAX and PyTorch where the values are known)."""
    return checked(x, ops.all(ops.isfinite(x)), message)


def static_rank(x) -> int | None:
    """The rank of ``x``, or ``None`` where it is not known (a TensorFlow tensor of unknown rank)."""
    try:
        return len(x.shape)
    except (TypeError, ValueError):
        return None


def mean(x, axis=None, keepdims: bool = False):
    """``ops.mean`` in the dtype of ``x`` on every backend.

    Keras 3.15's ``ops.mean`` computes float64 in float32 on JAX and PyTorch; there the sum is
    divided by the count instead. TensorFlow keeps ``tf.reduce_mean`` (which graphs compute as
    they always did: Grappler rewrites a division by the count).
    """
    if keras.backend.backend() == "tensorflow":
        return ops.mean(x, axis=axis, keepdims=keepdims)
    shape = ops.shape(x)
    axes = range(len(shape)) if axis is None else [axis] if isinstance(axis, int) else axis
    count = np.prod([shape[a] for a in axes], dtype=np.int64)
    return ops.sum(x, axis=axis, keepdims=keepdims) / ops.cast(count, x.dtype)


def constant(array, dtype):
    """The array (a number, nested list or numpy array) as a tensor of ``dtype``, rounded by numpy."""
    return ops.convert_to_tensor(np.asarray(array, dtype=keras.backend.standardize_dtype(dtype)))


def broadcast_like(x, target):
    """``x`` broadcast to the shape of ``target``.

    On TensorFlow the shape is read at run time (``tf.shape``), as before the port: with a
    static shape TensorFlow sums the gradients in another order, and they would move by an ulp.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.broadcast_to(x, tf.shape(target))
    return ops.broadcast_to(x, ops.shape(target))


def broadcast_batch(a, b, core: int) -> tuple:
    """``a`` and ``b`` with their batch axes (all but the last ``core``) broadcast together.

    Works whether the batch sizes are known or not (TensorFlow's dynamic shapes): TensorFlow
    broadcasts to ``tf.broadcast_dynamic_shape``, as before the port; the other backends add
    zeros, which leaves the values as they are.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        batch = tf.broadcast_dynamic_shape(tf.shape(a)[:-core], tf.shape(b)[:-core])
        return tuple(tf.broadcast_to(x, tf.concat([batch, tf.shape(x)[-core:]], 0)) for x in (a, b))
    corner = (Ellipsis,) + (slice(0, 1),) * core
    return a + ops.zeros_like(b[corner]), b + ops.zeros_like(a[corner])


def rows_shape(x, *trailing: int) -> tuple:
    """``(batch, *trailing)`` for ``x`` of shape ``(batch, ...)``: a batch size only known at run
    time (TensorFlow's dynamic shapes) is a scalar tensor."""
    return (ops.shape(x)[0], *trailing)


def xlogy(x, y):
    """``x log y``, 0 where ``x = 0`` (whatever ``y``), with TensorFlow's gradient.

    The gradient is ``(log y, x / y)`` where ``x != 0`` and ``(0, 0)`` where ``x = 0``, so that
    ``xlogy(p, p)`` has the gradient ``log p + 1`` on the support and 0 off it, and
    ``xlogy(p, q)`` a finite one where ``p = q = 0``. TensorFlow's ``tf.math.xlogy`` on
    TensorFlow; elsewhere the same formulas with ``keras.ops.custom_gradient``.

    Args:
        x: a floating tensor.
        y: a tensor of the same shape and dtype.

    Returns:
        ``x log y`` elementwise.

    Example:
        >>> keras.ops.convert_to_numpy(xlogy(keras.ops.array([0.0, 2.0]), keras.ops.array([0.0, 1.0])))
        array([0., 0.], dtype=float32)
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.math.xlogy(x, y)
    return _xlogy(x, y)


@ops.custom_gradient
def _xlogy(x, y):
    nonzero = x != 0
    safe_y = ops.where(nonzero, y, ops.ones_like(y))
    log_y = ops.log(safe_y)
    value = ops.where(nonzero, x * log_y, ops.zeros_like(x))

    def grad(*args, upstream=None):
        # TensorFlow and JAX call grad(upstream); PyTorch grad(*inputs, upstream=upstream).
        if upstream is None:
            (upstream,) = args
        zeros = ops.zeros_like(upstream)
        return ops.where(nonzero, log_y * upstream, zeros), ops.where(nonzero, x / safe_y * upstream, zeros)

    return value, grad
