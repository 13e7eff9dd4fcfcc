"""Bad input gets a clear error: SICK bytes, projection centers and bounds, huge features, lengths.

Each test reproduces a case of the input-validation audit that used to pass silently or
fail deep inside numpy or TensorFlow.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.applications.nli.sick_reader import read_sick
from keras_structured.ops.crf import (
    linear_chain_crf_log_partition,
    linear_chain_crf_marginals,
    tree_crf_log_partition,
    tree_crf_marginals,
)
from keras_structured.ops.sequence_scores import add_boundary_scores
from keras_structured.projections import (
    EntropyLowerBound,
    Halfspace,
    KLTrustRegion,
    L1Ball,
    L2Ball,
    LinfBall,
    Polytope,
    UserConstraint,
    project_gaussian_entropy,
    project_gaussian_kl,
)

# ---------------------------------------------------------------------------------------------
# SICK: bytes that are not UTF-8


@pytest.mark.application
def test_a_sick_file_with_non_utf8_bytes_names_the_line_and_the_encoding(tmp_path):
    path = tmp_path / "sick.tsv"
    rows = [
        "pair_id\tsentence_a\tsentence_b\tlabel\tsplit",
        "1\tA dog runs\tA dog is running\tentailment\ttrain",
        "2\tA caf\xe9 is open\tA shop is open\tentailment\ttrain",
    ]
    data = ("\n".join(rows) + "\n").encode("latin-1")
    path.write_bytes(data)
    offset = data.index(b"\xe9")
    with pytest.raises(
        ValueError, match=f"{re.escape(str(path))}, line 3: .*not valid UTF-8.*byte offset {offset}"
    ):
        read_sick(path)


@pytest.mark.application
def test_a_sick_file_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "sick.tsv"
    text = "pair_id\tsentence_a\tsentence_b\tlabel\tsplit\n1\tA dog\tA cat\tneutral\ttest\n"
    path.write_text("\ufeff" + text, encoding="utf-8")
    assert read_sick(path)["test"][0].premise == ("a", "dog")


# ---------------------------------------------------------------------------------------------
# Projections: centers and bounds checked alike, eagerly and inside tf.function

BALLS = (L1Ball, L2Ball, LinfBall)


@pytest.mark.parametrize("ball", BALLS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_every_norm_ball_refuses_a_center_that_is_not_finite(ball, bad):
    with pytest.raises(ValueError, match=r"center must be a finite array\. Received: center="):
        ball(1.0, center=[bad, 0.0])

    @tf.function
    def build_and_project(x):
        return ball(1.0, center=[bad, 0.0]).project(x, validate_args=True)

    with pytest.raises(ValueError, match=r"center must be a finite array\. Received: center="):
        build_and_project(tf.constant([[3.0, 1.0]]))


def test_the_other_fixed_arrays_of_the_constraints_must_be_finite():
    with pytest.raises(ValueError, match=r"b must be a finite array\. Received: b="):
        Polytope([[1.0, 0.0]], [np.inf], interior_point=[0.0, 0.0])
    with pytest.raises(ValueError, match=r"A must be a finite array\. Received: A="):
        Polytope([[np.nan, 0.0]], [1.0], interior_point=[0.0, 0.0])
    with pytest.raises(
        ValueError, match=r"interior_point must be a finite array\. Received: interior_point="
    ):
        Halfspace([1.0, 0.0], 1.0, interior_point=[-np.inf, 0.0])
    with pytest.raises(ValueError, match=r"a must be a finite array\. Received: a="):
        Halfspace([np.nan, 1.0], 1.0)
    with pytest.raises(ValueError, match=r"anchor_fn must be a finite array\. Received: anchor_fn="):
        UserConstraint(lambda x: tf.reduce_sum(x, -1), [np.nan, 0.0])


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda bound: L2Ball(bound), "radius"),
        (lambda bound: L1Ball(bound, center=[1.0, 0.0]), "radius"),
        (lambda bound: EntropyLowerBound(bound, from_logits=True), "min_entropy"),
        (lambda bound: KLTrustRegion(bound, from_logits=True), "epsilon"),
    ],
    ids=["L2Ball", "L1Ball", "EntropyLowerBound", "KLTrustRegion"],
)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_symbolic_bound_that_is_not_finite_is_named_inside_tf_function(make, name, bad):
    x = tf.constant([[3.0, 1.0]])

    @tf.function
    def project(bound):
        return make(bound).project(x, reference=tf.zeros_like(x))

    with pytest.raises(ValueError, match=f"{name} must be"):
        make(tf.constant(bad))  # eager tensor: checked at once
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{name} must be .*finite"):
        project(tf.constant(bad))


def test_the_gaussian_projections_refuse_bounds_that_are_not_finite_inside_tf_function():
    old_mean, old_scale = tf.zeros([2, 2], tf.float64), tf.ones([2, 2], tf.float64)
    mean, scale = old_mean + 3.0, 3.0 * old_scale

    @tf.function
    def kl(epsilon_mean, epsilon_cov):
        return project_gaussian_kl(mean, scale, old_mean, old_scale, epsilon_mean, epsilon_cov, diagonal=True)

    @tf.function
    def entropy(min_entropy):
        return project_gaussian_entropy(old_mean, 0.1 * old_scale, min_entropy, diagonal=True)

    good = tf.constant(0.1, tf.float64)
    for bad in (np.nan, np.inf, -1.0, 0.0):
        bad = tf.constant(bad, tf.float64)
        with pytest.raises(tf.errors.InvalidArgumentError, match="epsilon_mean must be a finite number > 0"):
            kl(bad, good)
        with pytest.raises(tf.errors.InvalidArgumentError, match="epsilon_cov must be a finite number > 0"):
            kl(good, bad)
    for bad in (np.nan, -np.inf):
        with pytest.raises(tf.errors.InvalidArgumentError, match="min_entropy must be finite"):
            entropy(tf.constant(bad, tf.float64))
        with pytest.raises(ValueError, match="min_entropy must be finite"):  # eager: checked at once
            project_gaussian_entropy(old_mean, 0.1 * old_scale, bad, diagonal=True)
    # Per-state bounds and Variables are checked at run time too; good bounds still project.
    per_state = tf.Variable([0.1, np.nan], dtype=tf.float64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="epsilon_cov must be a finite number > 0"):
        kl(good, per_state)
    projected_mean, _ = kl(good, good)
    kl_mean, _ = ks.projections.gaussian_kl_parts(projected_mean, scale, old_mean, old_scale, diagonal=True)
    assert np.all(kl_mean.numpy() <= 0.1 + 1e-9)


# ---------------------------------------------------------------------------------------------
# Polynomial networks: features so large that the trainer would overflow


@pytest.mark.parametrize("scale", [1e100, 1e200])
def test_polynomial_features_too_large_for_float64_are_refused_before_numpy(scale):
    from keras_structured.polynomial import PolynomialNetworkClassifier, PolynomialNetworkRegressor

    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 3))
    labels = (x[:, 0] * x[:, 1] > 0).astype(int)
    message = (
        r"X has entries too large for a polynomial network.*Scale the features.*Received: max\(abs\(X\)\)="
    )
    with pytest.raises(ValueError, match=message):
        PolynomialNetworkClassifier(max_iter=3).fit(scale * x, labels)
    with pytest.raises(ValueError, match=message):
        PolynomialNetworkRegressor(max_iter=3).fit(scale * x, labels.astype(float))
    fitted = PolynomialNetworkRegressor(max_iter=3).fit(x, labels.astype(float))
    with pytest.raises(ValueError, match=message):
        fitted.predict(scale * x)


def test_polynomial_targets_whose_gradients_would_overflow_are_refused_before_numpy():
    from keras_structured.polynomial import PolynomialNetworkRegressor

    x = np.random.default_rng(0).standard_normal((20, 3))
    with pytest.raises(
        ValueError, match=r"overflow float64 at iteration 0: .*Scale the targets y or the features X"
    ):
        PolynomialNetworkRegressor(max_iter=3).fit(1e50 * x, 1e100 * x[:, 0] ** 2)


# ---------------------------------------------------------------------------------------------
# Lengths: fractional values are refused, not truncated

FLOAT_LENGTHS = [2.5, 3.0]
LENGTH_MESSAGE = r"lengths must have an integer dtype.*Received: lengths\.dtype=float"


def _callers_of_lengths():
    unary = tf.zeros([2, 3, 2])
    transitions = tf.zeros([2, 2])
    tree_scores = tf.zeros([2, 4, 4])
    sequence = ks.engine.SequenceStructure()
    return {
        "sparsemap_sequence": lambda lengths: ks.sparsemap_sequence(unary, transitions, lengths=lengths),
        "sparsemap": lambda lengths: ks.sparsemap(
            sequence,
            *ks.ops.unpack_sequence_scores(ks.ops.pack_sequence_scores(unary, transitions)),
            lengths=lengths,
        ),
        "map_decode": lambda lengths: ks.map_decode(sequence, unary, tf.zeros([2, 2, 2, 2]), lengths=lengths),
        "chain_crf_log_partition": lambda lengths: linear_chain_crf_log_partition(
            unary, transitions, lengths=lengths
        ),
        "chain_crf_marginals": lambda lengths: linear_chain_crf_marginals(
            unary, transitions, lengths=lengths
        ),
        "tree_crf_log_partition": lambda lengths: tree_crf_log_partition(tree_scores, lengths),
        "tree_crf_marginals": lambda lengths: tree_crf_marginals(tree_scores, lengths),
        "add_boundary_scores": lambda lengths: add_boundary_scores(unary, end=[1.0, 2.0], lengths=lengths),
        "SparseMAPSequence": lambda lengths: ks.SparseMAPSequence()(unary, lengths=lengths),
        "SequenceScores": lambda lengths: ks.SequenceScores(use_boundary=True)(unary, lengths=lengths),
        "SparseMAPDependencyTree": lambda lengths: ks.SparseMAPDependencyTree()(tree_scores, lengths=lengths),
    }


@pytest.mark.parametrize("name", sorted(_callers_of_lengths()))
def test_fractional_lengths_are_refused_eagerly_and_at_trace_time(name):
    call = _callers_of_lengths()[name]
    call(tf.constant([2, 3]))  # integer lengths are fine
    for lengths in (FLOAT_LENGTHS, np.array(FLOAT_LENGTHS), tf.constant(FLOAT_LENGTHS, tf.float64)):
        with pytest.raises(ValueError, match=LENGTH_MESSAGE):
            call(lengths)
    traced = tf.function(call, input_signature=[tf.TensorSpec([2], tf.float32)])
    with pytest.raises(ValueError, match=LENGTH_MESSAGE):
        traced.get_concrete_function()
