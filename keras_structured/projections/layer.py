"""Keras layer applying an interpolation projection to its inputs."""

from __future__ import annotations

import keras

from keras_structured.projections.constraints import Constraint, Intersection
from keras_structured.validation import check_number


@keras.saving.register_keras_serializable(package="keras_structured")
class InterpolationProjection(keras.layers.Layer):
    """Maps each batch row into ``{h <= 0}``: ``x`` if feasible, else ``x0 + t (x - x0)``.

    ``t = h(x0) / (h(x0) - h(x))`` for a strictly feasible anchor ``x0``; the layer is
    differentiable through ``t``, so the network learns to use the constraint.

    Args:
        constraint: a ``Constraint``, or a list of them (their intersection).
        margin: in ``[0, 1)``; outputs satisfy ``h <= -margin |h(x0)|`` (strictly
            feasible for ``margin > 0``).
        validate_args: assert ``h(output) <= 1e-6 max(1, |h(x0)|)`` at run time.
        average_over_batch: the constraint holds on the batch mean of ``h``, with one
            coefficient for the batch (see
            :meth:`Constraint.batch_mean_interpolation_coefficient`), instead of on every row.

    Call arguments:
        inputs: a tensor ``(batch, ...)``, or ``[inputs, reference]`` when the
            constraint needs a reference (e.g. ``KLTrustRegion``).

    A Keras mask on the inputs (e.g. ``(batch, n)`` after ``Embedding(mask_zero=True)``)
    is passed on unchanged: the output has the shape of the inputs. The projection does
    not read it: each batch row is projected as a whole, padded positions included.

    Returns:
        The projected inputs, shape and dtype of ``inputs`` (float16 under
        ``mixed_float16``).

    Raises:
        ValueError: at construction, for a constraint that is not one or a ``margin``
            outside ``[0, 1)``; at build time, for inputs the constraint cannot hold
            on (:meth:`Constraint.check_input_shape`); at call time, for a missing
            reference.
        tf.errors.InvalidArgumentError: on TensorFlow, at run time with ``validate_args=True``,
            for non-finite inputs or an infeasible output (``ValueError`` eagerly on JAX and
            PyTorch; no check under XLA, ``jax.jit`` or ``torch.compile``).

    The layer runs on every Keras backend (its maths is written with ``keras.ops``).

    Example:
        >>> from keras_structured.projections import L2Ball
        >>> keras.ops.convert_to_numpy(InterpolationProjection(L2Ball(1.0))(np.array([[3.0, 4.0]])))
        array([[0.6, 0.8]], dtype=float32)
    """

    def __init__(
        self,
        constraint: Constraint | list,
        margin: float = 0.0,
        validate_args: bool = False,
        average_over_batch: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if isinstance(constraint, dict):
            constraint = keras.saving.deserialize_keras_object(constraint)
        if isinstance(constraint, (list, tuple)):
            constraint = Intersection(constraint)
        if not isinstance(constraint, Constraint):
            raise ValueError(f"constraint must be a Constraint. Received: constraint={constraint!r}")
        self.constraint = constraint
        self.margin = check_number("margin", margin, minimum=0, maximum=1, open_maximum=True)
        self.validate_args = bool(validate_args)
        self.average_over_batch = bool(average_over_batch)

    def _split(self, inputs):
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != 2:
                raise ValueError(
                    f"Expected inputs or [inputs, reference]. Received: len(inputs)={len(inputs)}"
                )
            return inputs[0], inputs[1]
        if self.constraint.needs_reference:
            raise ValueError(
                f"{self.constraint!r} needs a reference: call the layer on [inputs, reference]. "
                f"Received: inputs={inputs!r}"
            )
        return inputs, None

    def build(self, input_shape):
        shape = (
            input_shape[0]
            if isinstance(input_shape, (list, tuple)) and isinstance(input_shape[0], (list, tuple))
            else input_shape
        )
        self.constraint.check_input_shape(shape)
        self.built = True

    def call(self, inputs):
        x, reference = self._split(inputs)
        return self.constraint.project(
            x,
            reference=reference,
            margin=self.margin,
            validate_args=self.validate_args,
            average_over_batch=self.average_over_batch,
        )

    def compute_mask(self, inputs, mask=None):
        return mask[0] if isinstance(mask, (list, tuple)) else mask

    def compute_output_shape(self, input_shape):
        if isinstance(input_shape, (list, tuple)) and isinstance(input_shape[0], (list, tuple)):
            return tuple(input_shape[0])
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            constraint=keras.saving.serialize_keras_object(self.constraint),
            margin=self.margin,
            validate_args=self.validate_args,
            average_over_batch=self.average_over_batch,
        )
        return config
