"""The JAX adapter: ``jax.pure_callback`` inside ``jax.custom_vjp``.

A :class:`~keras_structured.ops.host_call.HostFunction` is one callback
(:func:`call_function`) with the ``vmap_method`` it declares. Traced by ``jax.jit`` (the
Keras JAX trainer jits its steps), the callbacks become host calls of the compiled step; an
error the host function raises there reaches the caller as JAX's ``JaxRuntimeError``, its
message after ``"INTERNAL: CpuCallback error"``. Called on concrete arrays (eagerly, and in
``jax.grad`` or ``jax.vjp`` outside ``jax.jit``, whose rules get concrete values), the host
function runs at once, without a callback, and its errors reach the caller as raised.
With a VJP, the call is a ``jax.custom_vjp``: its forward rule calls ``forward`` (the results,
then residuals such as handles to what the host keeps), its backward rule the VJP, a second
callback, with the arguments, the residuals and the cotangents of the differentiable results
(itself a ``custom_vjp`` when the VJP declares a VJP: gradients of gradients). Without
differentiation, JAX runs the primal function, whose callback is ``function`` and keeps
nothing. A call without gradient (no VJP, or :func:`keras_structured.ops.host_call.values`)
stops its arguments' gradients; a VJP without one of its own is called as it is, so that
differentiating it again raises JAX's error rather than giving zeros.

``vmap_method="broadcast_all"`` (SparseMAP's, LP-SparseMAP's and the tree CRF's host
functions) makes a vmapped call one host call, with the mapped dimensions leading every
argument (broadcast where an argument is not mapped), which the host functions fold into
the batch: the engine solves all problems in one batched call, as it does an ordinary
batch. Because the scores are broadcast too, the backward callback of ``jax.jacrev`` (a vmap
over cotangents) also makes one call, and can solve again from them should the store have
dropped what the forward call kept. ``"sequential"`` makes one host call per mapped element;
``"expand_dims"`` (not offered) would leave unmapped arguments with size-1 dimensions for the
host to broadcast. Results take the dtypes JAX holds (int32 for int64 without 64-bit types).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from keras_structured.ops.host_call._functions import BoundCall, HostFunction, bind


def traced(*arrays) -> bool:
    """Whether an argument is traced (by ``jax.jit``, ``jax.grad``, ``jax.vmap``...)."""
    return any(isinstance(array, jax.core.Tracer) for array in arrays)


def constant(function, *args):
    """``function(*args)`` (PyTorch's adapter makes it a constant of a compiled graph)."""
    return function(*args)


def host_arrays(function, *arrays) -> list:
    """``function`` of concrete ``arrays`` (None stays None) called now, on the host, its
    results as JAX arrays: shapes that depend on the data, as TensorFlow's."""
    arrays = (None if array is None else np.asarray(array) for array in arrays)
    return [jnp.asarray(result) for result in function(*arrays)]


def _canonical(specs) -> tuple:
    """``jax.ShapeDtypeStruct``\\ s of ``(shape, dtype)`` specs, in the dtypes JAX holds."""
    return tuple(jax.ShapeDtypeStruct(shape, jax.dtypes.canonicalize_dtype(dtype)) for shape, dtype in specs)


@functools.cache
def _host_function(bound: BoundCall, forward: bool):
    """The callback of ``bound``'s function (or forward function): numpy arrays in, results
    in the dtypes JAX holds out. One object per bound call, so that eager calls reuse what
    JAX compiled."""

    def host(*arrays):
        arrays = [np.asarray(array) for array in arrays]
        results = bound.forward(*arrays) if forward else bound.function(*arrays)
        specs = bound.specs(*arrays) + (bound.residual_specs(*arrays) if forward else [])
        return tuple(
            np.asarray(result, jax.dtypes.canonicalize_dtype(dtype))
            for result, (_, dtype) in zip(results, specs, strict=True)
        )

    return host


def _callback(bound: BoundCall, arrays, forward: bool = False) -> tuple:
    """The results of ``bound``'s function (or forward function): called now on concrete
    arrays, so that its errors reach the caller as raised (a ``jax.pure_callback`` run eagerly
    raises ``JaxRuntimeError`` instead, the error's traceback in its message), and by a
    callback of the computation being traced otherwise."""
    if not traced(*arrays):
        return tuple(jnp.asarray(result) for result in _host_function(bound, forward)(*arrays))
    specs = bound.specs(*arrays) + (bound.residual_specs(*arrays) if forward else [])
    return jax.pure_callback(
        _host_function(bound, forward), _canonical(specs), *arrays, vmap_method=bound.host.vmap_method
    )


def call_function(
    host: HostFunction, arrays: list, present: tuple, static: dict, differentiable: bool
) -> list:
    """The results of ``host`` of the given ``arrays`` (see :func:`keras_structured.ops.host_call.call`);
    without gradient unless ``differentiable`` and ``host`` has a VJP."""
    bound = bind(host, present, static)
    if differentiable and host.vjp is not None:
        return list(_differentiable(bound, *arrays))
    return list(_callback(bound, [jax.lax.stop_gradient(array) for array in arrays]))


def _call(bound: BoundCall, arrays) -> tuple:
    """``bound`` of ``arrays``, differentiable when its host function has a VJP."""
    if bound.host.vjp is None:
        return _callback(bound, arrays)
    return _differentiable(bound, *arrays)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _differentiable(bound: BoundCall, *arrays):
    return _callback(bound, arrays)


def _differentiable_forward(bound: BoundCall, *arrays):
    outputs = _callback(bound, arrays, forward=True)
    count = len(bound.specs(*arrays))
    return tuple(outputs[:count]), (arrays, tuple(outputs[count:]))


def _differentiable_backward(bound: BoundCall, saved, cotangents):
    arrays, residuals = saved
    chosen = [cotangents[i] for i in bound.cotangent_positions(len(cotangents))]
    vjp = bound.vjp_call(len(residuals) + len(chosen))
    gradients = _call(vjp, [*arrays, *residuals, *chosen])
    by_position = dict(zip(bound.gradient_positions, gradients, strict=True))
    return tuple(by_position.get(i) for i in range(len(arrays)))


_differentiable.defvjp(_differentiable_forward, _differentiable_backward)
