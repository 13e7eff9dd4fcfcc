"""The matrix-tree theorem for dependency trees, compiled: ``log Z`` and arc marginals.

For arc scores ``s`` (``[head, modifier]``, index 0 the root) of a sentence of ``n`` words,

    log Z = log sum_T exp(sum_{(h, m) in T} s[h, m])

over all dependency trees ``T`` is ``log det`` of the ``n x n`` Laplacian ``L`` of the
arc weights (Koo et al., 2007), and the arc marginals ``p((h, m) in T)`` are its gradient.

**Forward.** ``det L`` is taken by Grassmann-Taksar-Heyman elimination, word by word: with
the pivot ``p = r_k + sum_i A[i, k]`` (the root weight of ``k`` plus the arcs into it), the
Schur complement is the Laplacian of ``A' = A + A[:, k] A[k, :] / p`` and
``r' = r + r_k A[k, :] / p``. It only adds nonnegative numbers, so ``log Z`` keeps its
relative accuracy however close ``L`` is to singular (confident scores whose best heads
form a cycle), where LU or QR on ``L`` lose every digit. Each column is scaled once by
its largest weight (elimination preserves column sums, so nothing overflows), root
weights are kept in the log domain, where they may fall thousands of nats below the
arcs, and everything is float64. The eliminated columns and rows (the factors of
``L``, ``O(n^2)``) stay in the arc matrix, as in an in-place LU; what each step adds to
the root weights is kept too, so that the backward pass takes no exp or log per entry.

**Backward.** The marginals are the gradient of ``log det``, taken by reverse-mode
differentiation of the elimination written out by hand, step ``n - 1`` back to step 0,
from the stored factors: ``O(n^2)`` memory and two matrix-vector products per step.
The adjoint of an arc ``A_k[i, j]`` of a Schur complement is ``(L_k^{-1})[j, j] -
(L_k^{-1})[j, i]``, at most ``1 / A_k[i, j]`` (the arc's marginal is at most 1), so every
product of a factor and an adjoint is bounded and the one subtraction of a step (the
pivot's adjoint, ``1`` minus the expected number of children of the eliminated word)
loses at most ``n^2`` units of roundoff, absolutely: marginals are accurate to about
``1e-12`` whatever the conditioning of ``L``. (Reading the marginals off ``L^{-1}``
instead, ``A[h, m] (L^{-1}[m, m] - L^{-1}[m, h])``, subtracts two numbers as large as
the condition number of ``L``.)

Single-root trees are counted as the first-order term of ``Z`` in a vanishing scale of
the root weights (see :func:`_sentence_laplacian`). The sentences of a batch are shared
among the cores (:func:`_over_batch`).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from keras_structured.engine.parallel import THREADS, run_on_all_threads

# Reassociation lets the sums vectorize; no assumption about infinities or NaN.
_REASSOCIATE = {"reassoc", "contract"}


@nb.njit(cache=True, nogil=True, fastmath=_REASSOCIATE)
def _dot(x, y):
    total = 0.0
    for i in range(x.size):
        total += x[i] * y[i]
    return total


@nb.njit(cache=True, nogil=True, fastmath=_REASSOCIATE)
def _axpy(alpha, x, y):
    """``y += alpha * x`` in place."""
    for i in range(x.size):
        y[i] += alpha * x[i]


@nb.njit(cache=True, nogil=True)
def _log_add(a, b):
    """``log(exp(a) + exp(b))``, ``-inf`` when both are."""
    top, low = max(a, b), min(a, b)
    if top == -np.inf:
        return top
    return top + math.log1p(math.exp(low - top))


@nb.njit(cache=True, nogil=True)
def _log(x):
    return math.log(x) if x > 0 else -np.inf


@nb.njit(cache=True, nogil=True)
def _sentence_laplacian(scores, words, single_root, arcs, log_root):
    """Fills ``arcs[:words, :words]`` and ``log_root[:words]`` from ``scores``; returns
    ``(sum(scale), offset, floor)``: ``log Z = log det + sum(scale) - offset``, and no tree is
    counted below ``floor``.

    ``arcs[h - 1, m - 1] = exp(scores[h, m] - scale[m - 1])``, each column scaled by its
    largest weight (arcs and root); ``log_root[m - 1] = scores[0, m] + offset - scale[m - 1]``;
    Entries outside the sentence, into the root and on the
    diagonal are never read.

    With ``single_root``, scaling the root weights by ``t = exp(offset)`` gives
    ``Z(t) = t Z_1 + t^2 Z_2 + ...`` (``Z_k``: the trees with ``k`` root children). A
    single-root tree scores at least ``n * low`` and ``Z_k <= (n + 1)^(n - 1) exp(n * high)``,
    so this ``offset`` leaves ``Z(t) / t = Z_1`` up to a relative ``exp(-40)``, and puts
    ``Z(t) / t`` below ``floor = n * low - 20`` when no single-root tree exists.
    Otherwise ``offset = 0`` and ``floor = -inf``.
    """
    offset, floor = 0.0, -np.inf
    if single_root:
        high, low = -np.inf, np.inf
        for m in range(1, words + 1):
            for h in range(words + 1):
                if h != m and scores[h, m] > -np.inf:
                    high, low = max(high, scores[h, m]), min(low, scores[h, m])
        if high > -np.inf:
            offset = -(words + 1) * math.log(words + 1) - words * (high - low) - 40.0
            floor = words * low - 20.0
    scale_sum = 0.0
    for m in range(words):
        top = scores[0, m + 1] + offset
        for h in range(words):
            if h != m:
                top = max(top, scores[h + 1, m + 1])
        scale = top if top > -np.inf else 0.0
        for h in range(words):
            arcs[h, m] = math.exp(scores[h + 1, m + 1] - scale) if h != m else 0.0
        log_root[m] = scores[0, m + 1] + offset - scale
        scale_sum += scale
    return scale_sum, offset, floor


@nb.njit(cache=True, nogil=True)
def _eliminate(arcs, log_root, words, gains, log_pivots, root_shares):
    """``log det`` of the Laplacian of ``arcs`` and ``exp(log_root)`` (their first ``words``
    entries), by GTH elimination in place.

    Leaves the factors in ``arcs`` (column ``k`` below the diagonal: the arcs into word ``k``
    when it was eliminated; row ``k`` right of it: the arcs out of it), the log pivots in
    ``log_pivots``, ``log(r_k / p)`` in ``root_shares[k]`` and, in ``gains[k, j]``, the root
    weight step ``k`` adds to word ``j`` over the one it had (``inf`` if it had none).
    Returns ``-inf`` (and stops) at a zero pivot: no tree.
    """
    n = words
    log_det = 0.0
    for k in range(n):
        rest = n - k - 1
        out = arcs[k, k + 1 : n]
        total = arcs[k + 1 : n, k].sum()
        log_pivot = _log_add(log_root[k], _log(total))
        if log_pivot == -np.inf:
            return log_pivot
        log_pivots[k] = log_pivot
        log_det += log_pivot
        inverse_pivot = math.exp(-log_pivot) if total > 0 else 0.0
        for i in range(k + 1, n):
            share = arcs[i, k] * inverse_pivot  # <= 1
            if share > 0:
                _axpy(share, out, arcs[i, k + 1 : n])
                arcs[i, i] = 0.0  # no self-loops
        root_share = root_shares[k] = log_root[k] - log_pivot  # <= 0
        for t in range(rest):
            j = k + 1 + t
            if out[t] == 0 or root_share == -np.inf:
                gains[k, j] = 0.0
                continue
            log_ratio = root_share - log_root[j]
            # The product first when it cannot overflow where the gain does not.
            gain = math.exp(log_ratio) * out[t] if log_ratio < 700 else math.exp(log_ratio + math.log(out[t]))
            gains[k, j] = gain
            log_root[j] = log_root[j] + math.log1p(gain) if gain < np.inf else root_share + math.log(out[t])
    return log_det


@nb.njit(cache=True, nogil=True)
def _backpropagate(factors, gains, log_pivots, root_shares, words, arcs_bar, root_bar):
    """Gradient of :func:`_eliminate`'s ``log det`` into ``arcs_bar`` and ``root_bar`` (w.r.t.
    the arcs and the log root weights; first ``words`` entries).

    Reverse mode through the steps, from what :func:`_eliminate` leaves. At step ``k`` the
    trailing block ``arcs_bar[k + 1:, k + 1:]`` holds the adjoints of the Schur complement's
    arcs; the step writes column and row ``k``. Adjoints of zero arcs are set to zero (they
    only ever multiply zero arcs), which keeps infinities out.
    """
    n = words
    arcs_bar[:n, :n] = 0.0
    root_bar[:n] = 0.0
    into, into_bar, gradient_out = np.empty(n), np.empty(n), np.empty(n)
    for k in range(n - 1, -1, -1):
        rest = n - k - 1
        out, out_bar = factors[k, k + 1 : n], gradient_out[:rest]
        total = factors[k + 1 : n, k].sum()
        inverse_pivot = math.exp(-log_pivots[k]) if total > 0 else 0.0
        # Arcs: A'[i, j] = A[i, j] + into[i] * out[j], into = A[:, k] / p.
        through_arcs = 0.0
        out_bar[:] = 0.0
        for i in range(rest):
            into[i] = factors[k + 1 + i, k] * inverse_pivot
            row = arcs_bar[k + 1 + i, k + 1 : n]
            into_bar[i] = _dot(row, out)
            _axpy(into[i], row, out_bar)
            through_arcs += into[i] * into_bar[i]
        # Root weights: r'[j] = r[j] + (r_k / p) out[j] = r[j] (1 + gain[j]), in the log domain.
        through_root = 0.0
        for j in range(rest):
            gain = gains[k, k + 1 + j]
            if gain > 0:
                kept = 1.0 / (1.0 + gain)
                gained = gain * kept if gain < np.inf else 1.0  # share of r'[j] from k
                through_root += root_bar[k + 1 + j] * gained
                out_bar[j] += root_bar[k + 1 + j] * gained / out[j]
                root_bar[k + 1 + j] *= kept
        # log p: 1 from log det, minus what the pivot divides (1 - expected children of k).
        pivot_bar = 1.0 - through_arcs - through_root
        for i in range(rest):
            if factors[k + 1 + i, k] > 0:
                arcs_bar[k + 1 + i, k] = (into_bar[i] + pivot_bar) * inverse_pivot
        for j in range(rest):
            if out[j] > 0:
                arcs_bar[k, k + 1 + j] = out_bar[j]
        root_bar[k] = through_root + pivot_bar * math.exp(root_shares[k])


@nb.njit(cache=True, nogil=True)
def _factorize_sentences(
    scores, lengths, single_root, log_z, weights, factors, gains, log_pivots, root_shares
):
    """:func:`factorize` of some sentences, into zeroed arrays."""
    log_root = np.empty(weights.shape[1])
    for b in range(scores.shape[0]):
        words = lengths[b]
        if words == 0:
            continue
        scale_sum, offset, floor = _sentence_laplacian(scores[b], words, single_root, weights[b], log_root)
        factors[b] = weights[b]
        log_det = _eliminate(factors[b], log_root, words, gains[b], log_pivots[b], root_shares[b])
        log_z[b] = log_det + scale_sum - offset
        if not log_z[b] > floor:  # also a zero pivot (-inf)
            log_z[b] = -np.inf


@nb.njit(cache=True, nogil=True)
def _marginals_of_sentences(log_z, weights, factors, gains, log_pivots, root_shares, lengths, result):
    """:func:`marginals` of some sentences, into a zeroed ``result``."""
    size = weights.shape[1]
    arcs_bar, root_bar = np.empty((size, size)), np.empty(size)
    for b in range(weights.shape[0]):
        words = lengths[b]
        if words == 0 or log_z[b] == -np.inf:
            continue
        _backpropagate(factors[b], gains[b], log_pivots[b], root_shares[b], words, arcs_bar, root_bar)
        result[b, 0, 1 : words + 1] = root_bar[:words]
        for h in range(words):
            result[b, h + 1, 1 : words + 1] = weights[b, h, :words] * arcs_bar[h, :words]


def _over_batch(kernel, size: int, *arrays) -> None:
    """``kernel(*arrays)`` for sentences of ``size`` words, split along the batch (axis 0 of
    ``arrays``) into shares that the calling thread and one helper per other core take in
    turn (the kernels release the GIL; sentences are independent). Two shares per core, so
    that a core taken by another process holds up a small share only; one share below a
    million ``size^3``."""
    batch = arrays[0].shape[0]
    count = min(2 * THREADS, batch) if THREADS > 1 and batch * size**3 >= 1e6 else 1
    if count == 1:
        kernel(*arrays)
        return
    bounds = np.linspace(0, batch, count + 1).astype(int)
    shares = zip(bounds[:-1], bounds[1:], strict=True)

    def work():
        for low, high in shares:
            kernel(*[array[low:high] for array in arrays])

    run_on_all_threads(work)


def factorize(scores, lengths, single_root):
    """``log Z`` of arc-factored dependency trees and the factors its gradient needs.

    Args:
        scores: ``(batch, n + 1, n + 1)`` float64 arc scores ``[head, modifier]``, index 0
            the root; column 0 and the diagonal are ignored, ``-inf`` forbids an arc.
        lengths: ``(batch,)`` integer numbers of words in ``[0, n]``.
        single_root: count only the trees with one word attached to the root.

    Returns:
        ``(log_z, weights, factors, gains, log_pivots, root_shares)``: ``(batch,)`` float64
        ``log Z`` (0 for an empty sentence, ``-inf`` without any tree), then for
        :func:`marginals` the scaled arc weights, the eliminated Laplacian and the root
        weight gains of each step ``(batch, n, n)``, the log pivots and the log root shares
        of the pivots ``(batch, n)``.

    Example:
        >>> # Two words, zero scores: 3 trees.
        >>> log_z = factorize(np.zeros((1, 3, 3)), np.array([2]), False)[0]
        >>> round(float(np.exp(log_z[0])), 6)
        3.0
    """
    batch, size = scores.shape[0], scores.shape[1] - 1
    outputs = (np.zeros(batch), *np.zeros((3, batch, size, size)), *np.zeros((2, batch, size)))
    _over_batch(
        lambda scores, lengths, *outputs: _factorize_sentences(scores, lengths, single_root, *outputs),
        size,
        scores,
        lengths,
        *outputs,
    )
    return outputs


def marginals(log_z, weights, factors, gains, log_pivots, root_shares, lengths):
    """Arc marginals ``p((h, m) in T)``, the gradient of ``log Z``, from :func:`factorize`.

    Args:
        log_z, weights, factors, gains, log_pivots, root_shares: :func:`factorize`'s results.
        lengths: the lengths given to :func:`factorize`.

    Returns:
        ``(batch, n + 1, n + 1)`` float64 marginals ``[head, modifier]``; every word's
        column sums to 1; column 0, the diagonal, padding and sentences without any
        tree are zero.

    Example:
        >>> lengths = np.array([2])
        >>> mu = marginals(*factorize(np.zeros((1, 3, 3)), lengths, False), lengths)
        >>> np.round(mu[0] * 3, 6).tolist()
        [[0.0, 2.0, 2.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    batch, size = weights.shape[0], weights.shape[1]
    result = np.zeros((batch, size + 1, size + 1))
    factors = (log_z, weights, factors, gains, log_pivots, root_shares)
    _over_batch(_marginals_of_sentences, size, *factors, lengths, result)
    return result
