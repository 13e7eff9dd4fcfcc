"""The PyTorch adapter: ``torch.library.custom_op``s, with autograd and fake kernels.

* ``keras_structured::sparsemap_values`` returns ``(u, v)``: the call without gradients
  (``torch.no_grad()``, as in Keras's ``predict`` and ``evaluate``, or scores that
  require none);
* ``keras_structured::sparsemap_forward`` also returns per-example handles to the active
  sets, kept on the host; its autograd formula calls
* ``keras_structured::sparsemap_jacobian``, the Jacobian product, whose own autograd
  formula is the same product (the Jacobian is symmetric): double backward works;
* ``keras_structured::sparsemap_values_info`` and ``keras_structured::sparsemap_forward_info``
  are the first two with the solver's info after their results (no gradient);
* ``keras_structured::map_decode`` is MAP decoding (no gradient).

The ops name their :class:`~keras_structured.ops.host_call._host.HostSolve` by an integer,
since an op takes no Python objects; ``torch.compile`` looks it up once, when it traces.
Their fake kernels give the result shapes without running the engine, which is all
``torch.compile`` (and Keras's symbolic calls on the ``meta`` device) need: the compiled
graph calls the ops as opaque host functions, without a graph break
(``fullgraph=True`` works). The ops copy tensors of any device to the host and their
results back.

The info's number of structures depends on the data: eagerly it is the batch's largest
support, as on TensorFlow; under ``torch.compile`` the call pads it to the static bound of
:func:`._host.max_support`, which is also the size that the fake kernels give.

A :class:`~keras_structured.ops.host_call.HostFunction` named ``name`` is the op
``keras_structured::<name>`` (and ``keras_structured::<name>_vjp``, its autograd formula,
when it has a VJP), registered once (:func:`register_function`) with one schema for all,
``(Tensor[] arrays, int key) -> Tensor[]``: the given arrays, and the key of the
:class:`~keras_structured.ops.host_call._functions.BoundCall` that holds the static
arguments and puts back the absent ones (an op's list of tensors cannot hold None and
keep its autograd formula).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from keras_structured.engine import SolverOptions, Structure
from keras_structured.ops.host_call._functions import HostFunction, bind, bound_by_key
from keras_structured.ops.host_call._host import host_by_key, host_solve


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
    info = ("bound" if torch.compiler.is_compiling() else "batch") if info else None
    host = _host_key(structure, ranks, info, *_option_values(options))
    ops = torch.ops.keras_structured
    needs_grad = scores_u.requires_grad or scores_v.requires_grad
    if jacobian and needs_grad and torch.is_grad_enabled():
        forward = ops.sparsemap_forward if info is None else ops.sparsemap_forward_info
        u, v, _, *info_arrays = forward(scores_u, scores_v, lengths, host)
        return [u, v, *info_arrays]
    scores_u, scores_v = scores_u.detach(), scores_v.detach()
    values = ops.sparsemap_values if info is None else ops.sparsemap_values_info
    return list(values(scores_u, scores_v, lengths, host))


def decode(structure: Structure, ranks: tuple, scores_u, scores_v, lengths):
    """``[codes, m, n]`` of the MAP structures, by one op; no gradient."""
    host = _host_key(structure, ranks, None, *_DEFAULT_OPTION_VALUES)
    return list(torch.ops.keras_structured.map_decode(scores_u.detach(), scores_v.detach(), lengths, host))


#: The fields of :class:`~keras_structured.engine.SolverOptions`, in order.
_OPTION_FIELDS = tuple(field.name for field in dataclasses.fields(SolverOptions))


def _option_values(options: SolverOptions) -> tuple:
    return tuple(getattr(options, name) for name in _OPTION_FIELDS)


_DEFAULT_OPTION_VALUES = _option_values(SolverOptions())  # MAP decoding solves nothing


@torch.compiler.assume_constant_result
def _host_key(structure: Structure, ranks: tuple, info: str | None, *option_values) -> int:
    """The key of the call site's host functions. ``torch.compile`` runs it when it traces,
    so that the compiled graph holds the key as a constant and the lookup stays out of it.

    The options come as plain values: options made inside the compiled function (by
    :func:`~keras_structured.engine.options.resolve_options`, from ``max_iter=...``) would
    reach it as Dynamo rebuilds them, with their defaults. (A structure made there meets the
    same fate: make it outside, as the layers do.)"""
    options = SolverOptions(**dict(zip(_OPTION_FIELDS, option_values, strict=True)))
    return host_solve(structure, options, ranks, info=info).key


def _numpy(tensor):
    return None if tensor is None else tensor.detach().cpu().numpy()


def _tensor(array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(like.device)


def _empty(specs, like: torch.Tensor) -> list[torch.Tensor]:
    """Fake tensors of the ``(shape, numpy dtype)`` specs of a :class:`HostSolve`."""
    return [like.new_empty(shape, dtype=_TORCH_DTYPES[np.dtype(dtype)]) for shape, dtype in specs]


_TORCH_DTYPES = {
    np.dtype(name): getattr(torch, name)
    for name in ("float16", "float32", "float64", "int32", "int64", "bool")
}


@torch.library.custom_op("keras_structured::sparsemap_values", mutates_args=())
def _values(
    scores_u: torch.Tensor, scores_v: torch.Tensor, lengths: torch.Tensor | None, host: int
) -> tuple[torch.Tensor, torch.Tensor]:
    u, v = host_by_key(host).values(_numpy(scores_u), _numpy(scores_v), _numpy(lengths))
    return _tensor(u, scores_u), _tensor(v, scores_v)


@_values.register_fake
def _values_fake(scores_u, scores_v, lengths, host):
    return torch.empty_like(scores_u), torch.empty_like(scores_v)


@torch.library.custom_op("keras_structured::sparsemap_forward", mutates_args=())
def _forward(
    scores_u: torch.Tensor, scores_v: torch.Tensor, lengths: torch.Tensor | None, host: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    u, v, handles = host_by_key(host).forward(_numpy(scores_u), _numpy(scores_v), _numpy(lengths))
    return _tensor(u, scores_u), _tensor(v, scores_v), _tensor(handles, scores_u)


@_forward.register_fake
def _forward_fake(scores_u, scores_v, lengths, host):
    handles = scores_u.new_empty(host_by_key(host).leading_shape(scores_u) + (2,), dtype=torch.int32)
    return torch.empty_like(scores_u), torch.empty_like(scores_v), handles


def _forward_setup(ctx, inputs, output):
    scores_u, scores_v, lengths, host = inputs
    ctx.host = host
    ctx.save_for_backward(output[2], scores_u, scores_v, lengths)


def _forward_backward(ctx, grad_u, grad_v, *unused):  # the handles and info get no gradient
    handles, scores_u, scores_v, lengths = ctx.saved_tensors
    j_u, j_v = torch.ops.keras_structured.sparsemap_jacobian(
        handles, scores_u, scores_v, grad_u, grad_v, lengths, ctx.host
    )
    return j_u, j_v, None, None


_forward.register_autograd(_forward_backward, setup_context=_forward_setup)


@torch.library.custom_op("keras_structured::sparsemap_values_info", mutates_args=())
def _values_info(
    scores_u: torch.Tensor, scores_v: torch.Tensor, lengths: torch.Tensor | None, host: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    arrays = host_by_key(host).values(_numpy(scores_u), _numpy(scores_v), _numpy(lengths))
    return tuple(_tensor(array, scores_u) for array in arrays)


@_values_info.register_fake
def _values_info_fake(scores_u, scores_v, lengths, host):
    info = _empty(host_by_key(host).info_specs(scores_u, scores_v), scores_u)
    return (torch.empty_like(scores_u), torch.empty_like(scores_v), *info)


@torch.library.custom_op("keras_structured::sparsemap_forward_info", mutates_args=())
def _forward_info(
    scores_u: torch.Tensor, scores_v: torch.Tensor, lengths: torch.Tensor | None, host: int
) -> tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
]:
    arrays = host_by_key(host).forward(_numpy(scores_u), _numpy(scores_v), _numpy(lengths))
    return tuple(_tensor(array, scores_u) for array in arrays)


@_forward_info.register_fake
def _forward_info_fake(scores_u, scores_v, lengths, host):
    info = _empty(host_by_key(host).info_specs(scores_u, scores_v), scores_u)
    return (*_forward_fake(scores_u, scores_v, lengths, host), *info)


_forward_info.register_autograd(_forward_backward, setup_context=_forward_setup)


@torch.library.custom_op("keras_structured::map_decode", mutates_args=())
def _decode(
    scores_u: torch.Tensor, scores_v: torch.Tensor, lengths: torch.Tensor | None, host: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    arrays = host_by_key(host).decode(_numpy(scores_u), _numpy(scores_v), _numpy(lengths))
    return tuple(_tensor(array, scores_u) for array in arrays)


@_decode.register_fake
def _decode_fake(scores_u, scores_v, lengths, host):
    return tuple(_empty(host_by_key(host).decode_specs(scores_u, scores_v), scores_u))


@torch.library.custom_op("keras_structured::sparsemap_jacobian", mutates_args=())
def _jacobian(
    handles: torch.Tensor,
    scores_u: torch.Tensor,
    scores_v: torch.Tensor,
    x_u: torch.Tensor,
    x_v: torch.Tensor,
    lengths: torch.Tensor | None,
    host: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    arrays = (_numpy(t) for t in (handles, scores_u, scores_v, x_u, x_v, lengths))
    j_u, j_v = host_by_key(host).jacobian(*arrays)
    return _tensor(j_u, x_u), _tensor(j_v, x_v)


@_jacobian.register_fake
def _jacobian_fake(handles, scores_u, scores_v, x_u, x_v, lengths, host):
    return torch.empty_like(x_u), torch.empty_like(x_v)


def _jacobian_setup(ctx, inputs, output):
    handles, scores_u, scores_v, _, _, lengths, host = inputs
    ctx.host = host
    ctx.save_for_backward(handles, scores_u, scores_v, lengths)


def _jacobian_backward(ctx, grad_u, grad_v):
    # The product is linear in x with a symmetric matrix, locally constant in the scores.
    handles, scores_u, scores_v, lengths = ctx.saved_tensors
    j_u, j_v = torch.ops.keras_structured.sparsemap_jacobian(
        handles, scores_u, scores_v, grad_u, grad_v, lengths, ctx.host
    )
    return None, None, None, j_u, j_v, None, None


_jacobian.register_autograd(_jacobian_backward, setup_context=_jacobian_setup)


#: The schema of every host function's op (and of its VJP's).
_FUNCTION_SCHEMA = "(Tensor[] arrays, int key) -> Tensor[]"

_FUNCTION_OPS: dict[str, object] = {}


def _function_op(name: str, host_function: str):
    """The op ``keras_structured::<name>`` calling the ``host_function`` method
    (``"function"`` or ``"vjp"``) of the bound call of its key; results on the device of
    its first array."""

    @torch.library.custom_op(f"keras_structured::{name}", mutates_args=(), schema=_FUNCTION_SCHEMA)
    def op(arrays, key):
        results = getattr(bound_by_key(key), host_function)(*(_numpy(array) for array in arrays))
        return [_tensor(result, arrays[0]) for result in results]

    return op


def register_function(host: HostFunction) -> None:
    """Registers the op of ``host`` (and of its VJP, its autograd formula), once."""
    if host.name in _FUNCTION_OPS:
        return
    op = _function_op(host.name, "function")

    @op.register_fake
    def _(arrays, key):
        return _empty(bound_by_key(key).specs(*arrays), arrays[0])

    if host.vjp is not None:
        vjp = _function_op(f"{host.name}_vjp", "vjp")
        vjp_op = getattr(torch.ops.keras_structured, f"{host.name}_vjp")

        @vjp.register_fake
        def _(arrays, key):
            positions = bound_by_key(key).gradient_positions
            return [torch.empty_like(arrays[i]) for i in positions]

        def setup_context(ctx, inputs, output):
            arrays, key = inputs
            ctx.key, ctx.result_specs = key, [(result.shape, result.dtype) for result in output]
            ctx.save_for_backward(*arrays)

        def backward(ctx, gradients):
            arrays = ctx.saved_tensors
            gradients = [
                arrays[0].new_zeros(shape, dtype=dtype) if gradient is None else gradient
                for (shape, dtype), gradient in zip(ctx.result_specs, gradients, strict=True)
            ]
            cotangents = vjp_op([*arrays, *gradients], ctx.key)
            by_position = dict(zip(bound_by_key(ctx.key).gradient_positions, cotangents, strict=True))
            return [by_position.get(i) for i in range(len(arrays))], None

        op.register_autograd(backward, setup_context=setup_context)
    _FUNCTION_OPS[host.name] = getattr(torch.ops.keras_structured, host.name)


@torch.compiler.assume_constant_result
def _bound_key(host: HostFunction, present: tuple, names: tuple, *values) -> int:
    """The key of the bound call, a constant of the graph that ``torch.compile`` traces.
    (The static values come each as an argument: Dynamo cannot pass a structure inside a tuple.)"""
    return bind(host, present, dict(zip(names, values, strict=True))).key


def call_function(host: HostFunction, arrays: list, present: tuple, static: dict) -> list:
    """The results of ``host`` of the given ``arrays`` (see
    :func:`keras_structured.ops.host_call.call`)."""
    register_function(host)  # registered at import, unless the backend was set since
    key = _bound_key(host, present, tuple(static), *static.values())
    if host.vjp is None:
        arrays = [array.detach() for array in arrays]
    return list(_FUNCTION_OPS[host.name](arrays, key))
