"""Value-dependent checks that run on every Keras backend.

``checked(x, ok, message, count)`` returns ``x`` once the boolean scalar ``ok`` holds, and
otherwise stops the computation with ``message``. How it stops depends on the backend:

- TensorFlow: ``tf.errors.InvalidArgumentError``, eagerly and at run time in graphs
  (``tf.function``, ``model.fit``); nothing under XLA, which drops asserts.
- JAX: ``ValueError`` eagerly; nothing under ``jax.jit``, which cannot raise on values.
- PyTorch: ``ValueError`` eagerly; nothing under ``torch.compile`` or on the ``meta``
  device (Keras' shape inference).

Where nothing can be raised, callers return NaN for the offending slices instead, so that a
bad input is never mistaken for a good output.
"""

from __future__ import annotations

import keras


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
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        data = [message] if count is None else [message, count]
        with tf.control_dependencies([tf.debugging.Assert(ok, data)]):
            return tf.identity(x)
    if is_concrete(ok) and not bool(keras.ops.convert_to_numpy(ok)):
        suffix = "" if count is None else f" {keras.ops.convert_to_numpy(count)}"
        raise ValueError(message + suffix)
    return x


def is_concrete(x) -> bool:
    """Whether ``x`` holds values that Python can read now (not a tracer or a shape-only tensor).

    Always False on TensorFlow, where checks run as graph ops instead.
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return not isinstance(x, jax.core.Tracer)
    if backend == "torch":
        import torch

        return x.device.type != "meta" and not torch.compiler.is_compiling()
    return backend == "numpy"
