"""SparseMAP on the JAX and PyTorch backends: the scores prepared with ``keras.ops``.

:func:`keras_structured.sparsemap`, :func:`keras_structured.sparsemap_sequence` and
:func:`keras_structured.ops.sparsemap_op.sparsemap_solution` (the structured losses' solve)
call these functions when Keras runs on another backend than TensorFlow (the TensorFlow path
keeps its own, which also handles the unknown dimensions of graph mode). The checks and
errors are the same; the solve is :func:`keras_structured.ops.host_call.solve`, MAP
decoding :func:`keras_structured.ops.host_call.decode`. Shapes are static here: JAX traces
with concrete shapes, and PyTorch runs eagerly or traces with its own symbolic sizes. The
solver info (``return_info``) holds as many structures per example as the batch's largest
support in eager calls; under ``jax.jit`` (and other JAX transformations) and
``torch.compile`` it is padded to :func:`keras_structured.ops.host_call.max_support`.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_structured.engine import SequenceStructure, SolverOptions, Structure
from keras_structured.ops import host_call
from keras_structured.ops.dtypes import integer_lengths
from keras_structured.ops.sequence_scores import add_boundary_scores

_SEQUENCE = SequenceStructure()  # one object, so that its host functions are reused


def solver_dtype() -> str:
    """The dtype in which the scores reach the host: float64, unless JAX runs without x64.

    The host solves in float64 whatever it receives; without ``jax_enable_x64``, JAX has no
    float64 arrays, so float32 scores cross as they are and the results are rounded to
    float32 once, as the TensorFlow op rounds its float64 results.
    """
    if keras.backend.backend() == "jax":
        import jax

        return "float64" if jax.config.jax_enable_x64 else "float32"
    return "float64"


def _dtype(x) -> str:
    return keras.backend.standardize_dtype(x.dtype)


def _check_float(x) -> None:
    """A ``TypeError`` unless ``x`` holds floats (half precision too: the host solves in float64)."""
    dtype = _dtype(x)
    if "float" not in dtype:
        raise TypeError(f"Expected a floating-point tensor. Received: dtype={dtype}")


def _check_rank(name: str, scores, min_rank: int) -> None:
    if len(scores.shape) < min_rank:
        raise ValueError(
            f"sparsemap needs {name} with a leading batch dimension (rank >= {min_rank}). "
            f"Received: {name}.shape={tuple(scores.shape)}"
        )


def _prepare_scores(structure: Structure, eta_u, eta_v, lengths) -> tuple:
    """Validated ``(eta_u, scores_u, scores_v, lengths)``: the scores in :func:`solver_dtype`
    (a missing ``eta_v`` as zeros of the structure's higher-order shape), the lengths int32."""
    eta_u = ops.convert_to_tensor(eta_u)
    _check_rank("eta_u", eta_u, 2)
    _check_float(eta_u)
    wide = solver_dtype()
    u_shape = tuple(eta_u.shape[1:])
    if eta_v is None:
        v_shape = structure.v_shape(u_shape)
        if None in v_shape:
            raise ValueError(
                f"eta_v is required when its shape is not static. Received: eta_u.shape={tuple(eta_u.shape)}"
            )
        eta_v = ops.zeros((eta_u.shape[0],) + tuple(v_shape), wide)
    eta_v = ops.convert_to_tensor(eta_v)
    _check_rank("eta_v", eta_v, 1)
    structure.validate_shapes(u_shape, tuple(eta_v.shape[1:]))
    if eta_u.shape[0] != eta_v.shape[0]:
        raise ValueError(
            "eta_u and eta_v must have the same batch size. "
            f"Received: eta_u.shape={tuple(eta_u.shape)}, eta_v.shape={tuple(eta_v.shape)}"
        )
    if lengths is not None:
        lengths = integer_lengths(lengths)
    return eta_u, ops.cast(eta_u, wide), ops.cast(eta_v, wide), lengths


#: The keys of the info dict of :func:`keras_structured.sparsemap`, in the order of the
#: info arrays of :func:`keras_structured.ops.host_call.solve`.
INFO_KEYS = ("weights", "structures", "gap", "map_calls", "converged")


def _info_in(info: dict, dtype: str) -> dict:
    """``info`` with its float arrays (weights, gap) in the compute dtype of ``dtype``
    scores (float32 for half precision), as on TensorFlow."""
    dtype = "float32" if dtype in ("float16", "bfloat16") else dtype
    return {
        key: ops.cast(value, dtype) if key in ("weights", "gap") else value for key, value in info.items()
    }


def sparsemap(structure: Structure, eta_u, eta_v, lengths, options: SolverOptions, return_info: bool):
    """:func:`keras_structured.sparsemap` after its options are resolved: ``(u, v)``, then the
    info dict when ``return_info``."""
    eta_u, scores_u, scores_v, lengths = _prepare_scores(structure, eta_u, eta_v, lengths)
    outputs = host_call.solve(structure, options, scores_u, scores_v, lengths, info=return_info)
    u, v = ops.cast(outputs[0], eta_u.dtype), ops.cast(outputs[1], eta_u.dtype)
    if not return_info:
        return u, v
    return u, v, _info_in(dict(zip(INFO_KEYS, outputs[2:], strict=True)), _dtype(eta_u))


def sparsemap_solution(structure: Structure, eta_u, eta_v, lengths, options: SolverOptions) -> tuple:
    """:func:`keras_structured.ops.sparsemap_op.sparsemap_solution` in ``keras.ops``: ``(u, v)``
    in :func:`solver_dtype`, without gradient (nothing is kept for a backward pass)."""
    _, scores_u, scores_v, lengths = _prepare_scores(structure, eta_u, eta_v, lengths)
    scores_u, scores_v = ops.stop_gradient(scores_u), ops.stop_gradient(scores_v)
    u, v = host_call.solve(structure, options, scores_u, scores_v, lengths, jacobian=False)
    return u, v


def map_decode(structure: Structure, eta_u, eta_v=None, lengths=None) -> tuple:
    """:func:`keras_structured.map_decode` in ``keras.ops``: ``(codes, m, n)``."""
    eta_u, scores_u, scores_v, lengths = _prepare_scores(structure, eta_u, eta_v, lengths)
    codes, m, n = host_call.decode(structure, scores_u, scores_v, lengths)
    return codes, ops.cast(m, eta_u.dtype), ops.cast(n, eta_u.dtype)


def sparsemap_sequence(unary, transitions, start=None, end=None, lengths=None, **kwargs):
    """:func:`keras_structured.sparsemap_sequence` in ``keras.ops``: ``(u, v)``, then the info
    dict with ``return_info=True``."""
    from keras_structured.ops.sparsemap_op import sparsemap as sparsemap_op

    unary = ops.convert_to_tensor(unary)
    _check_rank("unary", unary, 3)
    if len(unary.shape) != 3:
        raise ValueError(f"unary must have shape (batch, n, K). Received: unary.shape={tuple(unary.shape)}")
    dtype = unary.dtype
    _check_float(unary)
    # Broadcast and boundary scores in the solver's dtype too: their gradients sum over positions.
    wide = solver_dtype()
    unary = ops.cast(unary, wide)
    transitions = ops.cast(ops.convert_to_tensor(transitions), wide)
    batch, n, num_labels = unary.shape
    if len(transitions.shape) not in (2, 3, 4) or tuple(transitions.shape[-2:]) != (num_labels, num_labels):
        raise ValueError(
            f"transitions must have shape (K, K), (batch, K, K) or (batch, n - 1, K, K) with K={num_labels}. "
            f"Received: transitions.shape={tuple(transitions.shape)}"
        )
    if len(transitions.shape) == 3:
        transitions = transitions[:, None]
    pairwise = ops.broadcast_to(transitions, (batch, max(n - 1, 0), num_labels, num_labels))
    unary = add_boundary_scores(unary, start, end, lengths)
    outputs = sparsemap_op(_SEQUENCE, unary, pairwise, lengths=lengths, **kwargs)
    u, v = (ops.cast(marginals, dtype) for marginals in outputs[:2])
    if len(outputs) == 2:
        return u, v
    return u, v, _info_in(outputs[2], keras.backend.standardize_dtype(dtype))
