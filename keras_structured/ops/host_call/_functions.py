"""The numpy side of the generic host call: :class:`HostFunction` and its bound calls.

A :class:`HostFunction` is a numpy function of arrays whose results have shapes and dtypes
known from the arguments' (its ``specs`` function), optionally with a numpy vector-Jacobian
product. A call binds it to the call's static keyword arguments and to which array
arguments are given (None for an absent optional one): a :class:`BoundCall`, one per
combination for the process's life (:func:`bind`), known by an integer key, since a
PyTorch op takes no Python objects, and reused by JAX for the callbacks it compiled. The
adapters (``_tf``, ``_jax``, ``_torch``) pass the given arrays only; the bound call puts
the Nones back.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

import keras
import numpy as np

from keras_structured.engine import CustomStructure, Structure

#: How ``jax.vmap`` may reach a host function (``jax.pure_callback``'s ``vmap_method``).
VMAP_METHODS = ("sequential", "broadcast_all")


@dataclasses.dataclass(frozen=True, eq=False)
class HostFunction:
    """A numpy function called from a model by one host call, on every Keras backend.

    Args:
        name: the name of its host call: the ``tf.numpy_function``'s on TensorFlow, the
            custom op ``keras_structured::<name>`` on PyTorch (``<name>_vjp`` for ``vjp``).
            Unique in the process.
        function: ``function(*arrays, **static) -> tuple of arrays``: numpy arrays in (None
            for an absent optional argument), numpy arrays out, shaped and typed as ``specs``
            says.
        specs: ``specs(*arrays, **static) -> [(shape, dtype), ...]``, one per result, from
            anything with ``shape`` and ``dtype`` (tensors of the backend, fake and symbolic
            ones, numpy arrays). Under TensorFlow's graph mode a shape can hold None.
        vjp: optional ``vjp(*arrays, *cotangents, **static) -> tuple``: the cotangents of
            the arguments listed in ``differentiable``, in their shape and dtype, given one
            cotangent per result (every result must then be floating). Without it the
            results carry no gradient. The VJP itself is not differentiated again.
        differentiable: the positions of the arguments that ``vjp`` differentiates.
        vmap_method: how ``jax.vmap`` calls ``function``, one of :data:`VMAP_METHODS`:
            ``"sequential"`` once per mapped element, ``"broadcast_all"`` once, with the
            mapped dimensions leading every argument (``function`` must fold them).
    """

    name: str
    function: Callable
    specs: Callable
    vjp: Callable | None = None
    differentiable: tuple[int, ...] = ()
    vmap_method: str = "sequential"

    def __post_init__(self):
        if self.vmap_method not in VMAP_METHODS:
            raise ValueError(
                f"vmap_method must be one of {VMAP_METHODS}. Received: vmap_method={self.vmap_method!r}"
            )
        if (self.vjp is None) != (not self.differentiable):
            raise ValueError(
                "A vjp needs the positions of the arguments it differentiates, and only a vjp does. "
                f"Received: vjp={self.vjp!r}, differentiable={self.differentiable!r}"
            )


@dataclasses.dataclass(frozen=True, eq=False)
class BoundCall:
    """A :class:`HostFunction` bound to a call's static arguments and given arguments.

    Its methods take the given arrays only (the adapters pass no None); ``key`` is its index
    in the registry of :func:`bind`.
    """

    host: HostFunction
    static: dict
    present: tuple[bool, ...]
    key: int

    def arguments(self, arrays: Sequence) -> list:
        """The arguments of the host function: ``arrays`` with None where none was given."""
        given = iter(arrays)
        return [next(given) if present else None for present in self.present]

    def function(self, *arrays) -> tuple:
        """The results of the host function of the given ``arrays``."""
        return tuple(self.host.function(*self.arguments(arrays), **self.static))

    def specs(self, *arrays) -> list[tuple[tuple, np.dtype]]:
        """``(shape, numpy dtype)`` of the results for arguments shaped like ``arrays``."""
        specs = self.host.specs(*self.arguments(arrays), **self.static)
        return [(tuple(shape), numpy_dtype(dtype)) for shape, dtype in specs]

    @property
    def gradient_positions(self) -> tuple[int, ...]:
        """The positions, among the given arrays, of those that ``vjp`` differentiates."""
        given = [i for i, present in enumerate(self.present) if present]
        return tuple(given.index(i) for i in self.host.differentiable if self.present[i])

    def vjp(self, *arrays_and_cotangents) -> tuple:
        """The cotangents of the arguments at :attr:`gradient_positions`."""
        count = sum(self.present)
        arrays, cotangents = arrays_and_cotangents[:count], arrays_and_cotangents[count:]
        results = self.host.vjp(*self.arguments(arrays), *cotangents, **self.static)
        wanted = [i for i in self.host.differentiable if self.present[i]]
        return tuple(results[self.host.differentiable.index(i)] for i in wanted)


def numpy_dtype(dtype) -> np.dtype:
    """A numpy, TensorFlow, JAX or PyTorch dtype (or its name) as a numpy dtype."""
    return np.dtype(keras.backend.standardize_dtype(dtype))


def structure_key(structure: Structure) -> tuple:
    """The library's structures are equal when their configs are (the configs serialize
    them); a custom oracle or a user's structure class is known by identity."""
    library = type(structure).__module__.startswith("keras_structured.engine.")
    if library and not isinstance(structure, CustomStructure):
        return type(structure), repr(sorted(structure.get_config().items()))
    return type(structure), id(structure)


def _static_key(value):
    if isinstance(value, Structure):
        return structure_key(value)
    try:
        hash(value)
    except TypeError:
        raise TypeError(
            f"A host function's static arguments must be hashable or structures. Received: {value!r}"
        ) from None
    return type(value), value


_BOUND: dict[tuple, BoundCall] = {}
_BOUND_BY_KEY: list[BoundCall] = []
_BOUND_LOCK = threading.Lock()


def bind(host: HostFunction, present: tuple[bool, ...], static: dict) -> BoundCall:
    """The one :class:`BoundCall` of these arguments, created on first use and kept (with
    its static arguments, so that an identity stays unique) for the process's life.

    Example:
        >>> host = HostFunction("doubled", lambda x: (2 * x,), lambda x: [(x.shape, x.dtype)])
        >>> bound = bind(host, (True,), {})
        >>> bound.function(np.ones(2)), bound is bind(host, (True,), {})
        ((array([2., 2.]),), True)
    """
    key = (id(host), tuple(present), tuple(sorted((name, _static_key(v)) for name, v in static.items())))
    with _BOUND_LOCK:
        bound = _BOUND.get(key)
        if bound is None:
            bound = BoundCall(host, dict(static), tuple(present), len(_BOUND_BY_KEY))
            _BOUND[key] = bound
            _BOUND_BY_KEY.append(bound)
    return bound


def bound_by_key(key: int) -> BoundCall:
    """The :class:`BoundCall` whose :attr:`~BoundCall.key` is ``key``."""
    return _BOUND_BY_KEY[key]
