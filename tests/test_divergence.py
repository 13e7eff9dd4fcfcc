"""``keras_structured.divergence``: a non-finite batch loss or weight stops training, naming where."""

import keras
import numpy as np
import pytest

from keras_structured.divergence import DivergenceError, RaiseOnNonFiniteLoss, check_finite_weights


def _model() -> keras.Model:
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_a_nan_loss_stops_fit_at_its_epoch_and_batch():
    x = np.ones((8, 2), "float32")
    y = np.zeros((8, 1), "float32")
    y[4] = np.nan  # the third batch of two has a NaN target, so a NaN loss
    model = _model()
    with pytest.raises(DivergenceError, match=r"loss became nan at epoch 2, batch 3\. Likely cause"):
        model.fit(x, y, batch_size=2, epochs=2, initial_epoch=1, shuffle=False, verbose=0,
                  callbacks=[RaiseOnNonFiniteLoss()])


def test_finite_weights_pass_and_a_nan_weight_is_named():
    model = _model()
    check_finite_weights(model, "after epoch 1")
    kernel = model.layers[0].kernel
    kernel.assign(np.full(kernel.shape, np.nan, "float32"))
    named = r"weights of '[^']*dense[^']*/kernel' are not finite after epoch 1\."
    with pytest.raises(DivergenceError, match=named):
        check_finite_weights(model, "after epoch 1")
