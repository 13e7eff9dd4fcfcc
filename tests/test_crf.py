"""CRF log-partition functions and marginals against brute-force enumeration."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import logsumexp

import keras_structured as ks
from keras_structured.ops.crf import (
    linear_chain_crf_log_partition,
    linear_chain_crf_marginals,
    tree_crf_log_partition,
    tree_crf_marginals,
)
from keras_structured.ops.sequence_scores import pack_sequence_scores


def dependency_trees(num_words: int, single_root: bool = False) -> np.ndarray:
    """All trees of ``num_words`` words as head arrays ``(T, num_words + 1)``, ``-1`` at the root."""
    trees = []
    for heads in itertools.product(range(num_words + 1), repeat=num_words):
        heads = (-1,) + heads
        if any(heads[m] == m for m in range(1, num_words + 1)):
            continue
        if single_root and num_words and heads.count(0) != 1:
            continue
        reaches_root = True
        for m in range(1, num_words + 1):
            node, steps = m, 0
            while node != 0 and steps <= num_words:
                node, steps = heads[node], steps + 1
            reaches_root &= node == 0
        if reaches_root:
            trees.append(heads)
    return np.array(trees, dtype=np.int64).reshape(-1, num_words + 1)


def tree_indicators(heads: np.ndarray, size: int) -> np.ndarray:
    """``(T, size, size)`` arc indicators ``[head, modifier]`` of head arrays (padded to ``size``)."""
    arcs = np.zeros((len(heads), size, size))
    for t, tree in enumerate(heads):
        for m, h in enumerate(tree):
            if h >= 0:
                arcs[t, h, m] = 1.0
    return arcs


def brute_force_tree_crf(scores: np.ndarray, num_words: int, single_root: bool):
    """``(log Z, marginals)`` of one example by enumerating all trees of its first ``num_words`` words."""
    arcs = tree_indicators(dependency_trees(num_words, single_root), scores.shape[0])
    tree_scores = np.einsum("thm,hm->t", arcs, scores)
    probs = np.exp(tree_scores - logsumexp(tree_scores))
    return logsumexp(tree_scores), np.einsum("t,thm->hm", probs, arcs)


def brute_force_chain_crf(unary, pairwise, start, end, length):
    """``(log Z, u, v)`` of one chain by enumerating the label sequences of its first ``length`` positions."""
    n, num_labels = unary.shape
    u, v = np.zeros_like(unary), np.zeros_like(pairwise)
    if length == 0:
        return 0.0, u, v
    sequences = list(itertools.product(range(num_labels), repeat=length))
    scores = np.array(
        [
            start[y[0]]
            + end[y[-1]]
            + sum(unary[i, y[i]] for i in range(length))
            + sum(pairwise[i, y[i], y[i + 1]] for i in range(length - 1))
            for y in sequences
        ]
    )
    probs = np.exp(scores - logsumexp(scores))
    for p, y in zip(probs, sequences, strict=True):
        u[np.arange(length), y] += p
        v[np.arange(length - 1), y[:-1], y[1:]] += p
    return logsumexp(scores), u, v


@pytest.mark.parametrize("layout", ["shared", "per_example", "per_position"])
def test_linear_chain_matches_brute_force(layout):
    rng = np.random.default_rng(0)
    batch, n, num_labels = 4, 4, 3
    unary = rng.normal(size=(batch, n, num_labels))
    transitions = rng.normal(
        size={"shared": (3, 3), "per_example": (batch, 3, 3), "per_position": (batch, n - 1, 3, 3)}[layout]
    )
    pairwise = np.broadcast_to(
        transitions.reshape((-1, 1, 3, 3)) if transitions.ndim < 4 else transitions, (batch, n - 1, 3, 3)
    )
    start, end = rng.normal(size=num_labels), rng.normal(size=(batch, num_labels))
    lengths = np.array([4, 2, 1, 0])
    log_z = linear_chain_crf_log_partition(unary, transitions, start, end, lengths)
    u, v = linear_chain_crf_marginals(unary, transitions, start, end, lengths)
    assert log_z.dtype == tf.float64 and u.shape == (batch, n, 3) and v.shape == (batch, n - 1, 3, 3)
    for b in range(batch):
        expected = brute_force_chain_crf(unary[b], pairwise[b], start, end[b], lengths[b])
        np.testing.assert_allclose(log_z.numpy()[b], expected[0], rtol=1e-12)
        np.testing.assert_allclose(u.numpy()[b], expected[1], atol=1e-12)
        np.testing.assert_allclose(v.numpy()[b], expected[2], atol=1e-12)


def test_linear_chain_without_lengths_single_position_and_large_scores():
    rng = np.random.default_rng(1)
    unary = rng.normal(size=(2, 1, 3)) * 1e3
    log_z = linear_chain_crf_log_partition(unary, np.zeros((3, 3)))
    np.testing.assert_allclose(log_z.numpy(), logsumexp(unary[:, 0], axis=-1), rtol=1e-12)
    unary = rng.normal(size=(2, 3, 2)) * 1e3
    u, _ = linear_chain_crf_marginals(unary, np.zeros((2, 2)))
    assert np.isfinite(u.numpy()).all()
    np.testing.assert_allclose(u.numpy().sum(-1), 1.0, rtol=1e-12)


def test_linear_chain_graph_mode_dtypes_and_errors():
    @tf.function(
        input_signature=[tf.TensorSpec([None, None, 3], tf.float16), tf.TensorSpec([None], tf.int32)]
    )
    def marginals(unary, lengths):
        return linear_chain_crf_marginals(unary, tf.zeros([3, 3], tf.float16), lengths=lengths)

    u, v = marginals(tf.zeros([2, 4, 3], tf.float16), tf.constant([4, 2]))
    assert u.dtype == tf.float32 and u.shape == (2, 4, 3) and v.shape == (2, 3, 3, 3)
    np.testing.assert_allclose(u.numpy().sum(-1), [[1, 1, 1, 1], [1, 1, 0, 0]], rtol=1e-6)
    with pytest.raises(ValueError, match="Received: transitions.shape"):
        linear_chain_crf_log_partition(tf.zeros([2, 4, 3]), tf.zeros([2, 2]))
    with pytest.raises(ValueError, match="Received: unary.shape"):
        linear_chain_crf_log_partition(tf.zeros([2, 0, 3]), tf.zeros([3, 3]))
    with pytest.raises(ValueError, match="Received: end.shape"):
        linear_chain_crf_log_partition(tf.zeros([2, 4, 3]), tf.zeros([3, 3]), end=tf.zeros([2]))


@pytest.mark.parametrize("single_root", [False, True])
def test_tree_matches_brute_force(single_root):
    rng = np.random.default_rng(2 + single_root)
    scores = rng.normal(size=(5, 5, 5))
    lengths = np.array([4, 3, 2, 1, 0])
    log_z = tree_crf_log_partition(scores, lengths, single_root=single_root)
    marginals = tree_crf_marginals(scores, lengths, single_root=single_root).numpy()
    for b, length in enumerate(lengths):
        expected_log_z, expected_marginals = brute_force_tree_crf(scores[b], length, single_root)
        np.testing.assert_allclose(log_z.numpy()[b], expected_log_z, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(marginals[b], expected_marginals, atol=1e-10)
        # Every real word has exactly one head; nothing enters the root or padding.
        np.testing.assert_allclose(marginals[b].sum(0), [0.0] + [1.0] * length + [0.0] * (4 - length))
        if single_root and length:
            np.testing.assert_allclose(marginals[b, 0].sum(), 1.0)


@pytest.mark.parametrize("single_root", [False, True])
def test_tree_is_stable_for_large_scores_without_lengths(single_root):
    scores = np.random.default_rng(4).normal(size=(2, 4, 4)) * 500
    log_z = tree_crf_log_partition(scores, single_root=single_root).numpy()
    marginals = tree_crf_marginals(scores, single_root=single_root).numpy()
    for b in range(2):
        expected_log_z, expected_marginals = brute_force_tree_crf(scores[b], 3, single_root)
        np.testing.assert_allclose(log_z[b], expected_log_z, rtol=1e-12)
        np.testing.assert_allclose(marginals[b], expected_marginals, atol=1e-8)


def test_tree_ignores_unused_entries_and_forbids_minus_inf():
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(1, 4, 4))
    noisy = scores.copy()
    noisy[:, :, 0] = np.nan  # arcs into the root
    noisy[:, np.arange(4), np.arange(4)] = np.inf  # self-loops
    np.testing.assert_allclose(tree_crf_log_partition(noisy).numpy(), tree_crf_log_partition(scores).numpy())
    assert np.isfinite(tree_crf_marginals(noisy).numpy()).all()
    forbidden = scores.copy()
    forbidden[0, 0, 1] = -np.inf
    marginals = tree_crf_marginals(forbidden).numpy()
    assert marginals[0, 0, 1] == 0 and np.isfinite(marginals).all()


def test_tree_graph_mode_dtypes_and_errors():
    @tf.function(input_signature=[tf.TensorSpec([None, None, None], tf.float16)])
    def marginals(scores):
        return tree_crf_marginals(scores, single_root=True)

    mu = marginals(tf.zeros([2, 4, 4], tf.float16))
    assert mu.dtype == tf.float32
    np.testing.assert_allclose(mu.numpy().sum(1)[:, 1:], 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="Received: scores.shape"):
        tree_crf_log_partition(tf.zeros([2, 4, 3]))


def test_both_crfs_compile_with_xla():
    rng = np.random.default_rng(6)
    unary, scores = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 4, 4))
    lengths = tf.constant([4, 2])

    @tf.function(jit_compile=True)
    def marginals(unary, scores):
        u, _ = linear_chain_crf_marginals(unary, tf.zeros([3, 3], tf.float64), lengths=lengths)
        return u, tree_crf_marginals(scores, lengths - 1, single_root=True)

    u, mu = marginals(unary, scores)
    expected_u, _ = linear_chain_crf_marginals(unary, np.zeros((3, 3)), lengths=lengths)
    np.testing.assert_allclose(u.numpy(), expected_u.numpy(), atol=1e-12)
    np.testing.assert_allclose(mu.numpy(), tree_crf_marginals(scores, lengths - 1, True).numpy(), atol=1e-12)


def _laplacian_reference(scores: np.ndarray, single_root: bool) -> tuple[float, np.ndarray]:
    """``(log Z, marginals)`` of Koo et al.'s matrix-tree determinant with 120 significant digits.

    An independent reference: the Laplacian (for single-root trees, its first row replaced by
    the root weights) inverted by Gauss-Jordan elimination; each marginal is
    ``w[h, m] * sum_cells sign * L^{-1}[j, i]`` over the cells ``(i, j)`` holding ``sign * w[h, m]``,
    a difference of entries up to the condition number of ``L`` that 120 digits keep exact.
    """
    from decimal import Decimal, getcontext

    getcontext().prec = 120
    n = scores.shape[0] - 1
    weight = [[Decimal(float(scores[h, m])).exp() for m in range(n + 1)] for h in range(n + 1)]
    cells = {}  # arc (h, m) -> [(row, column, sign)] of the Laplacian entries it enters
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h == 0:
                cells[h, m] = [(0, m - 1, 1) if single_root else (m - 1, m - 1, 1)]
            elif h != m:  # single root: row 0 holds the root weights, not word 1's arcs
                entries = ((m - 1, m - 1, 1), (h - 1, m - 1, -1))
                cells[h, m] = [cell for cell in entries if not (single_root and cell[0] == 0)]
    lap = [[Decimal(0)] * (2 * n) for _ in range(n)]
    for i in range(n):
        lap[i][n + i] = Decimal(1)
    for (h, m), entries in cells.items():
        for i, j, sign in entries:
            lap[i][j] += sign * weight[h][m]
    det = Decimal(1)
    for k in range(n):  # Gauss-Jordan with partial pivoting on [L | I]
        pivot = max(range(k, n), key=lambda i: abs(lap[i][k]))
        if pivot != k:
            lap[k], lap[pivot], det = lap[pivot], lap[k], -det
        det *= lap[k][k]
        lap[k] = [x / lap[k][k] for x in lap[k]]
        for i in range(n):
            if i != k and lap[i][k]:
                factor = lap[i][k]
                lap[i] = [a - factor * b for a, b in zip(lap[i], lap[k], strict=True)]
    marginals = np.zeros((n + 1, n + 1))
    for (h, m), entries in cells.items():
        marginals[h, m] = float(weight[h][m] * sum(sign * lap[j][n + i] for i, j, sign in entries))
    return float(abs(det).ln()), marginals


def test_the_120_digit_reference_matches_enumeration():
    scores = np.random.default_rng(7).normal(size=(5, 5)) * 3
    for single_root in (False, True):
        log_z, marginals = _laplacian_reference(scores, single_root)
        expected_log_z, expected_marginals = brute_force_tree_crf(scores, 4, single_root)
        np.testing.assert_allclose(log_z, expected_log_z, rtol=1e-14)
        np.testing.assert_allclose(marginals, expected_marginals, atol=1e-14)


@pytest.mark.parametrize("single_root", [False, True])
@pytest.mark.parametrize("gap", [0.0, 20.0, 60.0])
def test_tree_is_accurate_when_confident_heads_form_cycles(single_root, gap):
    # Confident scores whose best heads form one long cycle, with the root arcs `gap` lower:
    # the Laplacian is nearly singular, where LU or QR lose every digit (float64 included),
    # and so do marginals read off its inverse (a difference of two entries as large as
    # its condition number). Float32 inputs are computed in float64: only rounding the
    # results to float32 (a relative 6e-8) separates them from the reference.
    n = 30
    rng = np.random.default_rng(int(gap) + single_root)
    scores = rng.normal(size=(n + 1, n + 1)) * 3
    for m in range(1, n + 1):
        scores[m % n + 1, m] += 25.0
    scores[0, 1:] -= gap
    scores32 = scores.astype(np.float32)
    expected_log_z, expected_marginals = _laplacian_reference(scores32.astype(np.float64), single_root)
    for dtype, rtol, atol in ((tf.float64, 1e-14, 1e-12), (tf.float32, 1e-7, 2e-7)):
        log_z = tree_crf_log_partition(tf.constant(scores32[None], dtype), single_root=single_root)
        marginals = tree_crf_marginals(tf.constant(scores32[None], dtype), single_root=single_root)
        np.testing.assert_allclose(log_z.numpy()[0], expected_log_z, rtol=rtol)
        np.testing.assert_allclose(marginals.numpy()[0], expected_marginals, rtol=0, atol=atol)


def test_single_root_without_a_single_root_tree_is_minus_inf():
    # Only the root may head a word: the one tree has three root children.
    scores = np.full((1, 4, 4), -np.inf)
    scores[0, 0, 1:] = [0.5, -1.0, 2.0]
    assert tree_crf_log_partition(scores, single_root=True).numpy()[0] == -np.inf
    np.testing.assert_allclose(tree_crf_log_partition(scores).numpy()[0], 1.5)


@pytest.mark.parametrize("single_root", [False, True])
def test_tree_marginals_in_a_graph_are_finite_for_long_sentences_and_low_root_scores(single_root):
    # A word whose arcs are all eliminated has a pivot of its root weight alone: tiny here,
    # and tinier still under the single-root scaling. Its (unused) spreading factor must not
    # overflow, or the while loop's gradient turns NaN (the eager tape never sees it).
    rng = np.random.default_rng(9)
    scores = rng.normal(size=(2, 61, 61))
    scores[:, 0, 1:] -= 100.0
    lengths = tf.constant([60, 45])
    graph = tf.function(lambda s: tree_crf_marginals(s, lengths, single_root=single_root))
    for dtype in (tf.float32, tf.float64):
        mu = graph(tf.constant(scores, dtype)).numpy()
        assert np.isfinite(mu).all()
        for b, length in enumerate([60, 45]):
            np.testing.assert_allclose(mu[b].sum(0)[1 : length + 1], 1.0, atol=1e-4)
        if single_root:
            np.testing.assert_allclose(mu[:, 0].sum(1), 1.0, atol=1e-4)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_plus_inf_scores_raise_eagerly_and_in_graphs_and_give_nan_under_xla(bad):
    rng = np.random.default_rng(7)
    lengths = tf.constant([3, 2])
    arcs = rng.normal(size=(2, 4, 4))
    arcs[1, 2, 1] = bad  # an arc of sentence 1, in none of the trees below
    unary = rng.normal(size=(2, 3, 2))
    unary[1, 1, 0] = bad  # inside sequence 1
    tree_message = r"Tree CRF arc scores must not be NaN or \+inf .* Received: scores\[1\] with 1 "
    chain_message = r"Linear-chain CRF scores must not be NaN or \+inf .* this many examples:\W*1\b"
    cases = {
        tree_message: lambda arcs, unary: tree_crf_log_partition(arcs, lengths),
        f"{tree_message}.*": lambda arcs, unary: ks.tree_crf_loss([[-1, 0, 1, 1], [-1, 0, 1, -1]], arcs),
        chain_message: lambda arcs, unary: linear_chain_crf_log_partition(
            unary, np.zeros((2, 2)), lengths=lengths
        ),
        f"{chain_message}.*": lambda arcs, unary: ks.linear_chain_crf_loss(
            [[0, 1, 1], [0, 1, 1]], pack_sequence_scores(unary, np.zeros((2, 2)))
        ),
    }
    for message, function in cases.items():
        for run in (function, tf.function(function)):
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                run(arcs, unary)
        # XLA drops the checks: the bad example's value is NaN, the other's unchanged.
        value = tf.function(function, jit_compile=True)(arcs, unary).numpy()
        assert np.isfinite(value[0]) and np.isnan(value[1]), (message, value)
    # Where no structure uses them (padding, past the last word), they are ignored.
    arcs[1, 2, 1], arcs[1, 3, 1], unary[1, 1, 0], unary[1, 2, 0] = 0.0, bad, 0.0, bad
    assert np.isfinite(tree_crf_log_partition(arcs, lengths - 1).numpy()).all()
    assert np.isfinite(linear_chain_crf_log_partition(unary, np.zeros((2, 2)), lengths=lengths).numpy()).all()
    start = np.array([[0.0, 0.0], [0.0, bad]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=chain_message):
        linear_chain_crf_log_partition(unary, np.zeros((2, 2)), start=start, lengths=lengths)
