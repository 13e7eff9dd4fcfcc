"""The SparseMAP TensorFlow op: gradients, graph mode, dtypes, errors, training."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import DependencyTreeStructure, SequenceStructure, SimplexStructure, solve


def random_scores(seed, shape, scale=0.5):
    return tf.constant(np.random.default_rng(seed).normal(size=shape) * scale)


def test_simplex_op_equals_sparsemax_with_same_jacobian():
    scores = random_scores(0, (5, 6))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(scores)
        u, _ = ks.sparsemap(SimplexStructure(), scores, tol=1e-12)
        probs = ks.sparsemax(scores)
    np.testing.assert_allclose(u.numpy(), probs.numpy(), atol=1e-12)
    np.testing.assert_allclose(
        tape.batch_jacobian(u, scores).numpy(), tape.batch_jacobian(probs, scores).numpy(), atol=1e-12
    )


def test_simplex_gradient_matches_finite_differences():
    scores = random_scores(1, (3, 5))
    theoretical, numerical = tf.test.compute_gradient(
        lambda s: ks.sparsemap(SimplexStructure(), s, tol=1e-12)[0], [scores], delta=1e-6
    )
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_sequence_gradient_matches_finite_differences(seed):
    unary = random_scores(seed, (2, 4, 3), 0.4)
    transitions = random_scores(seed + 10, (2, 3, 3, 3), 0.4)

    def marginals(unary, transitions):
        u, v = ks.sparsemap(SequenceStructure(), unary, transitions, tol=1e-13)
        return tf.concat([tf.reshape(u, [2, -1]), tf.reshape(v, [2, -1])], axis=1)

    theoretical, numerical = tf.test.compute_gradient(marginals, [unary, transitions], delta=1e-6)
    for t, n in zip(theoretical, numerical, strict=True):
        np.testing.assert_allclose(t, n, atol=1e-6)


def test_sequence_wrapper_broadcasts_transitions_and_start_end():
    rng = np.random.default_rng(5)
    unary = rng.normal(size=(2, 4, 3))
    transitions = rng.normal(size=(3, 3))
    start, end = rng.normal(size=3), rng.normal(size=3)
    u, v = ks.sparsemap_sequence(unary, transitions, start=start, end=end, tol=1e-12)
    shifted = unary.copy()
    shifted[:, 0] += start
    shifted[:, -1] += end
    expected = solve(SequenceStructure(), shifted, np.broadcast_to(transitions, (2, 3, 3, 3)), tol=1e-12)
    np.testing.assert_allclose(u.numpy(), expected.u, atol=1e-12)
    np.testing.assert_allclose(v.numpy(), expected.v, atol=1e-12)
    theoretical, numerical = tf.test.compute_gradient(
        lambda t, s: ks.sparsemap_sequence(unary, t, start=s, tol=1e-13)[0],
        [tf.constant(transitions), tf.constant(start)],
    )
    for t, n in zip(theoretical, numerical, strict=True):
        np.testing.assert_allclose(t, n, atol=1e-6)


def test_sequence_wrapper_with_unknown_label_count_under_tf_function():
    rng = np.random.default_rng(6)
    unary = rng.normal(size=(2, 4, 3))
    transitions, start, end = rng.normal(size=(3, 3)), rng.normal(size=3), rng.normal(size=3)
    signature = [tf.TensorSpec([None] * rank, tf.float64) for rank in (3, 2, 1)]

    @tf.function(input_signature=signature)
    def run(unary, transitions, start):
        return ks.sparsemap_sequence(unary, transitions, start=start, end=end, tol=1e-12)

    eager = ks.sparsemap_sequence(unary, transitions, start=start, end=end, tol=1e-12)
    for traced, expected in zip(run(unary, transitions, start), eager, strict=True):
        np.testing.assert_allclose(traced.numpy(), expected.numpy(), atol=1e-12)


def test_tf_function_static_shapes_and_info():
    @tf.function
    def run(unary, transitions):
        return ks.sparsemap_sequence(unary, transitions, return_info=True)

    u, v, info = run(tf.random.normal([4, 6, 3]), tf.zeros([3, 3]))
    assert u.shape == (4, 6, 3) and v.shape == (4, 5, 3, 3)
    np.testing.assert_allclose(tf.reduce_sum(info["weights"], -1).numpy(), 1.0, rtol=1e-5)
    assert info["converged"].numpy().all()
    concrete = run.get_concrete_function(tf.TensorSpec([None, 6, 3]), tf.TensorSpec([3, 3]))
    assert concrete.structured_outputs[0].shape.as_list() == [None, 6, 3]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_dtypes(dtype):
    u, v = ks.sparsemap_sequence(tf.random.normal([2, 3, 2], dtype=dtype), tf.zeros([2, 2], dtype))
    assert u.dtype == dtype and v.dtype == dtype
    np.testing.assert_allclose(tf.reduce_sum(tf.cast(u, tf.float32), -1).numpy(), 1.0, atol=1e-3)


@pytest.mark.parametrize("which", ["unary", "transitions"])
def test_non_finite_scores_raise(which):
    unary, transitions = np.zeros((2, 3, 2)), np.zeros((2, 2))
    (unary if which == "unary" else transitions)[0, 0] = np.nan
    name = "eta_u" if which == "unary" else "eta_v"
    with pytest.raises(tf.errors.InvalidArgumentError, match=name) as eager:
        ks.sparsemap_sequence(unary, transitions)
    assert isinstance(eager.value, ValueError)  # InvalidScoresError is both
    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        tf.function(ks.sparsemap_sequence)(tf.constant(unary), tf.constant(transitions))


def test_shape_errors_at_trace_time():
    with pytest.raises(ValueError, match="Received: transitions.shape"):
        ks.sparsemap_sequence(tf.zeros([2, 3, 2]), tf.zeros([3, 3]))
    with pytest.raises(ValueError, match="Received: eta_v per-example shape"):
        ks.sparsemap(SequenceStructure(), tf.zeros([2, 3, 2]), tf.zeros([2, 3, 2, 2]))
    with pytest.raises(ValueError, match="Received: eta_u.shape"):
        ks.sparsemap(SimplexStructure(), tf.zeros([3]))
    with pytest.raises(ValueError, match="Received: method="):
        ks.sparsemap(SimplexStructure(), tf.zeros([1, 3]), method="simplex")

    @tf.function(input_signature=[tf.TensorSpec([None, None, 2])])
    def bad(unary):
        return ks.sparsemap_sequence(unary, tf.zeros([3, 3]))

    with pytest.raises(ValueError, match="Received: transitions.shape"):
        bad.get_concrete_function()


def test_non_convergence_is_reported():
    unary = random_scores(6, (2, 8, 5), 0.1)
    with pytest.warns(ks.engine.SparseMAPConvergenceWarning):
        _, _, info = ks.sparsemap_sequence(unary, tf.zeros([5, 5], tf.float64), max_iter=1, return_info=True)
    assert not info["converged"].numpy().any()


@pytest.mark.parametrize("method", ["active_set", "pairwise_frank_wolfe"])
def test_methods_agree_through_the_op(method):
    unary = random_scores(7, (2, 4, 3))
    u, _ = ks.sparsemap_sequence(unary, tf.zeros([3, 3], tf.float64), method=method, tol=1e-10, max_iter=5000)
    reference, _ = ks.sparsemap_sequence(unary, tf.zeros([3, 3], tf.float64), tol=1e-12)
    np.testing.assert_allclose(u.numpy(), reference.numpy(), atol=1e-5)


class TinyTagger(keras.layers.Layer):
    """Test-only layer: SparseMAP label marginals from unary scores and learned transitions."""

    supports_jit = False

    def build(self, input_shape):
        num_labels = input_shape[-1]
        self.transitions = self.add_weight(shape=(num_labels, num_labels), initializer="zeros")

    def call(self, unary):
        return ks.sparsemap_sequence(unary, self.transitions)[0]


def test_two_epoch_fit_of_a_tiny_tagger():
    rng = np.random.default_rng(8)
    tokens = rng.integers(0, 10, size=(64, 7))
    tags = tokens % 3
    model = keras.Sequential(
        [keras.Input((7,), dtype="int32"), keras.layers.Embedding(10, 8), keras.layers.Dense(3), TinyTagger()]
    )
    model.compile(keras.optimizers.Adam(0.05), "mse")
    history = model.fit(tokens, np.eye(3)[tags], epochs=2, batch_size=16, verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0]
    accuracy = (np.argmax(model.predict(tokens, verbose=0), -1) == tags).mean()
    assert accuracy > 0.9


def test_lengths_give_unpadded_results_and_zero_gradient():
    rng = np.random.default_rng(9)
    unary = tf.constant(rng.normal(size=(3, 5, 3)))
    transitions = tf.constant(rng.normal(size=(3, 3)))
    end = tf.constant(rng.normal(size=3))
    lengths = tf.constant([5, 2, 0])
    with tf.GradientTape() as tape:
        tape.watch(unary)
        u, v = ks.sparsemap_sequence(unary, transitions, end=end, lengths=lengths, tol=1e-12)
        total = tf.reduce_sum(u * tf.constant(rng.normal(size=(3, 5, 3))))
    grad = tape.gradient(total, unary).numpy()
    for b, length in enumerate(lengths.numpy()):
        single, _ = ks.sparsemap_sequence(unary[b : b + 1, :length], transitions, end=end, tol=1e-12)
        np.testing.assert_allclose(u.numpy()[b, :length], single.numpy()[0], atol=1e-9)
        assert np.all(u.numpy()[b, length:] == 0) and np.all(grad[b, length:] == 0)


def test_forbidden_transitions_through_the_op():
    rng = np.random.default_rng(10)
    unary = tf.constant(rng.normal(size=(2, 4, 3)) * 0.3)
    transitions = rng.normal(size=(3, 3)) * 0.3
    transitions[0, 1] = -np.inf
    transitions = tf.constant(transitions)
    with tf.GradientTape() as tape:
        tape.watch([unary, transitions])
        u, v = ks.sparsemap_sequence(unary, transitions)
        total = tf.reduce_sum(u * tf.constant(rng.normal(size=(2, 4, 3))))
    grads = tape.gradient(total, [unary, transitions])
    assert np.all(v.numpy()[:, :, 0, 1] == 0)
    assert all(np.isfinite(g.numpy()).all() for g in grads)
    with pytest.raises(tf.errors.InvalidArgumentError, match="eta_v"):
        ks.sparsemap_sequence(unary, tf.fill([3, 3], np.inf))


def test_sequence_score_packing_round_trip():
    unary = tf.random.normal([2, 4, 3])
    for transitions in (
        tf.random.normal([3, 3]),
        tf.random.normal([2, 3, 3]),
        tf.random.normal([2, 3, 3, 3]),
    ):
        packed = ks.ops.pack_sequence_scores(unary, transitions)
        got_unary, pairwise = ks.ops.unpack_sequence_scores(packed)
        np.testing.assert_array_equal(got_unary.numpy(), unary.numpy())
        expected = tf.broadcast_to(
            transitions if transitions.shape.rank == 4 else tf.reshape(transitions, [-1, 1, 3, 3]),
            [2, 3, 3, 3],
        )
        np.testing.assert_array_equal(pairwise.numpy(), expected.numpy())
    with pytest.raises(ValueError, match="Received: shape"):
        ks.ops.unpack_sequence_scores(tf.zeros([2, 4, 3, 3]))


def test_the_backward_pass_is_differentiable_with_the_same_jacobian():
    """The gradient of a vector-Jacobian product with respect to its cotangent is a
    Jacobian-vector product: the backward op's own gradient (double-backward trick)."""
    rng = np.random.default_rng(11)
    scores = tf.constant(rng.normal(size=(3, 5, 5)))
    cotangent = tf.Variable(rng.normal(size=(3, 5, 5)))
    direction = rng.normal(size=(3, 5, 5))
    structure = DependencyTreeStructure()
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(scores)
            u, _ = ks.sparsemap(structure, scores, tol=1e-12)
        vjp = inner.gradient(u, scores, output_gradients=cotangent)
        projected = tf.reduce_sum(vjp * direction)
    jvp = outer.gradient(projected, cotangent).numpy()
    expected = solve(structure, scores.numpy(), tol=1e-12).jacobian_product(direction)[0]
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(jvp, expected, atol=1e-10)
