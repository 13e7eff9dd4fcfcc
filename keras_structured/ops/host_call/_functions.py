"""The numpy side of the generic host call: :class:`HostFunction` and its bound calls.

A :class:`HostFunction` is a numpy function of arrays whose results have shapes and dtypes
known from the arguments' (its ``specs`` function), optionally with a vector-Jacobian
product, which may receive residuals: arrays that a ``forward`` function returns after the
results and that stay out of the model (handles to what the host keeps, for instance). A
call binds it to the call's static keyword arguments and to which array arguments are given
(None for an absent optional one): a :class:`BoundCall`, one per combination for the
process's life (:func:`bind`), known by an integer key, since a PyTorch op takes no Python
objects, and reused by JAX for the callbacks it compiled. The adapters (``_tf``, ``_jax``,
``_torch``) pass the given arrays only; the bound call puts the Nones back.
"""

from __future__ import annotations

import dataclasses
import functools
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

    Differentiated, a call runs ``forward`` (``function`` when there is none), keeps its
    residuals, and its backward pass calls ``vjp`` with the arguments, the residuals and the
    cotangents of the differentiable results: for results ``r = f(x)``, the cotangents
    ``(dL/dr) (dr/dx)`` of the arguments at ``differentiable``.

    Args:
        name: the name of its host call: the ``tf.numpy_function``'s on TensorFlow, the
            custom ops ``keras_structured::<name>`` (and ``<name>_forward`` with a ``vjp``)
            on PyTorch. Unique in the process.
        function: ``function(*arrays, **static) -> tuple of arrays``: numpy arrays in (None
            for an absent optional argument), numpy arrays out, shaped and typed as ``specs``
            says.
        specs: ``specs(*arrays, **static) -> [(shape, dtype), ...]``, one per result, from
            anything with ``shape`` and ``dtype`` (tensors of the backend, fake and symbolic
            ones, numpy arrays). Under TensorFlow's graph mode a shape can hold None.
        vjp: optional ``vjp(*arrays, *residuals, *cotangents, **static) -> tuple``: the
            cotangents of the arguments at ``differentiable``, in their shape and dtype,
            given one cotangent per result at ``differentiable_results`` (zeros where the
            model used none). Without it the results carry no gradient. A plain function is
            not differentiated again (it becomes the host function ``<name>_vjp``); a
            :class:`HostFunction` (whose results are the cotangents of the arguments given,
            of those at ``differentiable``) is differentiated as it declares.
        differentiable: the positions of the arguments that ``vjp`` differentiates.
        vmap_method: how ``jax.vmap`` calls ``function``, one of :data:`VMAP_METHODS`:
            ``"sequential"`` once per mapped element, ``"broadcast_all"`` once, with the
            mapped dimensions leading every argument (``function`` must fold them).
        forward: optional ``forward(*arrays, **static) -> tuple``: the results of
            ``function``, then the residuals for ``vjp``, shaped and typed as
            ``residual_specs`` says. Residuals stay on the backend's tape, out of the model.
        residual_specs: ``residual_specs(*arrays, **static) -> [(shape, dtype), ...]``, one
            per residual; given with ``forward``, and only then.
        differentiable_results: the positions of the results that get cotangents (floating
            ones); None for all. The others (integer info, flags) carry no gradient.

    Example:
        >>> square = HostFunction(
        ...     "doc_square", lambda x: (x**2,), lambda x: [(x.shape, x.dtype)],
        ...     vjp=lambda x, upstream: (2 * x * upstream,), differentiable=(0,),
        ... )
        >>> square.vjp.name, bind(square.vjp, (True, True), {}).function(np.ones(2), np.ones(2))
        ('doc_square_vjp', (array([2., 2.]),))
    """

    name: str
    function: Callable
    specs: Callable
    vjp: HostFunction | Callable | None = None
    differentiable: tuple[int, ...] = ()
    vmap_method: str = "sequential"
    forward: Callable | None = None
    residual_specs: Callable | None = None
    differentiable_results: tuple[int, ...] | None = None

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
        if (self.forward is None) != (self.residual_specs is None):
            raise ValueError(
                "A forward function comes with the specs of its residuals, and only it does. "
                f"Received: forward={self.forward!r}, residual_specs={self.residual_specs!r}"
            )
        if self.vjp is None and (self.forward is not None or self.differentiable_results is not None):
            raise ValueError(
                "A forward function and differentiable results serve a vjp. "
                f"Received: forward={self.forward!r}, differentiable_results={self.differentiable_results!r}"
            )
        if self.vjp is not None and not isinstance(self.vjp, HostFunction):
            object.__setattr__(self, "vjp", _vjp_function(self))


def _vjp_function(host: HostFunction) -> HostFunction:
    """The plain ``vjp`` of ``host`` as a host function without gradient: its results are
    the cotangents of the arguments given, of those at ``differentiable``."""
    positions, vjp = host.differentiable, host.vjp

    def function(*arguments, **static):
        cotangents = vjp(*arguments, **static)
        return tuple(c for i, c in zip(positions, cotangents, strict=True) if arguments[i] is not None)

    def specs(*arguments, **static):
        return [(arguments[i].shape, arguments[i].dtype) for i in positions if arguments[i] is not None]

    return HostFunction(f"{host.name}_vjp", function, specs, vmap_method=host.vmap_method)


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

    def forward(self, *arrays) -> tuple:
        """The results, then the residuals (none without a ``forward`` function)."""
        forward = self.host.function if self.host.forward is None else self.host.forward
        return tuple(forward(*self.arguments(arrays), **self.static))

    def specs(self, *arrays) -> list[tuple[tuple, np.dtype]]:
        """``(shape, numpy dtype)`` of the results for arguments shaped like ``arrays``."""
        return _numpy_specs(self.host.specs(*self.arguments(arrays), **self.static))

    def residual_specs(self, *arrays) -> list[tuple[tuple, np.dtype]]:
        """``(shape, numpy dtype)`` of the residuals of :meth:`forward`."""
        if self.host.residual_specs is None:
            return []
        return _numpy_specs(self.host.residual_specs(*self.arguments(arrays), **self.static))

    @property
    def gradient_positions(self) -> tuple[int, ...]:
        """The positions, among the given arrays, of those that ``vjp`` differentiates."""
        given = [i for i, present in enumerate(self.present) if present]
        return tuple(given.index(i) for i in self.host.differentiable if self.present[i])

    def cotangent_positions(self, result_count: int) -> tuple[int, ...]:
        """The positions of the results that get cotangents, among ``result_count``."""
        positions = self.host.differentiable_results
        return tuple(range(result_count)) if positions is None else positions

    def vjp_call(self, extra: int) -> BoundCall:
        """The bound call of the VJP, whose arguments are this call's, then ``extra`` arrays
        (the residuals and the cotangents)."""
        return _vjp_call(self, extra)


@functools.cache
def _vjp_call(bound: BoundCall, extra: int) -> BoundCall:
    return bind(bound.host.vjp, bound.present + (True,) * extra, bound.static)


def _numpy_specs(specs) -> list[tuple[tuple, np.dtype]]:
    return [(tuple(shape), numpy_dtype(dtype)) for shape, dtype in specs]


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
