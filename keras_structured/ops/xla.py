"""A clear error for code that XLA cannot compile: the MAP oracles run in Python.

SparseMAP, MAP decoding and the SparseMAP, hinge and perceptron losses call the
numpy engine through ``tf.numpy_function``, which XLA cannot compile. Left alone,
``jit_compile=True`` fails only when the compiled step first runs, with
``tf2xla conversion failed`` and no word of which layer or loss is to blame. These
ops, layers and losses call :func:`refuse_xla` when they are traced, so that the
first call inside an XLA-compiled function raises a ``ValueError`` naming the
caller and the fix instead.

What each caller does about ``jit_compile=True`` (see docs/performance.md):

* The SparseMAP layers set ``supports_jit = False``, so ``model.compile(...,
  jit_compile=True)`` warns once ("Model doesn't support ``jit_compile=True``.
  Proceeding with ``jit_compile=False``", Keras's own fallback) and trains. Only a
  hand-written ``tf.function(jit_compile=True)`` around the layer reaches the error.
* A loss cannot tell Keras that it does not compile, so a model whose layers all
  support XLA and whose loss is a SparseMAP, hinge or perceptron loss fails at its
  first training step (the step is traced then), with the fix in the message:
  ``model.compile(..., jit_compile=False)``. On GPU, Keras's default
  ``jit_compile="auto"`` chooses XLA for such models, so the fix applies there too.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def _in_xla_context() -> bool:
    """Whether the code being traced will be XLA-compiled (``tf.function(jit_compile=True)``).

    Never on the other backends of Keras, whose tracers (``jax.jit``, ``torch.compile``) need
    not see a TensorFlow call.
    """
    if keras.backend.backend() != "tensorflow" or tf.executing_eagerly():
        return False
    try:  # TensorFlow marks the graphs it traces for XLA with an XLA control-flow context.
        from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
    except ImportError:  # pragma: no cover - a TensorFlow without it: fail late, as before
        return False
    return bool(GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def refuse_xla(owner: str, fix: str) -> None:
    """Raise ``ValueError`` when traced for XLA, naming ``owner`` and ``fix``; else nothing.

    Args:
        owner: what is being compiled, e.g. ``"SparseMAPLoss"``.
        fix: the sentence telling the user what to do instead.

    Raises:
        ValueError: inside a function compiled with ``jit_compile=True``.

    Example:
        >>> refuse_xla("SparseMAPLoss", "Compile the model with jit_compile=False.")  # eager: no error
        >>> @tf.function(jit_compile=True)
        ... def step(x):
        ...     refuse_xla("SparseMAPLoss", "Compile the model with jit_compile=False.")
        ...     return x
        >>> try:
        ...     step(tf.ones(1))
        ... except ValueError as error:
        ...     print("SparseMAPLoss cannot be XLA-compiled" in str(error))
        True
    """
    if _in_xla_context():
        raise ValueError(
            f"{owner} cannot be XLA-compiled (jit_compile=True): it runs its MAP oracle in Python "
            f"(tf.numpy_function), which XLA cannot compile. {fix}"
        )


#: The fix named by the losses that call a MAP oracle.
LOSS_FIX = (
    "Compile the model with jit_compile=False: model.compile(optimizer, loss, jit_compile=False) "
    "(on GPU, Keras's default jit_compile='auto' picks XLA for models whose layers all support it)."
)

#: The fix named by the SparseMAP layers (model.compile falls back by itself, see the module docstring).
LAYER_FIX = (
    "Call it outside tf.function(jit_compile=True); model.compile(..., jit_compile=True) falls "
    "back to jit_compile=False by itself for models with this layer (it sets supports_jit=False)."
)

#: The fix named by the ops.
OP_FIX = "Call it from a tf.function without jit_compile=True."
