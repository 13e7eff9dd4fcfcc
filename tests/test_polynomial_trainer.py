"""Conditional-gradient trainer of multi-output polynomial networks: numpy core and estimators."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification
from sklearn.exceptions import NotFittedError

from keras_structured.polynomial.basis_selection import select_basis
from keras_structured.polynomial.conditional_gradient import (
    ConvergenceWarning,
    check_features,
    network_outputs,
)
from keras_structured.polynomial.estimators import PolynomialNetworkClassifier, PolynomialNetworkRegressor
from keras_structured.polynomial.gamma_operators import DenseGammas
from keras_structured.polynomial.losses import get_loss
from keras_structured.polynomial.ordinal import OrdinalPolynomialNetwork
from keras_structured.polynomial.penalties import get_penalty

PENALTIES = ("l1", "l1/l2", "l1/linf")
LOSSES = ("squared", "logistic", "smoothed_hinge", "binary_logistic")


def _explicit_gammas(x, d):
    """``Gamma_c = X^T diag(d[:, c]) X`` formed explicitly (tests only)."""
    return np.einsum("ia,ic,ib->cab", x, d, x)


def _planted_problem(seed=0, n=500, d=10, k=3, m=4, weights_only=False):
    """``(X, O)`` for a network of ``k`` unit basis vectors (or only its ``V``)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    basis = rng.standard_normal((k, d + 1))
    basis /= np.linalg.norm(basis, axis=1, keepdims=True)
    output_weights = rng.standard_normal((k, m))
    if weights_only:
        return output_weights
    return x, network_outputs(check_features(x, augment=True), basis, output_weights)


def _r2(pred, y):
    return 1.0 - np.sum((pred - y) ** 2) / np.sum((y - y.mean(axis=0)) ** 2)


# ---------------------------------------------------------------- basis selection


def test_l2_selection_reaches_the_brute_force_optimum_on_easy_problems():
    rng = np.random.default_rng(3)
    x, d = rng.standard_normal((50, 2)), np.abs(rng.standard_normal((50, 3)))  # all Gamma_c PSD
    penalty = get_penalty("l1/l2")
    angles = np.linspace(0.0, np.pi, 200001)
    circle = np.stack([np.cos(angles), np.sin(angles)])
    best = penalty.row_norms(((x @ circle) ** 2).T @ d).max()
    selection = select_basis(DenseGammas(x, d), penalty)
    np.testing.assert_allclose(selection.value, best, rtol=1e-6)


# ---------------------------------------------------------------- losses and penalties


def _targets(name, rng, n, m):
    if name == "squared":
        return rng.standard_normal((n, m))
    if name == "binary_logistic":
        return (rng.random((n, m)) > 0.5).astype(float)
    return np.eye(m)[rng.integers(0, m, n)]


@pytest.mark.parametrize("name", LOSSES)
def test_loss_gradient_matches_finite_differences(name):
    rng = np.random.default_rng(0)
    loss = get_loss(name)
    y, o = _targets(name, rng, 6, 4), 2.0 * rng.standard_normal((6, 4))
    eps = 1e-6
    numerical = np.zeros_like(o)
    for index in np.ndindex(o.shape):
        step = np.zeros_like(o)
        step[index] = eps
        numerical[index] = (loss.value(y, o + step) - loss.value(y, o - step)) / (2 * eps)
    np.testing.assert_allclose(loss.gradient(y, o), numerical, atol=1e-7)
    assert loss.value(y, o) >= 0


def test_loss_values_on_known_points():
    y = np.array([[0.0, 1.0, 0.0]])
    assert get_loss("smoothed_hinge").value(y, np.array([[0.0, 2.0, 0.0]])) == 0.0
    assert get_loss("smoothed_hinge").value(y, np.array([[0.0, 1.0, 0.0]])) > 0.0
    np.testing.assert_allclose(get_loss("logistic").value(y, np.zeros((1, 3))), np.log(3.0))
    np.testing.assert_allclose(get_loss("squared").value(y, np.zeros((1, 3))), 0.5)


@pytest.mark.parametrize("name", PENALTIES)
@pytest.mark.parametrize("seed", range(20))
def test_projection_satisfies_the_optimality_certificate(name, seed):
    """``P`` is the projection of ``V`` onto ``{Omega <= tau}`` iff ``Omega(P) <= tau`` and
    ``<V - P, W - P> <= 0`` for every ``W`` in the ball, i.e. ``tau Omega*(V - P) <= <V - P, P>``."""
    rng = np.random.default_rng(seed)
    penalty = get_penalty(name)
    v = rng.standard_normal((5, 4)) * rng.choice([0.0, 1.0, 3.0], size=(5, 1))
    v[0, :2] = v[0, 2]  # ties
    tau = float(rng.uniform(0.1, 1.0)) * penalty.value(v)
    p = penalty.project(v, tau)
    assert penalty.value(p) <= tau * (1 + 1e-9)
    np.testing.assert_allclose(penalty.value(p), tau, rtol=1e-9)
    residual = v - p
    assert tau * penalty.dual_norm(residual) <= np.sum(residual * p) + 1e-9 * np.sum(v**2)
    np.testing.assert_array_equal(penalty.project(v, 2.0 * penalty.value(v)), v)


@pytest.mark.parametrize("name", PENALTIES)
def test_projection_matches_brute_force(name):
    """Tiny case: the projection beats every ball point of a dense sample of the boundary."""
    rng = np.random.default_rng(1)
    penalty = get_penalty(name)
    v, tau = np.array([[2.0, -0.5], [0.7, 1.5]]), 1.0
    p = penalty.project(v, tau)
    candidates = rng.standard_normal((20000, 2, 2))
    candidates *= (tau / np.array([penalty.value(c) for c in candidates]))[:, None, None]
    distances = np.sum((candidates - v) ** 2, axis=(1, 2))
    assert np.sum((p - v) ** 2) <= distances.min() + 1e-12


@pytest.mark.parametrize("name", PENALTIES)
def test_dual_row_achieves_the_dual_norm(name):
    penalty = get_penalty(name)
    g = np.array([0.5, -2.0, 1.0])
    s = penalty.dual_row(g)
    np.testing.assert_allclose(penalty.value(s[None]), 1.0)
    np.testing.assert_allclose(s @ g, penalty.row_norms(g)[0])


# ---------------------------------------------------------------- trainer


@pytest.mark.parametrize("refit", [None, "V", "HV"])
@pytest.mark.parametrize("penalty", PENALTIES)
def test_objective_is_non_increasing(refit, penalty):
    x, y = make_classification(n_samples=120, n_features=6, n_classes=3, n_informative=4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = PolynomialNetworkClassifier(
            penalty=penalty, tau=10.0, max_iter=6, refit=refit, refit_iter=50, random_state=0
        ).fit(x, y)
    history = clf.objective_history_
    assert len(history) == len(clf.gap_history_) == clf.n_iter_ + 1
    assert np.all(np.diff(history) <= 1e-10 * history[0])
    assert history[-1] < (0.9 if refit is None else 0.7) * history[0]
    np.testing.assert_allclose(
        history[-1], get_loss("logistic").value(np.eye(3)[y], clf.decision_function(x)), rtol=1e-10
    )
    assert get_penalty(penalty).value(clf.output_weights_) <= 10.0 * (1 + 1e-9)
    assert np.all(np.linalg.norm(clf.basis_, axis=1) <= 1.0 + 1e-12)


def test_gap_history_ends_with_the_exact_frank_wolfe_gap():
    """l1 penalty: the gap is ``tau max_c |lambda_max(Gamma_c)| - <D, O>``, checked with ``eigvalsh``."""
    x, y = make_classification(n_samples=60, n_features=4, n_informative=3, n_redundant=0, random_state=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = PolynomialNetworkClassifier(penalty="l1", tau=5.0, max_iter=3, random_state=0).fit(x, y)
    outputs = network_outputs(check_features(x, augment=True), clf.basis_, clf.output_weights_)
    d = -get_loss("logistic").gradient(np.eye(2)[y], outputs)
    spectra = np.linalg.eigvalsh(_explicit_gammas(check_features(x, augment=True), d))
    expected = 5.0 * np.abs(spectra).max() - np.sum(d * outputs)
    np.testing.assert_allclose(clf.gap_history_[-1], expected, rtol=1e-9)
    np.testing.assert_allclose(clf.lower_gap_history_, clf.gap_history_, rtol=1e-9)
    assert clf.gap_certified_


@pytest.mark.parametrize("seed", [0, *(pytest.param(seed, marks=pytest.mark.slow) for seed in (1, 2))])
def test_planted_shared_basis_reaches_the_noise_floor(seed):
    """Outputs of k = 3 shared basis vectors (m = 4, d = 10, n = 500) plus Gaussian noise (10% of
    the signal's standard deviation), ``tau = Omega(V_true)``: 30 iterations with the joint refit
    reach the noise floor ``||noise||^2 / 2`` within 10% and recover the noiseless outputs."""
    x, clean = _planted_problem(seed)
    noise = 0.1 * np.std(clean) * np.random.default_rng(seed + 10).standard_normal(clean.shape)
    tau = get_penalty("l1/l2").value(_planted_problem(seed, weights_only=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = PolynomialNetworkRegressor(tau=tau, refit="HV", max_iter=30, random_state=0)
        reg.fit(x, clean + noise)
    floor = 0.5 * np.sum(noise**2)
    assert 0.9 * floor <= reg.objective_history_[-1] <= 1.1 * floor, reg.objective_history_[-1]
    assert _r2(reg.predict(x), clean) >= 0.99
    assert reg.basis_.shape == (reg.n_basis_, 11) and reg.output_weights_.shape == (reg.n_basis_, 4)


def test_group_penalty_shares_rows_and_l1_does_not():
    x, y = _planted_problem(n=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        group = PolynomialNetworkRegressor(penalty="l1/l2", tau=2.0, max_iter=8, random_state=0).fit(x, y)
        lasso = PolynomialNetworkRegressor(penalty="l1", tau=2.0, max_iter=8, random_state=0).fit(x, y)
    assert group.n_basis_ >= 2 and np.all(group.output_weights_ != 0)
    assert np.any(lasso.output_weights_ == 0), "l1 should zero single entries of kept rows"
    assert np.all(np.any(lasso.output_weights_ != 0, axis=1))


# The refits amplify rounding differences: the Barzilai-Borwein steps of the V refit a little
# (the objective agrees closely, V along its flat directions less), the non-convex joint refit
# (HV) more, from one iteration to the next.
@pytest.mark.parametrize("refit, rtol, max_iter", [("V", 1e-7, 5), ("HV", 1e-5, 2)])
def test_sparse_input_gives_the_dense_result(refit, rtol, max_iter):
    x, y = make_classification(n_samples=150, n_features=8, n_classes=3, n_informative=4, random_state=1)
    x[np.abs(x) < 0.8] = 0.0
    kwargs = dict(penalty="l1/linf", tau=10.0, max_iter=max_iter, refit=refit, refit_iter=30, random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dense = PolynomialNetworkClassifier(**kwargs).fit(x, y)
        sparse = PolynomialNetworkClassifier(**kwargs).fit(sp.csr_matrix(x), y)
    assert dense.n_basis_ == sparse.n_basis_
    np.testing.assert_allclose(sparse.objective_history_, dense.objective_history_, rtol=rtol)
    np.testing.assert_allclose(
        sparse.decision_function(sp.csc_matrix(x)), dense.decision_function(x), rtol=1e-3, atol=1e-3
    )


@pytest.mark.parametrize("augment", [True, False])
def test_to_keras_reproduces_decision_function(augment):
    x, y = make_classification(n_samples=100, n_features=5, n_classes=3, n_informative=3, random_state=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = PolynomialNetworkClassifier(tau=5.0, max_iter=4, augment=augment, random_state=0).fit(x, y)
    layer = clf.to_keras(dtype="float64")
    assert (layer.rank, layer.units) == (clf.n_basis_, 3)
    np.testing.assert_allclose(np.asarray(layer(x)), clf.decision_function(x), rtol=1e-6, atol=1e-6)


def test_classification_smoke_and_probabilities():
    x, y = make_classification(n_samples=300, n_features=10, n_informative=6, n_classes=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = PolynomialNetworkClassifier(tau=20.0, max_iter=10, refit="HV", refit_iter=100, random_state=0)
        clf.fit(x, y)
    assert np.mean(clf.predict(x) == y) >= 0.9
    np.testing.assert_array_equal(clf.classes_, [0, 1, 2])
    proba = clf.predict_proba(x)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(np.argmax(proba, axis=1), clf.predict(x))


@pytest.mark.parametrize("loss", ["smoothed_hinge", "squared"])
def test_other_classification_losses_learn(loss):
    x, y = make_classification(n_samples=200, n_features=6, n_informative=4, n_classes=3, random_state=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = PolynomialNetworkClassifier(loss=loss, tau=10.0, max_iter=8, random_state=0).fit(x, y)
    assert np.mean(clf.predict(x) == y) >= 0.75
    assert not hasattr(clf, "predict_proba")


def test_non_convergence_warning_states_the_gap():
    x, y = make_classification(n_samples=80, n_features=5, n_classes=2, random_state=0)
    clf = PolynomialNetworkClassifier(tau=10.0, max_iter=2, tol=1e-12, random_state=0)
    with pytest.warns(ConvergenceWarning, match=r"max_iter=2.*gap bound \d") as record:
        clf.fit(x, y)
    assert f"{clf.gap_history_[-1]:.3e}" in str(record[0].message)
    assert not clf.converged_


def test_verbose_prints_progress(capsys):
    x = np.array([[-1.0], [0.0], [1.0], [2.0]])
    PolynomialNetworkRegressor(tau=10.0, verbose=True, random_state=0).fit(x, x[:, 0] ** 2)
    lines = capsys.readouterr().out.splitlines()
    assert lines and all("objective" in line and "gap" in line for line in lines)


def test_convergence_stops_early_without_warning():
    x = np.array([[-1.0], [0.0], [1.0], [2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        reg = PolynomialNetworkRegressor(tau=10.0, tol=1e-6, random_state=0).fit(x, x[:, 0] ** 2 - x[:, 0])
    assert reg.converged_ and reg.n_iter_ < 100
    assert reg.gap_history_[-1] <= 1e-6 * reg.objective_history_[0]


def test_bad_data_raise():
    x, y = np.random.default_rng(0).standard_normal((10, 3)), np.arange(10) % 3
    clf = PolynomialNetworkClassifier(max_iter=1)
    with pytest.raises(ValueError, match="Unknown label type"):
        clf.fit(x, y + 0.5)
    with pytest.raises(ValueError, match="NaN"):
        clf.fit(np.where(x > 1, np.nan, x), y)
    with pytest.raises(ValueError, match="infinity"):
        clf.fit(sp.csr_matrix(np.where(x > 1, np.inf, x)), y)
    with pytest.raises(ValueError, match=r"inconsistent numbers of samples: \[10, 9\]"):
        clf.fit(x, y[:9])
    with pytest.raises(NotFittedError, match="not fitted"):
        PolynomialNetworkClassifier().predict(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x, y)
    with pytest.raises(ValueError, match="expecting 3 features"):
        clf.predict(x[:, :2])


# ---------------------------------------------------------------- ordinal regression


def _ordinal_problem(seed=0, n=400, d=5, ratings=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    latent = x[:, 0] * x[:, 1] + 0.5 * x[:, 2] ** 2 + x[:, 3] + 0.2 * rng.standard_normal(n)
    thresholds = np.quantile(latent, np.linspace(0, 1, ratings + 1)[1:-1])
    return x, 1 + np.searchsorted(thresholds, latent)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_ordinal_reduction_learns_ratings(loss):
    x, y = _ordinal_problem()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = OrdinalPolynomialNetwork(
            loss=loss, tau=20.0, max_iter=10, refit="HV", refit_iter=50, random_state=0
        )
        model.fit(x, y)
    assert model.classes_.tolist() == [1, 2, 3, 4, 5] and model.output_weights_.shape[1] == 4
    assert model.predict_cumulative(x).shape == (400, 4)
    expected = model.predict_expected(x)
    assert np.all((expected >= 1) & (expected <= 5))
    rmse = np.sqrt(np.mean((expected - y) ** 2))
    assert rmse < 0.6 * np.std(y), rmse
    predicted = model.predict(x)
    assert set(np.unique(predicted)) <= {1, 2, 3, 4, 5}
    assert np.mean(np.abs(predicted - y) <= 1) >= 0.9


def test_ordinal_labels_are_any_ordered_values():
    x, y = _ordinal_problem(n=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = OrdinalPolynomialNetwork(tau=20.0, max_iter=5, random_state=0).fit(x, 10 * y)
        reference = OrdinalPolynomialNetwork(tau=20.0, max_iter=5, random_state=0).fit(x, y)
    np.testing.assert_array_equal(model.classes_, [10, 20, 30, 40, 50])
    np.testing.assert_array_equal(model.predict(x), 10 * reference.predict(x))
    np.testing.assert_allclose(model.predict_expected(x), 10 * reference.predict_expected(x))
