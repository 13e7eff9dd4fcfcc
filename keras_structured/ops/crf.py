"""Conditional random fields: log-partition functions and marginals in TensorFlow.

A CRF puts the Gibbs distribution ``p(s) = exp(<eta, a_s>) / Z(eta)`` on the
structures ``s`` of a marginal polytope. Its log-partition function

    log Z(eta) = log sum_s exp(<eta, a_s>) = max_{mu in M} <eta, mu> + H(mu)

is smooth and its gradient is the vector of marginals ``mu = E_p[a_s]``, so the
marginals here are obtained by automatic differentiation of ``log Z``. Two
structures are covered, both in pure TensorFlow (usable in graph mode,
``tf.function`` and XLA, with no Python in the loop body):

* linear chains, by the forward algorithm in the log domain;
* non-projective dependency trees, by the matrix-tree theorem (Koo et al., 2007).

Half-precision inputs are computed in float32 (the results keep that dtype).
"""

from __future__ import annotations

import tensorflow as tf

from keras_structured.ops.dtypes import compute_dtype
from keras_structured.ops.sequence_scores import pack_sequence_scores, unpack_sequence_scores


def _checked_lengths(lengths, scores: tf.Tensor, size) -> tf.Tensor:
    """``(batch,)`` int32 lengths (default ``size``), checked at run time to be in ``[0, size]``.

    The range the SparseMAP structures' ``validate_lengths`` accept: 0 is an empty
    example. The check is an assertion, so it also runs in graph mode (XLA drops it).
    """
    if lengths is None:
        return tf.fill(tf.shape(scores)[:1], size)
    lengths = tf.convert_to_tensor(lengths)
    if not lengths.shape.is_compatible_with(scores.shape[:1]):
        raise ValueError(
            f"lengths must have shape (batch,) for scores of shape {scores.shape}. "
            f"Received: lengths.shape={lengths.shape}"
        )
    lengths = tf.cast(lengths, tf.int32)
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
        ValueError: at trace time, for shapes that do not fit.
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


def _tree_log_partition(scores, lengths, single_root):
    """``log Z`` of arc-factored trees by the matrix-tree theorem (see :func:`tree_crf_log_partition`)."""
    dtype = scores.dtype
    num_words = tf.shape(scores)[1] - 1
    word = tf.range(num_words)[None, :] < lengths[:, None]  # (batch, n)
    # Arcs (head, modifier) between real words, head != modifier; the root row is separate.
    word_arcs = word[:, :, None] & word[:, None, :] & ~tf.eye(num_words, dtype=tf.bool)[None]
    valid = tf.concat([word[:, None, :], word_arcs], axis=1)  # (batch, n + 1, n) over scores[:, :, 1:]
    arc_scores = scores[:, :, 1:]
    # Column m of the Laplacian holds only the weights of arcs into word m, and every
    # tree has exactly one such arc: scaling the column by exp(-shift[m]), with shift[m]
    # the best score into m, shifts log Z by shift[m] and keeps exp in range.
    shift = tf.reduce_max(tf.where(valid, arc_scores, tf.constant(-float("inf"), dtype)), axis=1)
    shift = tf.stop_gradient(tf.where(tf.math.is_finite(shift), shift, tf.zeros_like(shift)))
    safe = tf.where(valid, arc_scores - shift[:, None, :], tf.zeros_like(arc_scores))
    weights = tf.where(valid, tf.exp(safe), tf.zeros_like(safe))
    root, arcs = weights[:, 0], weights[:, 1:]  # (batch, n), (batch, n, n)
    padding = tf.cast(~word, dtype)
    incoming = tf.reduce_sum(arcs, axis=1)
    if single_root:
        # Koo et al. (2007): drop the root from the in-degrees, put the root
        # weights in the first row (kept an identity row when there are no words).
        laplacian = tf.linalg.diag(incoming + padding) - arcs
        first_word = tf.one_hot(0, num_words, dtype=dtype)[None, :] * padding[:, :1]
        laplacian = tf.concat([(root + first_word)[:, None, :], laplacian[:, 1:]], axis=1)
    else:
        laplacian = tf.linalg.diag(root + incoming + padding) - arcs
    return _log_abs_det(laplacian) + tf.reduce_sum(shift, axis=-1)


@tf.custom_gradient
def _log_abs_det(matrix):
    """``log |det(matrix)|`` from a QR decomposition: like ``tf.linalg.slogdet``, but XLA-compatible.

    The gradient is ``inverse(matrix)^T = Q R^-T``, by one triangular solve.
    """
    q, r = tf.linalg.qr(matrix)
    value = tf.reduce_sum(tf.math.log(tf.abs(tf.linalg.diag_part(r))), axis=-1)

    def grad(upstream):
        inverse = tf.linalg.triangular_solve(r, tf.linalg.matrix_transpose(q), lower=False)
        return upstream[:, None, None] * tf.linalg.matrix_transpose(inverse)

    return value, grad


def tree_crf_log_partition(scores, lengths=None, single_root: bool = False) -> tf.Tensor:
    """Log-partition function of an arc-factored non-projective dependency-tree CRF.

    Computes ``log Z = log sum_T exp(sum_{(h, m) in T} scores[h, m])`` over all
    dependency trees ``T`` of a sentence of ``L`` words (every word has one head,
    the root or another word, and there is no cycle), with the matrix-tree
    theorem: ``Z`` is the determinant of the ``L x L`` Laplacian of the arc weights
    ``exp(scores)`` with the root row and column removed (Koo et al., 2007). With
    ``single_root=True`` only trees with exactly one word attached to the root
    count; the first row of the Laplacian then holds the root weights.

    Before ``exp``, the scores of the arcs into each word are shifted by their
    maximum (the Laplacian column of that word scales by a known factor, so
    ``exp`` never overflows and the best arcs never underflow), and the
    log-determinant is the sum of
    ``log |R_ii|`` of a QR decomposition (backward stable, and unlike
    ``tf.linalg.slogdet`` compilable with XLA). Padded words get identity rows
    and columns.

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
        ValueError: at trace time, for shapes that do not fit.
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

    Arguments as for :func:`tree_crf_log_partition`.

    Returns:
        ``(batch, n + 1, n + 1)`` arc marginals ``[head, modifier]``; every real
        word's column sums to 1; column 0, the diagonal and padding are zero.

    Example:
        >>> mu = tree_crf_marginals(tf.zeros([1, 3, 3], tf.float64))
        >>> np.round(mu.numpy()[0] * 3, 6).tolist()
        [[0.0, 2.0, 2.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    scores, lengths = _tree_inputs(scores, lengths)
    with tf.GradientTape() as tape:
        tape.watch(scores)
        log_z = _tree_log_partition(scores, lengths, single_root)
    return tape.gradient(log_z, scores, unconnected_gradients=tf.UnconnectedGradients.ZERO)
