"""Keras layer projecting Gaussian policy outputs (mean, scale) onto entropy and KL constraints."""

from __future__ import annotations

import keras
from keras import ops

from keras_structured.projections.policy import project_gaussian


@keras.saving.register_keras_serializable(package="keras_structured")
class GaussianProjection(keras.layers.Layer):
    """Makes Gaussian outputs ``N(mean, L L^T)`` satisfy an entropy bound and/or a KL trust region.

    With ``min_entropy`` the scale is rescaled exactly onto ``H >= min_entropy``
    (:func:`project_gaussian_entropy`); with ``epsilon_mean``/``epsilon_cov`` the
    output is interpolated towards a reference ("old") Gaussian until the decomposed
    ``KL(new || old)`` parts are within the bounds (:func:`project_gaussian_kl`). The
    entropy projection runs first, then the KL one (:func:`project_gaussian`): the KL
    step interpolates the covariance towards the old one, along which the entropy is
    concave, so the output keeps both bounds whenever the old Gaussian satisfies the
    entropy bound; the other order would widen the scale after the KL step and could
    break the KL bound (see :mod:`keras_structured.projections.policy`). Gradients flow
    through the interpolation and rescaling coefficients.

    Args:
        min_entropy: optional entropy lower bound (nats), per state.
        epsilon_mean: bound on the mean part of the KL (with ``epsilon_cov``).
        epsilon_cov: bound on the covariance part of the KL.
        average_over_batch: the KL bounds hold on the batch average (one shared
            coefficient) instead of per state; the entropy bound stays per state.
        diagonal: scales are standard deviations ``(batch, d)`` instead of Cholesky
            factors ``(batch, d, d)``.

    Call arguments:
        inputs: ``[mean, scale]``, or ``[mean, scale, old_mean, old_scale]`` with KL bounds.

    Returns:
        ``[mean, scale]`` projected, in the inputs' dtype (float16 under
        ``mixed_float16``; the projection runs in float32).

    Raises:
        ValueError: at construction, for one KL bound without the other or no bound at
            all; at call time, for a number of inputs other than 2 (4 with KL bounds).

    Example:
        >>> layer = GaussianProjection(min_entropy=2.0, diagonal=True)
        >>> mean, scale = layer([np.zeros((1, 2)), np.full((1, 2), 0.1)])
        >>> from keras_structured.projections import gaussian_entropy
        >>> round(float(gaussian_entropy(scale, diagonal=True)[0]), 4)
        2.0
    """

    def __init__(
        self,
        min_entropy: float | None = None,
        epsilon_mean: float | None = None,
        epsilon_cov: float | None = None,
        average_over_batch: bool = False,
        diagonal: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if (epsilon_mean is None) != (epsilon_cov is None):
            raise ValueError(
                "Give both KL bounds or neither. "
                f"Received: epsilon_mean={epsilon_mean}, epsilon_cov={epsilon_cov}"
            )
        if min_entropy is None and epsilon_mean is None:
            raise ValueError(
                "GaussianProjection needs min_entropy and/or the KL bounds. "
                f"Received: min_entropy={min_entropy}, epsilon_mean={epsilon_mean}, epsilon_cov={epsilon_cov}"
            )
        self.min_entropy, self.epsilon_mean, self.epsilon_cov = min_entropy, epsilon_mean, epsilon_cov
        self.average_over_batch, self.diagonal = bool(average_over_batch), bool(diagonal)

    @property
    def uses_kl(self) -> bool:
        return self.epsilon_mean is not None

    def call(self, inputs):
        expected = 4 if self.uses_kl else 2
        if not isinstance(inputs, (list, tuple)) or len(inputs) != expected:
            raise ValueError(
                f"GaussianProjection expects {expected} inputs "
                f"({'[mean, scale, old_mean, old_scale]' if self.uses_kl else '[mean, scale]'}). "
                f"Received: {len(inputs) if isinstance(inputs, (list, tuple)) else 1} input(s)"
            )
        # Under mixed precision the projection runs in float32: TensorFlow has no float16
        # Cholesky or triangular-solve kernels, and the KL needs the precision anyway.
        dtype = keras.backend.standardize_dtype(inputs[0].dtype)
        if dtype in ("float16", "bfloat16"):
            inputs = [ops.cast(x, "float32") for x in inputs]
        old_mean, old_scale = (inputs[2], inputs[3]) if self.uses_kl else (None, None)
        (mean, scale), _ = project_gaussian(
            inputs[0],
            inputs[1],
            old_mean,
            old_scale,
            min_entropy=self.min_entropy,
            epsilon_mean=self.epsilon_mean,
            epsilon_cov=self.epsilon_cov,
            average_over_batch=self.average_over_batch,
            diagonal=self.diagonal,
            average_entropy_over_batch=False,
        )
        return [ops.cast(mean, dtype), ops.cast(scale, dtype)]

    def compute_output_shape(self, input_shape):
        return [tuple(input_shape[0]), tuple(input_shape[1])]

    def get_config(self):
        config = super().get_config()
        config.update(
            min_entropy=self.min_entropy,
            epsilon_mean=self.epsilon_mean,
            epsilon_cov=self.epsilon_cov,
            average_over_batch=self.average_over_batch,
            diagonal=self.diagonal,
        )
        return config
