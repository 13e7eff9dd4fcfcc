"""The conditional-gradient estimators as scikit-learn estimators: API checks, labels, bad input."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.exceptions import NotFittedError, SkipTestWarning
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.utils.estimator_checks import check_estimator

from keras_structured.polynomial import (
    ConvergenceWarning,
    OrdinalPolynomialNetwork,
    PolynomialNetworkClassifier,
    PolynomialNetworkRegressor,
)

ESTIMATORS = (PolynomialNetworkClassifier, PolynomialNetworkRegressor, OrdinalPolynomialNetwork)
SLOW = pytest.mark.slow
ENVIRONMENT_SKIPS = {
    "check_array_api_input",  # skipped unless SCIPY_ARRAY_API=1 and array-api-compat are set up
    "check_classifier_data_not_an_array",  # skipped when pandas is not installed
    "check_regressor_data_not_an_array",  # idem
}


@pytest.fixture(autouse=True)
def _no_convergence_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", SkipTestWarning)  # the skipped checks are asserted
        yield


@pytest.mark.parametrize(
    "estimator, kwargs",
    [
        (PolynomialNetworkClassifier, {"max_iter": 3}),
        pytest.param(PolynomialNetworkRegressor, {"max_iter": 3}, marks=SLOW),
        pytest.param(OrdinalPolynomialNetwork, {"max_iter": 3}, marks=SLOW),
        *(pytest.param(estimator, {}, marks=SLOW) for estimator in ESTIMATORS),
    ],
)
def test_scikit_learn_estimator_checks(estimator, kwargs):
    """Every check of ``check_estimator`` passes, at default settings (slow) and with a 3-iteration
    fit (the classifier's runs by default). Only checks of optional environments may be skipped."""
    results = check_estimator(estimator(tau=10.0, **kwargs), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])) for r in results if r["status"] == "failed"]
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    assert not failed, failed
    assert skipped <= ENVIRONMENT_SKIPS, skipped


def _data(n=120, classes=3, seed=0):
    return make_classification(
        n_samples=n, n_features=5, n_informative=4, n_redundant=0, n_classes=classes, random_state=seed
    )


def test_clone_grid_search_and_cross_validation():
    x, y = _data()
    clf = PolynomialNetworkClassifier(max_iter=5, random_state=0)
    assert clone(clf).get_params() == clf.get_params()
    search = GridSearchCV(clf, {"tau": [1.0, 10.0], "penalty": ["l1", "l1/l2"]}, cv=2).fit(x, y)
    assert search.best_params_["tau"] in (1.0, 10.0)
    assert search.best_estimator_.n_features_in_ == 5
    scores = cross_val_score(PolynomialNetworkRegressor(tau=10.0, max_iter=5), x, x[:, 0] * x[:, 1], cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.5)


def test_arbitrary_labels_give_no_phantom_classes():
    x, y = _data()
    reference = PolynomialNetworkClassifier(tau=10.0, max_iter=5).fit(x, y)
    for labels in (y + 1, np.array(["a", "b", "c"])[y], 10.0 * y - 7.0):
        clf = PolynomialNetworkClassifier(tau=10.0, max_iter=5).fit(x, labels)
        assert clf.output_weights_.shape[1] == 3
        np.testing.assert_array_equal(clf.classes_, np.unique(labels))
        np.testing.assert_array_equal(clf.predict(x), clf.classes_[reference.predict(x)])
        assert clf.score(x, labels) == reference.score(x, y) > 0.7
    binary = PolynomialNetworkClassifier(tau=10.0, max_iter=5).fit(x[y < 2], np.where(y[y < 2], "yes", "no"))
    margin = binary.decision_function(x)
    assert margin.shape == (len(x),)
    np.testing.assert_array_equal(binary.predict(x), np.where(margin > 0, "yes", "no"))


@pytest.mark.parametrize("estimator", [PolynomialNetworkClassifier, OrdinalPolynomialNetwork])
def test_a_single_class_raises(estimator):
    x = np.random.default_rng(0).standard_normal((10, 3))
    message = "at least 2 classes, got 1 class. Received: y with the single class 4"
    with pytest.raises(ValueError, match=message):
        estimator().fit(x, np.full(10, 4))


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize(
    "x, match",
    [
        (np.zeros((0, 3)), "0 sample"),
        (np.zeros((6, 0)), "0 feature"),
        (np.ones((6, 3)) * (1 + 1j), "Complex data not supported"),
        (np.where(np.eye(6, 3) > 0, np.nan, 1.0), "Input X contains NaN"),
        (sp.csr_matrix(np.where(np.eye(6, 3) > 0, np.inf, 0.0)), "Input X contains infinity"),
    ],
    ids=["empty", "no features", "complex", "nan", "sparse inf"],
)
def test_bad_x_raises_at_fit(estimator, x, match):
    with pytest.raises(ValueError, match=match):
        estimator().fit(x, np.arange(x.shape[0]) % 2)


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize(
    "name, value",
    [
        ("tau", -5),
        ("tau", 0.0),
        ("tau", np.inf),
        ("penalty", "l2"),
        ("loss", "hinge"),
        ("refit", "H"),
        ("max_iter", 0),
        ("max_basis", 0),
        ("tol", -1.0),
        ("refit_iter", 2.5),
        ("augment", "yes"),
        ("random_state", -1),
    ],
)
def test_parameters_changed_after_construction_are_checked_at_fit(estimator, name, value):
    x = np.random.default_rng(0).standard_normal((10, 3))
    model = estimator()
    setattr(model, name, value)
    with pytest.raises(ValueError, match=f"Received: {name}={value!r}"):
        model.fit(x, np.arange(10) % 2)
    with pytest.raises(ValueError, match=f"Received: {name}={value!r}"):
        estimator().set_params(**{name: value}).fit(x, np.arange(10) % 2)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_not_fitted_tags_and_sparse_input(estimator):
    x, y = _data(classes=2)
    model = estimator(tau=10.0, max_iter=4)
    with pytest.raises(NotFittedError):
        model.predict(x)
    assert model.__sklearn_tags__().input_tags.sparse
    dense = model.fit(x, y).predict(x)
    sparse = clone(model).fit(sp.csr_matrix(x), y).predict(sp.csc_matrix(x))
    np.testing.assert_allclose(sparse, dense, rtol=1e-3, atol=1e-3)  # rounding, amplified by the refits
    assert model.n_features_in_ == 5 and model.score(x, y) <= 1.0


def test_only_the_estimator_modules_import_scikit_learn():
    """``import keras_structured`` must not need the ``polynomial`` extra (checked on the sources)."""
    import ast
    from pathlib import Path

    import keras_structured

    allowed = {"estimators.py", "ordinal.py"}
    for path in Path(keras_structured.__file__).parent.rglob("*.py"):
        imports = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imports |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imports.add(node.module.split(".")[0])
        if "sklearn" in imports:
            assert path.parent.name == "polynomial" and path.name in allowed, path
