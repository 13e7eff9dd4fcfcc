"""SparseMAP as a differentiable op, on the TensorFlow, JAX and PyTorch backends of Keras.

Solves, for every example of a batch,

    (u, v) = argmax_{(u, v) in M}  <eta_u, u> + <eta_v, v> - ||u||^2 / 2,

over the marginal polytope ``M`` of a structure, with the numpy engine run by one host
call per batch (:mod:`keras_structured.ops.host_call`: ``tf.numpy_function`` on
TensorFlow, ``jax.pure_callback`` on JAX, a ``torch.library`` custom op on PyTorch). The
backward pass is the closed-form Jacobian of Niculae et al. (2018, Prop. 1) built from
the final active set, applied by one compiled (numba) call per batch. This module
prepares the scores with TensorFlow; on the other backends :func:`sparsemap` and
:func:`sparsemap_sequence` hand them to :mod:`keras_structured.ops.portable_sparsemap`,
which does the same with ``keras.ops`` (there ``return_info``'s number of structures,
which depends on the data, is padded to a static bound under ``jax.jit`` and
``torch.compile``).

Whatever the input dtype, the op works in float64 inside: the solver, the Jacobian
factors it returns and every product with them; the results and the gradients are cast
to the input dtype once, at the end. The factors cannot be rounded to float32: the
inverse KKT block they hold can have a condition number of 1e12 (trees of 50 words),
and products with a float32 copy of it come out wrong in sign and magnitude.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_structured.engine import SequenceStructure, SolverOptions, Structure
from keras_structured.engine.options import resolve_options
from keras_structured.ops import host_call, portable_sparsemap
from keras_structured.ops.dtypes import compute_dtype, integer_lengths
from keras_structured.ops.host_call._tf import SOLVER_DTYPE, flatten_examples
from keras_structured.ops.invalid_inputs import InvalidScoresError, raising_invalid_scores
from keras_structured.ops.sequence_scores import add_boundary_scores
from keras_structured.ops.xla import OP_FIX, refuse_xla

__all__ = [
    "InvalidScoresError",
    "SOLVER_DTYPE",
    "flatten_examples",
    "prepare_scores",
    "raising_invalid_scores",
    "sparsemap",
    "sparsemap_sequence",
    "sparsemap_solution",
]


def _on_tensorflow() -> bool:
    return keras.backend.backend() == "tensorflow"


def _check_scores(name: str, scores: tf.Tensor, min_rank: int) -> None:
    if scores.shape.rank is None or scores.shape.rank < min_rank:
        raise ValueError(
            f"sparsemap needs {name} with a leading batch dimension (rank >= {min_rank}). "
            f"Received: {name}.shape={scores.shape}"
        )


def prepare_scores(structure: Structure, eta_u: tf.Tensor, eta_v, lengths) -> list[tf.Tensor]:
    """Validate scores for a structure and return ``[scores_u, scores_v(, lengths)]``.

    Shapes and the lengths' integer dtype are checked at trace time (``ValueError``); values
    are checked at run time by the engine, in the op's numpy function (see
    :class:`InvalidScoresError`);
    scores are cast to the compute dtype (float32 for half precision), a missing
    ``eta_v`` becomes zeros of the structure's static higher-order shape.
    """
    _check_scores("eta_u", eta_u, 2)
    dtype = compute_dtype(eta_u)
    u_shape = tuple(eta_u.shape[1:])
    if eta_v is None:
        v_shape = structure.v_shape(u_shape)
        if None in v_shape:
            raise ValueError(
                f"eta_v is required when its shape is not static. Received: eta_u.shape={eta_u.shape}"
            )
        eta_v = tf.zeros(tf.concat([tf.shape(eta_u)[:1], v_shape], axis=0), dtype)
    eta_v = tf.convert_to_tensor(eta_v)
    _check_scores("eta_v", eta_v, 1)
    structure.validate_shapes(u_shape, tuple(eta_v.shape[1:]))
    if eta_u.shape[0] is not None and eta_v.shape[0] is not None and eta_u.shape[0] != eta_v.shape[0]:
        raise ValueError(
            "eta_u and eta_v must have the same batch size. "
            f"Received: eta_u.shape={eta_u.shape}, eta_v.shape={eta_v.shape}"
        )
    inputs = [tf.cast(eta_u, dtype), tf.cast(eta_v, dtype)]
    if lengths is not None:
        inputs.append(integer_lengths(lengths, tf.int64))
    return inputs


def sparsemap(
    structure: Structure,
    eta_u,
    eta_v=None,
    *,
    lengths=None,
    options: SolverOptions | None = None,
    method: str | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
    exact_jacobian: bool | None = None,
    return_info: bool = False,
):
    """Batched SparseMAP with a closed-form gradient.

    Args:
        structure: a :class:`keras_structured.engine.Structure`.
        eta_u: ``(batch, *u_shape)`` unary scores (float16/32/64); ``-inf``
            forbids a part (it never appears in the solution).
        eta_v: ``(batch, *v_shape)`` higher-order scores; may be None when the
            structure's higher-order part is empty.
        lengths: optional integer per-example sizes of padded inputs, shape
            ``(batch,)`` or ``(batch, d)`` as the structure expects; padded parts of
            ``u`` and ``v`` are exactly zero and get zero gradient.
        options: the solver settings, a :class:`keras_structured.engine.SolverOptions`
            (default: ``SolverOptions()``), checked once and passed to the engine as
            they are. The four arguments below are shortcuts for its fields; None
            leaves a field to ``options``.
        method: ``"active_set"`` (default) or a Frank-Wolfe variant, see
            :func:`keras_structured.engine.solve`.
        tol: relative Wolfe-gap tolerance, a finite number >= 0 (default 1e-6).
        max_iter: maximum MAP calls after the warm start, an integer >= 1 (default 2500).
        exact_jacobian: (active set) run the solver on past ``tol`` to its finite
            termination, so that the gradient is the exact Jacobian product (the
            default); False stops at ``tol``, a few MAP calls cheaper, with a
            gradient built from a possibly incomplete support (see
            :func:`keras_structured.engine.solve`). Frank-Wolfe gradients are
            always approximate.
        return_info: also return a dict with ``weights`` ``(batch, k)``,
            ``structures`` (codes, padded with -1), ``gap``, ``map_calls`` and
            ``converged``; it carries no gradient. ``k`` is the batch's largest
            support; under JAX transformations (``jax.jit``, hence the Keras JAX
            trainer's steps, ``jax.grad``, ``jax.vmap``) and ``torch.compile``, which
            need static shapes, it is the bound
            :func:`keras_structured.ops.host_call.max_support` (``prod(u_shape) + 1``
            for the active set, ``max_iter + 1`` for Frank-Wolfe). On JAX without
            64-bit types the codes are int32.

    Returns:
        ``(u, v)`` with the shapes and dtype of ``(eta_u, eta_v)``, plus the info
        dict when ``return_info``.

    Raises:
        ValueError: at trace time, for shapes that do not fit the structure, lengths of
            a non-integer dtype, solver settings that break the rules of
            ``SolverOptions``, a keyword that disagrees with ``options``, or a call inside
            an XLA-compiled function (the MAP oracle runs in Python, see
            :mod:`keras_structured.ops.xla`).
        tf.errors.InvalidArgumentError: at run time, for NaN or +inf scores, or when
            ``-inf`` scores (forbidden parts) rule out every structure (an
            :class:`InvalidScoresError`, also a ``ValueError``, in eager mode; on PyTorch
            and eagerly on JAX the same error; under ``jax.jit``, inside the
            ``JaxRuntimeError`` of the host callback).

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> u, _ = sparsemap(SimplexStructure(), [[1.0, 0.5, -1.0]])
        >>> u.numpy()
        array([[0.75, 0.25, 0.  ]], dtype=float32)
    """
    if not _on_tensorflow():
        options = resolve_options(
            options, method=method, tol=tol, max_iter=max_iter, exact_jacobian=exact_jacobian
        )
        return portable_sparsemap.sparsemap(structure, eta_u, eta_v, lengths, options, return_info)
    refuse_xla("keras_structured.sparsemap", OP_FIX)
    options = resolve_options(
        options, method=method, tol=tol, max_iter=max_iter, exact_jacobian=exact_jacobian
    )
    eta_u = tf.convert_to_tensor(eta_u)
    inputs = prepare_scores(structure, eta_u, eta_v, lengths)
    dtype = inputs[0].dtype
    scores_u, scores_v = (tf.cast(scores, SOLVER_DTYPE) for scores in inputs[:2])
    lengths = inputs[2] if len(inputs) > 2 else None
    outputs = host_call.solve(structure, options, scores_u, scores_v, lengths, info=return_info)
    u, v = tf.cast(outputs[0], eta_u.dtype), tf.cast(outputs[1], eta_u.dtype)
    if not return_info:
        return u, v
    weights, codes, gap, map_calls, converged = outputs[2:]
    info = {
        "weights": tf.stop_gradient(weights),
        "structures": codes,
        "gap": tf.stop_gradient(gap),
        "map_calls": map_calls,
        "converged": converged,
    }
    return u, v, _info_in(info, dtype)


def _info_in(info: dict, dtype: tf.DType) -> dict:
    """The info dict of :func:`sparsemap` with its float arrays (weights, gap) in ``dtype``."""
    return {key: tf.cast(value, dtype) if key in ("weights", "gap") else value for key, value in info.items()}


def sparsemap_solution(
    structure: Structure, eta_u, eta_v=None, *, lengths=None, options: SolverOptions | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """SparseMAP's solution ``(u, v)`` in float64, with no gradient and no Jacobian factors.

    For the structured losses, whose gradient is the solution itself (Danskin's theorem):
    the op then skips building and shipping the factors of :func:`sparsemap`'s backward
    pass (on JAX and PyTorch, storing the active sets). Arguments as for :func:`sparsemap`;
    the scores carry no gradient. On JAX without 64-bit types the solution is float32.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> sparsemap_solution(SimplexStructure(), [[1.0, 0.5, -1.0]])[0].numpy()
        array([[0.75, 0.25, 0.  ]])
    """
    options = resolve_options(options)
    if not _on_tensorflow():
        return portable_sparsemap.sparsemap_solution(structure, eta_u, eta_v, lengths, options)
    refuse_xla("keras_structured.sparsemap", OP_FIX)
    inputs = prepare_scores(structure, tf.convert_to_tensor(eta_u), eta_v, lengths)
    scores_u, scores_v = (tf.stop_gradient(tf.cast(scores, SOLVER_DTYPE)) for scores in inputs[:2])
    lengths = inputs[2] if len(inputs) > 2 else None
    u, v = host_call.solve(structure, options, scores_u, scores_v, lengths, jacobian=False)
    return u, v


def sparsemap_sequence(unary, transitions, start=None, end=None, lengths=None, **kwargs):
    """SparseMAP over label sequences (linear-chain structure).

    Solves ``max_{(u, v) in M} <unary', u> + <transitions, v> - ||u||^2 / 2`` where
    ``unary'`` adds the start scores to the first position and the end scores to
    the last one.

    Args:
        unary: ``(batch, n, K)`` label scores.
        transitions: ``(K, K)``, ``(batch, K, K)`` or ``(batch, n - 1, K, K)``
            transition scores (from-label first).
        start: optional ``(K,)`` or ``(batch, K)`` scores of the first label.
        end: optional ``(K,)`` or ``(batch, K)`` scores of the last label (the
            label at position ``lengths - 1`` when lengths are given).
        lengths: optional ``(batch,)`` integer lengths; positions past them are
            padding with zero marginals and zero gradient.
        **kwargs: forwarded to :func:`sparsemap` (``options``, ``method``, ``tol``,
            ``max_iter``, ``exact_jacobian``, ``return_info``).

    Returns:
        ``u`` ``(batch, n, K)`` label marginals, ``v`` ``(batch, n - 1, K, K)``
        transition marginals (and the info dict with ``return_info=True``).

    Raises:
        ValueError: at trace time, for scores of the wrong shapes, and as for
            :func:`sparsemap`.
        tf.errors.InvalidArgumentError: at run time, as for :func:`sparsemap`.

    Example:
        >>> u, v = sparsemap_sequence(tf.random.normal([2, 5, 3]), tf.zeros([3, 3]))
        >>> u.shape, v.shape
        (TensorShape([2, 5, 3]), TensorShape([2, 4, 3, 3]))
    """
    if not _on_tensorflow():
        return portable_sparsemap.sparsemap_sequence(unary, transitions, start, end, lengths, **kwargs)
    unary = tf.convert_to_tensor(unary)
    _check_scores("unary", unary, 3)
    if unary.shape.rank != 3:
        raise ValueError(f"unary must have shape (batch, n, K). Received: unary.shape={unary.shape}")
    dtype, info_dtype = unary.dtype, compute_dtype(unary)  # a TypeError for non-float scores
    # Broadcast and boundary scores in float64 too: their gradients sum over positions.
    unary = tf.cast(unary, SOLVER_DTYPE)
    transitions = tf.cast(tf.convert_to_tensor(transitions), SOLVER_DTYPE)
    num_labels = unary.shape[-1]
    square = transitions.shape[-2:].is_compatible_with([num_labels] * 2)
    if transitions.shape.rank not in (2, 3, 4) or not square:
        raise ValueError(
            f"transitions must have shape (K, K), (batch, K, K) or (batch, n - 1, K, K) with K={num_labels}. "
            f"Received: transitions.shape={transitions.shape}"
        )
    if transitions.shape.rank == 3:
        transitions = transitions[:, None]
    shape = tf.shape(unary)
    pair_shape = tf.stack([shape[0], tf.maximum(shape[1] - 1, 0), shape[2], shape[2]])
    pairwise = tf.broadcast_to(transitions, pair_shape)
    pairwise.set_shape(
        [
            unary.shape[0],
            None if unary.shape[1] is None else max(unary.shape[1] - 1, 0),
            num_labels,
            num_labels,
        ]
    )
    unary = add_boundary_scores(unary, start, end, lengths)
    outputs = sparsemap(SequenceStructure(), unary, pairwise, lengths=lengths, **kwargs)
    u, v = (tf.cast(marginals, dtype) for marginals in outputs[:2])
    if len(outputs) == 2:
        return u, v
    return u, v, _info_in(outputs[2], info_dtype)
