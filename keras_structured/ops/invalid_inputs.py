"""Invalid inputs found at run time (NaN or ``+inf`` scores, labels out of range), on every backend.

Values can be checked in two places, and each has its way of failing:

- In tensor ops, by :func:`checked` (sparsemax, its loss): ``checked(x, ok, message, count)``
  returns ``x`` once the boolean scalar ``ok`` holds, and otherwise stops the computation
  with ``message``:

  - TensorFlow: ``tf.errors.InvalidArgumentError``, eagerly and at run time in graphs
    (``tf.function``, ``model.fit``); nothing under XLA, which drops asserts.
  - JAX: ``ValueError`` eagerly; nothing under ``jax.jit``, which cannot raise on values.
  - PyTorch: ``ValueError`` eagerly; nothing under ``torch.compile`` or in Keras's shape
    inference (``meta`` tensors, or placeholder ones when Keras retries off ``meta``).

  Where nothing can be raised, callers return NaN for the offending slices instead, so that
  a bad input is never mistaken for a good output.
- On the host, in the numpy function that reads the values anyway (SparseMAP, MAP decoding,
  the structured losses' labels, the tree CRF's scores): the engine raises ``ValueError``,
  which :func:`raising_invalid_scores` raises as :class:`InvalidScoresError`. That saves a
  chain of graph ops per call, and raises where the host function runs: eagerly on every
  backend as it is (on JAX too, whose eager calls run the function directly), in TensorFlow
  graphs and under ``torch.compile``, and under ``jax.jit`` as JAX's ``JaxRuntimeError`` (a
  ``RuntimeError``), which holds the message after ``"INTERNAL: CpuCallback error"``; nothing
  under XLA, which cannot call the host.
"""

from __future__ import annotations

import functools

import keras
import tensorflow as tf
from keras.src.backend import in_symbolic_scope


class InvalidScoresError(tf.errors.InvalidArgumentError, ValueError):
    """Bad input found at run time: NaN or +inf scores, every structure forbidden, bad
    lengths or labels (or a custom oracle's invalid answer).

    Raised inside the ops' numpy functions: being a ``ValueError``, TensorFlow turns it
    into ``tf.errors.InvalidArgumentError`` in graph mode, and eager mode re-raises it as
    it is, an ``InvalidArgumentError`` too. On the PyTorch backend and eagerly on JAX it reaches
    the caller as it is; under ``jax.jit``, inside the ``JaxRuntimeError`` of the host
    callback, its message included.
    """

    def __init__(self, *args):
        # ``InvalidScoresError(message)``, or TensorFlow's ``(node_def, op, message, ...)``
        # with which Keras re-raises op errors, its layer's name added to the message.
        node_def, op, message = (None, None, *args) if len(args) == 1 else args[:3]
        super().__init__(node_def, op, message)


def raising_invalid_scores(function):
    """``function`` with its ``ValueError`` raised as :class:`InvalidScoresError`.

    Example:
        >>> def positive(x):
        ...     if x <= 0:
        ...         raise ValueError(f"x must be positive. Received: x={x}")
        ...     return x
        >>> try:
        ...     raising_invalid_scores(positive)(-1)
        ... except tf.errors.InvalidArgumentError as error:
        ...     print(error.message)
        x must be positive. Received: x=-1
    """

    @functools.wraps(function)
    def raising(*arrays):
        try:
            return function(*arrays)
        except ValueError as error:
            raise InvalidScoresError(str(error)) from error

    return raising


def checked(x, ok, message: str, count=None):
    """``x``, made to wait for the check ``ok`` (a boolean scalar tensor) on TensorFlow.

    Args:
        x: the tensor that must not be used unless the check passes.
        ok: boolean scalar tensor, True when the inputs are valid.
        message: the error message; it names the offending argument.
        count: optional integer scalar tensor appended to the message (e.g. the number of
            invalid slices).

    Returns:
        ``x`` (on TensorFlow, an identity of ``x`` with a control dependency on the assert,
        so that nothing computed from it runs before the check).

    Raises:
        tf.errors.InvalidArgumentError: on TensorFlow, when ``ok`` is False (at run time in
            graph mode).
        ValueError: on JAX and PyTorch when ``ok`` is False and has a concrete value.

    Example:
        >>> x = keras.ops.ones((2,))
        >>> checked(x, keras.ops.all(x > 0), "x must be positive.").shape
        TensorShape([2])
    """
    if keras.backend.backend() == "tensorflow":
        data = [message] if count is None else [message, count]
        with tf.control_dependencies([tf.debugging.Assert(ok, data)]):
            return tf.identity(x)
    if is_concrete(ok) and not bool(keras.ops.convert_to_numpy(ok)):
        suffix = "" if count is None else f" {keras.ops.convert_to_numpy(count)}"
        raise ValueError(message + suffix)
    return x


def nan_where_invalid(x, valid):
    """``x`` of shape ``(batch,)``, NaN for the examples whose check (``valid``) failed where
    it could not raise, so that a bad input never reads as a good output.

    Example:
        >>> keras.ops.convert_to_numpy(nan_where_invalid(keras.ops.ones((2,)), [True, False])).tolist()
        [1.0, nan]
    """
    # A scalar NaN, not ``full_like``, which reads its fill value back on PyTorch's ``meta``.
    return keras.ops.where(valid, x, float("nan"))


def is_concrete(x) -> bool:
    """Whether ``x`` holds values that Python can read now (not a tracer or a shape-only tensor).

    Always False on TensorFlow, where checks run as graph ops instead, and inside Keras's shape
    inference (``compute_output_spec``), whose tensors hold placeholders: on PyTorch, where
    ``meta`` tensors fail, Keras infers the loss of a model from ones on the CPU, labels too.
    """
    backend = keras.backend.backend()
    if in_symbolic_scope():
        return False
    if backend == "jax":
        import jax

        return not isinstance(x, jax.core.Tracer)
    if backend == "torch":
        import torch

        return x.device.type != "meta" and not torch.compiler.is_compiling()
    return backend == "numpy"
