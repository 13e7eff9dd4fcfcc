"""The PyTorch adapter: ``torch.library.custom_op``s, with autograd and fake kernels.

* ``keras_structured::lp_sparsemap_values``: ``(u, v)`` and the info, nothing kept (the call
  without gradients: ``torch.no_grad()``, as in Keras's ``predict``, or scores that need none);
* ``keras_structured::lp_sparsemap_forward``: the same and per-example handles to the
  solutions kept on the host; its autograd formula calls
* ``keras_structured::lp_sparsemap_backward``, the vector-Jacobian product (no gradient of
  its own: second derivatives are not supported);
* ``keras_structured::lp_sparsemap_gold``: the additional parts of gold variables.

The ops name their :class:`~keras_structured.ops.lp_host_call._host.LPHost` by an integer,
since an op takes no Python objects. Their fake kernels give the result shapes without
solving, which is what Keras's symbolic calls (on the ``meta`` device) need. Tensors of any
device are copied to the host and their results back.
"""

from __future__ import annotations

import numpy as np
import torch

from keras_structured.ops.lp_host_call._host import LPHost, host_by_key

_TORCH_DTYPES = {np.dtype(name): getattr(torch, name) for name in ("float32", "float64", "int32", "bool")}


def solve(host: LPHost, eta_u, eta_v, differentiable: bool) -> list:
    """``[u, v, converged, iterations, map_calls]``; ``(u, v)`` differentiable when asked."""
    ops = torch.ops.keras_structured
    needs_grad = eta_u.requires_grad or eta_v.requires_grad
    if differentiable and needs_grad and torch.is_grad_enabled():
        u, v, _, *info = ops.lp_sparsemap_forward(eta_u, eta_v, host.key)
        return [u, v, *info]
    return list(ops.lp_sparsemap_values(eta_u.detach(), eta_v.detach(), host.key))


def gold(host: LPHost, gold_u):
    """The flat additional parts of the gold variables (no gradient)."""
    return torch.ops.keras_structured.lp_sparsemap_gold(gold_u.detach(), host.key)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _tensors(arrays, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(np.ascontiguousarray(array)).to(like.device) for array in arrays)


def _empty(specs, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Fake tensors of ``(shape, numpy dtype)`` specs."""
    return tuple(like.new_empty(shape, dtype=_TORCH_DTYPES[np.dtype(dtype)]) for shape, dtype in specs)


def _forward_specs(host: LPHost, eta_u, eta_v) -> list:
    specs = host.result_specs(eta_u, eta_v)
    return [*specs[:2], host.handle_spec(eta_u), *specs[2:]]


@torch.library.custom_op("keras_structured::lp_sparsemap_values", mutates_args=())
def _values(
    eta_u: torch.Tensor, eta_v: torch.Tensor, host: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _tensors(host_by_key(host).values(_numpy(eta_u), _numpy(eta_v)), eta_u)


@_values.register_fake
def _values_fake(eta_u, eta_v, host):
    return _empty(host_by_key(host).result_specs(eta_u, eta_v), eta_u)


@torch.library.custom_op("keras_structured::lp_sparsemap_forward", mutates_args=())
def _forward(
    eta_u: torch.Tensor, eta_v: torch.Tensor, host: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _tensors(host_by_key(host).forward(_numpy(eta_u), _numpy(eta_v)), eta_u)


@_forward.register_fake
def _forward_fake(eta_u, eta_v, host):
    return _empty(_forward_specs(host_by_key(host), eta_u, eta_v), eta_u)


def _forward_setup(ctx, inputs, output):
    eta_u, eta_v, host = inputs
    ctx.host = host
    ctx.save_for_backward(output[2], eta_u, eta_v)


def _forward_backward(ctx, g_u, g_v, *unused):  # the handles and the info get no gradient
    handles, eta_u, eta_v = ctx.saved_tensors
    grad_u, grad_v = torch.ops.keras_structured.lp_sparsemap_backward(
        handles, eta_u, eta_v, g_u, g_v, ctx.host
    )
    return grad_u, grad_v, None


_forward.register_autograd(_forward_backward, setup_context=_forward_setup)


@torch.library.custom_op("keras_structured::lp_sparsemap_backward", mutates_args=())
def _backward(
    handles: torch.Tensor,
    eta_u: torch.Tensor,
    eta_v: torch.Tensor,
    g_u: torch.Tensor,
    g_v: torch.Tensor,
    host: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    arrays = (_numpy(t) for t in (handles, eta_u, eta_v, g_u, g_v))
    return _tensors(host_by_key(host).backward(*arrays), g_u)


@_backward.register_fake
def _backward_fake(handles, eta_u, eta_v, g_u, g_v, host):
    return torch.empty_like(g_u), torch.empty_like(g_v)


@torch.library.custom_op("keras_structured::lp_sparsemap_gold", mutates_args=())
def _gold(gold_u: torch.Tensor, host: int) -> torch.Tensor:
    return _tensors([host_by_key(host).gold(_numpy(gold_u))], gold_u)[0]


@_gold.register_fake
def _gold_fake(gold_u, host):
    return _empty([host_by_key(host).gold_spec(gold_u)], gold_u)[0]
