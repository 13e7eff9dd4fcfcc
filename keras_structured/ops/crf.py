"""Conditional random fields: log-partition functions and marginals in TensorFlow.

A CRF puts the Gibbs distribution ``p(s) = exp(<eta, a_s>) / Z(eta)`` on the
structures ``s`` of a marginal polytope. Its log-partition function

    log Z(eta) = log sum_s exp(<eta, a_s>) = max_{mu in M} <eta, mu> + H(mu)

is smooth and its gradient is the vector of marginals ``mu = E_p[a_s]``. Two
structures are covered:

* linear chains, by the forward algorithm in the log domain, in pure TensorFlow
  (graph mode, ``tf.function`` and XLA), with marginals by automatic differentiation;
* non-projective dependency trees, by the matrix-tree theorem (Koo et al., 2007),
  with a subtraction-free elimination of the Laplacian: a compiled kernel
  (:mod:`keras_structured.engine.matrix_tree`, float64, marginals by its hand-written
  backward pass, ``O(n^2)`` memory) called through ``tf.numpy_function``; inside
  ``tf.function(jit_compile=True)``, where XLA cannot call Python, the same
  elimination in pure TensorFlow (a ``tf.while_loop``, slower, and its gradient
  stores every step).

Half-precision inputs are computed in float32 (the results keep that dtype).
"""

from __future__ import annotations

import tensorflow as tf

from keras_structured.engine import matrix_tree
from keras_structured.ops.dtypes import compute_dtype, integer_lengths
from keras_structured.ops.sequence_scores import pack_sequence_scores, unpack_sequence_scores
from keras_structured.ops.xla import _in_xla_context


def _checked_lengths(lengths, scores: tf.Tensor, size) -> tf.Tensor:
    """``(batch,)`` int32 lengths (default ``size``) of an integer dtype, in ``[0, size]`` at run time.

    The range the SparseMAP structures' ``validate_lengths`` accept: 0 is an empty
    example. The check is an assertion, so it also runs in graph mode (XLA drops it).
    """
    if lengths is None:
        return tf.fill(tf.shape(scores)[:1], size)
    lengths = integer_lengths(lengths)
    if not lengths.shape.is_compatible_with(scores.shape[:1]):
        raise ValueError(
            f"lengths must have shape (batch,) for scores of shape {scores.shape}. "
            f"Received: lengths.shape={lengths.shape}"
        )
    message = "lengths must be in [0, n], n the number of positions (words for trees)."
    checks = [
        tf.debugging.assert_non_negative(lengths, message=message),
        tf.debugging.assert_less_equal(lengths, size, message=message),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(lengths)


def _chain_inputs(unary, transitions, start, end, lengths):
    """Validated ``(unary, pairwise (batch, n - 1, K, K), start, end, lengths)`` in a common dtype."""
    unary = tf.convert_to_tensor(unary)
    if unary.shape.rank != 3 or unary.shape[1] == 0:
        raise ValueError(
            f"unary must have shape (batch, n, K) with n >= 1. Received: unary.shape={unary.shape}"
        )
    dtype = compute_dtype(unary)
    unary = tf.cast(unary, dtype)
    num_labels = unary.shape[-1]
    transitions = tf.cast(tf.convert_to_tensor(transitions), dtype)
    if transitions.shape.rank not in (2, 3, 4) or transitions.shape[-2:] != (num_labels, num_labels):
        raise ValueError(
            f"transitions must have shape (K, K), (batch, K, K) or (batch, n - 1, K, K) with K={num_labels}. "
            f"Received: transitions.shape={transitions.shape}"
        )
    # Packing broadcasts every accepted transition layout to one per position.
    _, pairwise = unpack_sequence_scores(pack_sequence_scores(unary, transitions))
    batch = tf.shape(unary)[0]
    boundary = []
    for name, scores in (("start", start), ("end", end)):
        if scores is None:
            boundary.append(tf.zeros([batch, num_labels], dtype))
            continue
        scores = tf.cast(tf.convert_to_tensor(scores), dtype)
        if scores.shape.rank not in (1, 2) or scores.shape[-1] != num_labels:
            raise ValueError(
                f"{name} scores must have shape (K,) or (batch, K) with K={num_labels}. "
                f"Received: {name}.shape={scores.shape}"
            )
        boundary.append(tf.broadcast_to(scores, [batch, num_labels]))
    return unary, pairwise, boundary[0], boundary[1], _checked_lengths(lengths, unary, tf.shape(unary)[1])


def _forward(unary, pairwise, start, end, lengths):
    """``log Z`` ``(batch,)`` of linear chains by the log-domain forward algorithm."""
    steps = (
        tf.transpose(unary[:, 1:], [1, 0, 2]),
        tf.transpose(pairwise, [1, 0, 2, 3]),
        tf.range(1, tf.shape(unary)[1]),
    )

    def step(alpha, inputs):
        scores, transition, position = inputs
        advanced = tf.reduce_logsumexp(alpha[:, :, None] + transition, axis=1) + scores
        return tf.where((position < lengths)[:, None], advanced, alpha)

    alpha = tf.foldl(step, steps, initializer=start + unary[:, 0])
    log_z = tf.reduce_logsumexp(alpha + end, axis=-1)
    return tf.where(lengths > 0, log_z, tf.zeros_like(log_z))


def linear_chain_crf_log_partition(unary, transitions, start=None, end=None, lengths=None) -> tf.Tensor:
    """Log-partition function of a linear-chain CRF, by the forward algorithm.

    Computes, for every example,

        log Z = log sum_y exp(start[y_1] + sum_i unary[i, y_i]
                              + sum_i transitions[i, y_i, y_{i+1}] + end[y_L])

    over all label sequences ``y`` of length ``L`` (the example's length), in the
    log domain. An empty sequence (``L = 0``) has ``log Z = 0``.

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
            non-integer dtype.
        tf.errors.InvalidArgumentError: at run time, for lengths outside ``[0, n]``.

    Example:
        >>> # Zero scores: log Z = log(number of sequences) = log(2 ** 3).
        >>> log_z = linear_chain_crf_log_partition(tf.zeros([1, 3, 2]), tf.zeros([2, 2]))
        >>> round(float(tf.exp(log_z[0])), 4)
        8.0
    """
    return _forward(*_chain_inputs(unary, transitions, start, end, lengths))


def linear_chain_crf_marginals(
    unary, transitions, start=None, end=None, lengths=None
) -> tuple[tf.Tensor, tf.Tensor]:
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
    unary, pairwise, start, end, lengths = _chain_inputs(unary, transitions, start, end, lengths)
    with tf.GradientTape() as tape:
        tape.watch([unary, pairwise])
        log_z = _forward(unary, pairwise, start, end, lengths)
    u, v = tape.gradient(log_z, [unary, pairwise], unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return u, v


def _tree_inputs(scores, lengths):
    scores = tf.convert_to_tensor(scores)
    if scores.shape.rank != 3 or (
        scores.shape[1] is not None and scores.shape[2] is not None and scores.shape[1] != scores.shape[2]
    ):
        raise ValueError(
            "Arc scores must have shape (batch, n + 1, n + 1) [head, modifier] with index 0 the root. "
            f"Received: scores.shape={scores.shape}"
        )
    scores = tf.cast(scores, compute_dtype(scores))
    return scores, _checked_lengths(lengths, scores, tf.shape(scores)[1] - 1)


def _log_sum(values, axis):
    """``log sum exp`` along ``axis``: ``-inf`` (zero gradient) where every term is ``-inf``."""
    top = tf.stop_gradient(tf.reduce_max(values, axis=axis, keepdims=True))
    top = tf.where(tf.math.is_finite(top), top, tf.zeros_like(top))
    return _log_of(tf.reduce_sum(tf.exp(values - top), axis=axis), tf.squeeze(top, axis))


def _log_add(a, b):
    return _log_sum(tf.stack([a, b]), 0)


def _log_of(values, log_scale):
    """``log(values) + log_scale`` of nonnegative ``values``, ``-inf`` (zero gradient) at zeros."""
    positive = values > 0
    logs = tf.math.log(tf.where(positive, values, tf.ones_like(values))) + log_scale
    return tf.where(positive, logs, tf.constant(-float("inf"), values.dtype))


def _log_det_by_elimination(log_arcs, log_root, num_words):
    """``log det`` of the Laplacian of arcs ``exp(log_arcs)`` and root weights ``exp(log_root)``.

    Grassmann-Taksar-Heyman elimination, word by word: with the pivot
    ``p = r_k + sum_i A[i, k]``, the Schur complement is the Laplacian of
    ``A' = A + A[:, k] A[k, :] / p`` and ``r' = r + r_k A[k, :] / p``. The arcs are kept
    in the linear domain, each column scaled to a maximum of 1 by a log-domain factor
    (the update leaves those factors alone, and no column sum ever grows), and the
    root weights in the log domain, where they may fall far below the arcs.
    """
    scale = tf.stop_gradient(tf.reduce_max(log_arcs, axis=1))
    scale = tf.where(tf.math.is_finite(scale), scale, tf.zeros_like(scale))
    arcs = tf.exp(log_arcs - scale[:, None, :])
    self_loops = tf.eye(num_words, dtype=tf.bool)[None]

    def eliminate(k, arcs, scale, log_root, log_det):
        into_k, out_of_k = arcs[:, :, k], arcs[:, k, :]
        total = tf.reduce_sum(into_k, axis=1)
        pivot = _log_add(log_root[:, k], _log_of(total, scale[:, k]))
        log_pivot = tf.where(tf.math.is_finite(pivot), pivot, tf.zeros_like(pivot))
        # A^T e_k / p <= 1 (the column's largest arc is 1); with no arc into k there is nothing
        # to spread, and the guard keeps exp from overflowing (and NaN out of the gradient).
        arcs_in = total > 0
        factor = tf.exp(tf.where(arcs_in, scale[:, k] - log_pivot, tf.zeros_like(pivot)))
        factor = tf.where(arcs_in, factor, tf.zeros_like(factor))
        arcs = arcs + (factor[:, None] * into_k)[:, :, None] * out_of_k[:, None, :]
        gain = (log_root[:, k] - log_pivot)[:, None] + _log_of(out_of_k, scale)
        log_root = _log_add(log_root, gain)
        # Word k is gone: no arcs into or out of it, and no self-loops; columns back to a max of 1.
        gone = tf.range(num_words) == k
        arcs = tf.where(gone[None, :, None] | gone[None, None, :] | self_loops, tf.zeros_like(arcs), arcs)
        top = tf.stop_gradient(tf.reduce_max(arcs, axis=1))
        top = tf.where(top > 0, top, tf.ones_like(top))
        return k + 1, arcs / top[:, None, :], scale + tf.math.log(top), log_root, log_det + pivot

    return tf.while_loop(
        lambda k, *_: k < num_words,
        eliminate,
        (tf.constant(0), arcs, scale, log_root, tf.zeros_like(log_root[:, 0])),
        maximum_iterations=num_words,
    )[-1]


def _eliminated_log_partition(scores, lengths, single_root):
    """``log Z`` of arc-factored trees in pure TensorFlow, differentiable to any order.

    The path under XLA and for second derivatives: the same computation as
    :mod:`keras_structured.engine.matrix_tree` (whose docstring explains it), in the
    input's dtype (float64 for ``single_root``), with ``log det`` of the Laplacian from
    :func:`_log_det_by_elimination`.
    """
    result_dtype = scores.dtype
    # The single-root offset below is thousands of nats: float64 keeps the digits under it.
    dtype = tf.float64 if single_root else result_dtype
    scores = tf.cast(scores, dtype)
    neg_inf = tf.constant(-float("inf"), dtype)
    num_words = tf.shape(scores)[1] - 1
    word = tf.range(num_words)[None, :] < lengths[:, None]  # (batch, n)
    # Arcs (head, modifier) between real words, head != modifier.
    word_arcs = word[:, :, None] & word[:, None, :] & ~tf.eye(num_words, dtype=tf.bool)[None]
    log_arcs = tf.where(word_arcs, scores[:, 1:, 1:], neg_inf)
    # Padded words are isolated, with root weight 1: pivots of 1 that leave det L alone.
    log_root = tf.where(word, scores[:, 0, 1:], tf.zeros_like(scores[:, 0, 1:]))
    offset = tf.zeros_like(log_root[:, 0])
    if single_root:
        # Root weights scaled by a vanishing t = exp(offset): see matrix_tree._sentence_laplacian.
        candidates = tf.concat([log_arcs, tf.where(word, log_root, neg_inf)[:, None, :]], axis=1)
        high = tf.reduce_max(candidates, [1, 2])  # forbidden and padded arcs are -inf
        low = tf.reduce_min(tf.where(candidates > neg_inf, candidates, -neg_inf), [1, 2])
        n = tf.cast(lengths, dtype)
        spread = tf.where(n > 0, high - low, tf.zeros_like(n))
        offset = tf.stop_gradient(-(n + 1.0) * tf.math.log(n + 1.0) - n * spread - 40.0)
        offset = tf.where(n > 0, offset, tf.zeros_like(offset))
        log_root = tf.where(word, log_root + offset[:, None], log_root)
        floor = tf.stop_gradient(tf.where(n > 0, n * low - 20.0, tf.fill(tf.shape(n), neg_inf)))

    log_det = _log_det_by_elimination(log_arcs, log_root, num_words)
    log_z = log_det - offset
    if single_root:
        log_z = tf.where(log_z > floor, log_z, neg_inf)
    return tf.cast(log_z, result_dtype)


def _eliminated_marginals(scores, lengths, single_root):
    """Marginals by automatic differentiation of :func:`_eliminated_log_partition`."""
    with tf.GradientTape() as tape:
        tape.watch(scores)
        log_z = _eliminated_log_partition(scores, lengths, single_root)
    return tape.gradient(log_z, scores, unconnected_gradients=tf.UnconnectedGradients.ZERO)


def _with_second_derivatives(marginals, scores, lengths, single_root):
    """``marginals`` (the compiled kernel's, for ``scores``) with a gradient: the second
    derivatives of ``log Z``, by automatic differentiation of :func:`_eliminated_marginals`."""

    @tf.custom_gradient
    def attach(scores):
        def grad(upstream):
            with tf.GradientTape() as tape:
                tape.watch(scores)
                mu = _eliminated_marginals(scores, lengths, single_root)
            return tape.gradient(mu, scores, output_gradients=upstream)

        return tf.identity(marginals), grad

    return attach(scores)


def _factorize(scores, lengths, single_root):
    """:func:`keras_structured.engine.matrix_tree.factorize` on ``scores`` (in float64)."""
    outputs = tf.numpy_function(
        lambda scores, lengths: matrix_tree.factorize(scores, lengths, single_root),
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


def _tree_log_partition(scores, lengths, single_root):
    """``log Z`` by the compiled kernel with the marginals as its gradient, or under XLA by
    :func:`_eliminated_log_partition`."""
    if _in_xla_context():
        return _eliminated_log_partition(scores, lengths, single_root)

    @tf.custom_gradient
    def log_partition(scores):
        factors = _factorize(scores, lengths, single_root)

        def grad(upstream):
            return upstream[:, None, None] * _marginals_from_factors(factors, scores, lengths, single_root)

        return tf.cast(factors[0], scores.dtype), grad

    return log_partition(scores)


def tree_crf_log_partition(scores, lengths=None, single_root: bool = False) -> tf.Tensor:
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

    A compiled kernel computes it in float64 whatever the input dtype, in ``O(n^3)``
    time and ``O(n^2)`` memory per sentence; its gradient (the marginals, see
    :func:`tree_crf_marginals`) comes from a hand-written backward pass of the
    elimination, accurate to about ``1e-12`` for any scores
    (:mod:`keras_structured.engine.matrix_tree`). Inside
    ``tf.function(jit_compile=True)`` the same elimination runs in pure TensorFlow
    instead (XLA cannot call the kernel), in the input's dtype: slower, and its
    gradient stores every step (``O(n^3)`` memory).

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
            non-integer dtype.
        tf.errors.InvalidArgumentError: at run time, for lengths outside ``[0, n]``.

    Example:
        >>> # Two words with zero scores: 3 multi-root trees, 2 single-root ones.
        >>> scores = tf.zeros([1, 3, 3])
        >>> round(float(tf.exp(tree_crf_log_partition(scores)[0])), 4)
        3.0
        >>> round(float(tf.exp(tree_crf_log_partition(scores, single_root=True)[0])), 4)
        2.0
    """
    return _tree_log_partition(*_tree_inputs(scores, lengths), single_root)


def tree_crf_marginals(scores, lengths=None, single_root: bool = False) -> tf.Tensor:
    """Arc marginals ``p((h, m) in T)`` of a dependency-tree CRF (gradient of ``log Z``).

    Arguments as for :func:`tree_crf_log_partition`. The marginals are differentiable:
    their gradient (second derivatives of ``log Z``) is taken by automatic
    differentiation of the pure-TensorFlow elimination.

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
    return _marginals_from_factors(_factorize(scores, lengths, single_root), scores, lengths, single_root)
