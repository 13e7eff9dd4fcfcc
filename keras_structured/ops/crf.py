"""Conditional random fields: log-partition functions and marginals, on every Keras backend.

A CRF puts the Gibbs distribution ``p(s) = exp(<eta, a_s>) / Z(eta)`` on the
structures ``s`` of a marginal polytope. Its log-partition function

    log Z(eta) = log sum_s exp(<eta, a_s>) = max_{mu in M} <eta, mu> + H(mu)

is smooth and its gradient is the vector of marginals ``mu = E_p[a_s]``. Two
structures are covered:

* linear chains, by the forward algorithm in the log domain, in ``keras.ops`` (on
  TensorFlow also in graph mode, ``tf.function`` and XLA), with marginals by automatic
  differentiation;
* non-projective dependency trees, by the matrix-tree theorem (Koo et al., 2007),
  with a subtraction-free elimination of the Laplacian: a compiled kernel
  (:mod:`keras_structured.engine.matrix_tree`, float64, marginals by its hand-written
  backward pass, ``O(n^2)`` memory) called on the host: ``tf.numpy_function`` on
  TensorFlow, :mod:`keras_structured.ops.matrix_tree_host` on JAX (under ``jax.jit`` and
  ``jax.vmap``) and PyTorch. Inside ``tf.function(jit_compile=True)``, where XLA cannot
  call Python, the same elimination runs in ``keras.ops`` instead (a loop, slower, and its
  gradient stores every step); that elimination also gives the second derivatives of
  ``log Z`` (the gradient of the marginals) on every backend.

Half-precision inputs are computed in float32 (the results keep that dtype). Lengths
outside ``[0, n]`` and NaN or ``+inf`` scores where a structure uses them (``-inf`` forbids a
part) raise ``tf.errors.InvalidArgumentError`` on TensorFlow and ``ValueError`` on JAX and
PyTorch when their values are known; where they are not (``jax.jit``, XLA) the offending
examples get a NaN ``log Z``. The tree's scores are checked on the host, by its kernel's call
(:mod:`keras_structured.ops.matrix_tree_host`): they raise
:class:`~keras_structured.ops.invalid_inputs.InvalidScoresError` (both errors) wherever the
kernel runs, under ``jax.jit`` as the message of JAX's ``JaxRuntimeError``; only XLA gives NaN.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_structured.engine import matrix_tree
from keras_structured.ops.dtypes import compute_dtype, integer_lengths
from keras_structured.ops.host_call import call
from keras_structured.ops.invalid_inputs import checked, nan_where_invalid
from keras_structured.ops.matrix_tree_host import TREE_CRF, checked_factorize
from keras_structured.ops.portable_sparsemap import solver_dtype
from keras_structured.ops.sequence_scores import pack_sequence_scores, unpack_sequence_scores
from keras_structured.ops.xla import _in_xla_context

_INVALID_LENGTHS = (
    "lengths must be in [0, n], n the number of positions (words for trees). "
    "Received: lengths with this many values outside:"
)
_INVALID_CHAIN_SCORES = (
    "Linear-chain CRF scores must not be NaN or +inf where a sequence uses them (-inf forbids "
    "a label or a transition). Received: unary, transition, start or end scores with NaN or "
    "+inf values in this many examples:"
)


def _vjp(function, inputs: list, cotangent=None) -> list:
    """Gradients of ``<cotangent, function(*inputs)>`` with respect to ``inputs``, themselves
    differentiable (marginals are the gradient of ``log Z``, and have one).

    ``cotangent`` defaults to ones. The backend's own autodiff: ``tf.GradientTape``,
    ``jax.vjp``, ``torch.autograd.grad`` (with a graph when gradients are being recorded,
    also inside a backward pass that builds one).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = function(*inputs)
        return tape.gradient(
            outputs, inputs, output_gradients=cotangent, unconnected_gradients=tf.UnconnectedGradients.ZERO
        )
    if backend == "jax":
        import jax

        outputs, pullback = jax.vjp(function, *inputs)
        return list(pullback(ops.ones_like(outputs) if cotangent is None else cotangent))
    if backend == "torch":
        import torch

        recording = torch.is_grad_enabled()
        with torch.enable_grad():
            inputs = [x if x.requires_grad else x.detach().requires_grad_() for x in inputs]
            outputs = function(*inputs)
            cotangent = torch.ones_like(outputs) if cotangent is None else cotangent
            gradients = torch.autograd.grad(
                outputs, inputs, cotangent, create_graph=recording, allow_unused=True, materialize_grads=True
            )
        return list(gradients)
    raise ValueError(f"The CRF ops run on TensorFlow, JAX and PyTorch. Received: backend={backend!r}")


def _checked_lengths(lengths, scores, size):
    """``(lengths, valid)``: ``(batch,)`` int32 lengths (default ``size``) of an integer dtype,
    checked to be in ``[0, size]`` and clipped to it, and which examples' were in it.

    The range the SparseMAP structures' ``validate_lengths`` accept: 0 is an empty example.
    The check raises where values can be read (:func:`keras_structured.ops.invalid_inputs.checked`:
    also at run time in TensorFlow graphs); elsewhere the callers return NaN for ``~valid``.
    """
    batch = ops.shape(scores)[0]
    if lengths is None:  # zeros plus size: ``ops.full`` reads its fill value back on ``meta``
        return ops.zeros((batch,), "int32") + size, ops.ones((batch,), "bool")
    lengths = integer_lengths(lengths)
    vector = len(lengths.shape) == 1
    if not vector or None not in (lengths.shape[0], scores.shape[0]) and lengths.shape[0] != scores.shape[0]:
        raise ValueError(
            f"lengths must have shape (batch,) for scores of shape {scores.shape}. "
            f"Received: lengths.shape={lengths.shape}"
        )
    valid = ops.logical_and(lengths >= 0, lengths <= size)
    outside = ops.sum(ops.cast(ops.logical_not(valid), "int32"))
    lengths = checked(lengths, ops.all(valid), _INVALID_LENGTHS, outside)
    return ops.clip(lengths, 0, size), valid


def _fold(body, state: tuple, start, stop) -> tuple:
    """``state = body(i, state)`` for ``i`` in ``[start, stop)``, differentiably.

    ``keras.ops.fori_loop``: on JAX a scan (bounds known when it traces), which reverse mode
    differentiates; on PyTorch a Python loop. On TensorFlow a ``while_loop`` with
    ``maximum_iterations``, without which XLA cannot differentiate it (``stop`` may be a
    tensor there, for dimensions unknown until run time).
    """
    if keras.backend.backend() == "tensorflow":
        return tf.while_loop(
            lambda i, *_: i < stop,
            lambda i, *state: (i + 1, *body(i, state)),
            (start, *state),
            maximum_iterations=stop - start,
        )[1:]
    return ops.fori_loop(start, stop, body, state)


def _chain_inputs(unary, transitions, start, end, lengths):
    """Validated ``(unary, pairwise (batch, n - 1, K, K), start, end, lengths, valid)`` in a
    common dtype; ``valid`` is False for the examples with invalid lengths or scores, which
    raise where values can be read (:func:`keras_structured.ops.invalid_inputs.checked`)."""
    unary = ops.convert_to_tensor(unary)
    if len(unary.shape) != 3 or unary.shape[1] == 0:
        raise ValueError(
            f"unary must have shape (batch, n, K) with n >= 1. Received: unary.shape={unary.shape}"
        )
    dtype = compute_dtype(unary)
    unary = ops.cast(unary, dtype)
    num_labels = unary.shape[-1]
    transitions = ops.cast(ops.convert_to_tensor(transitions), dtype)
    if len(transitions.shape) not in (2, 3, 4) or tuple(transitions.shape[-2:]) != (num_labels, num_labels):
        raise ValueError(
            f"transitions must have shape (K, K), (batch, K, K) or (batch, n - 1, K, K) with K={num_labels}. "
            f"Received: transitions.shape={transitions.shape}"
        )
    # Packing broadcasts every accepted transition layout to one per position.
    _, pairwise = unpack_sequence_scores(pack_sequence_scores(unary, transitions))
    batch = ops.shape(unary)[0]
    boundary = []
    for name, scores in (("start", start), ("end", end)):
        if scores is None:
            boundary.append(ops.zeros((batch, num_labels), dtype))
            continue
        scores = ops.cast(ops.convert_to_tensor(scores), dtype)
        if len(scores.shape) not in (1, 2) or scores.shape[-1] != num_labels:
            raise ValueError(
                f"{name} scores must have shape (K,) or (batch, K) with K={num_labels}. "
                f"Received: {name}.shape={scores.shape}"
            )
        boundary.append(ops.broadcast_to(scores, (batch, num_labels)))
    lengths, valid = _checked_lengths(lengths, unary, ops.shape(unary)[1])
    finite = _valid_chain_scores(unary, pairwise, *boundary, lengths)
    count = ops.sum(ops.cast(ops.logical_not(finite), "int32"))
    unary = checked(unary, ops.all(finite), _INVALID_CHAIN_SCORES, count)
    return unary, pairwise, *boundary, lengths, ops.logical_and(valid, finite)


def _nan_or_posinf(scores):
    return ops.logical_or(ops.isnan(scores), ops.isposinf(scores))


def _valid_chain_scores(unary, pairwise, start, end, lengths):
    """``(batch,)``: whether the scores that an example's label sequences use (its positions,
    the transitions between them, the boundary scores of a nonempty one) are free of NaN and
    ``+inf``."""
    used = ops.arange(ops.shape(unary)[1], dtype="int32")[None, :] < lengths[:, None]
    bad = ops.any(_nan_or_posinf(unary) & used[:, :, None], axis=(1, 2))
    bad = bad | ops.any(_nan_or_posinf(pairwise) & used[:, 1:, None, None], axis=(1, 2, 3))
    bad = bad | (ops.any(_nan_or_posinf(start) | _nan_or_posinf(end), axis=1) & (lengths > 0))
    return ops.logical_not(bad)


def _forward(unary, pairwise, start, end, lengths):
    """``log Z`` ``(batch,)`` of linear chains by the log-domain forward algorithm."""

    def step(position, state):
        (alpha,) = state
        transition, scores = pairwise[:, position - 1], unary[:, position]
        advanced = ops.logsumexp(alpha[:, :, None] + transition, axis=1) + scores
        return (ops.where((position < lengths)[:, None], advanced, alpha),)

    (alpha,) = _fold(step, (start + unary[:, 0],), 1, ops.shape(unary)[1])
    log_z = ops.logsumexp(alpha + end, axis=-1)
    return ops.where(lengths > 0, log_z, ops.zeros_like(log_z))


def linear_chain_crf_log_partition(unary, transitions, start=None, end=None, lengths=None):
    """Log-partition function of a linear-chain CRF, by the forward algorithm.

    Computes, for every example,

        log Z = log sum_y exp(start[y_1] + sum_i unary[i, y_i]
                              + sum_i transitions[i, y_i, y_{i+1}] + end[y_L])

    over all label sequences ``y`` of length ``L`` (the example's length), in the
    log domain. An empty sequence (``L = 0``) has ``log Z = 0``. Runs on every Keras
    backend (``keras.ops``), differentiably.

    Args:
        unary: ``(batch, n, K)`` label scores, ``n >= 1``.
        transitions: ``(K, K)``, ``(batch, K, K)`` or ``(batch, n - 1, K, K)``
            transition scores (from-label first).
        start: optional ``(K,)`` or ``(batch, K)`` scores of the first label.
        end: optional ``(K,)`` or ``(batch, K)`` scores of the last label (at
            position ``L - 1``).
        lengths: optional ``(batch,)`` integer lengths in ``[0, n]``; positions
            past them are padding and get zero marginals.

    Returns:
        ``(batch,)`` log-partition values (float32 for half-precision inputs).

    Raises:
        ValueError: at trace time, for shapes that do not fit, or lengths of a
            non-integer dtype; on JAX and PyTorch also for lengths outside ``[0, n]``, or
            NaN or ``+inf`` scores within an example's length, when their values are known
            (elsewhere, under ``jax.jit`` and XLA, their ``log Z`` is NaN).
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for lengths outside
            ``[0, n]`` or NaN or ``+inf`` scores within an example's length.

    Example:
        >>> # Zero scores: log Z = log(number of sequences) = log(2 ** 3).
        >>> log_z = linear_chain_crf_log_partition(tf.zeros([1, 3, 2]), tf.zeros([2, 2]))
        >>> round(float(tf.exp(log_z[0])), 4)
        8.0
    """
    *inputs, valid = _chain_inputs(unary, transitions, start, end, lengths)
    return nan_where_invalid(_forward(*inputs), valid)


def linear_chain_crf_marginals(unary, transitions, start=None, end=None, lengths=None):
    """Label and transition marginals of a linear-chain CRF (gradient of ``log Z``).

    Arguments as for :func:`linear_chain_crf_log_partition`.

    Returns:
        ``(u, v)``: ``u`` ``(batch, n, K)`` with ``u[b, i, k] = p(y_i = k)`` and
        ``v`` ``(batch, n - 1, K, K)`` with ``v[b, i, k, l] = p(y_i = k, y_{i+1} = l)``;
        zero past each example's length.

    Example:
        >>> u, v = linear_chain_crf_marginals(tf.zeros([1, 3, 2]), tf.zeros([2, 2]))
        >>> u.numpy()[0].tolist(), v.shape
        ([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]], TensorShape([1, 2, 2, 2]))
    """
    unary, pairwise, start, end, lengths, _ = _chain_inputs(unary, transitions, start, end, lengths)
    u, v = _vjp(lambda unary, pairwise: _forward(unary, pairwise, start, end, lengths), [unary, pairwise])
    return u, v


def _tree_scores(scores):
    """``(batch, n + 1, n + 1)`` arc scores in their compute dtype, their shape checked."""
    scores = ops.convert_to_tensor(scores)
    if len(scores.shape) != 3 or None not in scores.shape[1:] and scores.shape[1] != scores.shape[2]:
        raise ValueError(
            "Arc scores must have shape (batch, n + 1, n + 1) [head, modifier] with index 0 the root. "
            f"Received: scores.shape={scores.shape}"
        )
    return ops.cast(scores, compute_dtype(scores))


def _tree_lengths(scores, lengths):
    """:func:`_checked_lengths` of trees: ``(lengths, valid)``, at most ``n`` words."""
    return _checked_lengths(lengths, scores, ops.shape(scores)[1] - 1)


def _tree_inputs(scores, lengths):
    """``(scores, lengths)``, checked."""
    scores = _tree_scores(scores)
    return scores, _tree_lengths(scores, lengths)[0]


def _log_sum(values, axis):
    """``log sum exp`` along ``axis``: ``-inf`` (zero gradient) where every term is ``-inf``."""
    top = ops.stop_gradient(ops.max(values, axis=axis, keepdims=True))
    top = ops.where(ops.isfinite(top), top, ops.zeros_like(top))
    return _log_of(ops.sum(ops.exp(values - top), axis=axis), ops.squeeze(top, axis))


def _log_add(a, b):
    return _log_sum(ops.stack([a, b]), 0)


def _log_of(values, log_scale):
    """``log(values) + log_scale`` of nonnegative ``values``, ``-inf`` (zero gradient) at zeros."""
    positive = values > 0
    logs = ops.log(ops.where(positive, values, ops.ones_like(values))) + log_scale
    return ops.where(positive, logs, ops.full_like(values, -float("inf")))


def _log_det_by_elimination(log_arcs, log_root, num_words):
    """``log det`` of the Laplacian of arcs ``exp(log_arcs)`` and root weights ``exp(log_root)``.

    Grassmann-Taksar-Heyman elimination, word by word: with the pivot
    ``p = r_k + sum_i A[i, k]``, the Schur complement is the Laplacian of
    ``A' = A + A[:, k] A[k, :] / p`` and ``r' = r + r_k A[k, :] / p``. The arcs are kept
    in the linear domain, each column scaled to a maximum of 1 by a log-domain factor
    (the update leaves those factors alone, and no column sum ever grows), and the
    root weights in the log domain, where they may fall far below the arcs.
    """
    scale = ops.stop_gradient(ops.max(log_arcs, axis=1))
    scale = ops.where(ops.isfinite(scale), scale, ops.zeros_like(scale))
    arcs = ops.exp(log_arcs - scale[:, None, :])
    words = ops.arange(num_words, dtype="int32")
    self_loops = ops.equal(words[:, None], words[None, :])[None]

    def eliminate(k, state):
        arcs, scale, log_root, log_det = state
        into_k, out_of_k = arcs[:, :, k], arcs[:, k, :]
        total = ops.sum(into_k, axis=1)
        pivot = _log_add(log_root[:, k], _log_of(total, scale[:, k]))
        log_pivot = ops.where(ops.isfinite(pivot), pivot, ops.zeros_like(pivot))
        # A^T e_k / p <= 1 (the column's largest arc is 1); with no arc into k there is nothing
        # to spread, and the guard keeps exp from overflowing (and NaN out of the gradient).
        arcs_in = total > 0
        factor = ops.exp(ops.where(arcs_in, scale[:, k] - log_pivot, ops.zeros_like(pivot)))
        factor = ops.where(arcs_in, factor, ops.zeros_like(factor))
        arcs = arcs + (factor[:, None] * into_k)[:, :, None] * out_of_k[:, None, :]
        gain = (log_root[:, k] - log_pivot)[:, None] + _log_of(out_of_k, scale)
        log_root = _log_add(log_root, gain)
        # Word k is gone: no arcs into or out of it, and no self-loops; columns back to a max of 1.
        gone = ops.equal(words, k)
        removed = gone[None, :, None] | gone[None, None, :] | self_loops
        arcs = ops.where(removed, ops.zeros_like(arcs), arcs)
        top = ops.stop_gradient(ops.max(arcs, axis=1))
        top = ops.where(top > 0, top, ops.ones_like(top))
        return arcs / top[:, None, :], scale + ops.log(top), log_root, log_det + pivot

    return _fold(eliminate, (arcs, scale, log_root, ops.zeros_like(log_root[:, 0])), 0, num_words)[-1]


def _eliminated_log_partition(scores, lengths, single_root):
    """``log Z`` of arc-factored trees in ``keras.ops``, differentiable to any order.

    The path under XLA and for second derivatives: the same computation as
    :mod:`keras_structured.engine.matrix_tree` (whose docstring explains it), in the
    input's dtype (float64 for ``single_root``, where the backend has it), with ``log det``
    of the Laplacian from :func:`_log_det_by_elimination`.
    """
    result_dtype = scores.dtype
    # The single-root offset below is thousands of nats: float64 keeps the digits under it.
    dtype = solver_dtype() if single_root else result_dtype
    scores = ops.cast(scores, dtype)
    neg_inf = -float("inf")
    num_words = ops.shape(scores)[1] - 1
    words = ops.arange(num_words, dtype="int32")
    word = words[None, :] < lengths[:, None]  # (batch, n)
    # Arcs (head, modifier) between real words, head != modifier.
    word_arcs = word[:, :, None] & word[:, None, :] & ops.not_equal(words[:, None], words[None, :])[None]
    log_arcs = ops.where(word_arcs, scores[:, 1:, 1:], neg_inf)
    # Padded words are isolated, with root weight 1: pivots of 1 that leave det L alone.
    log_root = ops.where(word, scores[:, 0, 1:], ops.zeros_like(scores[:, 0, 1:]))
    offset = ops.zeros_like(log_root[:, 0])
    if single_root:
        # Root weights scaled by a vanishing t = exp(offset): see matrix_tree._sentence_laplacian.
        candidates = ops.concatenate([log_arcs, ops.where(word, log_root, neg_inf)[:, None, :]], axis=1)
        high = ops.max(candidates, axis=(1, 2))  # forbidden and padded arcs are -inf
        low = ops.min(ops.where(candidates > neg_inf, candidates, -neg_inf), axis=(1, 2))
        n = ops.cast(lengths, dtype)
        spread = ops.where(n > 0, high - low, ops.zeros_like(n))
        offset = ops.stop_gradient(-(n + 1.0) * ops.log(n + 1.0) - n * spread - 40.0)
        offset = ops.where(n > 0, offset, ops.zeros_like(offset))
        log_root = ops.where(word, log_root + offset[:, None], log_root)
        floor = ops.stop_gradient(ops.where(n > 0, n * low - 20.0, ops.full_like(n, neg_inf)))

    log_det = _log_det_by_elimination(log_arcs, log_root, num_words)
    log_z = log_det - offset
    if single_root:
        log_z = ops.where(log_z > floor, log_z, ops.full_like(log_z, neg_inf))
    # NaN or +inf on an arc of a sentence: NaN (the kernel raises; under XLA nothing can).
    finite = ~ops.any(_nan_or_posinf(log_arcs), axis=(1, 2)) & ~ops.any(_nan_or_posinf(log_root), axis=1)
    return ops.cast(nan_where_invalid(log_z, finite), result_dtype)


def _eliminated_marginals(scores, lengths, single_root):
    """Marginals by automatic differentiation of :func:`_eliminated_log_partition`."""
    return _vjp(lambda scores: _eliminated_log_partition(scores, lengths, single_root), [scores])[0]


def _with_second_derivatives(marginals, scores, lengths, single_root):
    """``marginals`` (the compiled kernel's, for ``scores``) with a gradient: the second
    derivatives of ``log Z``, by automatic differentiation of :func:`_eliminated_marginals`."""

    # Every tensor an argument: JAX's custom gradients cannot close over the tracers of jax.jit.
    @ops.custom_gradient
    def attach(scores, marginals, lengths):
        def grad(*args, upstream=None):
            # TensorFlow and JAX call grad(upstream); PyTorch grad(*inputs, upstream=upstream).
            upstream = args[0] if upstream is None else upstream
            marginals_of = lambda s: _eliminated_marginals(s, lengths, single_root)  # noqa: E731
            return _vjp(marginals_of, [scores], upstream)[0], None, None

        return ops.copy(marginals), grad

    return attach(scores, marginals, lengths)


def _factorize(scores, lengths, single_root):
    """:func:`~keras_structured.ops.matrix_tree_host.checked_factorize` of ``scores``, on TensorFlow."""
    outputs = tf.numpy_function(
        lambda scores, lengths: checked_factorize(scores, lengths, single_root),
        [tf.cast(scores, tf.float64), lengths],
        [tf.float64] * 6,
        stateful=False,
        name="matrix_tree_factorize",
    )
    outputs[0].set_shape(scores.shape[:1])
    return outputs


def _marginals_from_factors(factors, scores, lengths, single_root):
    """Marginals in ``scores``' dtype from :func:`_factorize`'s ``factors``, differentiable."""
    marginals = tf.numpy_function(
        matrix_tree.marginals, [*factors, lengths], tf.float64, stateful=False, name="matrix_tree_marginals"
    )
    marginals.set_shape(scores.shape)
    return _with_second_derivatives(tf.cast(marginals, scores.dtype), scores, lengths, single_root)


def _on_host(scores, lengths, single_root):
    """``(log Z, marginals)`` by the host call of JAX and PyTorch, in ``scores``' dtype, without
    gradient (the scores reach it through ``stop_gradient``: JAX would otherwise look for a
    derivative of the callback when differentiating twice)."""
    wide = ops.cast(ops.stop_gradient(scores), solver_dtype())
    log_z, marginals = call(TREE_CRF, wide, lengths, single_root=single_root)
    return ops.cast(log_z, scores.dtype), ops.cast(marginals, scores.dtype)


def _tree_log_partition(scores, lengths, single_root):
    """``log Z`` by the compiled kernel with the marginals as its gradient, or under XLA by
    :func:`_eliminated_log_partition`.

    On TensorFlow the forward call keeps the kernel's factors for the backward one, which
    computes the marginals; on JAX and PyTorch, whose host calls return arrays of static
    shapes, the forward call returns the marginals at once.
    """
    if _in_xla_context():
        return _eliminated_log_partition(scores, lengths, single_root)
    if keras.backend.backend() == "tensorflow":

        @tf.custom_gradient
        def log_partition(scores):
            factors = _factorize(scores, lengths, single_root)

            def grad(upstream):
                marginals = _marginals_from_factors(factors, scores, lengths, single_root)
                return upstream[:, None, None] * marginals

            return tf.cast(factors[0], scores.dtype), grad

        return log_partition(scores)

    @ops.custom_gradient
    def log_partition(scores, lengths):
        log_z, marginals = _on_host(scores, lengths, single_root)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            marginals_with_gradient = _with_second_derivatives(marginals, scores, lengths, single_root)
            return upstream[:, None, None] * marginals_with_gradient, None

        return log_z, grad

    return log_partition(scores, lengths)


def tree_crf_log_partition(scores, lengths=None, single_root: bool = False):
    """Log-partition function of an arc-factored non-projective dependency-tree CRF.

    Computes ``log Z = log sum_T exp(sum_{(h, m) in T} scores[h, m])`` over all
    dependency trees ``T`` of a sentence of ``L`` words (every word has one head,
    the root or another word, and there is no cycle), with the matrix-tree
    theorem: ``Z`` is the determinant of the ``L x L`` Laplacian of the arc weights
    ``exp(scores)`` with the root row and column removed (Koo et al., 2007). With
    ``single_root=True`` only trees with exactly one word attached to the root
    count.

    The determinant is taken by eliminating one word at a time with the
    Grassmann-Taksar-Heyman update (arcs scaled per column, root weights in the log
    domain), which only adds nonnegative numbers:
    ``log Z`` keeps its relative accuracy for any scores, also confident ones whose
    best heads form cycles, where LU or QR on the Laplacian return garbage (in
    float64 too, once the best cycle outscores the best tree by about 20 nats).
    ``single_root`` counts the trees with one root child as the first-order term
    of ``Z`` in a vanishing scale of the root weights. Padded words are left out.

    A compiled kernel computes it on the host in float64 whatever the input dtype, in
    ``O(n^3)`` time and ``O(n^2)`` memory per sentence; its gradient (the marginals, see
    :func:`tree_crf_marginals`) comes from a hand-written backward pass of the
    elimination, accurate to about ``1e-12`` for any scores
    (:mod:`keras_structured.engine.matrix_tree`). On TensorFlow the backward call computes
    the marginals from the factors the forward call kept; on JAX and PyTorch (host calls
    of static shapes) the forward call computes them too, also when no gradient follows.
    Inside ``tf.function(jit_compile=True)`` the same elimination runs in ``keras.ops``
    instead (XLA cannot call the kernel), in the input's dtype: slower, and its gradient
    stores every step (``O(n^3)`` memory).

    Args:
        scores: ``(batch, n + 1, n + 1)`` arc scores ``[head, modifier]``; index 0 is
            the root. Arcs into the root (column 0) and the diagonal are ignored;
            ``-inf`` forbids an arc.
        lengths: optional ``(batch,)`` numbers of words in ``[0, n]``; words past
            them are padding.
        single_root: count only trees with a single word attached to the root.

    Returns:
        ``(batch,)`` log-partition values (float32 for half-precision inputs).

    Raises:
        ValueError: at trace time, for shapes that do not fit, or lengths of a
            non-integer dtype; on JAX and PyTorch also for lengths outside ``[0, n]``
            when their values are known (elsewhere their ``log Z`` is NaN).
        InvalidScoresError: at run time, for NaN or ``+inf`` scores on an arc of a
            sentence (from the root or a word to another of its words): a
            ``tf.errors.InvalidArgumentError`` and a ``ValueError``; under ``jax.jit``
            inside JAX's ``JaxRuntimeError``; under XLA their ``log Z`` is NaN instead.
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for lengths outside
            ``[0, n]``.

    Example:
        >>> # Two words with zero scores: 3 multi-root trees, 2 single-root ones.
        >>> scores = tf.zeros([1, 3, 3])
        >>> round(float(tf.exp(tree_crf_log_partition(scores)[0])), 4)
        3.0
        >>> round(float(tf.exp(tree_crf_log_partition(scores, single_root=True)[0])), 4)
        2.0
    """
    scores = _tree_scores(scores)
    lengths, valid = _tree_lengths(scores, lengths)
    return nan_where_invalid(_tree_log_partition(scores, lengths, single_root), valid)


def tree_crf_marginals(scores, lengths=None, single_root: bool = False):
    """Arc marginals ``p((h, m) in T)`` of a dependency-tree CRF (gradient of ``log Z``).

    Arguments as for :func:`tree_crf_log_partition`. The marginals are differentiable:
    their gradient (second derivatives of ``log Z``) is taken by automatic
    differentiation of the elimination written in ``keras.ops``.

    Returns:
        ``(batch, n + 1, n + 1)`` arc marginals ``[head, modifier]``; every real
        word's column sums to 1; column 0, the diagonal and padding are zero.

    Example:
        >>> mu = tree_crf_marginals(tf.zeros([1, 3, 3], tf.float64))
        >>> np.round(mu.numpy()[0] * 3, 6).tolist()
        [[0.0, 2.0, 2.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    scores, lengths = _tree_inputs(scores, lengths)
    if _in_xla_context():
        return _eliminated_marginals(scores, lengths, single_root)
    if keras.backend.backend() == "tensorflow":
        return _marginals_from_factors(_factorize(scores, lengths, single_root), scores, lengths, single_root)
    return _with_second_derivatives(_on_host(scores, lengths, single_root)[1], scores, lengths, single_root)
