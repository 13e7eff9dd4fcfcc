"""Constraints on categorical distributions (last axis): minimum entropy and KL trust region.

Both are convex in the probabilities, so the interpolation happens between
probability vectors and stays on the simplex. Their input space is
``"probabilities"``, or with ``from_logits=True`` ``"logits"``: inputs (and the
reference) are mapped by ``softmax`` first and the projection returns probabilities.
The bounds may be tensors: a scalar for the batch or one value per row (e.g. per state).
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from keras_structured.projections._tensors import broadcast_like, xlogy
from keras_structured.projections.constraints import (
    LOGITS,
    PROBABILITIES,
    Bound,
    Constraint,
    bound_config,
    bound_tensor,
    check_bound,
    static_bound,
)


def entropy(probs):
    """Shannon entropy (nats) over the last axis, ``0 log 0 = 0``, NaN-free gradient at 0.

    Example:
        >>> round(float(entropy(np.array([[0.5, 0.5, 0.0]]))[0]), 6)  # log 2
        0.693147
    """
    probs = ops.convert_to_tensor(probs)
    return -ops.sum(xlogy(probs, probs), axis=-1)


def kl_divergence(p, q):
    """``KL(p || q) = sum p (log p - log q)`` over the last axis, ``0 log 0 = 0``.

    It is ``+inf`` on rows where some ``p_i > 0 = q_i`` (e.g. a one-hot ``q``, or the
    softmax of logits whose gap underflows ``exp``: about 104 in float32, 745 in
    float64). There the gradient is zero, not NaN: ``log q_i`` is evaluated at a safe
    ``q_i = 1`` and the row's value then replaced by ``+inf`` (double ``where``), so
    both branches have finite gradients and one such row leaves the others' intact.

    Example:
        >>> p = np.array([[0.5, 0.5], [0.5, 0.5]], "float32")
        >>> q = np.array([[1.0, 0.0], [0.5, 0.5]], "float32")
        >>> ops.convert_to_numpy(kl_divergence(p, q))
        array([inf,  0.], dtype=float32)
    """
    p = ops.convert_to_tensor(p)
    q = ops.cast(ops.convert_to_tensor(q), p.dtype)
    outside = ops.logical_and(p > 0, q <= 0)  # log q_i = -inf with a positive weight
    safe_q = ops.where(outside, ops.ones_like(q), q)
    divergence = ops.sum(xlogy(p, p) - xlogy(p, safe_q), axis=-1)
    return ops.where(ops.any(outside, axis=-1), ops.full_like(divergence, np.inf), divergence)


class _Categorical(Constraint):
    def __init__(self, from_logits: bool = False):
        self.input_space = LOGITS if from_logits else PROBABILITIES


@keras.saving.register_keras_serializable(package="keras_structured")
class EntropyLowerBound(_Categorical):
    """``H(p) >= min_entropy``: ``h(p) = min_entropy - H(p)`` (convex); anchor: uniform.

    Args:
        min_entropy: the bound in nats, below ``log K`` for ``K`` categories: a number,
            or a scalar or ``(batch,)`` array or tensor (one bound per row). A symbolic
            tensor at or above ``log K`` is reported at run time by the anchor check.
        from_logits: whether inputs are logits (projected as ``softmax(logits)``).

    Example:
        >>> c = EntropyLowerBound(0.5)
        >>> p = c.project(np.array([[1.0, 0.0]]))
        >>> bool(abs(entropy(p)[0] - 0.5) < 1e-6 or entropy(p)[0] > 0.5)
        True
    """

    def __init__(self, min_entropy: Bound, from_logits: bool = False):
        super().__init__(from_logits)
        self.min_entropy = check_bound("min_entropy", min_entropy)

    def check_categories(self, num_categories: int | None) -> None:
        """Raises ``ValueError`` if ``min_entropy >= log(num_categories)`` (uniform infeasible).

        Only bounds whose values are known (not symbolic tensors) are checked.
        """
        values = static_bound(self.min_entropy)
        if num_categories is not None and values is not None and np.any(values >= math.log(num_categories)):
            received = self.min_entropy if isinstance(self.min_entropy, float) else values.tolist()
            raise ValueError(
                f"min_entropy must be < log(K) = {math.log(num_categories)!r} for K={num_categories} "
                f"categories (the maximum entropy). Received: min_entropy={received!r}"
            )

    def check_input_shape(self, input_shape):
        self.check_categories(input_shape[-1])

    def h(self, x, reference=None):
        entropies = entropy(x)
        return bound_tensor(self.min_entropy, entropies) - entropies

    def anchor(self, x, reference=None):
        self.check_categories(x.shape[-1])
        return ops.ones_like(x) / ops.cast(ops.shape(x)[-1], x.dtype)

    def get_config(self):
        return {"min_entropy": bound_config("min_entropy", self.min_entropy), "from_logits": self.from_logits}


@keras.saving.register_keras_serializable(package="keras_structured")
class KLTrustRegion(_Categorical):
    """``KL(p || q) <= epsilon`` with ``q`` the ``reference``; anchor: ``q`` (``h = -epsilon``).

    With ``reverse=True`` the constraint is ``KL(q || p) <= epsilon`` (also convex in ``p``).

    Where the KL is infinite (``q_i = 0 < p_i``, or ``p_i = 0 < q_i`` for ``reverse``)
    ``t = 0`` and the output is ``q``, with finite gradients (see :func:`kl_divergence`).

    Args:
        epsilon: positive trust-region size (nats): a number, or a scalar or ``(batch,)``
            array or tensor (one size per row). A symbolic tensor that is not positive is
            reported at run time by the anchor check (``h(q) = -epsilon``).
        from_logits: whether inputs and reference are logits.
        reverse: use ``KL(q || p)``.

    Example:
        >>> c = KLTrustRegion(0.1)
        >>> q = np.array([[0.5, 0.5]])
        >>> p = c.project(np.array([[1.0, 0.0]]), reference=q)
        >>> bool(kl_divergence(p, q)[0] <= 0.1 + 1e-9)
        True
    """

    needs_reference = True

    def __init__(self, epsilon: Bound, from_logits: bool = False, reverse: bool = False):
        super().__init__(from_logits)
        self.epsilon = check_bound("epsilon", epsilon, positive=True)
        self.reverse = bool(reverse)

    def h(self, x, reference=None):
        if reference is None:
            raise ValueError("KLTrustRegion needs the reference distribution q. Received: reference=None")
        reference = broadcast_like(ops.cast(reference, x.dtype), x)
        divergence = kl_divergence(reference, x) if self.reverse else kl_divergence(x, reference)
        return divergence - bound_tensor(self.epsilon, divergence)

    def anchor(self, x, reference=None):
        if reference is None:
            raise ValueError("KLTrustRegion needs the reference distribution q. Received: reference=None")
        return broadcast_like(ops.cast(reference, x.dtype), x)

    def get_config(self):
        return {
            "epsilon": bound_config("epsilon", self.epsilon),
            "from_logits": self.from_logits,
            "reverse": self.reverse,
        }
