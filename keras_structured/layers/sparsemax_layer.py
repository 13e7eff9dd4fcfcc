"""The Sparsemax activation layer."""

from __future__ import annotations

import keras

from keras_structured.ops.sparsemax_op import sparsemax


@keras.saving.register_keras_serializable(package="keras_structured")
class Sparsemax(keras.layers.Layer):
    """Sparsemax activation: ``argmin_{p in simplex} ||p - x||^2`` along ``axis``.

    Like ``keras.layers.Softmax`` but with sparse outputs (exact zeros). Runs on every
    Keras backend (TensorFlow, JAX, PyTorch).

    Args:
        axis: the normalised axis.

    Call arguments:
        inputs: scores.
        mask: optional boolean mask broadcastable to ``inputs`` (each dimension 1 or
            that of ``inputs``, as for ``keras.layers.Softmax``); masked entries get
            exactly zero. The mask is passed on to the next layer.

    Returns:
        Probabilities with the shape of ``inputs``, in the layer's compute dtype
        (float16 under ``mixed_float16``; the projection itself runs in float32).
        Unmasked outputs carry their scores for ``SparsemaxLoss(from_logits=False)``.

    Raises:
        ValueError: at build time, for an ``axis`` out of range; at call time, for a
            ``mask`` that does not broadcast to ``inputs``.
        tf.errors.InvalidArgumentError: on TensorFlow, at run time, for NaN or ``+inf``
            scores; ``ValueError`` on JAX and PyTorch (see :func:`keras_structured.sparsemax`).

    Example:
        >>> keras.ops.convert_to_numpy(Sparsemax()(np.array([[1.0, 0.5, -1.0]])))
        array([[0.75, 0.25, 0.  ]], dtype=float32)
    """

    supports_masking = True

    def __init__(self, axis: int = -1, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(axis, int):
            raise ValueError(f"axis must be an integer. Received: axis={axis!r}")
        self.axis = axis

    def build(self, input_shape):
        rank = len(input_shape)
        if not -rank <= self.axis < rank:
            raise ValueError(
                f"axis is out of range for inputs of rank {rank}. Received: axis={self.axis}, "
                f"input_shape={input_shape}"
            )
        self.built = True

    def call(self, inputs, mask=None):
        return sparsemax(inputs, axis=self.axis, mask=mask)

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config["axis"] = self.axis
        return config
