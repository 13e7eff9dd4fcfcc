"""The JAX adapter: ``jax.pure_callback`` inside ``jax.custom_vjp``.

Traced by ``jax.jit`` (the Keras JAX trainer jits its steps), the callbacks become host
calls of the compiled step. The forward rule returns ``(u, v)`` and per-example handles to
the active sets kept on the host; the backward rule passes them, with the scores, to a
second callback that applies the Jacobian. That product is a ``custom_vjp`` too, its own
backward the same product (the Jacobian is symmetric), so gradients of gradients work.
Without differentiation, JAX runs the primal function, whose callback keeps nothing.

The solver's info comes out of the same callbacks, after ``(u, v)``, and gets no gradient.
Its size depends on the data, so traced calls pad it to the static bound of
:func:`._host.max_support`; an eager call (concrete arrays, nothing traced) calls the host
directly and returns the batch's largest support, as TensorFlow does. MAP decoding
(:func:`decode`) is one callback on scores whose gradient is stopped.

``jax.vmap``: every callback uses ``vmap_method="broadcast_all"`` (:data:`VMAP_METHOD`). A
vmapped call then makes one host call, with the mapped dimensions leading every argument
(broadcast where an argument is not mapped), which the host functions fold into the batch:
the engine solves all problems in one batched call, as it does an ordinary batch.
``"sequential"`` would make one host call per mapped element, and ``"expand_dims"`` would
leave unmapped arguments with size-1 dimensions for the host to broadcast. Because the
scores are broadcast too, the backward callback of ``jax.jacrev`` (a vmap over cotangents)
also makes one call, and can solve again from them should the store have dropped the support.

A :class:`~keras_structured.ops.host_call.HostFunction` is one callback
(:func:`call_function`) with the ``vmap_method`` it declares, inside a ``jax.custom_vjp``
whose backward rule is a second callback when it has a VJP; without one, its arguments'
gradients are stopped. Its results take the dtypes JAX holds (int32 for int64 without
64-bit types).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from keras_structured.engine import SolverOptions, Structure
from keras_structured.ops.host_call._functions import BoundCall, HostFunction, bind
from keras_structured.ops.host_call._host import HostSolve, host_solve

#: How ``jax.vmap`` reaches the host callbacks (see the module docstring).
VMAP_METHOD = "broadcast_all"


def _code_dtype(structure: Structure) -> np.dtype:
    """The structure's code dtype as JAX holds it (int32 for int64 without 64-bit types)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(structure.code_dtype))


def _traced(*arrays) -> bool:
    return any(isinstance(array, jax.core.Tracer) for array in arrays)


def solve(
    structure: Structure,
    options: SolverOptions,
    ranks: tuple,
    scores_u,
    scores_v,
    lengths,
    jacobian: bool,
    info: bool = False,
):
    """``[u, v]`` for the scores, differentiable when ``jacobian``; then the five info arrays
    when ``info`` (see the module docstring for their size)."""
    if info and not _traced(scores_u, scores_v, lengths):
        host = host_solve(structure, options, ranks, info="batch", code_dtype=_code_dtype(structure))
        arrays = (None if array is None else np.asarray(array) for array in (scores_u, scores_v, lengths))
        return [jnp.asarray(array) for array in host.values(*arrays)]
    code_dtype = _code_dtype(structure) if info else None
    host = host_solve(structure, options, ranks, info="bound" if info else None, code_dtype=code_dtype)
    if not jacobian:
        scores_u, scores_v = jax.lax.stop_gradient(scores_u), jax.lax.stop_gradient(scores_v)
        return list(_values(host, scores_u, scores_v, lengths))
    return list(_sparsemap(host, scores_u, scores_v, lengths))


def decode(structure: Structure, ranks: tuple, scores_u, scores_v, lengths):
    """``[codes, m, n]`` of the MAP structures, by one callback; no gradient."""
    host = host_solve(structure, SolverOptions(), ranks, code_dtype=_code_dtype(structure))
    scores_u, scores_v = jax.lax.stop_gradient(scores_u), jax.lax.stop_gradient(scores_v)
    results = _specs(host.decode_specs(scores_u, scores_v))
    return list(_callback(host.decode, results, scores_u, scores_v, lengths=lengths))


def _results_like(*arrays):
    return tuple(jax.ShapeDtypeStruct(array.shape, array.dtype) for array in arrays)


def _specs(specs) -> tuple:
    return tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in specs)


def _callback(function, results, *arrays, lengths):
    arrays = arrays if lengths is None else (*arrays, lengths)
    return jax.pure_callback(function, results, *arrays, vmap_method=VMAP_METHOD)


def _values(host: HostSolve, scores_u, scores_v, lengths):
    results = _results_like(scores_u, scores_v) + _specs(host.info_specs(scores_u, scores_v))
    return _callback(host.values, results, scores_u, scores_v, lengths=lengths)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _sparsemap(host: HostSolve, scores_u, scores_v, lengths):
    return _values(host, scores_u, scores_v, lengths)


def _sparsemap_forward(host: HostSolve, scores_u, scores_v, lengths):
    handles = jax.ShapeDtypeStruct(host.leading_shape(scores_u) + (2,), jnp.int32)
    results = (*_results_like(scores_u, scores_v), handles, *_specs(host.info_specs(scores_u, scores_v)))
    u, v, handles, *info = _callback(host.forward, results, scores_u, scores_v, lengths=lengths)
    return (u, v, *info), (handles, scores_u, scores_v, lengths)


def _sparsemap_backward(host: HostSolve, residuals, cotangents):
    handles, scores_u, scores_v, lengths = residuals
    j_u, j_v = _jacobian_product(host, handles, scores_u, scores_v, lengths, *cotangents[:2])
    return j_u, j_v, None


_sparsemap.defvjp(_sparsemap_forward, _sparsemap_backward)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _jacobian_product(host: HostSolve, handles, scores_u, scores_v, lengths, x_u, x_v):
    results = _results_like(x_u, x_v)
    return _callback(host.jacobian, results, handles, scores_u, scores_v, x_u, x_v, lengths=lengths)


def _jacobian_product_forward(host: HostSolve, handles, scores_u, scores_v, lengths, x_u, x_v):
    product = _jacobian_product(host, handles, scores_u, scores_v, lengths, x_u, x_v)
    return product, (handles, scores_u, scores_v, lengths)


def _jacobian_product_backward(host: HostSolve, residuals, cotangents):
    # The product is linear in x with a symmetric matrix, locally constant in the scores.
    handles, scores_u, scores_v, lengths = residuals
    product = _jacobian_product(host, handles, scores_u, scores_v, lengths, *cotangents)
    return (None, None, None, None, *product)


_jacobian_product.defvjp(_jacobian_product_forward, _jacobian_product_backward)


def _canonical(specs) -> tuple:
    """``jax.ShapeDtypeStruct``\\ s of ``(shape, dtype)`` specs, in the dtypes JAX holds."""
    return tuple(jax.ShapeDtypeStruct(shape, jax.dtypes.canonicalize_dtype(dtype)) for shape, dtype in specs)


@functools.cache
def _host_function(bound: BoundCall, vjp: bool = False):
    """The callback of ``bound``'s function (or VJP): numpy arrays in, results in the dtypes
    JAX holds out. One object per bound call, so that eager calls reuse what JAX compiled."""

    def host(*arrays):
        arrays = [np.asarray(array) for array in arrays]
        if vjp:
            return bound.vjp(*arrays)
        results = bound.function(*arrays)
        specs = bound.specs(*arrays)
        return tuple(
            np.asarray(result, jax.dtypes.canonicalize_dtype(dtype))
            for result, (_, dtype) in zip(results, specs, strict=True)
        )

    return host


def _function_callback(bound: BoundCall, arrays):
    results = _canonical(bound.specs(*arrays))
    return jax.pure_callback(_host_function(bound), results, *arrays, vmap_method=bound.host.vmap_method)


def call_function(host: HostFunction, arrays: list, present: tuple, static: dict) -> list:
    """The results of ``host`` of the given ``arrays`` (see :func:`keras_structured.ops.host_call.call`)."""
    bound = bind(host, present, static)
    if bound.host.vjp is None:
        return list(_function_callback(bound, [jax.lax.stop_gradient(array) for array in arrays]))
    return list(_differentiable(bound, *arrays))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _differentiable(bound: BoundCall, *arrays):
    return _function_callback(bound, arrays)


def _differentiable_forward(bound: BoundCall, *arrays):
    return _differentiable(bound, *arrays), arrays


def _differentiable_backward(bound: BoundCall, arrays, cotangents):
    positions = bound.gradient_positions
    results = _results_like(*(arrays[i] for i in positions))
    vjp = _host_function(bound, vjp=True)
    gradients = jax.pure_callback(vjp, results, *arrays, *cotangents, vmap_method=bound.host.vmap_method)
    by_position = dict(zip(positions, gradients, strict=True))
    return tuple(by_position.get(i) for i in range(len(arrays)))


_differentiable.defvjp(_differentiable_forward, _differentiable_backward)
