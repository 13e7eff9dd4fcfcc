"""The generic host call (``keras_structured.ops.host_call.call``) on JAX and PyTorch, against TensorFlow.

A numpy function with a numpy VJP, an absent optional argument, a static argument and an
integer result without gradient; and one whose forward function keeps its result on the host
behind handles (residuals) for its VJP, with an integer result that gets no cotangent: values
and gradients equal TensorFlow's, eagerly and compiled (``jax.jit``,
``torch.compile(fullgraph=True)``), under ``jax.vmap`` (``"sequential"``: one host call per
mapped element) and on PyTorch's ``meta`` device (the fake kernel); the store of handles is
left empty, and a call without gradient keeps nothing. A host function's ``ValueError`` reaches
an eager caller as raised, on the first call too. Each backend runs in its own process
(``tests/backend_harness.py``); those not installed are skipped.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_structured.ops import host_call
from tests.backend_harness import backend_params, run_calls, value_and_vjp

MODULE = __name__
CALLS: list[int] = []  # the batch size of every host call of _cube


def _cube(x, offset, *, scale):
    """``(scale * x^3 + offset, sum of x per row)``."""
    CALLS.append(x.shape[0])
    cube = scale * x**3 + (0 if offset is None else offset)
    return cube, x.sum(-1)


def _cube_specs(x, offset, *, scale):
    return [(x.shape, x.dtype), (x.shape[:-1], x.dtype)]


def _cube_vjp(x, offset, upstream_cube, upstream_sum, *, scale):
    return 3 * scale * x**2 * upstream_cube + upstream_sum[..., None], upstream_cube


CUBE = host_call.host_function(
    "tests_cube", _cube, _cube_specs, vjp=_cube_vjp, differentiable=(0, 1), vmap_method="sequential"
)
ARGMAX = host_call.host_function(
    "tests_argmax",
    lambda x: (np.argmax(x, -1).astype("int32"),),
    lambda x: [(x.shape[:-1], "int32")],
)
#: The probabilities of the softmax's forward calls, kept for their backward calls.
KEPT = host_call.HandleStore()


def _softmax(x, *, temperature):
    """``(softmax(x / temperature), argmax)`` over the last axis."""
    shifted = np.exp((x - x.max(-1, keepdims=True)) / temperature)
    return shifted / shifted.sum(-1, keepdims=True), np.argmax(x, -1).astype("int32")


def _softmax_specs(x, *, temperature):
    return [(x.shape, x.dtype), (x.shape[:-1], "int32")]


def _softmax_forward(x, *, temperature):
    probabilities, argmax = _softmax(x, temperature=temperature)
    handles = KEPT.put(probabilities, len(x), probabilities.nbytes)
    return probabilities, argmax, handles


def _softmax_vjp(x, handles, upstream, *, temperature):
    """``p * (g - <g, p>) / temperature``, with ``p`` as the forward call kept it."""
    kept, examples = KEPT.take(handles)
    p = kept[examples]
    return (p * (upstream - (upstream * p).sum(-1, keepdims=True)) / temperature,)


SOFTMAX = host_call.host_function(
    "tests_softmax",
    _softmax,
    _softmax_specs,
    vjp=_softmax_vjp,
    differentiable=(0,),
    forward=_softmax_forward,
    residual_specs=lambda x, *, temperature: [(x.shape[:1] + (2,), "int32")],
    differentiable_results=(0,),
)


def _positive(x):
    """``(sqrt(x),)``; a ``ValueError`` for negative ``x``, as the library's host checks raise."""
    if (x < 0).any():
        raise ValueError(f"x must be nonnegative. Received: x with {int((x < 0).sum())} negative values")
    return (np.sqrt(x),)


SQRT = host_call.host_function(
    "tests_sqrt",
    _positive,
    lambda x: [(x.shape, x.dtype)],
    vjp=lambda x, g: (g / (2 * np.sqrt(x)),),
    differentiable=(0,),
)
X = np.random.default_rng(0).normal(size=(3, 4)).astype("float32")
OFFSET = np.random.default_rng(1).normal(size=(3, 4)).astype("float32")


def _flat(cube, total):
    return keras.ops.concatenate([cube, total[:, None]], axis=1)


def host_call_values(compiled: bool = False) -> dict:
    """Values and gradients of the host function, with and without its optional argument."""
    upstream = np.random.default_rng(2).normal(size=(3, 5)).astype("float32")
    with_offset, (grad_x, grad_offset) = value_and_vjp(
        lambda x, offset: _flat(*host_call.call(CUBE, x, offset, scale=2.0)),
        [X, OFFSET],
        upstream,
        compiled=compiled,
    )
    without, (grad_alone,) = value_and_vjp(
        lambda x: _flat(*host_call.call(CUBE, x, None, scale=0.5)), [X], upstream, compiled=compiled
    )
    (argmax,) = host_call.call(ARGMAX, X)
    softmax, [softmax_grad] = value_and_vjp(
        lambda x: host_call.call(SOFTMAX, x, temperature=2.0)[0], [X], upstream[:, :4], compiled=compiled
    )
    assert len(KEPT) == 0, len(KEPT)
    probabilities, indices = host_call.values(SOFTMAX, X, temperature=2.0)
    assert len(KEPT) == 0 and keras.ops.convert_to_numpy(indices).tolist() == X.argmax(-1).tolist()
    return {
        "softmax/out": softmax,
        "softmax/grad": softmax_grad,
        "softmax/values": keras.ops.convert_to_numpy(probabilities),
        "with/out": with_offset,
        "with/grad_x": grad_x,
        "with/grad_offset": grad_offset,
        "without/out": without,
        "without/grad": grad_alone,
        "argmax": keras.ops.convert_to_numpy(argmax),
    }


def host_errors() -> dict:
    """The host function's ``ValueError`` reaches an eager caller as raised: on the first call
    of the function, after a clean call of the same shapes, and when differentiated; under
    ``jax.jit``, as the message of JAX's ``JaxRuntimeError``."""
    message = r"^x must be nonnegative\. Received: x with 1 negative values"
    negative = np.abs(X)
    negative[1, 2] = -1.0
    for x in (negative, np.abs(X), negative):  # first call, clean call, same shapes again
        if (x < 0).any():
            with pytest.raises(ValueError, match=message):
                host_call.call(SQRT, x)
        else:
            host_call.call(SQRT, x)
    with pytest.raises(ValueError, match=message):
        value_and_vjp(lambda x: host_call.call(SQRT, x)[0], [negative], np.ones_like(X))
    if keras.backend.backend() == "jax":
        import jax

        with pytest.raises(jax.errors.JaxRuntimeError, match="x must be nonnegative"):
            jax.block_until_ready(jax.jit(lambda x: host_call.call(SQRT, x)[0])(negative))
    return {}


def jax_vmap() -> dict:
    """``jax.vmap`` (one host call per mapped element) of the value and its gradient."""
    import jax

    def total(x):
        cube, row_sums = host_call.call(CUBE, x, None, scale=2.0)
        return cube.sum() + row_sums.sum()

    CALLS.clear()
    values = jax.vmap(total)(X[:, None])
    assert CALLS == [1, 1, 1], CALLS
    return {"vmap/out": np.asarray(values), "vmap/grad": np.asarray(jax.vmap(jax.grad(total))(X[:, None]))}


def torch_compiled() -> dict:
    """Under ``torch.compile(fullgraph=True)`` (AOT autograd), on the ``meta`` device, and in
    Keras's symbolic calls on placeholder values (no host call)."""
    import torch
    from keras.src.backend.common.symbolic_scope import SymbolicScope

    def total(x, offset):
        cube, row_sums = host_call.call(CUBE, x, offset, scale=2.0)
        return cube.sum() + row_sums.sum()

    x, offset = (torch.tensor(a, requires_grad=True) for a in (X, OFFSET))
    torch.compile(total, fullgraph=True, backend="aot_eager")(x, offset).backward()
    with keras.device("meta"):  # as in Keras's symbolic calls
        meta = host_call.call(CUBE, torch.empty((3, 4), device="meta"), None, scale=2.0)
    assert [tuple(t.shape) for t in meta] == [(3, 4), (3,)] and meta[0].device.type == "meta"
    CALLS.clear()
    with SymbolicScope():  # Keras's retry off ``meta``, on placeholder ones, which _positive rejects
        results = [
            *host_call.call(SQRT, -torch.ones((3, 4))),
            *host_call.call(CUBE, torch.ones((3, 4)), None, scale=2.0),
        ]
    assert CALLS == [] and [tuple(t.shape) for t in results] == [(3, 4), (3, 4), (3,)]
    return {"compiled/grad_x": x.grad.numpy(), "compiled/grad_offset": offset.grad.numpy()}


@pytest.mark.parametrize("backend", backend_params("jax", "torch"))
def test_host_call_equals_tensorflow(backend, tmp_path):
    calls = {"errors": f"{MODULE}:host_errors", "eager": f"{MODULE}:host_call_values"}
    if backend == "jax":
        calls.update(jit=(f"{MODULE}:host_call_values", {"compiled": True}), vmap=f"{MODULE}:jax_vmap")
    else:
        calls["compiled"] = f"{MODULE}:torch_compiled"
    results = run_calls(backend, calls, tmp_path)
    results["errors"]  # raises the backend's traceback if it failed
    expected = host_call_values()
    for name in [name for name in ("eager", "jit") if name in calls]:
        for key, want in expected.items():
            np.testing.assert_allclose(results[name][key], want, rtol=1e-6, atol=1e-6, err_msg=key)
    if backend == "jax":
        np.testing.assert_allclose(results["vmap"]["vmap/grad"][:, 0], 6 * X**2 + 1, rtol=1e-6)
    else:
        np.testing.assert_allclose(results["compiled"]["compiled/grad_x"], 6 * X**2 + 1, rtol=1e-6)
        np.testing.assert_array_equal(results["compiled"]["compiled/grad_offset"], np.ones_like(X))


def test_tensorflow_values_and_gradients():
    results = host_call_values()
    np.testing.assert_allclose(results["with/out"][:, :4], 2 * X**3 + OFFSET, rtol=1e-6)
    np.testing.assert_allclose(results["softmax/out"], _softmax(X, temperature=2.0)[0], rtol=1e-6)
    np.testing.assert_array_equal(results["softmax/values"], results["softmax/out"])
    p, upstream = results["softmax/out"], np.random.default_rng(2).normal(size=(3, 5))[:, :4]
    expected = p * (upstream - (upstream * p).sum(-1, keepdims=True)) / 2
    np.testing.assert_allclose(results["softmax/grad"], expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(results["without/out"][:, 4], X.sum(-1), rtol=1e-6)
    np.testing.assert_array_equal(results["argmax"], X.argmax(-1))
    with pytest.raises(ValueError, match="x must be nonnegative"):  # eager: as raised
        host_call.call(SQRT, -np.abs(X))
    compiled = host_call_values(compiled=True)
    for key, value in results.items():
        np.testing.assert_allclose(compiled[key], value, rtol=1e-6, err_msg=key)


def test_bad_declarations():
    with pytest.raises(ValueError, match="Received: vmap_method="):
        host_call.HostFunction("tests_bad", _cube, _cube_specs, vmap_method="expand_dims")
    with pytest.raises(ValueError, match="Received: vjp="):
        host_call.HostFunction("tests_bad", _cube, _cube_specs, vjp=_cube_vjp)
    with pytest.raises(ValueError, match="Received: forward="):
        host_call.HostFunction(
            "tests_bad", _cube, _cube_specs, vjp=_cube_vjp, differentiable=(0,), forward=_cube
        )
    with pytest.raises(ValueError, match="Received: forward="):
        host_call.HostFunction("tests_bad", _cube, _cube_specs, forward=_cube, residual_specs=_cube_specs)
    with pytest.raises(TypeError, match="hashable"):
        host_call.call(CUBE, X, None, scale=[2.0])
