"""Entropy and KL trust-region projections of policies, in one documented order.

Projected policy iteration (Akrour et al. 2019, "Projections for approximate policy
iteration algorithms", ICML) constrains a new policy ``pi`` against the data-generating
policy ``q``: an entropy lower bound ``H(pi) >= b`` and a trust region
``KL(pi || q) <= eps``, on every state or on the batch mean. :func:`project_categorical`
and :func:`project_gaussian` apply the two interpolation projections of this package in
one order, **entropy first, then KL**:

1. entropy: ``pi -> pi'`` with ``H(pi') >= b`` (categorical: interpolation towards the
   uniform distribution, :class:`EntropyLowerBound`; Gaussian: the exact rescaling
   ``L -> c L``, :func:`project_gaussian_entropy`);
2. KL: ``pi' -> pi''`` on the segment from ``q`` to ``pi'``, with ``KL(pi'' || q) <= eps``
   (:class:`KLTrustRegion`; :func:`project_gaussian_kl` for the mean and covariance parts).

Why this order: step 2 keeps what step 1 established, so both constraints hold at the
output. Step 2 returns a convex combination of ``pi'`` and ``q`` (of the probability
vectors; of the covariances ``S'' = t S' + (1 - t) Q`` for Gaussians, whose mean does
not enter the entropy), and the entropy is concave along it (``-sum p log p`` is concave
in ``p``; ``0.5 log det S`` is concave in ``S``), so

    H(pi'') >= t H(pi') + (1 - t) H(q) >= b    whenever H(q) >= b.

The same holds on batch means, where one ``t`` moves every state. The precondition
``H(q) >= b`` (per state, or on the batch mean) is the caller's: a bound that never
exceeds the entropy of the data-generating policy, as a trainer's schedule ensures. The
reverse order does not keep both: the entropy step widens the scale of a Gaussian by
``c >= 1`` in every direction, which changes
``KL_cov(c^2 S) = KL_cov(S) + 0.5 (c^2 - 1) tr(Q^{-1} S) - d log c`` and can push it back
above ``eps_cov`` (a covariance already wider than ``Q`` along one axis and narrower along
another); the categorical entropy step moves ``pi'`` towards the uniform distribution,
away from ``q`` in general.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from keras import ops

from keras_structured.projections.categorical import EntropyLowerBound, KLTrustRegion
from keras_structured.projections.constraints import Bound
from keras_structured.projections.gaussian import project_gaussian_entropy, project_gaussian_kl

__all__ = ["ProjectionInfo", "project_categorical", "project_gaussian"]


class ProjectionInfo(NamedTuple):
    """Where each projection moved its input: boolean masks of shape ``(batch,)``.

    With batch-mean constraints the masks are the same for every row.
    """

    #: the entropy projection changed the row.
    entropy_active: Any
    #: the KL projection changed the row (for Gaussians: its mean or its covariance).
    kl_active: Any


def project_categorical(
    probs,
    old_probs=None,
    min_entropy: Bound | None = None,
    epsilon: Bound | None = None,
    average_over_batch: bool = False,
) -> tuple[Any, ProjectionInfo]:
    """Projects categorical distributions onto ``{H(p) >= min_entropy, KL(p || q) <= epsilon}``.

    Entropy first, then KL (module docstring): with the uniform distribution ``u`` and
    ``q = old_probs``,

        p'  = u + t_H (p - u),    t_H  = (b - log K) / (H(p) - log K)  where H(p) < b,
        p'' = q + t_KL (p' - q),  t_KL = eps / KL(p' || q)              where KL(p' || q) > eps,

    (``t = 1`` elsewhere), the convexity coefficients of :class:`EntropyLowerBound` and
    :class:`KLTrustRegion`. With ``average_over_batch`` the constraints are on the batch
    means, ``mean_s H(p_s) >= b`` and ``mean_s KL(p_s || q_s) <= eps``, with one
    coefficient per step. The output satisfies both when ``H(q) >= b`` (per state, or on
    the mean) and ``b < log K``. Gradients flow through both coefficients.

    Args:
        probs: probabilities ``(batch, K)``.
        old_probs: the data-generating probabilities ``q`` ``(batch, K)``, needed with
            ``epsilon``.
        min_entropy: the entropy bound ``b`` in nats, or ``None`` for none: a number, or a
            scalar or ``(batch,)`` tensor (see :class:`EntropyLowerBound`).
        epsilon: the trust-region size ``eps > 0``, or ``None`` for none (same forms).
        average_over_batch: constrain the batch means instead of every state.

    Returns:
        ``(projected_probs, info)``, ``info`` a :class:`ProjectionInfo`.

    Raises:
        ValueError: if neither bound is given, or ``epsilon`` without ``old_probs``, or
            for invalid bounds (see :class:`EntropyLowerBound`, :class:`KLTrustRegion`).

    Example:
        >>> from keras_structured.projections import entropy, kl_divergence
        >>> q = np.array([[0.5, 0.5]], "float32")
        >>> p, info = project_categorical(np.array([[1.0, 0.0]], "float32"), q, min_entropy=0.3, epsilon=0.1)
        >>> bool(entropy(p)[0] >= 0.3 - 1e-6), bool(kl_divergence(p, q)[0] <= 0.1 + 1e-6)
        (True, True)
        >>> ops.convert_to_numpy(info.entropy_active), ops.convert_to_numpy(info.kl_active)
        (array([ True]), array([ True]))
    """
    if min_entropy is None and epsilon is None:
        raise ValueError(
            "project_categorical needs min_entropy and/or epsilon. Received: min_entropy=None, epsilon=None"
        )
    if epsilon is not None and old_probs is None:
        raise ValueError(f"A KL bound needs old_probs. Received: epsilon={epsilon!r}, old_probs=None")
    probs = ops.convert_to_tensor(probs)
    inactive = ops.zeros(ops.shape(probs)[:1], "bool")
    entropy_active = kl_active = inactive
    if min_entropy is not None:
        probs, coefficient = EntropyLowerBound(min_entropy).project(
            probs, average_over_batch=average_over_batch, return_coefficient=True
        )
        entropy_active = coefficient < 1.0
    if epsilon is not None:
        probs, coefficient = KLTrustRegion(epsilon).project(
            probs, reference=old_probs, average_over_batch=average_over_batch, return_coefficient=True
        )
        kl_active = coefficient < 1.0
    return probs, ProjectionInfo(entropy_active, kl_active)


def project_gaussian(
    mean,
    scale_tril,
    old_mean=None,
    old_scale_tril=None,
    min_entropy: Bound | None = None,
    epsilon_mean: Bound | None = None,
    epsilon_cov: Bound | None = None,
    average_over_batch: bool = False,
    diagonal: bool = False,
    average_entropy_over_batch: bool | None = None,
) -> tuple[tuple[Any, Any], ProjectionInfo]:
    """Projects ``N(m, L L^T)`` onto an entropy bound and the decomposed KL trust region to ``N(b, Q)``.

    Entropy first, then KL (module docstring):

        L'  = c L,  c = exp((min_entropy - H(L)) / d)  where H(L) < min_entropy, else 1,
        S'' = t_cov S' + (1 - t_cov) Q,  m'' = b + t_mean (m - b),

    where ``S' = L' L'^T``, ``t_cov = epsilon_cov / KL_cov(S')`` where ``KL_cov(S') >
    epsilon_cov`` and ``t_mean = epsilon_mean / KL_mean(m)`` where ``KL_mean(m) >
    epsilon_mean`` (1 elsewhere): :func:`project_gaussian_entropy` then
    :func:`project_gaussian_kl`. The output satisfies ``H >= min_entropy``,
    ``KL_mean <= epsilon_mean`` and ``KL_cov <= epsilon_cov`` (so
    ``KL(new || old) <= epsilon_mean + epsilon_cov``) whenever the old Gaussian satisfies
    the entropy bound. Gradients flow through ``c``, ``t_cov`` and ``t_mean``.

    Args:
        mean: means ``(batch, d)``.
        scale_tril: Cholesky factors ``(batch, d, d)`` or shared ``(d, d)`` (or standard
            deviations ``(batch, d)`` / ``(d,)`` with ``diagonal=True``).
        old_mean: old means ``b``, needed with the KL bounds.
        old_scale_tril: old scales, same conventions as ``scale_tril``.
        min_entropy: entropy bound in nats, or ``None`` (see :func:`project_gaussian_entropy`).
        epsilon_mean: bound on the mean part of the KL, or ``None`` (with ``epsilon_cov``).
        epsilon_cov: bound on the covariance part of the KL, or ``None``.
        average_over_batch: the KL bounds hold on the batch means, with one coefficient per
            part (see :func:`project_gaussian_kl`).
        diagonal: whether the scales are standard deviations.
        average_entropy_over_batch: whether the entropy bound holds on the batch mean; by
            default the same as ``average_over_batch``.

    Returns:
        ``((projected_mean, projected_scale), info)``, ``info`` a :class:`ProjectionInfo`;
        the scale as returned by :func:`project_gaussian_kl` (with a batch axis, per state,
        for a shared scale), or by :func:`project_gaussian_entropy` without KL bounds.

    Raises:
        ValueError: if no bound is given, only one KL bound is, the KL bounds come
            without the old Gaussian, or a bound is invalid.
        tf.errors.InvalidArgumentError: on TensorFlow, if the inputs have NaN or infinite
            entries (``ValueError`` on JAX and PyTorch where the values are known).

    Example:
        >>> from keras_structured.projections import gaussian_entropy, gaussian_kl_parts
        >>> b, q = np.zeros([1, 2]), np.ones([1, 2])
        >>> (m, s), info = project_gaussian(b + 3.0, 0.1 * q, b, q, min_entropy=2.5, epsilon_mean=0.1,
        ...                                 epsilon_cov=0.2, diagonal=True)
        >>> kl_m, kl_c = gaussian_kl_parts(m, s, b, q, diagonal=True)
        >>> round(float(gaussian_entropy(s, diagonal=True)[0]), 9), bool(kl_m[0] <= 0.1), bool(kl_c[0] <= 0.2)
        (2.5, True, True)
    """
    uses_kl = epsilon_mean is not None or epsilon_cov is not None
    if (epsilon_mean is None) != (epsilon_cov is None):
        raise ValueError(
            "Give both KL bounds or neither. "
            f"Received: epsilon_mean={epsilon_mean!r}, epsilon_cov={epsilon_cov!r}"
        )
    if min_entropy is None and not uses_kl:
        raise ValueError(
            "project_gaussian needs min_entropy and/or the KL bounds. "
            "Received: min_entropy=None, epsilon_mean=None, epsilon_cov=None"
        )
    if uses_kl and (old_mean is None or old_scale_tril is None):
        raise ValueError(
            "The KL bounds need old_mean and old_scale_tril. "
            f"Received: old_mean={old_mean!r}, old_scale_tril={old_scale_tril!r}"
        )
    if average_entropy_over_batch is None:
        average_entropy_over_batch = average_over_batch
    mean, scale = ops.convert_to_tensor(mean), scale_tril
    batch = ops.shape(mean)[:1]
    entropy_active = kl_active = ops.zeros(batch, "bool")
    if min_entropy is not None:
        mean, scale, c = project_gaussian_entropy(
            mean, scale, min_entropy, diagonal, average_entropy_over_batch, return_coefficient=True
        )
        entropy_active = ops.broadcast_to(c > 1.0, batch)
    if uses_kl:
        mean, scale, coefficient_mean, coefficient_cov = project_gaussian_kl(
            mean,
            scale,
            old_mean,
            old_scale_tril,
            epsilon_mean,
            epsilon_cov,
            average_over_batch,
            diagonal,
            return_coefficients=True,
        )
        kl_active = ops.broadcast_to(ops.logical_or(coefficient_mean < 1.0, coefficient_cov < 1.0), batch)
    return (mean, scale), ProjectionInfo(entropy_active, kl_active)
