"""The ``Constraint`` base class, user-defined constraints and intersections.

Every constraint declares its input space (:attr:`Constraint.input_space`) and may hold
tensor bounds (:func:`check_bound`): a number, or a tensor that is a scalar (one bound for
the batch, which may change inside one compiled function) or of shape ``(batch,)`` (one
bound per batch row, e.g. per state). Fixed arrays (centers, offsets, interior points) are
checked by :func:`check_array`. Both checks are shared by every constraint and by the
Gaussian projections: values known when the check runs must be finite, at once
(``ValueError``); a bound computed inside a ``tf.function`` is checked when it runs
(``tf.errors.InvalidArgumentError``), with the same message, and one traced by ``jax.jit``
or ``torch.compile`` is not checked.

Written with ``keras.ops``: the constraints run on TensorFlow, JAX and PyTorch.
"""

from __future__ import annotations

import abc
import functools
import numbers
import operator
import warnings
from collections.abc import Callable, Sequence

import keras
import numpy as np
from keras import ops

from keras_structured.ops.dtypes import compute_dtype
from keras_structured.projections._tensors import (
    assert_finite,
    broadcast_like,
    check,
    constant,
    ensure,
    is_tensor,
    known_values,
    mean,
    static_rank,
)
from keras_structured.projections.interpolate import interpolation_coefficient, mix
from keras_structured.validation import check_number

#: Round-off counts as ``ROUNDOFF_ULPS eps`` times the magnitude of the terms of ``h``
#: (``eps`` of the dtype it is evaluated in). Rounding an interpolated point and its
#: coefficient, then evaluating an affine row there, each err by about ``eps / 2`` of that
#: magnitude; the largest error seen on random float32 batches is ``0.7 eps`` of it.
ROUNDOFF_ULPS = 2.0

#: The :class:`Constraint` methods renamed with the interpolation coefficient (once ``eta``).
_RENAMED_METHODS = {
    "eta": "interpolation_coefficient",
    "batch_mean_eta": "batch_mean_interpolation_coefficient",
}

#: ``h`` is evaluated on the inputs as given (the default).
POINTS = "points"
#: inputs are probability vectors on the last axis, used as given.
PROBABILITIES = "probabilities"
#: inputs are logits on the last axis, mapped to probabilities by ``softmax`` (the reference too).
LOGITS = "logits"
#: the input spaces that :meth:`Constraint.prepare` knows.
INPUT_SPACES = (POINTS, PROBABILITIES, LOGITS)


def roundoff(magnitude):
    """``ROUNDOFF_ULPS eps magnitude`` in ``magnitude``'s dtype, without gradient.

    The absolute round-off of a constraint value whose terms have this magnitude: the
    slack granted to anchors and outputs, and the margin by which affine projections
    stop short of the boundary.

    Example:
        >>> float(roundoff(ops.ones(())))  # 2 * 2**-23
        2.384185791015625e-07
    """
    eps = np.finfo(keras.backend.standardize_dtype(magnitude.dtype)).eps
    return ops.stop_gradient(float(ROUNDOFF_ULPS * eps) * magnitude)


def validation_tolerance(h_x0, magnitude):
    """``1e-6 max(1, |h(x0)|) + roundoff(magnitude)``: the slack allowed on ``h(g(x)) <= 0``."""
    scale = ops.abs(h_x0)
    return 1e-6 * ops.where(scale < 1.0, ops.ones_like(scale), scale) + roundoff(magnitude)


#: A bound: a number, a numpy array or a tensor of the backend.
Bound = float | np.ndarray | object


def static_bound(bound: Bound) -> np.ndarray | None:
    """The values of ``bound`` if they are known without running a graph.

    Args:
        bound: a bound from :func:`check_bound` (or any number, array or tensor).

    Returns:
        A float64 array (0-d for a scalar), or ``None`` for a symbolic tensor (in a TensorFlow
        graph, or traced by ``jax.jit`` or ``torch.compile``).
    """
    if is_tensor(bound):
        values = known_values(bound)
        return None if values is None else values.astype(np.float64)
    return np.asarray(bound, dtype=np.float64)


def check_array(name: str, value) -> np.ndarray:
    """``value`` as a float64 array, checked to be finite: a constraint's fixed center or offset.

    Args:
        name: the argument name, for the error message.
        value: a number, nested sequence or array (an eager tensor too).

    Returns:
        The values as a float64 array of the same shape.

    Raises:
        ValueError: for a value that is not numeric, or has a NaN or infinite entry.

    Example:
        >>> check_array("center", [1, 2])
        array([1., 2.])
    """
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be a finite array. Received: {name}={value!r}")
    return array


def check_bound(name: str, value, positive: bool = False) -> Bound:
    """Validates a constraint bound and returns it in the form a constraint stores.

    A bound is a number, or a scalar or rank-1 array or tensor: one bound for the whole
    batch, or one per batch row (shape ``(batch,)``, e.g. per state). Its values must be
    finite, and ``> 0`` with ``positive``: values known now (numbers, arrays, eager
    tensors) are checked at once; a symbolic tensor (a bound computed or read inside a
    ``tf.function``) is returned behind a run-time assertion with the same message
    (which XLA, like every TensorFlow assertion, drops under ``jit_compile=True``; a bound
    traced by ``jax.jit`` or ``torch.compile`` is not checked).

    Args:
        name: the argument name, for error messages.
        value: the bound.
        positive: whether the bound must be ``> 0``.

    Returns:
        A Python float for a number or a scalar array, a float64 array of shape
        ``(batch,)`` for a rank-1 array, the tensor itself for an eager tensor, and for a
        symbolic one the tensor behind its run-time check.

    Raises:
        ValueError: for a non-numeric value, a rank above 1, or known values that are not
            finite (or, with ``positive``, not ``> 0``).
        tf.errors.InvalidArgumentError: on TensorFlow, when a symbolic bound's values are not
            finite (or, with ``positive``, not ``> 0``), at run time.

    Example:
        >>> check_bound("epsilon", 0.1, positive=True)
        0.1
        >>> check_bound("min_entropy", [0.5, 1.0])
        array([0.5, 1. ])
    """
    requirement = "a finite number > 0" if positive else "finite"
    if is_tensor(value):
        if not (keras.backend.is_float_dtype(value.dtype) or keras.backend.is_int_dtype(value.dtype)):
            raise ValueError(f"{name} must be a real-valued tensor. Received: {name}={value!r}")
        rank = static_rank(value)
        stored = value
    elif isinstance(value, bool) or not isinstance(value, (numbers.Real, np.ndarray, list, tuple)):
        raise ValueError(f"{name} must be {requirement}. Received: {name}={value!r}")
    else:
        try:
            stored = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be {requirement}. Received: {name}={value!r}") from None
        rank = stored.ndim
    if rank is not None and rank > 1:
        raise ValueError(f"{name} must be a scalar or have shape (batch,). Received: {name}={value!r}")
    values = static_bound(stored)
    if values is None:
        return _asserted_bound(stored, positive, f"{name} must be {requirement}. Received: {name}=")
    if not (np.all(np.isfinite(values)) and (not positive or np.all(values > 0))):
        raise ValueError(f"{name} must be {requirement}. Received: {name}={value!r}")
    if isinstance(stored, np.ndarray) and stored.ndim == 0:
        return float(stored)
    return stored


def _asserted_bound(bound, positive: bool, message: str):
    """The symbolic ``bound`` behind an assertion that its values are finite (and ``> 0``)."""
    values = bound if keras.backend.is_float_dtype(bound.dtype) else ops.cast(bound, "float32")
    valid = ops.isfinite(values)
    if positive:
        valid = ops.logical_and(valid, values > 0)
    return check(bound, ops.all(valid), message, values)


def bound_tensor(bound: Bound, terms):
    """``bound`` in the dtype of ``terms``, shaped to broadcast against them (batch axis first).

    A bound given as a number is rounded to float32 first, then cast (as TensorFlow's
    ``tf.cast`` does with a Python float, on every backend); arrays and tensors are cast.

    Args:
        bound: a bound from :func:`check_bound`.
        terms: the values it is compared with, shape ``(batch, ...)``.

    Returns:
        A scalar tensor, or for a per-row bound a tensor of shape ``(batch, 1, ..., 1)``
        with the rank of ``terms``.
    """
    if isinstance(bound, float):
        bound = np.float32(bound)
    bound = ops.cast(ops.convert_to_tensor(bound), terms.dtype)
    rank = static_rank(terms)
    if static_rank(bound) == 1 and rank is not None and rank > 1:
        bound = ops.reshape(bound, (-1,) + (1,) * (rank - 1))
    return bound


def bound_config(name: str, bound: Bound) -> float | list:
    """``bound`` as a config value.

    Args:
        name: the argument name, for the error message.
        bound: a bound from :func:`check_bound`.

    Returns:
        A float for a scalar bound, a list for a per-row bound.

    Raises:
        ValueError: for a symbolic tensor, whose value is not known.
    """
    values = static_bound(bound)
    if values is None:
        raise ValueError(
            "A symbolic tensor bound cannot be saved in a config; pass a number or an array. "
            f"Received: {name}={bound!r}"
        )
    return float(values) if values.ndim == 0 else values.tolist()


class Constraint(abc.ABC):
    """A convex constraint ``h(x) <= 0`` on each batch row, projected by interpolation.

    Subclasses implement ``h`` (convex in ``x``, shape ``(batch,)``) and ``anchor`` (a
    strictly feasible point, ``h < 0``); they may override ``interpolation_coefficient``
    with a closed form (the largest feasible step along the segment from the anchor),
    ``magnitude`` (the scale of the round-off in ``h``), ``check_input_shape`` (static
    checks at layer build time) and ``get_config``. They declare their
    :attr:`input_space`; a subclass whose inputs need another mapping than those of
    :data:`INPUT_SPACES` overrides ``prepare`` (maps raw inputs to the space where ``h``
    is convex).

    ``project(x)`` returns ``x`` unchanged where feasible and
    ``x0 + t (x - x0)`` otherwise, with ``t = h(x0) / (h(x0) - h(x))``. With
    ``average_over_batch`` the constraint is on the batch mean, ``mean_s h(x_s) <= 0``
    (convex in the whole batch), and one ``t`` moves every row.
    """

    #: whether ``h`` and ``anchor`` need the ``reference`` argument.
    needs_reference = False

    #: The space ``project`` receives inputs in, one of :data:`INPUT_SPACES`: ``"points"``
    #: (``h`` is evaluated on the inputs as given), ``"probabilities"`` (probability vectors
    #: on the last axis, as given) or ``"logits"`` (``prepare`` maps inputs and reference
    #: by ``softmax`` on the last axis; the projection returns probabilities). The
    #: constraints of an :class:`Intersection` share it.
    input_space: str = POINTS

    @property
    def from_logits(self) -> bool:
        """Whether inputs are logits (``input_space == "logits"``)."""
        return self.input_space == LOGITS

    @abc.abstractmethod
    def h(self, x, reference=None):
        """Convex constraint function, feasible iff ``<= 0``; returns shape ``(batch,)``.

        Written with ``keras.ops`` (or the backend's own ops), differentiable in ``x``.
        """

    @abc.abstractmethod
    def anchor(self, x, reference=None):
        """A strictly feasible point (``h < 0``) shaped like ``x``."""

    def prepare(self, x, reference=None) -> tuple:
        """Maps raw inputs (and the reference) to the space where ``h`` is convex.

        ``softmax`` on the last axis for ``input_space == "logits"``, the identity otherwise.
        """
        if self.input_space == LOGITS:
            x = ops.softmax(x, axis=-1)
            reference = None if reference is None else ops.softmax(reference, axis=-1)
        return x, reference

    def check_input_shape(self, input_shape) -> None:  # noqa: B027 (optional hook)
        """Raises ``ValueError`` if inputs of ``input_shape`` cannot be projected (none by default).

        Called by :class:`InterpolationProjection` when it is built, so that a constraint
        that cannot hold for the input size (e.g. an entropy bound above ``log K``) fails
        before any data is seen.

        Args:
            input_shape: the shape of the inputs, ``(batch, ...)``.
        """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # An override under an old name (the coefficient was called ``eta``) still counts.
        for old, new in _RENAMED_METHODS.items():
            if old in cls.__dict__ and new not in cls.__dict__:
                warnings.warn(
                    f"{cls.__name__}.{old} is deprecated: name the override {new} instead.",
                    DeprecationWarning,
                    stacklevel=2,
                )
                setattr(cls, new, cls.__dict__[old])

    def eta(self, x, x0, reference=None, margin: float = 0.0):
        """Deprecated: :meth:`interpolation_coefficient`."""
        warnings.warn(
            "Constraint.eta is deprecated; use Constraint.interpolation_coefficient.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.interpolation_coefficient(x, x0, reference, margin)

    def batch_mean_eta(self, x, x0, reference=None, margin: float = 0.0):
        """Deprecated: :meth:`batch_mean_interpolation_coefficient`."""
        warnings.warn(
            "Constraint.batch_mean_eta is deprecated; use Constraint.batch_mean_interpolation_coefficient.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.batch_mean_interpolation_coefficient(x, x0, reference, margin)

    def interpolation_coefficient(self, x, x0, reference=None, margin: float = 0.0):
        """Interpolation coefficient ``t`` in ``[0, 1]``, 1 exactly where ``x`` is kept.

        The default is the convexity bound ``(1 - m) h(x0) / (h(x0) - h(x))``; subclasses
        may return any larger value that is still feasible (e.g. an exact line search).
        """
        return interpolation_coefficient(self.h(x, reference), self.h(x0, reference), margin)

    def batch_mean_interpolation_coefficient(self, x, x0, reference=None, margin: float = 0.0):
        """One coefficient for the batch-mean constraint ``H(x) = mean_s h(x_s) <= 0``.

        ``H`` is convex in the whole batch ``x`` and ``H(x0) < 0``, so the convexity bound
        ``t = (1 - m) H(x0) / (H(x0) - H(x))`` (1 where ``H(x) <= -m |H(x0)|``) applied to
        every row gives ``H(output) <= -m |H(x0)|``.

        Args:
            x: prepared inputs ``(batch, ...)``.
            x0: anchors shaped like ``x``.
            reference: the reference, for constraints that need one.
            margin: in ``[0, 1)``.

        Returns:
            ``t`` broadcast to shape ``(batch,)``.
        """
        h_x, h_x0 = self.h(x, reference), self.h(x0, reference)
        coefficient = interpolation_coefficient(
            ops.reshape(mean(h_x), (1,)), ops.reshape(mean(h_x0), (1,)), margin
        )
        return broadcast_like(ops.reshape(coefficient, ()), h_x)  # (batch,)

    def magnitude(self, x, reference=None):
        """Per row, the magnitude of the terms that ``h(x)`` sums, shape ``(batch,)``.

        Evaluated in ``x.dtype``, ``h(x)`` is exact up to ``roundoff(magnitude(x))``, and
        feasibility checks allow that much. The default, zero, takes ``h`` as exact (its
        round-off is within the ``1e-6 max(1, |h(x0)|)`` of ``validate_args``);
        constraints whose terms can dwarf ``h``, like affine rows far from the origin,
        override it.
        """
        return ops.zeros(ops.shape(x)[:1], x.dtype)

    def check_anchor(self, x0, reference=None, strict: bool = False, average_over_batch: bool = False):
        """``x0``, checked to be strictly feasible up to round-off: ``h(x0) < roundoff(magnitude(x0))``.

        Raises ``ValueError`` where the values are known (eagerly); otherwise returns ``x0``
        behind a run-time check (``tf.errors.InvalidArgumentError`` in a TensorFlow graph; not
        checked under XLA, ``jax.jit`` or ``torch.compile``).

        The slack accepts an anchor that rounding to ``x0.dtype`` pushed onto the boundary
        (e.g. ``Monotone``'s ramp near 1e8 in float32); the projection returns it where
        it would cross. With ``strict=True`` the test is ``h(x0) < 0``, for callers that
        divide by ``h(x0)``. With ``average_over_batch`` it is the batch means of ``h(x0)``
        and of the slack that are compared.
        """
        h_x0 = self.h(x0, reference)
        slack = ops.zeros_like(h_x0) if strict else roundoff(self.magnitude(x0, reference))
        if average_over_batch:
            h_x0, slack = mean(h_x0), mean(slack)
        where = "on the batch mean" if average_over_batch else "for every batch row"
        message = (
            f"The anchor of {self!r} must be strictly feasible (h(anchor) < 0, up to round-off) {where}; "
            "pass a strictly feasible anchor. Received: h(anchor)="
        )
        return ensure(x0, ops.all(h_x0 < slack), message, ops.max(h_x0))

    def project(
        self,
        x,
        reference=None,
        anchor=None,
        margin: float = 0.0,
        validate_args: bool = False,
        average_over_batch: bool = False,
        return_coefficient: bool = False,
    ):
        """Interpolation projection of each batch row of ``x`` onto ``{h <= 0}``.

        Returns ``g(x) = x`` where ``h(x) <= -m |h(x0)|`` and ``x0 + t (x - x0)``
        otherwise (:meth:`interpolation_coefficient`). With ``average_over_batch`` the
        constraint is ``mean_s h(x_s) <= 0`` and one coefficient moves every row
        (:meth:`batch_mean_interpolation_coefficient`).

        Args:
            x: inputs of shape ``(batch, ...)`` (raw inputs: see ``prepare``).
            reference: optional per-row reference (e.g. the distribution of a trust
                region), required when ``needs_reference``.
            anchor: optional strictly feasible point(s) broadcastable to ``x``;
                defaults to ``self.anchor(x, reference)``.
            margin: in ``[0, 1)``; outputs satisfy ``h <= -margin |h(anchor)|`` (on the
                batch mean with ``average_over_batch``).
            validate_args: also assert that ``x`` is finite, and that
                ``h(output) <= 1e-6 max(1, |h(anchor)|)`` plus the round-off
                ``roundoff(magnitude(output))`` (run-time checks, off by default).
            average_over_batch: constrain the batch mean of ``h`` instead of each row.
            return_coefficient: also return ``t`` (``(batch,)``, 1 exactly where the
                row is returned unchanged).

        Returns:
            Feasible points shaped like ``x`` (in the prepared space), and with
            ``return_coefficient`` the pair ``(points, t)``.

        Raises:
            ValueError: where the values are known (eagerly), if the anchor is not strictly
                feasible up to round-off (``tf.errors.InvalidArgumentError`` inside
                ``tf.function``).
            tf.errors.InvalidArgumentError: on TensorFlow with ``validate_args``, if ``x`` has
                NaN or infinite entries or the output is infeasible (``ValueError`` eagerly on
                JAX and PyTorch; no check under XLA, ``jax.jit`` or ``torch.compile``).
        """
        margin = check_number("margin", margin, minimum=0, maximum=1, open_maximum=True)
        if self.needs_reference and reference is None:
            raise ValueError(f"{type(self).__name__} needs a reference. Received: reference=None")
        raw = ops.convert_to_tensor(x)
        dtype = compute_dtype(raw)
        x = ops.cast(raw, dtype)
        if reference is not None:
            reference = ops.cast(ops.convert_to_tensor(reference), dtype)
        rank = static_rank(x)
        if rank is None or rank < 2:
            raise ValueError(f"project needs inputs of shape (batch, ...). Received: x.shape={x.shape}")
        if validate_args:
            x = assert_finite(x, f"{type(self).__name__}.project received NaN or inf inputs")
        x, reference = self.prepare(x, reference)
        if anchor is None:
            x0 = self.anchor(x, reference)
        else:
            x0 = broadcast_like(ops.cast(ops.convert_to_tensor(anchor), dtype), x)
        x0 = self.check_anchor(x0, reference, average_over_batch=average_over_batch)
        if average_over_batch:
            coefficient = self.batch_mean_interpolation_coefficient(x, x0, reference, margin)
        else:
            coefficient = self.interpolation_coefficient(x, x0, reference, margin)
        out = mix(x, x0, coefficient)
        if validate_args:
            excess = self.infeasibility(out, x0, reference, average_over_batch)
            message = (
                f"{self!r}: the projection is infeasible (h(output) > 1e-6 max(1, |h(anchor)|) + roundoff). "
                "Received: max(h(output) - tolerance)="
            )
            out = check(out, ops.all(excess <= 0), message, ops.max(excess))
        out = ops.cast(out, raw.dtype)
        return (out, coefficient) if return_coefficient else out

    def infeasibility(self, out, x0, reference=None, average_over_batch: bool = False):
        """How far ``out`` is outside the set, beyond what ``validate_args`` tolerates.

        ``h(out) - 1e-6 max(1, |h(x0)|) - roundoff(magnitude(out))`` per row, or on the batch
        means with ``average_over_batch``; ``<= 0`` where the projection is feasible.
        """
        h_out, h_x0, magnitude = self.h(out, reference), self.h(x0, reference), self.magnitude(out, reference)
        if average_over_batch:
            h_out, h_x0, magnitude = (mean(v) for v in (h_out, h_x0, magnitude))
        return h_out - validation_tolerance(h_x0, magnitude)

    def get_config(self) -> dict:
        return {}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**config)

    def __repr__(self) -> str:
        try:
            config = self.get_config()
        except ValueError:  # a symbolic tensor bound: show the attributes instead
            config = vars(self)
        args = ", ".join(f"{k}={v!r}" for k, v in config.items())
        return f"{type(self).__name__}({args})"


def _as_config_array(value):
    return None if value is None else np.asarray(value, dtype=np.float64).tolist()


@keras.saving.register_keras_serializable(package="keras_structured")
class UserConstraint(Constraint):
    """A constraint from user functions: ``h_fn(x[, reference]) -> (batch,)`` convex.

    Args:
        h_fn: convex, written with ``keras.ops`` (or the backend's own ops, for one backend);
            called as ``h_fn(x)`` or ``h_fn(x, reference)`` when a reference is given.
        anchor_fn: a callable ``anchor_fn(x[, reference])`` returning a strictly
            feasible point shaped like ``x``, or a fixed array broadcastable to ``x``.
        needs_reference: whether a reference is required.

    For ``.keras`` saving, ``h_fn``/``anchor_fn`` must be registered with
    ``keras.saving.register_keras_serializable`` (lambdas cannot be saved).

    Example:
        >>> disc = UserConstraint(lambda x: ops.sum(x**2, -1) - 1.0, [0.0, 0.0])
        >>> ops.convert_to_numpy(disc.project(np.array([[2.0, 0.0]], "float32")))
        array([[0.5, 0. ]], dtype=float32)
    """

    def __init__(self, h_fn: Callable, anchor_fn, needs_reference: bool = False):
        if not callable(h_fn):
            raise ValueError(f"h_fn must be callable. Received: h_fn={h_fn!r}")
        self.h_fn = h_fn
        self.anchor_fn = anchor_fn if callable(anchor_fn) else check_array("anchor_fn", anchor_fn)
        self.needs_reference = bool(needs_reference)

    def h(self, x, reference=None):
        return self.h_fn(x) if reference is None else self.h_fn(x, reference)

    def anchor(self, x, reference=None):
        if not callable(self.anchor_fn):
            return broadcast_like(constant(self.anchor_fn, x.dtype), x)
        x0 = self.anchor_fn(x) if reference is None else self.anchor_fn(x, reference)
        return broadcast_like(ops.cast(x0, x.dtype), x)

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
    """Several constraints at once: ``h = max_i h_i`` and ``t = min_i t_i``.

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
        >>> ops.convert_to_numpy(both.project(np.array([[2.0, 0.0]], "float32")))
        array([[0.5, 0. ]], dtype=float32)
    """

    def __init__(self, constraints: Sequence[Constraint]):
        constraints = list(constraints)
        if not constraints or not all(isinstance(c, Constraint) for c in constraints):
            raise ValueError(
                "constraints must be a non-empty sequence of Constraint. "
                f"Received: constraints={constraints!r}"
            )
        kinds = {(type(c).prepare, c.input_space) for c in constraints}
        if len(kinds) > 1:
            raise ValueError(
                "All constraints of an Intersection must take the same inputs (same input_space and "
                f"prepare). Received: constraints={constraints!r}"
            )
        self.constraints = constraints
        self.needs_reference = any(c.needs_reference for c in constraints)
        self.input_space = constraints[0].input_space

    def _ref(self, constraint, reference):
        return reference if constraint.needs_reference else None

    def _all_h(self, x, reference):
        return ops.stack([c.h(x, self._ref(c, reference)) for c in self.constraints], axis=-1)

    def h(self, x, reference=None):
        return ops.max(self._all_h(x, reference), axis=-1)

    def prepare(self, x, reference=None):
        x, _ = self.constraints[0].prepare(x, None)
        if reference is not None:
            user = next((c for c in self.constraints if c.needs_reference), self.constraints[0])
            _, reference = user.prepare(x, reference)
        return x, reference

    def anchor(self, x, reference=None):
        candidates = [c.anchor(x, self._ref(c, reference)) for c in self.constraints]
        candidates.append(functools.reduce(operator.add, candidates) / len(candidates))
        worst = ops.stack([self.h(candidate, reference) for candidate in candidates])
        best = ops.argmin(worst, axis=0)  # (batch,)
        best = ops.reshape(best, (-1,) + (1,) * (static_rank(x) - 1))
        anchor = candidates[0]
        for index, candidate in enumerate(candidates[1:], start=1):
            anchor = ops.where(best == index, candidate, anchor)
        return anchor

    def interpolation_coefficient(self, x, x0, reference=None, margin=0.0):
        coefficients = [
            c.interpolation_coefficient(x, x0, self._ref(c, reference), margin) for c in self.constraints
        ]
        return ops.min(ops.stack(coefficients, axis=-1), axis=-1)

    def batch_mean_interpolation_coefficient(self, x, x0, reference=None, margin=0.0):
        """``min_i`` of the batch-mean coefficients: each constraint holds on the batch mean."""
        coefficients = [
            c.batch_mean_interpolation_coefficient(x, x0, self._ref(c, reference), margin)
            for c in self.constraints
        ]
        return ops.min(ops.stack(coefficients, axis=-1), axis=-1)

    def check_input_shape(self, input_shape):
        for c in self.constraints:
            c.check_input_shape(input_shape)

    def magnitude(self, x, reference=None):
        return ops.max(
            ops.stack([c.magnitude(x, self._ref(c, reference)) for c in self.constraints], axis=-1), axis=-1
        )

    def infeasibility(self, out, x0, reference=None, average_over_batch=False):
        """Per row that of ``max_i h_i``; on the batch means the largest of the constraints'
        own, since each holds on its batch mean (the mean of ``max_i h_i`` need not)."""
        if not average_over_batch:
            return super().infeasibility(out, x0, reference)
        parts = [c.infeasibility(out, x0, self._ref(c, reference), True) for c in self.constraints]
        return ops.max(ops.stack(parts))

    def check_anchor(self, x0, reference=None, strict=False, average_over_batch=False):
        for c in self.constraints:
            x0 = c.check_anchor(x0, self._ref(c, reference), strict, average_over_batch)
        return x0

    def get_config(self):
        return {"constraints": [keras.saving.serialize_keras_object(c) for c in self.constraints]}

    @classmethod
    def from_config(cls, config):
        return cls([keras.saving.deserialize_keras_object(c) for c in config["constraints"]])

    def __repr__(self):
        return f"Intersection({self.constraints!r})"


def project(
    x,
    constraints: Constraint | Sequence[Constraint],
    reference=None,
    anchor=None,
    margin: float = 0.0,
    validate_args: bool = False,
    average_over_batch: bool = False,
):
    """Projects ``x`` onto the intersection of one or several constraints.

    ``t = min_i t_i`` over the constraints, with one anchor shared by all (see
    :class:`Intersection`).

    Args:
        x: inputs of shape ``(batch, ...)``.
        constraints: a ``Constraint`` or a sequence of them.
        reference: reference passed to the constraints that need one.
        anchor: optional shared strictly feasible anchor.
        margin: in ``[0, 1)``, see :meth:`Constraint.project`.
        validate_args: assert the output is feasible.
        average_over_batch: each constraint holds on the batch mean of its ``h``, with one
            coefficient for the batch (see :meth:`Constraint.batch_mean_interpolation_coefficient`).

    Returns:
        The projected tensor.

    Example:
        >>> from keras_structured.projections import L1Ball, Monotone
        >>> out = project(np.array([[3.0, -1.0]], "float32"), [L1Ball(2.0), Monotone()])
        >>> np.round(ops.convert_to_numpy(out), 4)  # (5/9, 5/9) up to Monotone's few-ulp margin
        array([[0.5556, 0.5556]], dtype=float32)
    """
    if isinstance(constraints, Constraint):
        constraint = constraints
    elif len(constraints) == 1:
        constraint = constraints[0]
    else:
        constraint = Intersection(constraints)
    return constraint.project(
        x,
        reference=reference,
        anchor=anchor,
        margin=margin,
        validate_args=validate_args,
        average_over_batch=average_over_batch,
    )
