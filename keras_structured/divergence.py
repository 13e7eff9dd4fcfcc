"""Divergence is an error, not a result: non-finite losses and weights stop training.

A run whose loss or weights become NaN or infinite must not be reported as finished, nor
keep a non-finite model as its best. :class:`RaiseOnNonFiniteLoss` stops ``model.fit`` at the
first non-finite batch loss (``keras.callbacks.TerminateOnNaN`` only stops quietly), and
:func:`check_finite_weights` checks a model before it is saved.

Example:
    >>> import keras
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> check_finite_weights(model, "epoch 1")
"""

from __future__ import annotations

import math

import keras
import numpy as np

__all__ = ["DivergenceError", "RaiseOnNonFiniteLoss", "check_finite_weights"]

#: What usually makes a run diverge, for the messages.
LIKELY_CAUSES = "a learning rate or gradient clipping norm too large for the model, or non-finite inputs"


class DivergenceError(FloatingPointError):
    """Training diverged: a loss or a weight became NaN or infinite (the message says where)."""


def check_finite_weights(model: keras.Model, where: str) -> None:
    """Raise :class:`DivergenceError` when a weight of ``model`` is NaN or infinite.

    Args:
        model: the model.
        where: when it was checked, for the message (``"after epoch 3"``).
    """
    for variable in model.weights:
        if not np.all(np.isfinite(keras.ops.convert_to_numpy(variable))):
            raise DivergenceError(
                f"Training diverged: the weights of {variable.path!r} are not finite {where}. "
                f"Likely cause: {LIKELY_CAUSES}."
            )


class RaiseOnNonFiniteLoss(keras.callbacks.Callback):
    """Stop ``model.fit`` with a :class:`DivergenceError` at the first non-finite batch loss.

    Args:
        epoch: the epoch being trained, from 0 (for the message).
    """

    def __init__(self, epoch: int = 0):
        super().__init__()
        self._epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise DivergenceError(
                f"Training diverged: the loss became {float(loss)} at epoch {self._epoch + 1}, "
                f"batch {batch + 1}. Likely cause: {LIKELY_CAUSES}."
            )
