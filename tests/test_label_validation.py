"""Invalid labels, lengths and scores raise clear errors, eagerly and inside ``tf.function``."""

import numpy as np
import pytest
import tensorflow as tf

from keras_structured.engine import (
    BudgetStructure,
    DependencyTreeStructure,
    MatchingStructure,
    SequenceStructure,
    SimplexStructure,
)
from keras_structured.losses import (
    LinearChainCRFLoss,
    MarginSparseMAPLoss,
    SparseMAPLoss,
    StructuredHingeLoss,
    StructuredPerceptronLoss,
    TreeCRFLoss,
)
from keras_structured.losses.fenchel_young import SparsemaxLoss, sparsemax_loss
from keras_structured.ops.crf import (
    linear_chain_crf_log_partition,
    linear_chain_crf_marginals,
    tree_crf_log_partition,
    tree_crf_marginals,
)
from keras_structured.ops.sequence_scores import pack_sequence_scores
from keras_structured.ops.sparsemax_op import sparsemax

STRUCTURED_LOSSES = [SparseMAPLoss, MarginSparseMAPLoss, StructuredPerceptronLoss, StructuredHingeLoss]


def eager_and_graph(function, *args):
    """``function(*args)`` run eagerly and inside ``tf.function``: a list of the two results."""
    tensors = [tf.convert_to_tensor(a) for a in args]
    return [function(*tensors), tf.function(function)(*tensors)]


def assert_raises_in_both_modes(function, args, match):
    for mode in (function, tf.function(function)):
        with pytest.raises(tf.errors.InvalidArgumentError, match=match):
            mode(*[tf.convert_to_tensor(a) for a in args])


# Each case: a structure, a valid gold example, an invalid one, and the scores' shape.
TREE = DependencyTreeStructure()
INVALID_GOLD = {
    "tree_cycle": (TREE, [-1, 0, 1, 2], [-1, 3, 1, 2], (4, 4)),
    "tree_cycle_beside_the_root": (TREE, [-1, 0, 1, 2], [-1, 0, 3, 2], (4, 4)),
    "tree_self_loop": (TREE, [-1, 0, 1, 2], [-1, 0, 2, 2], (4, 4)),
    "tree_head_below_minus_one": (TREE, [-1, 0, 1, 2], [-1, 0, -2, 1], (4, 4)),
    "tree_root_not_minus_one": (TREE, [-1, 0, 1, 2], [0, 0, 1, 2], (4, 4)),
    "tree_head_out_of_range": (TREE, [-1, 0, 1, 2], [-1, 0, 4, 1], (4, 4)),
    "tree_head_on_padding": (TREE, [-1, 0, 1, 2], [-1, 0, 3, -1], (4, 4)),
    "tree_two_root_children": (
        DependencyTreeStructure(single_root=True),
        [-1, 0, 1, 2],
        [-1, 0, 0, 2],
        (4, 4),
    ),
    "sequence_padding_inside": (SequenceStructure(), [0, 1, 2], [0, -1, 1], (3, 3, 4)),
    "sequence_tag_out_of_range": (SequenceStructure(), [0, 1, 2], [0, 3, 1], (3, 3, 4)),
    "sequence_tag_below_minus_one": (SequenceStructure(), [0, 1, 2], [0, -2, 1], (3, 3, 4)),
    "matching_duplicate_column": (MatchingStructure(), [2, 0, 1], [0, 0, 2], (3, 3)),
    "matching_column_out_of_range": (MatchingStructure(), [2, 0, 1], [0, 1, 3], (3, 3)),
    "matching_unmatched_row": (MatchingStructure(), [2, 0, 1], [2, -1, 1], (3, 3)),
    "budget_too_many_ones": (BudgetStructure(2), [1, 0, 1, 0], [1, 1, 1, 0], (4,)),
    "budget_not_binary": (BudgetStructure(2), [1, 0, 1, 0], [2, 0, 0, 0], (4,)),
    "budget_wrapping_value": (BudgetStructure(2, exact=False), [1, 0, 1, 0], [1, 0, 256, 0], (4,)),
    "simplex_minus_one": (SimplexStructure(), 1, -1, (3,)),
    "simplex_out_of_range": (SimplexStructure(), 1, 3, (3,)),
}


@pytest.mark.parametrize("loss_class", STRUCTURED_LOSSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("case", INVALID_GOLD, ids=str)
def test_structured_losses_reject_invalid_gold_labels(loss_class, case):
    structure, valid, invalid, shape = INVALID_GOLD[case]
    scores = np.random.default_rng(0).normal(size=(2,) + shape)
    loss = loss_class(structure, reduction="none")
    assert np.isfinite(loss(np.array([valid, valid]), scores).numpy()).all()
    assert_raises_in_both_modes(loss, (np.array([valid, invalid]), scores), r"y_true\[1\]")


def test_structured_losses_still_accept_padding_at_the_end():
    scores = np.random.default_rng(1).normal(size=(2, 4, 4))
    heads = np.array([[-1, 0, 1, 2], [-1, 2, 0, -1]])
    tags = np.array([[0, 1, 2], [2, -1, -1]])
    packed = np.random.default_rng(2).normal(size=(2, 3, 3, 4))
    for loss in (SparseMAPLoss(TREE), StructuredHingeLoss(TREE)):
        assert all(np.isfinite(v.numpy()).all() for v in eager_and_graph(loss, heads, scores))
    for loss in (SparseMAPLoss(SequenceStructure()), StructuredPerceptronLoss(SequenceStructure())):
        assert all(np.isfinite(v.numpy()).all() for v in eager_and_graph(loss, tags, packed))


INVALID_TAGS = {"padding_inside": [0, -1, 1], "out_of_range": [0, 3, 1], "below_minus_one": [0, -2, 1]}


@pytest.mark.parametrize("tags", INVALID_TAGS.values(), ids=INVALID_TAGS.keys())
def test_linear_chain_crf_loss_rejects_invalid_tags(tags):
    scores = pack_sequence_scores(tf.random.normal([2, 3, 3], seed=1), tf.zeros([3, 3]))
    loss = LinearChainCRFLoss(reduction="none")
    valid = np.array([[0, 1, 2], [1, 2, -1]])
    assert all(np.isfinite(v.numpy()).all() for v in eager_and_graph(loss, valid, scores))
    assert_raises_in_both_modes(loss, (np.array([[0, 1, 2], tags]), scores), "y_true")


INVALID_HEADS = {
    "cycle": [-1, 0, 3, 2],
    "self_loop": [-1, 0, 2, 2],
    "below_minus_one": [-1, 0, -2, 1],
    "root_not_minus_one": [0, 0, 1, 2],
    "out_of_range": [-1, 0, 4, 1],
    "on_padding": [-1, 0, 3, -1],
}


@pytest.mark.parametrize("heads", INVALID_HEADS.values(), ids=INVALID_HEADS.keys())
def test_tree_crf_loss_rejects_invalid_heads(heads):
    scores = tf.random.normal([2, 4, 4], seed=2)
    loss = TreeCRFLoss(reduction="none")
    valid = np.array([[-1, 0, 1, 2], [-1, 2, 0, -1]])
    assert all(np.isfinite(v.numpy()).all() for v in eager_and_graph(loss, valid, scores))
    assert_raises_in_both_modes(loss, (np.array([[-1, 0, 1, 2], heads]), scores), "y_true")


def test_single_root_tree_crf_loss_rejects_two_root_children():
    loss = TreeCRFLoss(single_root=True, reduction="none")
    heads = np.array([[-1, 0, 1, 2], [-1, 0, 0, 2]])
    assert_raises_in_both_modes(loss, (heads, tf.zeros([2, 4, 4])), "y_true")


CRF_OPS = {
    "linear_chain_crf_log_partition": lambda lengths: linear_chain_crf_log_partition(
        tf.zeros([2, 3, 2]), tf.zeros([2, 2]), lengths=lengths
    ),
    "linear_chain_crf_marginals": lambda lengths: linear_chain_crf_marginals(
        tf.zeros([2, 3, 2]), tf.zeros([2, 2]), lengths=lengths
    ),
    "tree_crf_log_partition": lambda lengths: tree_crf_log_partition(tf.zeros([2, 4, 4]), lengths),
    "tree_crf_marginals": lambda lengths: tree_crf_marginals(tf.zeros([2, 4, 4]), lengths),
}


@pytest.mark.parametrize("op", CRF_OPS.values(), ids=CRF_OPS.keys())
def test_crf_ops_reject_lengths_outside_zero_to_n(op):
    # As the SparseMAP structures' validate_lengths: 0 (an empty example) up to n.
    assert all(np.isfinite(tf.nest.flatten(r)[0].numpy()).all() for r in eager_and_graph(op, [3, 0]))
    for lengths in ([3, 4], [-1, 2]):
        assert_raises_in_both_modes(op, (lengths,), "lengths")
    with pytest.raises(ValueError, match="Received: lengths.shape"):
        op(tf.constant([[3], [2]]))


BAD_LOGITS = {
    "nan": [[0.0, 1.0], [np.nan, 1.0]],
    "inf": [[0.0, 1.0], [np.inf, 1.0]],
    "all_minus_inf": [[0.0, 1.0], [-np.inf, -np.inf]],
}


@pytest.mark.parametrize("logits", BAD_LOGITS.values(), ids=BAD_LOGITS.keys())
def test_sparsemax_and_its_loss_reject_nan_inf_and_all_minus_inf_rows(logits):
    logits = np.array(logits, np.float32)
    assert_raises_in_both_modes(sparsemax, (logits,), "logits")
    assert_raises_in_both_modes(lambda z: sparsemax_loss(tf.one_hot([0, 1], 2), z), (logits,), "logits")
    assert_raises_in_both_modes(SparsemaxLoss(sparse_labels=True), ([0, 1], logits), "logits")


def test_sparsemax_accepts_some_minus_inf_and_ignores_masked_entries():
    logits = np.array([[-np.inf, 1.0, 0.5], [np.nan, np.inf, 2.0], [np.nan, 0.0, 0.0]], np.float32)
    mask = np.array([[True, True, True], [False, False, True], [False, False, False]])
    for probs in eager_and_graph(lambda z, m: sparsemax(z, mask=m), logits, mask):
        np.testing.assert_allclose(probs.numpy(), [[0, 0.75, 0.25], [0, 0, 1], [0, 0, 0]])
    # Masked entries do not rescue a slice whose unmasked entries are all -inf.
    assert_raises_in_both_modes(
        lambda z, m: sparsemax(z, mask=m), ([[0.0, -np.inf]], [[False, True]]), "logits"
    )


def test_sparsemax_rejects_an_empty_class_axis():
    with pytest.raises(ValueError, match=r"Received: logits.shape=\(2, 0\)"):
        sparsemax(tf.zeros([2, 0]))
    with pytest.raises(ValueError, match=r"Received: logits.shape=\(0, 3\)"):
        sparsemax(tf.zeros([0, 3]), axis=0)
    with pytest.raises(ValueError, match=r"Received: logits.shape=\(2, 0\)"):
        sparsemax_loss(tf.zeros([2, 0]), tf.zeros([2, 0]))
    dynamic = tf.function(sparsemax, input_signature=[tf.TensorSpec([None, None])])
    with pytest.raises(tf.errors.InvalidArgumentError, match="logits"):
        dynamic(tf.zeros([2, 0]))


@pytest.mark.parametrize("labels", [[1, 3], [1, -1]], ids=["too_large", "minus_one"])
def test_sparsemax_loss_rejects_sparse_labels_outside_the_classes(labels):
    loss = SparsemaxLoss(sparse_labels=True, reduction="none")
    logits = np.array([[0.0, 5.0, 0.0], [0.0, 1.0, 0.0]], np.float32)
    assert all(np.isfinite(v.numpy()).all() for v in eager_and_graph(loss, [1, 1], logits))
    assert_raises_in_both_modes(loss, (labels, logits), "y_true")
