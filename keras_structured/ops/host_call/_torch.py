"""The PyTorch adapter: three ``torch.library.custom_op``s, with autograd and fake kernels.

* ``keras_structured::sparsemap_values`` returns ``(u, v)``: the call without gradients
  (``torch.no_grad()``, as in Keras's ``predict`` and ``evaluate``, or scores that
  require none);
* ``keras_structured::sparsemap_forward`` also returns per-example handles to the active
  sets, kept on the host; its autograd formula calls
* ``keras_structured::sparsemap_jacobian``, the Jacobian product, whose own autograd
  formula is the same product (the Jacobian is symmetric): double backward works.

The ops name their :class:`~keras_structured.ops.host_call._host.HostSolve` by an integer,
since an op takes no Python objects; ``torch.compile`` looks it up once, when it traces.
Their fake kernels give the result shapes without running the engine, which is all
``torch.compile`` (and Keras's symbolic calls on the ``meta`` device) need: the compiled
graph calls the ops as opaque host functions, without a graph break
(``fullgraph=True`` works). The ops copy tensors of any device to the host and their
results back.
"""

from __future__ import annotations

import numpy as np
import torch

from keras_structured.engine import SolverOptions, Structure
from keras_structured.ops.host_call._host import host_by_key, host_solve


def solve(structure: Structure, options: SolverOptions, ranks: tuple, scores_u, scores_v, lengths, jacobian):
    """``[u, v]`` for the scores, differentiable when ``jacobian``."""
    host = _host_key(structure, options, ranks)
    needs_grad = scores_u.requires_grad or scores_v.requires_grad
    if jacobian and needs_grad and torch.is_grad_enabled():
        u, v, _ = torch.ops.keras_structured.sparsemap_forward(scores_u, scores_v, lengths, host)
        return [u, v]
    scores_u, scores_v = scores_u.detach(), scores_v.detach()
    return list(torch.ops.keras_structured.sparsemap_values(scores_u, scores_v, lengths, host))


@torch.compiler.assume_constant_result
def _host_key(structure: Structure, options: SolverOptions, ranks: tuple) -> int:
    """The key of the call site's host functions. ``torch.compile`` runs it when it traces,
    so that the compiled graph holds the key as a constant and the lookup stays out of it."""
    return host_solve(structure, options, ranks).key


def _numpy(tensor):
    return None if tensor is None else tensor.detach().cpu().numpy()


def _tensor(array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(like.device)


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


def _forward_backward(ctx, grad_u, grad_v, grad_handles):
    handles, scores_u, scores_v, lengths = ctx.saved_tensors
    j_u, j_v = torch.ops.keras_structured.sparsemap_jacobian(
        handles, scores_u, scores_v, grad_u, grad_v, lengths, ctx.host
    )
    return j_u, j_v, None, None


_forward.register_autograd(_forward_backward, setup_context=_forward_setup)


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
