"""Structure facts on the protocol, and the structured losses as functions under thin classes.

* Every built-in structure states whether its codes carry the padding
  (``lengths_from_codes``), its code shape for given score shapes (``code_shape``)
  and how a loss's ``y_pred`` holds ``(eta_u, eta_v)`` (``split_scores``).
* ``ks.losses.sparsemap_loss`` and friends give the same values and gradients as the
  ``keras.losses.Loss`` classes, eagerly and inside ``tf.function``.
* A structure written in its own file with the default facts (``RowChoiceStructure``,
  the worked example of ``tests/test_new_structure.py``) trains with ``SparseMAPLoss``
  with no edit in the losses: over a product of simplices, the SparseMAP loss is the
  sum of the rows' sparsemax losses.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import (
    BudgetStructure,
    CustomStructure,
    DependencyTreeStructure,
    MatchingStructure,
    SequenceStructure,
    SimplexStructure,
    SolverOptions,
    Structure,
)
from keras_structured.losses import (
    LinearChainCRFLoss,
    MarginSparseMAPLoss,
    SparseMAPLoss,
    StructuredHingeLoss,
    StructuredPerceptronLoss,
    TreeCRFLoss,
    linear_chain_crf_loss,
    margin_sparsemap_loss,
    sparsemap_loss,
    structured_hinge_loss,
    structured_perceptron_loss,
    tree_crf_loss,
)
from keras_structured.ops import map_decode, pack_sequence_scores, unpack_sequence_scores
from tests.test_new_structure import RowChoiceStructure


def _largest(scores):
    """A user oracle: a one at the largest score."""
    best = np.zeros_like(scores)
    best.flat[np.argmax(scores)] = 1.0
    return best


# (structure, unary score shape, higher-order score shape, code shape, lengths_from_codes)
BUILT_IN_FACTS = [
    (SequenceStructure(), (5, 3), (4, 3, 3), (5,), True),
    (DependencyTreeStructure(), (4, 4), (0,), (4,), True),
    (DependencyTreeStructure(single_root=True, projective=True), (4, 4), (0,), (4,), True),
    (SimplexStructure(), (5,), (0,), (), False),
    (MatchingStructure(), (3, 4), (0,), (3,), False),
    (BudgetStructure(2), (5,), (0,), (5,), False),
    (CustomStructure(_largest), (2, 3), (0,), (2, 3), False),
    (RowChoiceStructure(), (3, 4), (0,), (3,), False),
]
FACT_IDS = [f"{type(case[0]).__name__}-{i}" for i, case in enumerate(BUILT_IN_FACTS)]


@pytest.mark.parametrize("structure, u_shape, v_shape, code_shape, padded", BUILT_IN_FACTS, ids=FACT_IDS)
def test_code_shape_and_padding_facts(structure, u_shape, v_shape, code_shape, padded):
    assert structure.lengths_from_codes is padded
    assert structure.code_shape(u_shape, v_shape) == code_shape
    # The fact agrees with what the MAP oracle returns.
    rng = np.random.default_rng(0)
    codes = structure.map(rng.normal(size=(2,) + u_shape), np.zeros((2,) + v_shape))
    assert np.shape(codes)[1:] == code_shape
    # Unknown dimensions: no code shape.
    assert structure.code_shape((None,) + u_shape[1:], (None,) + v_shape[1:]) is None


def test_code_shape_falls_back_to_a_map_call_without_a_compiled_oracle():
    calls = []

    class ArgmaxStructure(Structure):
        """A pure-Python structure: one part of ``K``, its code a scalar."""

        def map(self, eta_u, eta_v, lengths=None):
            calls.append(eta_u.shape)
            return np.argmax(eta_u, axis=1)

        def indicators(self, codes, u_shape, v_shape, lengths=None):
            m = np.zeros((len(codes),) + tuple(u_shape))
            m[np.arange(len(codes)), codes] = 1.0
            return m, np.zeros((len(codes),) + tuple(v_shape))

    assert ArgmaxStructure().code_shape((4,), (0,)) == ()
    assert calls == [(1, 4)]
    # A structure with a compiled oracle reads its code shape without a MAP call.
    assert RowChoiceStructure().code_shape((2, 3), (0,)) == (2,)


@pytest.mark.parametrize(
    "structure", [case[0] for case in BUILT_IN_FACTS if not isinstance(case[0], SequenceStructure)]
)
def test_default_split_is_the_unary_scores(structure):
    scores = np.ones((2, 3))
    eta_u, eta_v = structure.split_scores(scores)
    assert eta_u is scores and eta_v is None


def test_sequence_split_reads_the_packed_layout_on_numpy_and_tensors():
    rng = np.random.default_rng(1)
    unary, transitions = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 4, 3, 3))
    packed = pack_sequence_scores(unary, transitions)
    eta_u, eta_v = SequenceStructure().split_scores(packed.numpy())  # numpy in, numpy out
    assert isinstance(eta_u, np.ndarray) and isinstance(eta_v, np.ndarray)
    np.testing.assert_array_equal(eta_u, unary)
    np.testing.assert_array_equal(eta_v, transitions)
    tensor_u, tensor_v = SequenceStructure().split_scores(packed)
    assert isinstance(tensor_u, tf.Tensor)
    np.testing.assert_array_equal(tensor_u.numpy(), unary)
    np.testing.assert_array_equal(tensor_v.numpy(), transitions)
    op_u, op_v = unpack_sequence_scores(packed)  # the op reads the same layout
    np.testing.assert_array_equal(op_v.numpy(), transitions)
    for shape in [(2, 5, 3, 3), (2, 5, 3)]:
        with pytest.raises(ValueError, match=r"\(batch, n, K, K \+ 1\)"):
            SequenceStructure().split_scores(np.zeros(shape))


def test_map_decode_sets_the_static_code_shape_from_the_structure():
    codes, _, _ = map_decode(MatchingStructure(), tf.zeros([2, 3, 4]))
    assert codes.shape == (2, 3)
    codes, _, _ = map_decode(SimplexStructure(), tf.zeros([0, 4]))  # an empty batch
    assert codes.shape == (0,)


def _problems():
    """``(structure, y_true, y_pred)`` per structure: padded sequences and trees, matchings, budgets."""
    rng = np.random.default_rng(2)
    tags = np.array([[0, 2, 1, -1], [1, 1, 0, 2], [2, -1, -1, -1]])
    packed = pack_sequence_scores(rng.normal(size=(3, 4, 3)), rng.normal(size=(3, 3, 3, 3))).numpy()
    heads = np.array([[-1, 0, 1, 1], [-1, 2, 0, -1], [-1, 0, -1, -1]])
    return [
        (SequenceStructure(), tags, packed),
        (DependencyTreeStructure(), heads, rng.normal(size=(3, 4, 4))),
        (MatchingStructure(), np.array([[1, 0, 2], [2, 1, 0], [0, 1, 2]]), rng.normal(size=(3, 3, 3))),
        (BudgetStructure(2), np.array([[1, 0, 1, 0], [0, 0, 1, 1], [0, 1, 0, 1]]), rng.normal(size=(3, 4))),
        (RowChoiceStructure(), np.array([[0, 2], [1, 1], [2, 0]]), rng.normal(size=(3, 2, 3))),
    ]


PAIRS = [
    (SparseMAPLoss, sparsemap_loss, {}),
    (MarginSparseMAPLoss, margin_sparsemap_loss, {"cost_weight": 0.7}),
    (StructuredPerceptronLoss, structured_perceptron_loss, {}),
    (StructuredHingeLoss, structured_hinge_loss, {"cost_weight": 0.7}),
]


def _value_and_gradient(function, y_true, y_pred):
    y_pred = tf.constant(y_pred, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(y_pred)
        values = function(tf.constant(y_true, tf.float64), y_pred)
    return values.numpy(), tape.gradient(values, y_pred).numpy()


@pytest.mark.parametrize("loss_class, loss_function, kwargs", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_functions_equal_the_classes_eagerly_and_in_tf_function(loss_class, loss_function, kwargs):
    for structure, y_true, y_pred in _problems():
        loss = loss_class(structure, reduction="none", dtype="float64", **kwargs)

        def function(y_true, y_pred, structure=structure):
            return loss_function(y_true, y_pred, structure, **kwargs)

        expected, expected_gradient = _value_and_gradient(loss, y_true, y_pred)
        values, gradient = _value_and_gradient(function, y_true, y_pred)
        assert values.shape == (len(y_true),)
        np.testing.assert_array_equal(values, expected)
        np.testing.assert_array_equal(gradient, expected_gradient)
        # Graph mode may fuse float ops differently: equal up to rounding.
        values, gradient = _value_and_gradient(tf.function(function), y_true, y_pred)
        np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-12, atol=1e-12)
        # The default reduction is the mean of the function's values.
        mean = loss_class(structure, dtype="float64", **kwargs)(y_true, y_pred)
        np.testing.assert_allclose(float(mean), expected.mean(), rtol=1e-12)


def test_crf_functions_equal_the_classes():
    structure, tags, packed = _problems()[0]
    np.testing.assert_array_equal(
        _value_and_gradient(linear_chain_crf_loss, tags, packed)[0],
        _value_and_gradient(LinearChainCRFLoss(reduction="none", dtype="float64"), tags, packed)[0],
    )
    _, heads, arcs = _problems()[1]
    for single_root in (False, True):
        loss = TreeCRFLoss(single_root=single_root, reduction="none", dtype="float64")
        graph = tf.function(lambda y_true, y_pred, s=single_root: tree_crf_loss(y_true, y_pred, s))
        expected = _value_and_gradient(loss, heads, arcs)
        eager = _value_and_gradient(
            lambda y_true, y_pred, s=single_root: tree_crf_loss(y_true, y_pred, s), heads, arcs
        )
        np.testing.assert_array_equal(eager[0], expected[0])
        np.testing.assert_array_equal(eager[1], expected[1])
        got = _value_and_gradient(graph, heads, arcs)
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-12, atol=1e-12)


def test_functions_take_solver_options_and_check_their_arguments():
    scores = [[0.0, 1.0, 0.0]]
    by_options = sparsemap_loss([0], scores, SimplexStructure(), SolverOptions(tol=1e-10))
    by_keyword = sparsemap_loss([0], scores, SimplexStructure(), tol=1e-10)
    np.testing.assert_allclose(by_options.numpy(), [1.0], rtol=1e-6)
    np.testing.assert_array_equal(by_options.numpy(), by_keyword.numpy())
    config = {"class_name": "SimplexStructure", "config": {}}  # a config dict works, as for the classes
    np.testing.assert_array_equal(sparsemap_loss([0], scores, config).numpy(), by_options.numpy())
    with pytest.raises(ValueError, match="structure must be a Structure"):
        sparsemap_loss([0], scores, "simplex")
    with pytest.raises(ValueError, match="cost_weight"):
        structured_hinge_loss([0], scores, SimplexStructure(), cost_weight=-1.0)
    with pytest.raises(ValueError, match="max_iter"):
        margin_sparsemap_loss([0], scores, SimplexStructure(), max_iter=0)
    with pytest.raises(ValueError, match="Received: options.tol"):
        sparsemap_loss([0], scores, SimplexStructure(), SolverOptions(tol=1e-8), tol=1e-4)


def test_functions_are_exported_at_the_top_level():
    assert ks.sparsemap_loss is sparsemap_loss
    assert ks.losses.structured_hinge_loss is structured_hinge_loss
    for name in (
        "margin_sparsemap_loss",
        "structured_perceptron_loss",
        "linear_chain_crf_loss",
        "tree_crf_loss",
    ):
        assert name in ks.__all__ and name in ks.losses.__all__


def test_a_new_structure_trains_with_sparsemap_loss_unchanged():
    """``RowChoiceStructure`` keeps the default facts; its SparseMAP loss is per-row sparsemax loss."""
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(4, 3, 5))
    codes = rng.integers(0, 5, size=(4, 3))
    structure = RowChoiceStructure()
    assert not structure.lengths_from_codes
    values, gradient = _value_and_gradient(
        SparseMAPLoss(structure, tol=1e-12, reduction="none", dtype="float64"), codes, scores
    )
    one_hot = np.eye(5)[codes]
    per_row = ks.sparsemax_loss(tf.constant(one_hot), tf.constant(scores)).numpy()
    np.testing.assert_allclose(values, per_row.sum(axis=1), atol=1e-10)
    sparsemax = ks.sparsemax(tf.constant(scores), axis=-1).numpy()
    np.testing.assert_allclose(gradient, sparsemax - one_hot, atol=1e-10)

    # And in model.fit: a linear model learns to score its training codes highest.
    keras.utils.set_random_seed(0)
    inputs = rng.normal(size=(16, 6)).astype("float32")
    targets = rng.integers(0, 5, size=(16, 3))
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(15), keras.layers.Reshape((3, 5))])
    model.compile(keras.optimizers.Adam(0.05), loss=SparseMAPLoss(structure), jit_compile=False)
    history = model.fit(inputs, targets, epochs=30, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
