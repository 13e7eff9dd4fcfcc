"""The PyTorch adapter: ``torch.library.custom_op``\\ s, with autograd and fake kernels.

A :class:`~keras_structured.ops.host_call.HostFunction` named ``name`` is the op
``keras_structured::<name>``, which calls its ``function``, and with a VJP also the op
``keras_structured::<name>_forward``, which calls its ``forward`` function and returns the
results and the residuals as two lists; the autograd formula of the latter calls the VJP's
op (its ``_forward`` op when the VJP declares a VJP of its own: double backward works) with
the arguments, the residuals and the cotangents of the differentiable results. A call takes
the forward op when a gradient may be asked for (grad mode on, an argument that requires
one), the plain op otherwise (``torch.no_grad()``, as in Keras's ``predict`` and
``evaluate``), which keeps nothing.

The ops are registered once, when the function is declared (:func:`register_function`), with
one schema for all, ``(Tensor[] arrays, int key) -> Tensor[]``: the given arrays, and the key
of the :class:`~keras_structured.ops.host_call._functions.BoundCall` that holds the static
arguments and puts back the absent ones (an op's list of tensors cannot hold None and keep
its autograd formula); ``torch.compile`` computes the key once, when it traces
(:func:`constant`). Their fake kernels give the result shapes from the function's specs
without a host call, which is all ``torch.compile`` (and Keras's symbolic calls on the
``meta`` device) need: the compiled graph calls the ops as opaque host functions, without a
graph break (``fullgraph=True`` works). Keras's symbolic calls off ``meta`` (its retry on ones
where a model fails there) get such tensors too, without a host call. The ops copy tensors of
any device to the host and their results back, to the device of the first array.
"""

from __future__ import annotations

import numpy as np
import torch
from keras.src.backend import in_symbolic_scope

from keras_structured.ops.host_call._functions import BoundCall, HostFunction, bind, bound_by_key


def traced(*arrays) -> bool:
    """Whether ``torch.compile`` is tracing the call."""
    return torch.compiler.is_compiling()


@torch.compiler.assume_constant_result
def constant(function, *args):
    """``function(*args)``, which ``torch.compile`` runs when it traces, its result a
    constant of the compiled graph (the lookup stays out of it). Arguments made inside the
    compiled function reach it as Dynamo rebuilds them: pass plain values."""
    return function(*args)


def _numpy(tensor):
    return tensor.detach().cpu().numpy()


def _tensor(array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(like.device)


_TORCH_DTYPES = {
    np.dtype(name): getattr(torch, name)
    for name in ("float16", "float32", "float64", "int32", "int64", "bool")
}


def _empty(specs, like: torch.Tensor) -> list[torch.Tensor]:
    """Fake tensors of ``(shape, numpy dtype)`` specs."""
    return [like.new_empty(shape, dtype=_TORCH_DTYPES[np.dtype(dtype)]) for shape, dtype in specs]


#: The schema of every host function's op, and of its forward op.
_SCHEMA = "(Tensor[] arrays, int key) -> Tensor[]"
_FORWARD_SCHEMA = "(Tensor[] arrays, int key) -> (Tensor[], Tensor[])"

#: name -> (op, forward op or None) of the host functions registered.
_OPS: dict[str, tuple] = {}


def register_function(host: HostFunction) -> None:
    """Registers the ops of ``host`` (and of its VJP), once."""
    if host.name in _OPS:
        return

    @torch.library.custom_op(f"keras_structured::{host.name}", mutates_args=(), schema=_SCHEMA)
    def op(arrays, key):
        results = bound_by_key(key).function(*(_numpy(array) for array in arrays))
        return [_tensor(result, arrays[0]) for result in results]

    @op.register_fake
    def _(arrays, key):
        return _empty(bound_by_key(key).specs(*arrays), arrays[0])

    forward = None
    if host.vjp is not None:
        register_function(host.vjp)
        forward = _forward_op(host.name)
    _OPS[host.name] = (
        getattr(torch.ops.keras_structured, host.name),
        None if forward is None else getattr(torch.ops.keras_structured, f"{host.name}_forward"),
    )


def _forward_op(name: str):
    """The op ``keras_structured::<name>_forward``, with its fake kernel and autograd formula."""

    @torch.library.custom_op(f"keras_structured::{name}_forward", mutates_args=(), schema=_FORWARD_SCHEMA)
    def forward(arrays, key):
        bound = bound_by_key(key)
        outputs = [_tensor(output, arrays[0]) for output in bound.forward(*(_numpy(a) for a in arrays))]
        count = len(bound.specs(*arrays))
        return outputs[:count], outputs[count:]

    @forward.register_fake
    def _(arrays, key):
        bound = bound_by_key(key)
        return _empty(bound.specs(*arrays), arrays[0]), _empty(bound.residual_specs(*arrays), arrays[0])

    def setup_context(ctx, inputs, output):
        arrays, key = inputs
        results, residuals = output
        ctx.key, ctx.counts = key, (len(arrays), len(residuals))
        ctx.result_specs = [(result.shape, result.dtype) for result in results]
        ctx.save_for_backward(*arrays, *residuals)

    def backward(ctx, gradients, _):  # the residuals get no gradient
        bound = bound_by_key(ctx.key)
        saved = ctx.saved_tensors
        arrays, residuals = saved[: ctx.counts[0]], saved[ctx.counts[0] :]
        cotangents = []
        for i in bound.cotangent_positions(len(gradients)):
            shape, dtype = ctx.result_specs[i]
            missing = gradients[i] is None  # a result the model did not use
            cotangents.append(arrays[0].new_zeros(shape, dtype=dtype) if missing else gradients[i])
        vjp = bound.vjp_call(len(residuals) + len(cotangents))
        by_position = dict(
            zip(bound.gradient_positions, _call(vjp, [*arrays, *residuals, *cotangents]), strict=True)
        )
        return [by_position.get(i) for i in range(len(arrays))], None

    forward.register_autograd(backward, setup_context=setup_context)
    return forward


def _run(name: str, arrays: list, key: int) -> list:
    """The results of the host function ``name``: by its forward op when it has a VJP and
    a gradient may be asked for, by its plain op otherwise."""
    op, forward = _OPS[name]
    if forward is not None and torch.is_grad_enabled() and any(array.requires_grad for array in arrays):
        return list(forward(arrays, key)[0])
    return list(op(arrays, key))


def _call(bound: BoundCall, arrays: list) -> list:
    """``bound`` of ``arrays``, differentiable when its host function has a VJP."""
    return _run(bound.host.name, arrays, bound.key)


@torch.compiler.assume_constant_result
def _bound_key(host: HostFunction, present: tuple, names: tuple, *values) -> int:
    """The key of the bound call, a constant of the graph that ``torch.compile`` traces.
    (The static values come each as an argument: Dynamo cannot pass a structure inside a tuple.)"""
    return bind(host, present, dict(zip(names, values, strict=True))).key


def call_function(
    host: HostFunction, arrays: list, present: tuple, static: dict, differentiable: bool
) -> list:
    """The results of ``host`` of the given ``arrays`` (see :func:`keras_structured.ops.host_call.call`);
    without gradient unless ``differentiable`` and ``host`` has a VJP."""
    register_function(host)  # registered at import, unless the backend was set since
    key = _bound_key(host, present, tuple(static), *static.values())
    if in_symbolic_scope():
        # Keras's shape inference off the ``meta`` device (its retry where a model fails there)
        # calls on placeholder values, ones, which a host function may reject (labels): shapes,
        # as the fake kernel gives them, and no host call.
        return _empty(bound_by_key(key).specs(*arrays), arrays[0])
    if not differentiable or host.vjp is None:
        arrays = [array.detach() for array in arrays]
    return _run(host.name, arrays, key)
