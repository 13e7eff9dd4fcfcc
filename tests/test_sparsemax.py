"""sparsemax op, Sparsemax layer and SparsemaxLoss."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from tests.layer_checks import check_layer


def reference_sparsemax(z):
    """Bisection on the threshold tau: sum(max(z - tau, 0)) = 1 (independent of sorting)."""
    z = np.asarray(z, dtype=np.float64)
    low = z.max(axis=-1, keepdims=True) - 1.0
    high = z.max(axis=-1, keepdims=True)
    for _ in range(200):
        mid = (low + high) / 2
        too_low = np.maximum(z - mid, 0).sum(axis=-1, keepdims=True) > 1
        low, high = np.where(too_low, mid, low), np.where(too_low, high, mid)
    return np.maximum(z - (low + high) / 2, 0)


def random_logits(seed, shape=(64, 12)):
    rng = np.random.default_rng(seed)
    scales = 10.0 ** rng.uniform(-5, 8, size=shape[:-1] + (1,))
    logits = rng.normal(size=shape) * scales
    logits[:4] = np.round(logits[:4] / scales[:4]) * scales[:4]  # ties
    return logits


def keras_sparsemax_is_exact():
    probs = keras.ops.convert_to_numpy(keras.ops.sparsemax(np.array([1.0, 0.5, 0.0])))
    return np.allclose(probs, [0.75, 0.25, 0.0])


def test_matches_reference_on_all_scales_and_ties():
    logits = random_logits(0)
    probs = ks.sparsemax(tf.constant(logits)).numpy()
    np.testing.assert_allclose(probs, reference_sparsemax(logits), atol=1e-9)
    assert (probs > 0).sum(-1).max() > 1 and (probs > 0).sum(-1).min() == 1
    # Moderate-scale rows have supports larger than one.
    moderate = ks.sparsemax(tf.constant(np.random.default_rng(1).normal(size=(32, 8)) * 0.3)).numpy()
    assert ((moderate > 0).sum(-1) > 1).all()


def test_matches_keras_ops_sparsemax():
    logits = random_logits(2)
    ours = ks.sparsemax(tf.constant(logits)).numpy()
    theirs = keras.ops.convert_to_numpy(keras.ops.sparsemax(logits))
    rows = np.ones(len(logits), dtype=bool)
    if not keras_sparsemax_is_exact():
        # keras.ops.sparsemax (up to at least Keras 3.15) sums the cumulative sums over the
        # support to get the threshold, which is right only for supports of size one.
        rows = (ours > 0).sum(-1) == 1
        assert not np.allclose(theirs[~rows].sum(-1), 1.0)
    assert rows.sum() > 10
    np.testing.assert_allclose(ours[rows], theirs[rows], atol=1e-9)


def test_float32_is_finite_for_huge_inputs():
    logits = tf.constant([[1e8, 0.5, 0.0], [-1e8, 1e8, 1e8 - 16], [1e8, 1e8, 1e8]], tf.float32)
    probs = ks.sparsemax(logits).numpy()
    assert np.isfinite(probs).all()
    np.testing.assert_allclose(probs, [[1, 0, 0], [0, 1, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_dtypes(dtype):
    probs = ks.sparsemax(tf.constant([[1.0, 0.5, -1.0]], dtype))
    assert probs.dtype == dtype
    np.testing.assert_allclose(tf.cast(probs, tf.float64).numpy(), [[0.75, 0.25, 0.0]], atol=1e-2)


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_any_axis(axis):
    logits = np.random.default_rng(3).normal(size=(3, 4, 5))
    probs = ks.sparsemax(tf.constant(logits), axis=axis).numpy()
    expected = np.moveaxis(reference_sparsemax(np.moveaxis(logits, axis, -1)), -1, axis)
    np.testing.assert_allclose(probs, expected, atol=1e-9)


def test_bad_axis_raises():
    with pytest.raises(ValueError, match="Received: axis=3"):
        ks.sparsemax(tf.zeros([2, 3]), axis=3)
    with pytest.raises(ValueError, match="Received: axis=5"):
        ks.Sparsemax(axis=5)(tf.zeros([2, 3]))


def test_masked_entries_get_exactly_zero_and_no_gradient():
    logits = tf.constant(np.random.default_rng(4).normal(size=(5, 6)) * 0.2)
    mask = np.random.default_rng(5).random((5, 6)) > 0.4
    mask[0] = False
    with tf.GradientTape() as tape:
        tape.watch(logits)
        probs = ks.sparsemax(logits, mask=mask)
        loss = tf.reduce_sum(probs * tf.constant(np.random.default_rng(6).normal(size=(5, 6))))
    grad = tape.gradient(loss, logits).numpy()
    probs = probs.numpy()
    assert np.all(probs[~mask] == 0) and np.all(grad[~mask] == 0)
    np.testing.assert_allclose(probs[0], 0.0)
    for row in range(1, 5):
        np.testing.assert_allclose(probs[row, mask[row]], reference_sparsemax(logits.numpy()[row, mask[row]]))


def test_gradient_matches_finite_differences():
    logits = tf.constant(np.random.default_rng(7).normal(size=(4, 7)) * 0.5)
    theoretical, numerical = tf.test.compute_gradient(ks.sparsemax, [logits], delta=1e-6)
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


def test_jacobian_closed_form():
    logits = tf.constant([[0.3, 0.1, -1.0, 0.25]], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        probs = ks.sparsemax(logits)
    jacobian = tape.batch_jacobian(probs, logits).numpy()[0]
    support = (probs.numpy()[0] > 0).astype(float)
    expected = np.diag(support) - np.outer(support, support) / support.sum()
    np.testing.assert_allclose(jacobian, expected, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, shape, masked",
    [({}, (4, 5), False), ({}, (4, 5), True), ({"axis": 1}, (3, 4, 2), False)],
    ids=["plain", "mask", "axis1"],
)
def test_layer_checks(kwargs, shape, masked, tmp_path):
    rng = np.random.default_rng(8)
    call_kwargs = {"mask": rng.random(shape) > 0.3} if masked else {}
    check_layer(
        ks.Sparsemax,
        kwargs,
        rng.normal(size=shape).astype("float32"),
        call_kwargs=call_kwargs,
        tmp_path=tmp_path,
    )


def test_layer_mask():
    masked = ks.Sparsemax()(tf.constant([[1.0, 2.0, 0.0]]), mask=tf.constant([[True, False, True]]))
    np.testing.assert_allclose(masked.numpy(), [[1.0, 0.0, 0.0]])


def test_loss_values_and_gradient():
    rng = np.random.default_rng(9)
    logits = tf.constant(rng.normal(size=(6, 5)))
    labels = tf.constant(reference_sparsemax(rng.normal(size=(6, 5))))
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = ks.sparsemax_loss(labels, logits)
    grad = tape.gradient(loss, logits).numpy()
    assert np.all(loss.numpy() >= 0)
    np.testing.assert_allclose(grad, ks.sparsemax(logits).numpy() - labels.numpy(), atol=1e-12)
    theoretical, numerical = tf.test.compute_gradient(lambda z: ks.sparsemax_loss(labels, z), [logits])
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)
    # Zero exactly when the prediction equals the label (with margin: one-hot, gap >= 1).
    one_hot = np.eye(5)[[0, 3]]
    np.testing.assert_allclose(ks.sparsemax_loss(one_hot, one_hot * 1.5).numpy(), 0.0)
    assert np.all(ks.sparsemax_loss(one_hot, one_hot * 0.5).numpy() > 0)


def test_loss_sparse_and_dense_labels_agree():
    logits = np.random.default_rng(10).normal(size=(8, 4)).astype("float32")
    classes = np.arange(8) % 4
    dense = ks.SparsemaxLoss()(np.eye(4)[classes], logits)
    for labels in (classes, classes[:, None]):
        np.testing.assert_allclose(ks.SparsemaxLoss()(labels, logits), dense, rtol=1e-6)
        np.testing.assert_allclose(ks.SparsemaxLoss(sparse_labels=True)(labels, logits), dense, rtol=1e-6)


def test_loss_from_probabilities_needs_sparsemax_outputs():
    logits = tf.constant([[0.0, 2.0, 0.5]])
    expected = ks.SparsemaxLoss()([1], logits)
    np.testing.assert_allclose(ks.SparsemaxLoss(from_logits=False)([1], ks.sparsemax(logits)), expected)
    with pytest.raises(ValueError, match="from_logits=False"):
        ks.SparsemaxLoss(from_logits=False)([1], tf.nn.softmax(logits))


def test_model_fit_with_layer_and_loss(tmp_path):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(64, 5)).astype("float32")
    y = np.argmax(x[:, :3], axis=1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3), ks.Sparsemax()])
    model.compile("adam", ks.SparsemaxLoss(from_logits=False, sparse_labels=True))
    history = model.fit(x, y, epochs=3, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    logits_model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    logits_model.compile("adam", ks.SparsemaxLoss(sparse_labels=True))
    logits_model.fit(x, y, epochs=1, verbose=0)
    logits_model.save(tmp_path / "loss.keras")
    restored = keras.models.load_model(tmp_path / "loss.keras")
    assert restored.loss.get_config()["sparse_labels"] is True
