"""Basis selection and the Frank-Wolfe gap of the conditional-gradient trainer: what is certified.

References, independent of the library's code paths:

* ``l1``: ``Omega*(G) = max_c max(|lambda_min(Gamma_c)|, |lambda_max(Gamma_c)|)`` from
  ``numpy.linalg.eigvalsh`` of the explicitly formed ``Gamma_c`` (exact).
* ``l1/linf``: ``max_{s in {-1, 1}^m} lambda_max(sum_c s_c Gamma_c)`` over all sign vectors (exact).
* ``l1/l2``: the best of 200 random restarts of 50 steps of the fixed-point iteration
  ``h <- top eigenvector of sum_c (g_hc / ||g_h||) Gamma_c`` (a lower estimate of ``Omega*``;
  the exact value is a non-convex problem).

The trainer's reported gap must be at least ``tau Omega*_ref - <D, O>`` minus ``1e-8`` times
``tau max |Gamma_c|`` (rounding), at every iteration; for l1 and l1/linf both reported bounds
equal the exact gap to that tolerance.
"""

import warnings

import numpy as np
import pytest

from keras_structured.polynomial.basis_selection import select_basis
from keras_structured.polynomial.conditional_gradient import (
    ConvergenceWarning,
    check_features,
    conditional_gradient,
    network_outputs,
)
from keras_structured.polynomial.gamma_operators import DenseGammas, LanczosGammas
from keras_structured.polynomial.losses import get_loss
from keras_structured.polynomial.penalties import get_penalty
from keras_structured.polynomial.sphere_bound import sphere_maximum_bound

PENALTIES = ("l1", "l1/l2", "l1/linf")
RTOL = 1e-8


def _gammas(x, d):
    return np.einsum("ia,ic,ib->cab", x, d, x)


def _signs(m):
    return 1.0 - 2.0 * ((np.arange(2**m)[:, None] >> np.arange(m)) & 1)


def reference_dual_norm(x, d, name, rng=None):
    """``Omega*(G)`` exactly (l1, l1/linf) or a random-restart lower estimate (l1/l2)."""
    gammas = _gammas(x, d)
    if name == "l1":
        return float(np.abs(np.linalg.eigvalsh(gammas)).max())
    if name == "l1/linf":
        return float(np.linalg.eigvalsh(np.tensordot(_signs(d.shape[1]), gammas, axes=1))[:, -1].max())
    rng = np.random.default_rng(0) if rng is None else rng
    h = rng.standard_normal((200, x.shape[1]))  # 200 restarts at once
    for _ in range(50):
        g = np.einsum("ra,cab,rb->rc", h, gammas, h)
        weights = g / np.linalg.norm(g, axis=1, keepdims=True)
        h = np.linalg.eigh(np.tensordot(weights, gammas, axes=1))[1][:, :, -1]
    return float(np.linalg.norm(np.einsum("ra,cab,rb->rc", h, gammas, h), axis=1).max())


def _problem(seed, n=60, d=6, m=3):
    rng = np.random.default_rng(seed)
    x = check_features(rng.standard_normal((n, d)), augment=True)
    return x, np.eye(m)[rng.integers(0, m, n)]


# ---------------------------------------------------------------- one selection step


def test_l1_selection_is_exact_when_the_extreme_eigenvalues_nearly_cancel():
    """The audit's case: lambda_min = -99.57, lambda_max = +99.50; the power method stalls there."""
    rng = np.random.default_rng(0)
    q = np.linalg.qr(rng.standard_normal((8, 8)))[0]
    spectrum = np.array([-99.57, 99.50, 40.0, -30.0, 10.0, 5.0, -2.0, 1.0])
    x = np.sqrt(np.abs(spectrum))[:, None] * q.T  # Gamma = X^T diag(sign) X = Q diag(spectrum) Q^T
    d = np.sign(spectrum)[:, None]
    selection = select_basis(DenseGammas(x, d), get_penalty("l1"))
    assert selection.exact and selection.certified
    np.testing.assert_allclose([selection.value, selection.upper_bound], 99.57, rtol=1e-12)
    np.testing.assert_allclose(np.abs(selection.h @ q[:, 0]), 1.0, rtol=1e-10)


@pytest.mark.parametrize("name", PENALTIES)
@pytest.mark.parametrize("seed", range(3))
def test_selection_brackets_the_reference(name, seed):
    rng = np.random.default_rng(seed)
    x, d = rng.standard_normal((40, 5)), rng.standard_normal((40, 3))
    selection = select_basis(DenseGammas(x, d), get_penalty(name))
    reference = reference_dual_norm(x, d, name)
    np.testing.assert_allclose(selection.g, ((x @ selection.h) ** 2) @ d, rtol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(selection.h), 1.0)
    assert selection.upper_bound >= reference * (1 - RTOL)
    if name == "l1/l2":  # the selected vector is as good as 200 random restarts
        assert selection.value >= reference * (1 - 1e-6)
    else:
        assert selection.exact
        np.testing.assert_allclose([selection.value, selection.upper_bound], reference, rtol=1e-10)


def test_l1_linf_relaxation_bound_when_sign_vectors_are_not_enumerated():
    rng = np.random.default_rng(4)
    x, d = rng.standard_normal((40, 5)), rng.standard_normal((40, 6))
    penalty = get_penalty("l1/linf")
    exact = reference_dual_norm(x, d, "l1/linf")
    selection = select_basis(DenseGammas(x, d), penalty, vertex_limit=8)
    assert not selection.exact
    assert selection.value <= exact * (1 + RTOL) <= selection.upper_bound * (1 + 2 * RTOL)


def test_lanczos_eigenpairs_match_the_dense_ones():
    rng = np.random.default_rng(1)
    x, d = rng.standard_normal((80, 30)), rng.standard_normal((80, 3))
    weights = np.concatenate([np.eye(3), -np.eye(3), rng.standard_normal((2, 3))])
    dense_values, dense_vectors, dense_upper = DenseGammas(x, d).top_eigenpairs(weights)
    values, vectors, upper = LanczosGammas(x, d).top_eigenpairs(weights)
    np.testing.assert_allclose(values, dense_values, rtol=1e-7)
    np.testing.assert_allclose(np.abs(np.sum(vectors * dense_vectors, axis=0)), 1.0, rtol=1e-6)
    assert np.all(upper >= dense_values - 1e-9 * np.abs(dense_values)) and np.all(dense_upper >= dense_values)


def test_sphere_bound_is_valid_and_reaches_the_target():
    """``phi(w) = max_j <a_j, w>`` is sublinear, with maximum ``max_j ||a_j||`` on the ball."""
    a = np.random.default_rng(2).standard_normal((7, 4))
    exact = np.linalg.norm(a, axis=1).max()
    bound, direction = sphere_maximum_bound(lambda w: (w @ a.T).max(axis=1), 4, target=exact * 1.001)
    assert exact <= bound <= exact * 1.001
    np.testing.assert_allclose(np.linalg.norm(direction), 1.0)
    coarse, _ = sphere_maximum_bound(lambda w: (w @ a.T).max(axis=1), 4, target=0.0, max_evaluations=20)
    assert coarse >= exact


# ---------------------------------------------------------------- the trainer's gap, every iteration


@pytest.mark.parametrize("refit", ["V", None])
@pytest.mark.parametrize("name", ["l1", "l1/linf"])
def test_reported_gap_is_the_exact_gap_at_every_iteration(name, refit):
    """l1 and l1/linf (exact selection): both gap bounds equal the exact gap at every iterate."""
    x, y = _problem(0)
    loss, penalty, tau = get_loss("logistic"), get_penalty(name), 20.0
    references = []

    def record(iteration, basis, output_weights):
        outputs = network_outputs(x, basis, output_weights)
        d = -loss.gradient(y, outputs)
        exact_gap = tau * reference_dual_norm(x, d, name) - np.sum(d * outputs)
        references.append((exact_gap, RTOL * tau * np.abs(_gammas(x, d)).max()))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = conditional_gradient(x, y, loss, penalty, tau, max_iter=6, refit=refit, callback=record)
    assert len(references) == len(result.gap_history) == 7
    bounds = zip(result.gap_history, result.lower_gap_history, strict=True)
    for (exact_gap, atol), (gap, lower) in zip(references, bounds, strict=True):
        assert exact_gap >= -atol
        np.testing.assert_allclose([gap, lower], max(exact_gap, 0.0), atol=atol)


def test_l1_l2_reported_gap_bounds_the_restart_estimate():
    """l1/l2 (the non-convex selection): every iterate against 200 random restarts."""
    x, y = _problem(1)
    loss, penalty, tau = get_loss("logistic"), get_penalty("l1/l2"), 20.0
    iterates = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = conditional_gradient(
            x, y, loss, penalty, tau, max_iter=8, callback=lambda i, h, v: iterates.append((h, v))
        )
    bounds = zip(result.gap_history, result.lower_gap_history, strict=True)
    for (basis, weights), (gap, lower) in zip(iterates, bounds, strict=True):
        outputs = network_outputs(x, basis, weights)
        d = -loss.gradient(y, outputs)
        estimate = tau * reference_dual_norm(x, d, "l1/l2") - np.sum(d * outputs)
        scale = tau * np.abs(_gammas(x, d)).max()
        assert gap >= estimate - RTOL * scale
        assert lower >= estimate - 1e-6 * scale  # the selection is as good as the restarts


SLOW = pytest.mark.slow


@pytest.mark.parametrize("name", ["l1/l2", *(pytest.param(n, marks=SLOW) for n in ("l1", "l1/linf"))])
def test_seeds_and_row_orders_agree_within_the_reported_gap(name):
    """One convex problem, four (seed, row order) runs: ``|F_i - F_j| <= max(gap_i, gap_j)``."""
    rng = np.random.default_rng(5)
    x_raw = rng.standard_normal((200, 6))
    y = np.eye(3)[np.argmax(x_raw[:, :3] * x_raw[:, 3:], axis=1)]
    x = check_features(x_raw, augment=True)
    finals = []
    for seed in range(4):
        order = np.random.default_rng(seed).permutation(len(y)) if seed else np.arange(len(y))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            result = conditional_gradient(
                x[order], y[order], get_loss("logistic"), get_penalty(name), 8.0, max_iter=40, tol=1e-4,
                rng=np.random.default_rng(seed),
            )  # fmt: skip
        finals.append((result.objective_history[-1], result.gap_history[-1]))
    for value, gap in finals:
        assert gap >= 0
        for other, other_gap in finals:
            assert abs(value - other) <= max(gap, other_gap) + 1e-9 * value


@pytest.mark.parametrize("name", PENALTIES)
def test_lanczos_path_follows_the_dense_path(name):
    """Many features (here forced with ``dense_max_features``): Lanczos eigenpairs, uncertified
    bounds, the same iterates up to the eigensolver's tolerance."""
    x, y = _problem(2, n=80, d=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dense, lanczos = (
            conditional_gradient(
                x, y, get_loss("logistic"), get_penalty(name), 20.0, max_iter=4, dense_max_features=limit
            )
            for limit in (500, 5)
        )
    assert dense.certified and not lanczos.certified
    np.testing.assert_allclose(lanczos.objective_history, dense.objective_history, rtol=1e-3)
    assert np.all(lanczos.gap_history >= lanczos.lower_gap_history)
