"""The backend-neutral entry points of the host call: declaring a host function, calling it.

Each call goes to the adapter of the backend Keras runs on (``_tf``, ``_jax``, ``_torch``),
imported with this module: the library imports without JAX and PyTorch, and ``torch.compile``
does not trace an import on first call.
"""

from __future__ import annotations

import importlib

import keras

from keras_structured.ops.host_call._functions import HostFunction

_ADAPTERS = {"tensorflow": "_tf", "jax": "_jax", "torch": "_torch"}


def _import_adapter(backend: str):
    """The adapter module of ``backend`` (None for a backend without one)."""
    if backend not in _ADAPTERS:
        return None
    return importlib.import_module(f"keras_structured.ops.host_call.{_ADAPTERS[backend]}")


_ADAPTER = keras.backend.backend(), _import_adapter(keras.backend.backend())


def adapter():
    """``(backend, adapter module)`` of the backend Keras runs on now.

    Raises:
        ValueError: on a backend without an adapter.
    """
    backend, module = _ADAPTER
    if backend != keras.backend.backend():  # keras.config.set_backend was called since
        backend = keras.backend.backend()
        module = _import_adapter(backend)
    if module is None:
        raise ValueError(
            "The host call (SparseMAP, LP-SparseMAP, the tree CRF, the structured losses) runs on the "
            f"TensorFlow, JAX and PyTorch backends of Keras. Received: backend={backend!r}"
        )
    return backend, module


def host_function(
    name: str,
    function,
    specs,
    *,
    vjp=None,
    differentiable: tuple[int, ...] = (),
    vmap_method: str = "sequential",
    forward=None,
    residual_specs=None,
    differentiable_results: tuple[int, ...] | None = None,
) -> HostFunction:
    """Declares a numpy function for :func:`call`; on PyTorch, registers its custom ops.

    Declare it once, at import (``torch.compile`` would otherwise trace the registration):
    the ops ``keras_structured::<name>`` (and ``<name>_forward``, differentiable, with a
    ``vjp``) have fixed names and schemas, ``(Tensor[] arrays, int key) -> Tensor[]`` (the
    forward op returns the results and the residuals as two lists), the key naming the
    static arguments of a call.

    Args:
        name, function, specs, vjp, differentiable, vmap_method, forward, residual_specs,
            differentiable_results: see :class:`HostFunction`.

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
    host = HostFunction(
        name,
        function,
        specs,
        vjp,
        tuple(differentiable),
        vmap_method,
        forward,
        residual_specs,
        None if differentiable_results is None else tuple(differentiable_results),
    )
    backend, module = _ADAPTER
    if backend == "torch":
        module.register_function(host)
    return host


def _call(host: HostFunction, arrays: tuple, static: dict, differentiable: bool) -> list:
    _, module = adapter()
    present = tuple(array is not None for array in arrays)
    given = [keras.ops.convert_to_tensor(array) for array in arrays if array is not None]
    return module.call_function(host, given, present, static, differentiable)


def call(host: HostFunction, *arrays, **static) -> list:
    """``host.function(*arrays, **static)`` on tensors of the backend of Keras, by one host call.

    The arrays cross to the host as numpy arrays (None stays None), the results come back as
    tensors of the shapes and dtypes of ``host.specs``: under ``jax.jit`` and
    ``torch.compile`` too, and inside Keras's symbolic calls (the fake kernel of PyTorch).
    With a VJP the results at ``host.differentiable_results`` are differentiable with
    respect to the arguments at ``host.differentiable`` (again if the VJP is); without one
    they carry no gradient. Differentiated, the call runs ``host.forward`` and keeps its
    residuals for the backward call (on TensorFlow, which cannot tell, always). TensorFlow
    cannot compile the call with XLA.

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
    return _call(host, arrays, static, differentiable=True)


def values(host: HostFunction, *arrays, **static) -> list:
    """:func:`call` without gradient: ``host.function`` of the arrays, whose gradients are
    stopped, and nothing kept for a backward call (the residuals of ``host.forward``).

    For the values of a differentiable host function where no gradient is wanted (a loss
    whose gradient is the solution itself); arguments and results as for :func:`call`.

    Example:
        >>> import numpy as np
        >>> square = host_function(
        ...     "doc_squared", lambda x: (x**2,), lambda x: [(x.shape, x.dtype)],
        ...     vjp=lambda x, upstream: (2 * x * upstream,), differentiable=(0,),
        ... )
        >>> keras.ops.convert_to_numpy(values(square, np.array([3.0]))[0]).tolist()
        [9.0]
    """
    return _call(host, arrays, static, differentiable=False)
