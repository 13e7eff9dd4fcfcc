"""SparseMAP's host calls: :func:`solve` and :func:`decode`, on every backend.

On JAX and PyTorch they are generic host functions (:func:`._call.host_function`) whose
work a :class:`._host.HostSolve` does, named by its key, their one static argument:

* :data:`SPARSEMAP`: ``(u, v)`` and the solver info; differentiated, its forward function
  also returns handles to the active sets, kept in :data:`._host.SUPPORTS`, and its VJP is
* :data:`JACOBIAN`: the Jacobian product at the active set of the handles (solved again from
  the scores when the store no longer holds it). The Jacobian is symmetric and the product
  linear, so its own VJP is the same product: gradients of gradients work.
* :data:`MAP_DECODE`: MAP decoding, without gradient.

They fold any leading dimensions into the batch (``vmap_method="broadcast_all"``: a
``jax.vmap``\\ ped call is one host call). TensorFlow keeps its own calls (:mod:`._tf`): its
forward call returns the active set's factors as tensors of data-dependent shapes.
"""

from __future__ import annotations

import dataclasses

from keras_structured.engine import SolverOptions, Structure
from keras_structured.ops.host_call._call import adapter, call, host_function, values
from keras_structured.ops.host_call._host import host_by_key, host_solve

#: The fields of :class:`~keras_structured.engine.SolverOptions`, in order.
_OPTION_FIELDS = tuple(field.name for field in dataclasses.fields(SolverOptions))


def _option_values(options: SolverOptions) -> tuple:
    return tuple(getattr(options, name) for name in _OPTION_FIELDS)


_DEFAULT_OPTION_VALUES = _option_values(SolverOptions())  # MAP decoding solves nothing


def _solver_key(structure: Structure, ranks: tuple, info: str | None, *option_values) -> int:
    """The key of the :class:`._host.HostSolve` of a call site. The options come as plain
    values: made inside a function that ``torch.compile`` traces (by
    :func:`~keras_structured.engine.options.resolve_options`, from ``max_iter=...``), they
    would reach it as Dynamo rebuilds them, with their defaults. (A structure made there
    meets the same fate: make it outside, as the layers do.)"""
    options = SolverOptions(**dict(zip(_OPTION_FIELDS, option_values, strict=True)))
    return host_solve(structure, options, ranks, info).key


def _values(scores_u, scores_v, lengths, *, solver: int) -> tuple:
    return host_by_key(solver).values(scores_u, scores_v, lengths)


def _value_specs(scores_u, scores_v, lengths, *, solver: int) -> list:
    return host_by_key(solver).value_specs(scores_u, scores_v)


def _forward(scores_u, scores_v, lengths, *, solver: int) -> tuple:
    return host_by_key(solver).forward(scores_u, scores_v, lengths)


def _handle_specs(scores_u, scores_v, lengths, *, solver: int) -> list:
    return host_by_key(solver).handle_specs(scores_u)


def _jacobian(scores_u, scores_v, lengths, handles, x_u, x_v, *, solver: int) -> tuple:
    return host_by_key(solver).jacobian(scores_u, scores_v, lengths, handles, x_u, x_v)


def _jacobian_specs(scores_u, scores_v, lengths, handles, x_u, x_v, *, solver: int) -> list:
    return [(x_u.shape, x_u.dtype), (x_v.shape, x_v.dtype)]


def _jacobian_vjp(scores_u, scores_v, lengths, handles, x_u, x_v, g_u, g_v, *, solver: int) -> tuple:
    # Linear in x with a symmetric matrix, locally constant in the scores: the same product.
    return host_by_key(solver).jacobian(scores_u, scores_v, lengths, handles, g_u, g_v)


def _decode(scores_u, scores_v, lengths, *, solver: int) -> tuple:
    return host_by_key(solver).decode(scores_u, scores_v, lengths)


def _decode_specs(scores_u, scores_v, lengths, *, solver: int) -> list:
    return host_by_key(solver).decode_specs(scores_u, scores_v)


#: ``(scores_u, scores_v, lengths, handles, x_u, x_v) -> J (x_u, x_v)``.
JACOBIAN = host_function(
    "sparsemap_jacobian",
    _jacobian,
    _jacobian_specs,
    vjp=_jacobian_vjp,
    differentiable=(4, 5),
    vmap_method="broadcast_all",
)

#: ``(scores_u, scores_v, lengths) -> (u, v, *info)``, differentiable in the scores.
SPARSEMAP = host_function(
    "sparsemap",
    _values,
    _value_specs,
    vjp=JACOBIAN,
    differentiable=(0, 1),
    vmap_method="broadcast_all",
    forward=_forward,
    residual_specs=_handle_specs,
    differentiable_results=(0, 1),
)

#: ``(scores_u, scores_v, lengths) -> (codes, m, n)``, without gradient.
MAP_DECODE = host_function("map_decode", _decode, _decode_specs, vmap_method="broadcast_all")


def _ranks(scores_u, scores_v, lengths) -> tuple:
    """The per-example ranks of the arguments (after their batch dimension)."""
    return (
        len(scores_u.shape) - 1,
        len(scores_v.shape) - 1,
        None if lengths is None else len(lengths.shape) - 1,
    )


def solve(
    structure: Structure,
    options: SolverOptions,
    scores_u,
    scores_v,
    lengths=None,
    *,
    jacobian: bool = True,
    info: bool = False,
) -> list:
    """SparseMAP of a batch of scores by one host call, on the backend of Keras.

    Args:
        structure: the :class:`~keras_structured.engine.Structure`.
        options: the :class:`~keras_structured.engine.SolverOptions`.
        scores_u: ``(batch, *u_shape)`` float scores, tensors of the backend (float64 on
            TensorFlow; float32 or float64 elsewhere: the host solves in float64).
        scores_v: ``(batch, *v_shape)`` scores of the same dtype.
        lengths: optional integer per-example sizes.
        jacobian: make ``(u, v)`` differentiable (else the scores get no gradient).
        info: also return the weights ``(batch, k)``, codes ``(batch, k, *code_shape)``
            (padded with -1), gaps, MAP calls and convergence flags of the solution. ``k``
            is the batch's largest support, except under JAX transformations and
            ``torch.compile``, which need static shapes: there :func:`._host.max_support`.
            The info carries no gradient.

    Returns:
        ``[u, v]`` shaped and typed like the scores, then the five info arrays when ``info``
        (weights and gaps in the dtype of the scores; codes int32 on JAX without 64-bit types).

    Raises:
        ValueError: on a backend without an adapter.

    Example:
        >>> import keras
        >>> from keras_structured.engine import SimplexStructure
        >>> scores = keras.ops.convert_to_tensor([[1.0, 0.5, -1.0]], "float64")
        >>> u, v = solve(SimplexStructure(), SolverOptions(), scores, keras.ops.zeros((1, 0), "float64"))
        >>> keras.ops.convert_to_numpy(u)
        array([[0.75, 0.25, 0.  ]])
    """
    backend, module = adapter()
    if backend == "tensorflow":
        return module.solve_on_host(structure, options, scores_u, scores_v, lengths, jacobian, info)
    arrays = (scores_u, scores_v, lengths)
    size = ("bound" if module.traced(*arrays) else "batch") if info else None
    solver = module.constant(_solver_key, structure, _ranks(*arrays), size, *_option_values(options))
    if size == "batch" and backend == "jax":  # a callback's results have static shapes
        return module.host_arrays(host_by_key(solver).values, *arrays)
    return (call if jacobian else values)(SPARSEMAP, *arrays, solver=solver)


def decode(structure: Structure, scores_u, scores_v, lengths=None) -> list:
    """MAP decoding of a batch of scores by one host call, on the backend of Keras:
    ``argmax_s <scores_u, m_s> + <scores_v, n_s>`` for every example.

    The result is piecewise constant in the scores: it carries no gradient.

    Args:
        structure: the :class:`~keras_structured.engine.Structure`.
        scores_u: ``(batch, *u_shape)`` float scores, tensors of the backend.
        scores_v: ``(batch, *v_shape)`` scores of the same dtype.
        lengths: optional integer per-example sizes.

    Returns:
        ``[codes, m, n]``: the codes ``(batch, *code_shape)`` of the structure's
        ``code_dtype`` (int32 for int64 on JAX without 64-bit types) and the indicator
        vectors, shaped and typed like the scores.

    Raises:
        ValueError: on a backend without an adapter.

    Example:
        >>> import keras
        >>> from keras_structured.engine import SimplexStructure
        >>> scores = keras.ops.convert_to_tensor([[1.0, 0.5, -1.0]])
        >>> codes, m, n = decode(SimplexStructure(), scores, keras.ops.zeros((1, 0)))
        >>> keras.ops.convert_to_numpy(codes), keras.ops.convert_to_numpy(m)
        (array([0]), array([[1., 0., 0.]], dtype=float32))
    """
    backend, module = adapter()
    if backend == "tensorflow":
        return module.decode_on_host(structure, scores_u, scores_v, lengths)
    arrays = (scores_u, scores_v, lengths)
    solver = module.constant(_solver_key, structure, _ranks(*arrays), None, *_DEFAULT_OPTION_VALUES)
    return call(MAP_DECODE, *arrays, solver=solver)
