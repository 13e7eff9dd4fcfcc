"""The host call: numpy code (SparseMAP's engine, the tree CRF's kernel, the losses' gold
structures) run from a model, on every Keras backend.

Two entry points. :func:`host_function` declares a numpy function of arrays whose results
have shapes and dtypes known from the arguments', optionally with a numpy VJP, and
:func:`call` calls it on tensors of the backend: ``tf.numpy_function`` (under
``tf.custom_gradient`` with a VJP), ``jax.pure_callback`` (inside ``jax.custom_vjp``), or a
``torch.library`` custom op with a fake kernel (and ``register_autograd``), registered when
the function is declared, at import. :func:`solve` and :func:`decode` are SparseMAP's own
calls, described below.

The engine (:mod:`keras_structured.engine`) runs on the host, in numpy and numba. A model
reaches it through one host call per batch for the solution and one for the backward
pass, which applies the closed-form Jacobian of the final active set (Niculae et al.,
2018, Prop. 1) in float64. A small adapter per backend makes those calls:

* TensorFlow (:mod:`._tf`): ``tf.numpy_function`` under ``tf.custom_gradient``; the
  forward call returns the active set's factors as tensors, which TensorFlow lets have
  data-dependent shapes. XLA cannot compile it (see :mod:`keras_structured.ops.xla`).
* JAX (:mod:`._jax`): ``jax.pure_callback`` inside ``jax.custom_vjp``, so it runs under
  ``jax.jit`` (the Keras JAX trainer jits its steps) and ``jax.vmap``.
* PyTorch (:mod:`._torch`): ``torch.library.custom_op`` with ``register_autograd`` and
  ``register_fake``, so it runs eagerly and under ``torch.compile``.

JAX callbacks must declare their result shapes, so the JAX and PyTorch adapters leave the
active sets on the host (:data:`._host.SUPPORTS`) and pass handles to them from the
forward call to the backward one; the backward call also receives the scores, and solves
them again when the store no longer holds their support. For the same reason the solver's
info (whose number of structures depends on the data) comes padded to a static bound,
:func:`._host.max_support`, where shapes must be known before the call: under JAX
transformations (``jax.jit``, ``jax.grad``, ``jax.vmap``) and ``torch.compile``. Eager
calls return it as TensorFlow does, with the batch's largest support. Their host functions are the
methods of one :class:`._host.HostSolve` per call site (structure, options, ranks of the
arguments), which :func:`._host.host_solve` finds or creates. Importing this package imports
the adapter of the backend Keras runs on, and no other: the library imports without JAX
and PyTorch. (Imported then rather than on first call, which ``torch.compile`` would have
to trace.)
"""

from __future__ import annotations

import importlib

import keras

from keras_structured.engine import SolverOptions, Structure
from keras_structured.ops.host_call._functions import HostFunction
from keras_structured.ops.host_call._host import SUPPORTS, HostSolve, SupportStore, host_solve, max_support

__all__ = [
    "SUPPORTS",
    "HostFunction",
    "HostSolve",
    "SupportStore",
    "call",
    "decode",
    "host_function",
    "host_solve",
    "max_support",
    "solve",
]

_ADAPTERS = {"tensorflow": "_tf", "jax": "_jax", "torch": "_torch"}


def _import_adapter(backend: str):
    """The adapter module of ``backend`` (None for a backend without one)."""
    if backend not in _ADAPTERS:
        return None
    return importlib.import_module(f"keras_structured.ops.host_call.{_ADAPTERS[backend]}")


_ADAPTER = keras.backend.backend(), _import_adapter(keras.backend.backend())


def _adapter():
    """``(backend, adapter module)`` of the backend Keras runs on now."""
    backend, adapter = _ADAPTER
    if backend != keras.backend.backend():  # keras.config.set_backend was called since
        backend = keras.backend.backend()
        adapter = _import_adapter(backend)
    if adapter is None:
        raise ValueError(
            "The host call (SparseMAP, the tree CRF, the structured losses) runs on the TensorFlow, "
            "JAX and PyTorch backends of Keras. "
            f"Received: backend={backend!r}"
        )
    return backend, adapter


def _ranks(scores_u, scores_v, lengths) -> tuple:
    """The per-example ranks of the arguments (after their batch dimension)."""
    return (
        len(scores_u.shape) - 1,
        len(scores_v.shape) - 1,
        None if lengths is None else len(lengths.shape) - 1,
    )


def solve(
    structure: Structure,
    options: SolverOptions,
    scores_u,
    scores_v,
    lengths=None,
    *,
    jacobian: bool = True,
    info: bool = False,
) -> list:
    """SparseMAP of a batch of scores by one host call, on the backend of Keras.

    Args:
        structure: the :class:`~keras_structured.engine.Structure`.
        options: the :class:`~keras_structured.engine.SolverOptions`.
        scores_u: ``(batch, *u_shape)`` float scores, tensors of the backend (float64 on
            TensorFlow; float32 or float64 elsewhere: the host solves in float64).
        scores_v: ``(batch, *v_shape)`` scores of the same dtype.
        lengths: optional integer per-example sizes.
        jacobian: make ``(u, v)`` differentiable (else the scores get no gradient).
        info: also return the weights ``(batch, k)``, codes ``(batch, k, *code_shape)``
            (padded with -1), gaps, MAP calls and convergence flags of the solution. ``k``
            is the batch's largest support, except under JAX transformations and
            ``torch.compile``, which need static shapes: there :func:`max_support`.
            The info carries no gradient.

    Returns:
        ``[u, v]`` shaped and typed like the scores, then the five info arrays when ``info``
        (weights and gaps in the dtype of the scores; codes int32 on JAX without 64-bit types).

    Raises:
        ValueError: on a backend without an adapter.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> scores = keras.ops.convert_to_tensor([[1.0, 0.5, -1.0]], "float64")
        >>> u, v = solve(SimplexStructure(), SolverOptions(), scores, keras.ops.zeros((1, 0), "float64"))
        >>> keras.ops.convert_to_numpy(u)
        array([[0.75, 0.25, 0.  ]])
    """
    backend, adapter = _adapter()
    if backend == "tensorflow":
        return adapter.solve_on_host(structure, options, scores_u, scores_v, lengths, jacobian, info)
    ranks = _ranks(scores_u, scores_v, lengths)
    return adapter.solve(structure, options, ranks, scores_u, scores_v, lengths, jacobian, info)


def decode(structure: Structure, scores_u, scores_v, lengths=None) -> list:
    """MAP decoding of a batch of scores by one host call, on the backend of Keras:
    ``argmax_s <scores_u, m_s> + <scores_v, n_s>`` for every example.

    The result is piecewise constant in the scores: it carries no gradient.

    Args:
        structure: the :class:`~keras_structured.engine.Structure`.
        scores_u: ``(batch, *u_shape)`` float scores, tensors of the backend.
        scores_v: ``(batch, *v_shape)`` scores of the same dtype.
        lengths: optional integer per-example sizes.

    Returns:
        ``[codes, m, n]``: the codes ``(batch, *code_shape)`` of the structure's
        ``code_dtype`` (int32 for int64 on JAX without 64-bit types) and the indicator
        vectors, shaped and typed like the scores.

    Raises:
        ValueError: on a backend without an adapter.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> scores = keras.ops.convert_to_tensor([[1.0, 0.5, -1.0]])
        >>> codes, m, n = decode(SimplexStructure(), scores, keras.ops.zeros((1, 0)))
        >>> keras.ops.convert_to_numpy(codes), keras.ops.convert_to_numpy(m)
        (array([0]), array([[1., 0., 0.]], dtype=float32))
    """
    backend, adapter = _adapter()
    if backend == "tensorflow":
        return adapter.decode_on_host(structure, scores_u, scores_v, lengths)
    return adapter.decode(structure, _ranks(scores_u, scores_v, lengths), scores_u, scores_v, lengths)


def host_function(
    name: str,
    function,
    specs,
    *,
    vjp=None,
    differentiable: tuple[int, ...] = (),
    vmap_method: str = "sequential",
) -> HostFunction:
    """Declares a numpy function for :func:`call`; on PyTorch, registers its custom op.

    Declare it once, at import (``torch.compile`` would otherwise trace the registration):
    the op ``keras_structured::<name>`` has a fixed name and schema, ``(Tensor[] arrays,
    int key) -> Tensor[]``, the key naming the static arguments of a call.

    Args:
        name, function, specs, vjp, differentiable, vmap_method: see :class:`HostFunction`.

    Returns:
        The :class:`HostFunction`.

    Example:
        >>> import numpy as np
        >>> cube = host_function(
        ...     "doc_cube",
        ...     lambda x, scale: (scale * x**3,),
        ...     lambda x, scale: [(x.shape, x.dtype)],
        ...     vjp=lambda x, upstream, scale: (3 * scale * x**2 * upstream,),
        ...     differentiable=(0,),
        ... )
        >>> keras.ops.convert_to_numpy(call(cube, np.array([1.0, 2.0]), scale=2.0)[0]).tolist()
        [2.0, 16.0]
    """
    host = HostFunction(name, function, specs, vjp, tuple(differentiable), vmap_method)
    backend, adapter = _ADAPTER
    if backend == "torch":
        adapter.register_function(host)
    return host


def call(host: HostFunction, *arrays, **static) -> list:
    """``host.function(*arrays, **static)`` on tensors of the backend of Keras, by one host call.

    The arrays cross to the host as numpy arrays (None stays None), the results come back as
    tensors of the shapes and dtypes of ``host.specs``: under ``jax.jit`` and
    ``torch.compile`` too, and inside Keras's symbolic calls (the fake kernel of PyTorch).
    With a VJP the results are differentiable, once, with respect to the arguments at
    ``host.differentiable``; without one they carry no gradient. TensorFlow cannot compile
    the call with XLA.

    Args:
        host: the :class:`HostFunction`, from :func:`host_function`.
        *arrays: its array arguments: tensors, numpy arrays, or None for an absent one.
        **static: its other arguments: hashable values or structures, the same for every
            call that may share what a backend compiled (JAX's callbacks, PyTorch's key).

    Returns:
        The results, as a list of tensors.

    Raises:
        ValueError: on a backend without an adapter.

    Example:
        >>> import numpy as np
        >>> total = host_function(
        ...     "doc_total", lambda x, axis: (x.sum(axis),), lambda x, axis: [(x.shape[:axis], x.dtype)]
        ... )
        >>> keras.ops.convert_to_numpy(call(total, np.ones((2, 3)), axis=1)[0]).tolist()
        [3.0, 3.0]
    """
    backend, adapter = _adapter()
    present = tuple(array is not None for array in arrays)
    given = [keras.ops.convert_to_tensor(array) for array in arrays if array is not None]
    return adapter.call_function(host, given, present, static)
