"""The ``Constraint`` base class, user-defined constraints and intersections."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_structured.ops.dtypes import compute_dtype
from keras_structured.projections.interpolate import _check_margin, interpolation_coefficient, mix

#: Round-off counts as ``ROUNDOFF_ULPS eps`` times the magnitude of the terms of ``h``
#: (``eps`` of the dtype it is evaluated in). Rounding an interpolated point and its
#: coefficient, then evaluating an affine row there, each err by about ``eps / 2`` of that
#: magnitude; the largest error seen on random float32 batches is ``0.7 eps`` of it.
ROUNDOFF_ULPS = 2.0


def roundoff(magnitude: tf.Tensor) -> tf.Tensor:
    """``ROUNDOFF_ULPS eps magnitude`` in ``magnitude``'s dtype, without gradient.

    The absolute round-off of a constraint value whose terms have this magnitude: the
    slack granted to anchors and outputs, and the margin by which affine projections
    stop short of the boundary.

    Example:
        >>> float(roundoff(tf.constant(1.0)))  # 2 * 2**-23
        2.384185791015625e-07
    """
    eps = np.finfo(magnitude.dtype.as_numpy_dtype).eps
    return tf.stop_gradient(ROUNDOFF_ULPS * eps * magnitude)


def validation_tolerance(h_x0: tf.Tensor, magnitude: tf.Tensor) -> tf.Tensor:
    """``1e-6 max(1, |h(x0)|) + roundoff(magnitude)``: the slack allowed on ``h(g(x)) <= 0``."""
    return 1e-6 * tf.maximum(tf.ones_like(h_x0), tf.abs(h_x0)) + roundoff(magnitude)


class Constraint(abc.ABC):
    """A convex constraint ``h(x) <= 0`` on each batch row, projected by interpolation.

    Subclasses implement ``h`` (convex in ``x``, shape ``(batch,)``) and ``anchor`` (a
    strictly feasible point, ``h < 0``); they may override ``eta`` with a closed form
    (the largest feasible step along the segment from the anchor), ``prepare`` (maps
    raw inputs, e.g. logits, to the space where ``h`` is convex), ``magnitude`` (the
    scale of the round-off in ``h``) and ``get_config``.

    ``project(x)`` returns ``x`` unchanged where feasible and
    ``x0 + eta (x - x0)`` otherwise, with ``eta = h(x0) / (h(x0) - h(x))``.
    """

    #: whether ``h`` and ``anchor`` need the ``reference`` argument.
    needs_reference = False

    @abc.abstractmethod
    def h(self, x: tf.Tensor, reference: tf.Tensor | None = None) -> tf.Tensor:
        """Convex constraint function, feasible iff ``<= 0``; returns shape ``(batch,)``."""

    @abc.abstractmethod
    def anchor(self, x: tf.Tensor, reference: tf.Tensor | None = None) -> tf.Tensor:
        """A strictly feasible point (``h < 0``) shaped like ``x``."""

    def prepare(self, x, reference=None) -> tuple[tf.Tensor, tf.Tensor | None]:
        """Maps raw inputs to the space where ``h`` is convex (identity by default)."""
        return x, reference

    def eta(self, x, x0, reference=None, margin: float = 0.0) -> tf.Tensor:
        """Interpolation coefficient in ``[0, 1]``, 1 exactly where ``x`` is kept.

        The default is the convexity bound ``(1 - m) h(x0) / (h(x0) - h(x))``; subclasses
        may return any larger value that is still feasible (e.g. an exact line search).
        """
        return interpolation_coefficient(self.h(x, reference), self.h(x0, reference), margin)

    def magnitude(self, x, reference=None) -> tf.Tensor:
        """Per row, the magnitude of the terms that ``h(x)`` sums, shape ``(batch,)``.

        Evaluated in ``x.dtype``, ``h(x)`` is exact up to ``roundoff(magnitude(x))``, and
        feasibility checks allow that much. The default, zero, takes ``h`` as exact (its
        round-off is within the ``1e-6 max(1, |h(x0)|)`` of ``validate_args``);
        constraints whose terms can dwarf ``h``, like affine rows far from the origin,
        override it.
        """
        return tf.zeros(tf.shape(x)[:1], x.dtype)

    def check_anchor(self, x0, reference=None, strict: bool = False) -> list:
        """Raises ``ValueError`` (eagerly) or returns run-time assertions unless the anchor is
        strictly feasible up to round-off: ``h(x0) < roundoff(magnitude(x0))``.

        The slack accepts an anchor that rounding to ``x0.dtype`` pushed onto the boundary
        (e.g. ``Monotone``'s ramp near 1e8 in float32); the projection returns it where
        it would cross. With ``strict=True`` the test is ``h(x0) < 0``, for callers that
        divide by ``h(x0)``.
        """
        h_x0 = self.h(x0, reference)
        slack = tf.zeros_like(h_x0) if strict else roundoff(self.magnitude(x0, reference))
        feasible = tf.reduce_all(h_x0 < slack)
        worst = tf.reduce_max(h_x0)
        message = (
            f"The anchor of {self!r} must be strictly feasible (h(anchor) < 0, up to round-off) for every "
            "batch row; pass a strictly feasible anchor. Received: h(anchor)="
        )
        if tf.executing_eagerly():
            if not bool(feasible):
                raise ValueError(message + f"{float(worst)!r}")
            return []
        return [tf.debugging.Assert(feasible, [message, worst])]

    def project(
        self,
        x,
        reference=None,
        anchor=None,
        margin: float = 0.0,
        validate_args: bool = False,
    ) -> tf.Tensor:
        """Interpolation projection of each batch row of ``x`` onto ``{h <= 0}``.

        Args:
            x: inputs of shape ``(batch, ...)`` (raw inputs: see ``prepare``).
            reference: optional per-row reference (e.g. the distribution of a trust
                region), required when ``needs_reference``.
            anchor: optional strictly feasible point(s) broadcastable to ``x``;
                defaults to ``self.anchor(x, reference)``.
            margin: in ``[0, 1)``; outputs satisfy ``h <= -margin |h(anchor)|``.
            validate_args: also assert ``h(output) <= 1e-6 max(1, |h(anchor)|)`` plus
                the round-off ``roundoff(magnitude(output))``.

        Returns:
            Feasible points shaped like ``x`` (in the prepared space).

        Raises:
            ValueError: eagerly, if the anchor is not strictly feasible up to
                round-off (``tf.errors.InvalidArgumentError`` inside ``tf.function``).
            tf.errors.InvalidArgumentError: if ``x`` has NaN or infinite entries.
        """
        margin = _check_margin(margin)
        if self.needs_reference and reference is None:
            raise ValueError(f"{type(self).__name__} needs a reference. Received: reference=None")
        raw = tf.convert_to_tensor(x)
        dtype = compute_dtype(raw)
        x = tf.cast(raw, dtype)
        if reference is not None:
            reference = tf.cast(tf.convert_to_tensor(reference), dtype)
        if x.shape.rank is None or x.shape.rank < 2:
            raise ValueError(f"project needs inputs of shape (batch, ...). Received: x.shape={x.shape}")
        x = tf.debugging.assert_all_finite(x, f"{type(self).__name__}.project received NaN or inf inputs")
        x, reference = self.prepare(x, reference)
        if anchor is None:
            x0 = self.anchor(x, reference)
        else:
            x0 = tf.broadcast_to(tf.cast(tf.convert_to_tensor(anchor), dtype), tf.shape(x))
        checks = self.check_anchor(x0, reference)
        with tf.control_dependencies(checks):
            out = mix(x, x0, self.eta(x, x0, reference, margin))
        if validate_args:
            h_out = self.h(out, reference)
            bound = validation_tolerance(self.h(x0, reference), self.magnitude(out, reference))
            message = (
                f"{self!r}: the projection is infeasible (h(output) > 1e-6 max(1, |h(anchor)|) + roundoff)"
            )
            with tf.control_dependencies([tf.debugging.assert_less_equal(h_out, bound, message=message)]):
                out = tf.identity(out)
        return tf.cast(out, raw.dtype)

    def get_config(self) -> dict:
        return {}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _as_config_array(value):
    return None if value is None else np.asarray(value, dtype=np.float64).tolist()


@keras.saving.register_keras_serializable(package="keras_structured")
class UserConstraint(Constraint):
    """A constraint from user TF functions: ``h_fn(x[, reference]) -> (batch,)`` convex.

    Args:
        h_fn: convex, written in TF ops; called as ``h_fn(x)`` or
            ``h_fn(x, reference)`` when a reference is given.
        anchor_fn: a callable ``anchor_fn(x[, reference])`` returning a strictly
            feasible point shaped like ``x``, or a fixed array broadcastable to ``x``.
        needs_reference: whether a reference is required.

    For ``.keras`` saving, ``h_fn``/``anchor_fn`` must be registered with
    ``keras.saving.register_keras_serializable`` (lambdas cannot be saved).

    Example:
        >>> disc = UserConstraint(lambda x: tf.reduce_sum(x**2, -1) - 1.0, [0.0, 0.0])
        >>> disc.project(tf.constant([[2.0, 0.0]])).numpy()
        array([[0.5, 0. ]], dtype=float32)
    """

    def __init__(self, h_fn: Callable, anchor_fn, needs_reference: bool = False):
        if not callable(h_fn):
            raise ValueError(f"h_fn must be callable. Received: h_fn={h_fn!r}")
        self.h_fn = h_fn
        self.anchor_fn = anchor_fn if callable(anchor_fn) else np.asarray(anchor_fn, dtype=np.float64)
        self.needs_reference = bool(needs_reference)

    def h(self, x, reference=None):
        return self.h_fn(x) if reference is None else self.h_fn(x, reference)

    def anchor(self, x, reference=None):
        if not callable(self.anchor_fn):
            return tf.broadcast_to(tf.constant(self.anchor_fn, x.dtype), tf.shape(x))
        x0 = self.anchor_fn(x) if reference is None else self.anchor_fn(x, reference)
        return tf.broadcast_to(tf.cast(x0, x.dtype), tf.shape(x))

    def get_config(self):
        anchor = self.anchor_fn
        return {
            "h_fn": keras.saving.serialize_keras_object(self.h_fn),
            "anchor_fn": keras.saving.serialize_keras_object(anchor) if callable(anchor) else anchor.tolist(),
            "needs_reference": self.needs_reference,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["h_fn"] = keras.saving.deserialize_keras_object(config["h_fn"])
        if not isinstance(config["anchor_fn"], list):
            config["anchor_fn"] = keras.saving.deserialize_keras_object(config["anchor_fn"])
        return cls(**config)

    def __repr__(self):
        return f"UserConstraint(h_fn={getattr(self.h_fn, '__name__', self.h_fn)!r})"


@keras.saving.register_keras_serializable(package="keras_structured")
class Intersection(Constraint):
    """Several constraints at once: ``h = max_i h_i`` and ``eta = min_i eta_i``.

    The anchor must be strictly feasible for every constraint. By default, per batch
    row, it is the candidate with the smallest ``max_i h_i`` among the constraints' own
    anchors and their mean (the mean is strictly feasible for all whenever each own
    anchor is feasible for the other constraints); pass ``anchor=`` to ``project``
    when none of them is strictly feasible for all.

    Args:
        constraints: a non-empty sequence of ``Constraint`` sharing the same input
            space (same ``prepare``, e.g. all from logits or all from probabilities).

    Example:
        >>> from keras_structured.projections import L2Ball, LinfBall
        >>> both = Intersection([L2Ball(1.0), LinfBall(0.5)])
        >>> both.project(tf.constant([[2.0, 0.0]])).numpy()
        array([[0.5, 0. ]], dtype=float32)
    """

    def __init__(self, constraints: Sequence[Constraint]):
        constraints = list(constraints)
        if not constraints or not all(isinstance(c, Constraint) for c in constraints):
            raise ValueError(
                "constraints must be a non-empty sequence of Constraint. "
                f"Received: constraints={constraints!r}"
            )
        kinds = {(type(c).prepare, getattr(c, "from_logits", None)) for c in constraints}
        if len(kinds) > 1:
            raise ValueError(
                "All constraints of an Intersection must take the same inputs (same prepare / from_logits). "
                f"Received: constraints={constraints!r}"
            )
        self.constraints = constraints
        self.needs_reference = any(c.needs_reference for c in constraints)

    def _ref(self, constraint, reference):
        return reference if constraint.needs_reference else None

    def _all_h(self, x, reference):
        return tf.stack([c.h(x, self._ref(c, reference)) for c in self.constraints], axis=-1)

    def h(self, x, reference=None):
        return tf.reduce_max(self._all_h(x, reference), axis=-1)

    def prepare(self, x, reference=None):
        x, _ = self.constraints[0].prepare(x, None)
        if reference is not None:
            user = next((c for c in self.constraints if c.needs_reference), self.constraints[0])
            _, reference = user.prepare(x, reference)
        return x, reference

    def anchor(self, x, reference=None):
        candidates = [c.anchor(x, self._ref(c, reference)) for c in self.constraints]
        candidates = tf.stack(candidates + [tf.add_n(candidates) / len(candidates)])
        worst = tf.stack([self.h(candidate, reference) for candidate in tf.unstack(candidates)])
        best = tf.argmin(worst, axis=0, output_type=tf.int32)  # (batch,)
        batch = tf.range(tf.shape(x)[0], dtype=tf.int32)
        return tf.gather_nd(candidates, tf.stack([best, batch], axis=-1))

    def eta(self, x, x0, reference=None, margin=0.0):
        etas = [c.eta(x, x0, self._ref(c, reference), margin) for c in self.constraints]
        return tf.reduce_min(tf.stack(etas, axis=-1), axis=-1)

    def magnitude(self, x, reference=None):
        return tf.reduce_max(
            tf.stack([c.magnitude(x, self._ref(c, reference)) for c in self.constraints], axis=-1), axis=-1
        )

    def check_anchor(self, x0, reference=None, strict=False):
        return [
            check for c in self.constraints for check in c.check_anchor(x0, self._ref(c, reference), strict)
        ]

    def get_config(self):
        return {"constraints": [keras.saving.serialize_keras_object(c) for c in self.constraints]}

    @classmethod
    def from_config(cls, config):
        return cls([keras.saving.deserialize_keras_object(c) for c in config["constraints"]])

    def __repr__(self):
        return f"Intersection({self.constraints!r})"


def project(x, constraints, reference=None, anchor=None, margin: float = 0.0, validate_args: bool = False):
    """Projects ``x`` onto the intersection of one or several constraints.

    ``eta = min_i eta_i`` over the constraints, with one anchor shared by all (see
    :class:`Intersection`).

    Args:
        x: inputs of shape ``(batch, ...)``.
        constraints: a ``Constraint`` or a sequence of them.
        reference: reference passed to the constraints that need one.
        anchor: optional shared strictly feasible anchor.
        margin: in ``[0, 1)``, see :meth:`Constraint.project`.
        validate_args: assert the output is feasible.

    Returns:
        The projected tensor.

    Example:
        >>> from keras_structured.projections import L1Ball, Monotone
        >>> out = project(tf.constant([[3.0, -1.0]]), [L1Ball(2.0), Monotone()])
        >>> np.round(out.numpy(), 4)  # (5/9, 5/9) up to Monotone's few-ulp margin
        array([[0.5556, 0.5556]], dtype=float32)
    """
    if isinstance(constraints, Constraint):
        constraint = constraints
    elif len(constraints) == 1:
        constraint = constraints[0]
    else:
        constraint = Intersection(constraints)
    return constraint.project(
        x, reference=reference, anchor=anchor, margin=margin, validate_args=validate_args
    )
