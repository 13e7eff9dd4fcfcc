"""The JAX adapter: ``jax.pure_callback`` inside ``jax.custom_vjp``.

Traced by ``jax.jit`` (the Keras JAX trainer jits its steps), the callbacks become host
calls of the compiled step. The forward rule returns ``(u, v)``, the info and per-example
handles to the solutions kept on the host; the backward rule passes them, with the scores,
to a second callback. Without differentiation, JAX runs the primal function, whose callback
keeps nothing. Every callback uses ``vmap_method="broadcast_all"``: a vmapped call is one
host call, the mapped dimensions folded into the batch (as for SparseMAP,
:mod:`keras_structured.ops.host_call._jax`).
"""

from __future__ import annotations

import functools

import jax

from keras_structured.ops.lp_host_call._host import LPHost

VMAP_METHOD = "broadcast_all"


def _specs(specs) -> tuple:
    return tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in specs)


def _callback(function, specs, *arrays):
    return jax.pure_callback(function, _specs(specs), *arrays, vmap_method=VMAP_METHOD)


def solve(host: LPHost, eta_u, eta_v, differentiable: bool) -> list:
    """``[u, v, converged, iterations, map_calls]``; ``(u, v)`` differentiable when asked."""
    if not differentiable:
        eta_u, eta_v = jax.lax.stop_gradient(eta_u), jax.lax.stop_gradient(eta_v)
        return list(_values(host, eta_u, eta_v))
    return list(_lp_sparsemap(host, eta_u, eta_v))


def gold(host: LPHost, gold_u):
    """The flat additional parts of the gold variables (no gradient)."""
    gold_u = jax.lax.stop_gradient(gold_u)
    return _callback(host.gold, [host.gold_spec(gold_u)], gold_u)[0]


def _values(host: LPHost, eta_u, eta_v):
    return _callback(host.values, host.result_specs(eta_u, eta_v), eta_u, eta_v)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _lp_sparsemap(host: LPHost, eta_u, eta_v):
    return _values(host, eta_u, eta_v)


def _forward(host: LPHost, eta_u, eta_v):
    specs = host.result_specs(eta_u, eta_v)
    u, v, handles, *info = _callback(
        host.forward, [*specs[:2], host.handle_spec(eta_u), *specs[2:]], eta_u, eta_v
    )
    return (u, v, *info), (handles, eta_u, eta_v)


def _backward(host: LPHost, residuals, cotangents):
    handles, eta_u, eta_v = residuals
    specs = host.result_specs(eta_u, eta_v)[:2]
    return tuple(_callback(host.backward, specs, handles, eta_u, eta_v, *cotangents[:2]))


_lp_sparsemap.defvjp(_forward, _backward)
