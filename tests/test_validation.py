"""The shared argument checks (``keras_structured.validation``) and ``SolverOptions``.

``SolverOptions`` is frozen and checked once; every entry point that solves SparseMAP
(engine ``solve``, the ``sparsemap`` op, the layers, the losses) takes it, keeps the
keyword shortcuts, gives the same numbers both ways and applies the same rules
(``max_iter`` an integer >= 1, ``tol`` a finite number >= 0).
"""

import dataclasses
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured import validation as _validation
from keras_structured.engine import SequenceStructure, SimplexStructure, SolverOptions, solve
from keras_structured.engine.options import resolve_options
from keras_structured.polynomial import PolynomialNetworkClassifier
from keras_structured.projections import InterpolationProjection, L2Ball
from keras_structured.projections.interpolate import interpolation_coefficient
from keras_structured.projections.minimize import minimize

SCORES = np.array([[0.3, 0.2, 0.1, 0.25], [0.0, 0.05, 0.4, 0.35]])
# Settings far from the defaults: two Frank-Wolfe steps stop well short of the optimum,
# so a setting lost on the way gives other numbers.
SETTINGS = {"method": "frank_wolfe", "tol": 1e-9, "max_iter": 2, "exact_jacobian": False}


@pytest.fixture(autouse=True)
def _quiet_convergence():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ks.engine.SparseMAPConvergenceWarning)
        yield


# ------------------------------------------------------------------------------ the module
def test_check_integer():
    assert _validation.check_integer("n", np.int64(3), minimum=1) == 3
    assert type(_validation.check_integer("n", np.int64(3))) is int
    assert _validation.check_integer("n", None, allow_none=True) is None
    assert _validation.check_integer("n", -5) == -5
    for bad in (0, -1, 2.0, True, "3", None):
        with pytest.raises(ValueError, match=rf"^n must be an integer >= 1\. Received: n={bad!r}$"):
            _validation.check_integer("n", bad, minimum=1)


def test_check_number():
    assert _validation.check_number("tol", 0, minimum=0) == 0.0
    assert type(_validation.check_number("tol", np.float32(0.5), minimum=0)) is float
    assert _validation.check_number("m", None, allow_none=True) is None
    cases = [
        ({"minimum": 0}, -1e-9, "a finite number >= 0"),
        ({"minimum": 0, "open_minimum": True}, 0.0, "a finite number > 0"),
        ({"maximum": 1, "open_maximum": True}, 1.0, "a finite number < 1"),
        ({"minimum": 0, "maximum": 1, "open_maximum": True}, 1.0, r"a number in \[0, 1\)"),
        ({"minimum": 0, "maximum": 1, "open_minimum": True}, 0, r"a number in \(0, 1\]"),
        ({}, float("nan"), "a finite number"),
        ({}, float("inf"), "a finite number"),
        ({}, True, "a finite number"),
        ({}, "1", "a finite number"),
        ({}, tf.constant(1.0), "a finite number"),
    ]
    for bounds, bad, requirement in cases:
        with pytest.raises(ValueError, match=rf"^x must be {requirement}\. Received: x="):
            _validation.check_number("x", bad, **bounds)


def test_check_one_of_and_check_bool():
    assert _validation.check_one_of("method", "a", {"a": 1, "b": 2}) == "a"
    with pytest.raises(ValueError, match=r"^method must be one of \['a', 'b'\]\. Received: method='c'$"):
        _validation.check_one_of("method", "c", {"b": 2, "a": 1})
    with pytest.raises(ValueError, match=r"Received: method=\['a'\]"):  # unhashable: no TypeError
        _validation.check_one_of("method", ["a"], {"a": 1})
    assert _validation.check_bool("flag", np.bool_(True)) is True
    for bad in (1, 0, "yes", None):
        with pytest.raises(ValueError, match=rf"^flag must be True or False\. Received: flag={bad!r}$"):
            _validation.check_bool("flag", bad)


def _op_types(function, *args) -> set[str]:
    return {op.type for op in tf.function(function).get_concrete_function(*args).graph.get_operations()}


def test_assert_finite_adds_graph_ops_only_with_validate_args():
    x = tf.constant([1.0, np.nan])
    assert _validation.assert_finite(x, "x has NaN", validate_args=False) is x
    spec = tf.TensorSpec([2], tf.float32)
    assert "CheckNumerics" not in _op_types(lambda v: _validation.assert_finite(v, "m", False), spec)
    assert "CheckNumerics" in _op_types(lambda v: _validation.assert_finite(v, "m", True), spec)
    with pytest.raises(tf.errors.InvalidArgumentError, match="x has NaN"):
        _validation.assert_finite(x, "x has NaN", validate_args=True)


def test_project_checks_finiteness_only_with_validate_args():
    spec = tf.TensorSpec([None, 2], tf.float32)
    checks = {"CheckNumerics", "Assert"}
    assert not checks & _op_types(lambda v: L2Ball(1.0).project(v), spec)
    assert checks & _op_types(lambda v: L2Ball(1.0).project(v, validate_args=True), spec)
    x = tf.constant([[np.nan, 0.0]])
    assert np.isnan(L2Ball(1.0).project(x).numpy()[0, 0])  # passed through, unchecked
    assert np.isnan(InterpolationProjection(L2Ball(1.0))(x).numpy()[0, 0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="L2Ball.project received NaN or inf"):
        L2Ball(1.0).project(x, validate_args=True)


def test_old_checkers_are_gone():
    from keras_structured.losses import structured
    from keras_structured.polynomial import conditional_gradient, layers
    from keras_structured.projections import interpolate
    from keras_structured.projections import minimize as minimize_module

    for module, name in [
        (interpolate, "_check_margin"),
        (minimize_module, "_check_steps"),
        (layers, "_positive_int"),
        (conditional_gradient, "_check_positive_int"),
        (structured, "_check_cost_weight"),
    ]:
        assert not hasattr(module, name), f"{module.__name__}.{name}"


_XY = (np.eye(4, 2), np.array([0, 1, 0, 1]))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: L2Ball(1.0).project(tf.zeros((1, 2)), margin=1.0), r"margin must be a number in \[0, 1\)"),
        (lambda: InterpolationProjection(L2Ball(1.0), margin=-0.1), r"margin must be a number in \[0, 1\)"),
        (
            lambda: interpolation_coefficient([1.0], [-1.0], margin="0"),
            r"margin must be a number in \[0, 1\)",
        ),
        (
            lambda: minimize(lambda x: x[:, 0], L2Ball(1.0), [0.0, 0.0], steps=0),
            "steps must be an integer >= 1",
        ),
        (lambda: ks.PolynomialNetwork(0, 2), "units must be an integer >= 1"),
        (lambda: ks.FactorizationMachine(2, 1.5), "rank must be an integer >= 1"),
        # scikit-learn estimators check their arguments in fit
        (lambda: PolynomialNetworkClassifier(max_iter=0).fit(*_XY), "max_iter must be an integer >= 1"),
        (lambda: PolynomialNetworkClassifier(max_basis=True).fit(*_XY), "max_basis must be an integer >= 1"),
        (
            lambda: ks.MarginSparseMAPLoss(SimplexStructure(), cost_weight=-1.0),
            "cost_weight must be a finite",
        ),
        (
            lambda: ks.StructuredHingeLoss(SimplexStructure(), cost_weight=np.inf),
            "cost_weight must be a finite",
        ),
    ],
)
def test_replaced_checkers_keep_keras_style_messages(call, message):
    with pytest.raises(ValueError, match=rf"^{message}.*\. Received: \w+="):
        call()


# ------------------------------------------------------------------------------ SolverOptions
def test_solver_options_are_frozen_normalised_and_hashable():
    options = SolverOptions(tol=0, max_iter=np.int64(5), exact_jacobian=np.bool_(False))
    assert (options.tol, options.max_iter, options.exact_jacobian) == (0.0, 5, False)
    assert (
        type(options.tol) is float and type(options.max_iter) is int and type(options.exact_jacobian) is bool
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.tol = 1e-3
    assert options == SolverOptions(tol=0.0, max_iter=5, exact_jacobian=False)
    assert len({options, SolverOptions(tol=0.0, max_iter=5, exact_jacobian=False)}) == 1
    assert SolverOptions(**options.get_config()) == options
    assert SolverOptions() == SolverOptions("active_set", 1e-6, 2500, True)
    with pytest.raises(ValueError, match=r"Received: max_iter=0"):
        dataclasses.replace(options, max_iter=0)  # replace checks the new value too


def test_resolve_options():
    assert resolve_options() == SolverOptions()
    assert resolve_options(tol=1e-8) == SolverOptions(tol=1e-8)
    options = SolverOptions(**SETTINGS)
    assert resolve_options(options) is options
    assert resolve_options(options, method="frank_wolfe", max_iter=2) is options  # agreeing keywords
    with pytest.raises(ValueError, match=r"Received: options.max_iter=2, max_iter=3$"):
        resolve_options(options, max_iter=3)
    with pytest.raises(ValueError, match=r"Received: options.exact_jacobian=False, exact_jacobian=0"):
        resolve_options(options, exact_jacobian=0)
    with pytest.raises(ValueError, match=r"options must be a SolverOptions or None\. Received: options=\{"):
        resolve_options({"tol": 1e-8})


def _solve(options=None, **keywords):
    return solve(SimplexStructure(), SCORES, options=options, **keywords).u


def _op(options=None, **keywords):
    return ks.sparsemap(SimplexStructure(), tf.constant(SCORES), options=options, **keywords)[0].numpy()


def _layer(options=None, **keywords):
    return ks.SparseMAP(SimplexStructure(), options=options, **keywords)(SCORES).numpy()


def _sequence_layer(options=None, **keywords):
    unary = np.random.default_rng(0).normal(size=(2, 4, 3)).astype("float32")
    layer = ks.SparseMAPSequence(transitions_initializer="ones", options=options, **keywords)
    return layer(unary).numpy()


def _loss(options=None, **keywords):
    keywords.pop("exact_jacobian", None)  # not a loss argument: the loss ignores it
    loss = ks.SparseMAPLoss(SimplexStructure(), options=options, **keywords)
    return loss([2, 0], SCORES.astype("float32")).numpy()


ENTRY_POINTS = {"solve": _solve, "op": _op, "layer": _layer, "sequence_layer": _sequence_layer, "loss": _loss}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_options_and_keywords_give_the_same_numbers(entry):
    run = ENTRY_POINTS[entry]
    through_options = run(SolverOptions(**SETTINGS))
    np.testing.assert_array_equal(through_options, run(**SETTINGS))
    # The settings reach the solver: the defaults give other numbers.
    assert not np.allclose(through_options, run(), atol=1e-4)
    np.testing.assert_array_equal(run(), run(SolverOptions()))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_conflicting_keyword_raises_everywhere(entry):
    with pytest.raises(
        ValueError, match=r"either in options or as a keyword.*Received: options.tol=1e-09, tol=1e-05"
    ):
        ENTRY_POINTS[entry](SolverOptions(**SETTINGS), tol=1e-5)


BAD_SETTINGS = [
    ({"max_iter": 0}, r"max_iter must be an integer >= 1\. Received: max_iter=0"),
    ({"max_iter": -1}, r"max_iter must be an integer >= 1\. Received: max_iter=-1"),
    ({"max_iter": 2.0}, r"max_iter must be an integer >= 1\. Received: max_iter=2\.0"),
    ({"max_iter": True}, r"max_iter must be an integer >= 1\. Received: max_iter=True"),
    ({"tol": -1e-3}, r"tol must be a finite number >= 0\. Received: tol=-0\.001"),
    ({"tol": float("nan")}, r"tol must be a finite number >= 0\. Received: tol=nan"),
    ({"method": "newton"}, r"method must be one of \[.*\]\. Received: method='newton'"),
    ({"exact_jacobian": 1}, r"exact_jacobian must be True or False\. Received: exact_jacobian=1"),
]


@pytest.mark.parametrize(
    "entry, settings, message",
    [
        (entry, settings, message)
        for entry in ["options", *ENTRY_POINTS]
        for settings, message in BAD_SETTINGS
        # The losses take no exact_jacobian keyword (they never differentiate the solver).
        if not (entry == "loss" and "exact_jacobian" in settings)
    ],
)
def test_one_rule_everywhere(entry, settings, message):
    with pytest.raises(ValueError, match=rf"^{message}$"):
        SolverOptions(**settings) if entry == "options" else ENTRY_POINTS[entry](**settings)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_max_iter_one_is_allowed_everywhere(entry):
    assert np.all(np.isfinite(ENTRY_POINTS[entry](max_iter=1)))


def test_options_are_checked_once(monkeypatch):
    checked = []
    original = SolverOptions.__post_init__

    def counting(self):
        checked.append(self)
        original(self)

    monkeypatch.setattr(SolverOptions, "__post_init__", counting)
    options = SolverOptions(**SETTINGS)
    layer = ks.SparseMAP(SimplexStructure(), options=options)
    loss = ks.SparseMAPLoss(SimplexStructure(), options=SolverOptions(exact_jacobian=False))
    assert len(checked) == 2
    _solve(options)
    _op(options)
    tf.function(lambda x: ks.sparsemap(SimplexStructure(), x, options=options)[0])(tf.constant(SCORES))
    layer(SCORES)
    loss([2, 0], SCORES.astype("float32"))
    assert len(checked) == 2  # handed down as they are, never checked again
    assert layer.options is options


def test_op_gradient_same_through_options():
    x = tf.constant(SCORES)
    grads = []
    for kwargs in ({"options": SolverOptions(tol=1e-9)}, {"tol": 1e-9}):
        with tf.GradientTape() as tape:
            tape.watch(x)
            u, _ = ks.sparsemap(SimplexStructure(), x, **kwargs)
            value = tf.reduce_sum(u * tf.constant([[1.0, 2.0, 3.0, 4.0]], tf.float64))
        grads.append(tape.gradient(value, x).numpy())
    np.testing.assert_array_equal(*grads)


# ------------------------------------------------------------------------------ serialization
def test_layer_config_keeps_plain_keys():
    layer = ks.SparseMAP(SequenceStructure(), options=SolverOptions(**SETTINGS))
    config = layer.get_config()
    assert "options" not in config
    assert {key: config[key] for key in SETTINGS} == SETTINGS
    clone = ks.SparseMAP.from_config(config)
    assert clone.options == layer.options
    assert (clone.method, clone.tol, clone.max_iter, clone.exact_jacobian) == tuple(SETTINGS.values())
    # A config written before SolverOptions (plain keys, as in old .keras files) loads.
    old = {"name": "old", "structure": config["structure"], **SETTINGS, "return_structures": False}
    assert ks.SparseMAP.from_config(old).options == SolverOptions(**SETTINGS)
    tree = ks.SparseMAPDependencyTree(options=SolverOptions(max_iter=7))
    restored = keras.layers.deserialize(keras.layers.serialize(tree))
    assert restored.options == SolverOptions(max_iter=7)


def test_loss_config_keeps_plain_keys():
    loss = ks.MarginSparseMAPLoss(
        SimplexStructure(), cost_weight=0.5, options=SolverOptions(tol=1e-4, max_iter=9)
    )
    config = loss.get_config()
    assert "options" not in config and "exact_jacobian" not in config
    assert (config["method"], config["tol"], config["max_iter"]) == ("active_set", 1e-4, 9)
    clone = ks.MarginSparseMAPLoss.from_config(config)
    assert clone.options == loss.options and clone.cost_weight == 0.5
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert restored.options == loss.options


def test_losses_ignore_exact_jacobian():
    y_pred = SCORES.astype("float32")
    values = [
        ks.SparseMAPLoss(SimplexStructure(), options=SolverOptions(exact_jacobian=flag))([2, 0], y_pred)
        for flag in (True, False)
    ]
    np.testing.assert_array_equal(*values)
