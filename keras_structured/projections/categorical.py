"""Constraints on categorical distributions (last axis): minimum entropy and KL trust region.

Both are convex in the probabilities, so the interpolation happens between
probability vectors and stays on the simplex. With ``from_logits=True`` inputs (and the
reference) are mapped by ``softmax`` first and the projection returns probabilities.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from keras_structured.projections.constraints import Constraint


def entropy(probs: tf.Tensor) -> tf.Tensor:
    """Shannon entropy (nats) over the last axis, ``0 log 0 = 0``, NaN-free gradient at 0."""
    return -tf.reduce_sum(tf.math.xlogy(probs, probs), axis=-1)


def kl_divergence(p: tf.Tensor, q: tf.Tensor) -> tf.Tensor:
    """``KL(p || q) = sum p (log p - log q)`` over the last axis, ``0 log 0 = 0``.

    It is ``+inf`` on rows where some ``p_i > 0 = q_i`` (e.g. a one-hot ``q``, or the
    softmax of logits whose gap underflows ``exp``: about 104 in float32, 745 in
    float64). There the gradient is zero, not NaN: ``log q_i`` is evaluated at a safe
    ``q_i = 1`` and the row's value then replaced by ``+inf`` (double ``tf.where``), so
    both branches have finite gradients and one such row leaves the others' intact.

    Example:
        >>> p, q = tf.constant([[0.5, 0.5], [0.5, 0.5]]), tf.constant([[1.0, 0.0], [0.5, 0.5]])
        >>> kl_divergence(p, q).numpy()
        array([inf,  0.], dtype=float32)
    """
    outside = (p > 0) & (q <= 0)  # log q_i = -inf with a positive weight
    safe_q = tf.where(outside, tf.ones_like(q), q)
    divergence = tf.reduce_sum(tf.math.xlogy(p, p) - tf.math.xlogy(p, safe_q), axis=-1)
    return tf.where(tf.reduce_any(outside, axis=-1), tf.constant(np.inf, p.dtype), divergence)


class _Categorical(Constraint):
    def __init__(self, from_logits: bool = False):
        self.from_logits = bool(from_logits)

    def prepare(self, x, reference=None):
        if self.from_logits:
            x = tf.nn.softmax(x, axis=-1)
            reference = None if reference is None else tf.nn.softmax(reference, axis=-1)
        return x, reference


@keras.saving.register_keras_serializable(package="keras_structured")
class EntropyLowerBound(_Categorical):
    """``H(p) >= min_entropy``: ``h(p) = min_entropy - H(p)`` (convex); anchor: uniform.

    Args:
        min_entropy: the bound in nats; must be below ``log K`` for ``K`` categories.
        from_logits: whether inputs are logits (projected as ``softmax(logits)``).

    Example:
        >>> c = EntropyLowerBound(0.5)
        >>> p = c.project(tf.constant([[1.0, 0.0]], tf.float64))
        >>> bool(abs(entropy(p)[0] - 0.5) < 1e-6 or entropy(p)[0] > 0.5)
        True
    """

    def __init__(self, min_entropy: float, from_logits: bool = False):
        super().__init__(from_logits)
        if not np.isfinite(min_entropy):
            raise ValueError(f"min_entropy must be finite. Received: min_entropy={min_entropy!r}")
        self.min_entropy = float(min_entropy)

    def check_categories(self, num_categories: int | None) -> None:
        """Raises ``ValueError`` if ``min_entropy >= log(num_categories)`` (uniform infeasible)."""
        if num_categories is not None and self.min_entropy >= math.log(num_categories):
            raise ValueError(
                f"min_entropy must be < log(K) = {math.log(num_categories)!r} for K={num_categories} "
                f"categories (the maximum entropy). Received: min_entropy={self.min_entropy!r}"
            )

    def h(self, x, reference=None):
        return tf.cast(self.min_entropy, x.dtype) - entropy(x)

    def anchor(self, x, reference=None):
        self.check_categories(x.shape[-1])
        return tf.ones_like(x) / tf.cast(tf.shape(x)[-1], x.dtype)

    def get_config(self):
        return {"min_entropy": self.min_entropy, "from_logits": self.from_logits}


@keras.saving.register_keras_serializable(package="keras_structured")
class KLTrustRegion(_Categorical):
    """``KL(p || q) <= epsilon`` with ``q`` the ``reference``; anchor: ``q`` (``h = -epsilon``).

    With ``reverse=True`` the constraint is ``KL(q || p) <= epsilon`` (also convex in ``p``).

    Where the KL is infinite (``q_i = 0 < p_i``, or ``p_i = 0 < q_i`` for ``reverse``)
    ``eta = 0`` and the output is ``q``, with finite gradients (see :func:`kl_divergence`).

    Args:
        epsilon: positive trust-region size (nats).
        from_logits: whether inputs and reference are logits.
        reverse: use ``KL(q || p)``.

    Example:
        >>> c = KLTrustRegion(0.1)
        >>> q = tf.constant([[0.5, 0.5]], tf.float64)
        >>> p = c.project(tf.constant([[1.0, 0.0]], tf.float64), reference=q)
        >>> bool(kl_divergence(p, q)[0] <= 0.1 + 1e-9)
        True
    """

    needs_reference = True

    def __init__(self, epsilon: float, from_logits: bool = False, reverse: bool = False):
        super().__init__(from_logits)
        if not np.isfinite(epsilon) or epsilon <= 0:
            raise ValueError(f"epsilon must be a finite number > 0. Received: epsilon={epsilon!r}")
        self.epsilon = float(epsilon)
        self.reverse = bool(reverse)

    def h(self, x, reference=None):
        if reference is None:
            raise ValueError("KLTrustRegion needs the reference distribution q. Received: reference=None")
        reference = tf.broadcast_to(tf.cast(reference, x.dtype), tf.shape(x))
        divergence = kl_divergence(reference, x) if self.reverse else kl_divergence(x, reference)
        return divergence - tf.cast(self.epsilon, x.dtype)

    def anchor(self, x, reference=None):
        if reference is None:
            raise ValueError("KLTrustRegion needs the reference distribution q. Received: reference=None")
        return tf.broadcast_to(tf.cast(reference, x.dtype), tf.shape(x))

    def get_config(self):
        return {"epsilon": self.epsilon, "from_logits": self.from_logits, "reverse": self.reverse}
