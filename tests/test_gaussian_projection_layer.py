"""GaussianProjection layer: constraints hold (checked with tfp), fit, save/load."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from keras_structured.projections import GaussianProjection

tfd = tfp.distributions


def gaussian_policy(layer, d=2):
    state = keras.Input((3,))
    old_mean, old_scale = keras.Input((d,)), keras.Input((d,))
    mean = keras.layers.Dense(d)(state)
    scale = keras.layers.Dense(d, activation="softplus")(state)
    inputs = [state, old_mean, old_scale]
    projected = layer([mean, scale, old_mean, old_scale] if layer.uses_kl else [mean, scale])
    return keras.Model(inputs, projected)


def data(rng, n=64, d=2):
    return [rng.normal(size=(n, 3)), rng.normal(size=(n, d)) * 0.1, np.full((n, d), 0.5)]


def test_constraints_hold_against_tfp():
    rng = np.random.default_rng(0)
    layer = GaussianProjection(min_entropy=1.0, epsilon_mean=0.05, epsilon_cov=0.05, diagonal=True)
    mean, scale = rng.normal(size=(16, 2)) * 3, rng.uniform(0.01, 3.0, size=(16, 2))
    old_mean, old_scale = rng.normal(size=(16, 2)), rng.uniform(0.5, 1.5, size=(16, 2))
    new_mean, new_scale = layer([mean, scale, old_mean, old_scale])
    old_mean, old_scale = old_mean.astype("float32"), old_scale.astype("float32")
    new = tfd.MultivariateNormalDiag(new_mean, new_scale)
    old = tfd.MultivariateNormalDiag(old_mean, old_scale)
    assert np.all(new.entropy().numpy() >= 1.0 - 1e-5)
    mean_part = tfd.kl_divergence(tfd.MultivariateNormalDiag(new_mean, old_scale), old).numpy()
    assert np.all(mean_part <= 0.05 + 1e-5)


def test_fit_and_save_load(tmp_path):
    rng = np.random.default_rng(1)
    model = gaussian_policy(
        GaussianProjection(min_entropy=0.5, epsilon_mean=0.1, epsilon_cov=0.1, diagonal=True)
    )
    x = data(rng)

    def loss(y_true, y_pred):
        return tf.reduce_mean(tf.square(y_pred - y_true))

    model.compile("adam", [loss, loss])
    history = model.fit(x, [np.ones((64, 2)), np.ones((64, 2))], epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    expected = model(x)
    model.save(tmp_path / "policy.keras")
    restored = keras.models.load_model(tmp_path / "policy.keras", custom_objects={"loss": loss})
    for got, want in zip(restored(x), expected, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    graph = tf.function(model)(x)
    np.testing.assert_allclose(graph[1].numpy(), expected[1].numpy(), rtol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: epsilon_mean=0.1, epsilon_cov=None"):
        GaussianProjection(epsilon_mean=0.1)
    with pytest.raises(ValueError, match="needs min_entropy"):
        GaussianProjection()
    with pytest.raises(ValueError, match="Received: 2 input"):
        GaussianProjection(epsilon_mean=0.1, epsilon_cov=0.1)([np.zeros((1, 2)), np.ones((1, 2))])
