"""The TensorFlow adapter: ``tf.numpy_function``, under ``tf.custom_gradient`` when differentiable.

A :class:`~keras_structured.ops.host_call.HostFunction` is one ``tf.numpy_function``
(:func:`call_function`); with a VJP, it runs under ``tf.custom_gradient`` its ``forward``
function, whose residuals the gradient function holds, and the gradient is a second call,
of the VJP (itself differentiable when it declares a VJP). A differentiable call always runs
``forward`` (:func:`keras_structured.ops.host_call.values` runs ``function``); where no
gradient tape records its arguments when it is traced (or called eagerly), as in Keras's
``predict`` and ``evaluate`` steps, it runs it under :func:`~._store.discarding`, so that
it keeps nothing on the host for a backward call that will not come. A ``tf.function``
traced without a tape and then differentiated under one (the tape outside) does get its
backward call, which then computes what it needs again from the arguments.

SparseMAP keeps its own calls (:func:`solve_on_host`, :func:`decode_on_host`): the forward
call returns the active set's factors as tensors (TensorFlow's results may have
data-dependent shapes), and the backward pass applies them in a second
``tf.numpy_function``, itself differentiable: the Jacobian is symmetric, so the gradient of
a Jacobian product is the same product. MAP decoding is one ``tf.numpy_function`` without
gradient.
"""

from __future__ import annotations

import functools

import tensorflow as tf
from tensorflow.python.eager import record

from keras_structured.engine import SolverOptions, Structure, solve
from keras_structured.engine.jacobian import Support, jacobian_product
from keras_structured.ops.host_call._functions import BoundCall, HostFunction, bind
from keras_structured.ops.host_call._host import map_decode_arrays, pad_codes
from keras_structured.ops.host_call._store import discarding
from keras_structured.ops.invalid_inputs import raising_invalid_scores

# The dtype of the solver, its Jacobian factors and their products.
SOLVER_DTYPE = tf.float64


def flatten_examples(x: tf.Tensor) -> tf.Tensor:
    """``x`` as ``(batch, size)``, also for an empty batch (where ``-1`` cannot be inferred)."""
    shape = tf.shape(x)
    return tf.reshape(x, tf.stack([shape[0], tf.reduce_prod(shape[1:])]))


def solve_on_host(
    structure: Structure,
    options: SolverOptions,
    scores_u: tf.Tensor,
    scores_v: tf.Tensor,
    lengths: tf.Tensor | None,
    jacobian: bool,
    info: bool,
) -> list[tf.Tensor]:
    """``[u, v]`` in float64 for float64 scores, differentiable when ``jacobian``; then the five
    info arrays when ``info`` (weights, codes, gap, map_calls, converged)."""
    inputs = [scores_u, scores_v] + ([] if lengths is None else [lengths])
    outputs = _solver_outputs(structure, inputs, options, jacobian, info)
    u, v = outputs[:2]
    if jacobian:
        u, v = _attach_jacobian(Support(*outputs[2:7]), scores_u, scores_v, u, v)
    return [u, v] + outputs[7 if jacobian else 2 :]


def _attach_jacobian(support: Support, scores_u, scores_v, u, v):
    @tf.custom_gradient
    def attach_jacobian(values_u, values_v):
        def grad(grad_u, grad_v):
            grad_u = tf.zeros_like(u) if grad_u is None else grad_u
            grad_v = tf.zeros_like(v) if grad_v is None else grad_v
            j_u, j_v = _jacobian_product(support, flatten_examples(grad_u), flatten_examples(grad_v))
            return tf.reshape(j_u, tf.shape(values_u)), tf.reshape(j_v, tf.shape(values_v))

        return (tf.identity(u), tf.identity(v)), grad

    return attach_jacobian(scores_u, scores_v)


def _jacobian_product(support: Support, x_u: tf.Tensor, x_v: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``J (x_u, x_v)`` for flat ``(batch, d)`` float64 vectors, by one compiled call.

    The Jacobian is symmetric, so this op's own gradient is the same product:
    SparseMAP is twice differentiable wherever its support is locally constant.
    """

    @tf.custom_gradient
    def product(x_u, x_v):
        j_u, j_v = tf.numpy_function(
            lambda *arrays: jacobian_product(Support(*arrays[:5]), *arrays[5:]),
            [*support, x_u, x_v],
            [x_u.dtype, x_v.dtype],
            stateful=False,
            name="sparsemap_jacobian_product",
        )
        j_u.set_shape(x_u.shape)
        j_v.set_shape(x_v.shape)

        def grad(grad_u, grad_v):
            grad_u = tf.zeros_like(x_u) if grad_u is None else grad_u
            grad_v = tf.zeros_like(x_v) if grad_v is None else grad_v
            return _jacobian_product(support, grad_u, grad_v)

        return (j_u, j_v), grad

    return product(x_u, x_v)


def _solver_outputs(
    structure: Structure, inputs: list[tf.Tensor], options: SolverOptions, jacobian: bool, return_info: bool
) -> list[tf.Tensor]:
    """Solve in one ``tf.numpy_function``: ``[u, v]`` (float64, with static shapes), then the
    five :class:`Support` factors when ``jacobian``, then the five info arrays when
    ``return_info``. Every output costs a conversion to a tensor: ask only for those needed."""
    float64 = SOLVER_DTYPE

    def forward(values_u, values_v, sizes=None):
        solution = solve(structure, values_u, values_v, lengths=sizes, options=options)
        outputs = (solution.u, solution.v, *(solution.support if jacobian else ()))
        if not return_info:
            return outputs
        shape = (
            solution.structures[0].shape[1:]
            if solution.structures
            else structure.code_shape(values_u.shape[1:], values_v.shape[1:])
        )
        codes, weights = pad_codes(solution.structures, solution.weights, shape, structure.code_dtype)
        info = (weights, codes, solution.gap, solution.map_calls.astype("int32"), solution.converged)
        return outputs + info

    support_dtypes = [tf.int64, float64, tf.int64, float64, float64] if jacobian else []
    info_dtypes = [float64, structure.code_dtype, float64, tf.int32, tf.bool] if return_info else []
    outputs = tf.numpy_function(
        raising_invalid_scores(forward),
        inputs,
        [float64, float64] + support_dtypes + info_dtypes,
        stateful=False,
        name="sparsemap_forward",
    )
    outputs[0].set_shape(inputs[0].shape)
    outputs[1].set_shape(inputs[1].shape)
    return outputs


def decode_on_host(
    structure: Structure, scores_u: tf.Tensor, scores_v: tf.Tensor, lengths
) -> list[tf.Tensor]:
    """``[codes, m, n]`` of the MAP structures, by one ``tf.numpy_function`` (no gradient);
    static shapes where the scores' are (the codes' from the structure)."""
    inputs = [scores_u, scores_v] + ([] if lengths is None else [lengths])
    codes, m, n = tf.numpy_function(
        raising_invalid_scores(functools.partial(map_decode_arrays, structure)),
        inputs,
        [tf.as_dtype(structure.code_dtype), scores_u.dtype, scores_v.dtype],
        stateful=False,
        name="map_decode",
    )
    static_code_shape = structure.code_shape(tuple(scores_u.shape[1:]), tuple(scores_v.shape[1:]))
    if static_code_shape is not None:
        codes.set_shape((scores_u.shape[0],) + static_code_shape)
    m.set_shape(scores_u.shape)
    n.set_shape(scores_v.shape)
    return [codes, m, n]


def _numpy_call(function, arrays: list, specs: list, name: str) -> list[tf.Tensor]:
    """``function`` of ``arrays`` by one ``tf.numpy_function``, its results given the
    ``(shape, dtype)`` of ``specs`` (the shapes' known dimensions)."""
    results = tf.numpy_function(function, arrays, [dtype for _, dtype in specs], stateful=False, name=name)
    results = tf.nest.flatten(results)  # eagerly, a list of one dtype gives a tensor
    for result, (shape, _) in zip(results, specs, strict=True):
        result.set_shape(shape)
    return results


def call_function(
    host: HostFunction, arrays: list, present: tuple, static: dict, differentiable: bool
) -> list[tf.Tensor]:
    """The results of ``host`` of the given ``arrays`` (see :func:`keras_structured.ops.host_call.call`);
    without gradient unless ``differentiable`` and ``host`` has a VJP."""
    bound = bind(host, present, static)
    if differentiable:
        return _call(bound, arrays)
    return _numpy_call(bound.function, arrays, bound.specs(*arrays), host.name)


def _call(bound: BoundCall, arrays: list) -> list[tf.Tensor]:
    """``bound`` of ``arrays``, differentiable when its host function has a VJP."""
    if bound.host.vjp is None:
        return _numpy_call(bound.function, arrays, bound.specs(*arrays), bound.host.name)
    return _differentiable(bound, arrays)


def _discarding(function):
    """``function`` run under :func:`~._store.discarding`."""

    @functools.wraps(function)
    def discarded(*arrays):
        with discarding():
            return function(*arrays)

    return discarded


def _differentiable(bound: BoundCall, arrays: list) -> list[tf.Tensor]:
    specs = bound.specs(*arrays)
    count, name = len(specs), bound.host.name
    # (TensorFlow's public API cannot tell whether a tape records a tensor.)
    forward = bound.forward if record.should_record_backprop(arrays) else _discarding(bound.forward)

    @tf.custom_gradient
    def differentiable(*arrays):
        arrays = list(arrays)
        outputs = _numpy_call(forward, arrays, specs + bound.residual_specs(*arrays), name)
        results, residuals = outputs[:count], outputs[count:]

        def grad(*upstream):
            cotangents = [
                tf.zeros_like(results[i]) if upstream[i] is None else upstream[i]
                for i in bound.cotangent_positions(count)
            ]
            vjp = bound.vjp_call(len(residuals) + len(cotangents))
            gradients = [None] * len(arrays)
            for position, cotangent in zip(
                bound.gradient_positions, _call(vjp, [*arrays, *residuals, *cotangents]), strict=True
            ):
                gradients[position] = cotangent
            return gradients

        return results, grad

    return differentiable(*arrays)
