"""The policy projections of Akrour et al. (2019) on distribution parameters, per state or averaged.

Entropy projection first (interpolation towards a high-entropy anchor), then KL projection
(interpolation towards the old policy ``q``). Entropy is concave along the second segment and
both of its ends satisfy the bound (the anchor ``q`` does because the trainer never sets a
bound above the entropy of ``q``), so both constraints hold after the two steps.

Per state (``per_state=True``) every state gets its own coefficients; averaged
(``per_state=False``) one coefficient per constraint for the whole batch and the constraints
are on the batch means (``E_s[KL] <= eps``, ``E_s[H] >= bound``).

Built from :mod:`keras_structured.projections`: ``project_gaussian_entropy`` and
``project_gaussian_kl`` for Gaussians; for categoricals the interpolation primitives
(``entropy``, ``kl_divergence``, ``interpolation_coefficient``, ``mix``), because the entropy
bound is a tensor here (it changes every iteration inside one compiled update) and the
constraint objects (``EntropyLowerBound``) hold Python-float bounds.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_structured.projections import (
    entropy,
    gaussian_entropy,
    gaussian_kl_parts,
    interpolation_coefficient,
    kl_divergence,
    mix,
    project_gaussian_entropy,
    project_gaussian_kl,
)

#: the entropy bound passed while no bound is active (far below any entropy).
NO_BOUND = -1e9


class ProjectionInfo(NamedTuple):
    """Where each projection changed its input: float masks of shape ``(batch,)``."""

    entropy_active: tf.Tensor
    kl_active: tf.Tensor


def _coefficient(h_x: tf.Tensor, h_x0: tf.Tensor, per_state: bool) -> tf.Tensor:
    """``eta`` of shape ``(batch,)``: per state, or one shared from the batch means of ``h``."""
    if per_state:
        return interpolation_coefficient(h_x, h_x0)
    eta = interpolation_coefficient(tf.reduce_mean(h_x, keepdims=True), tf.reduce_mean(h_x0, keepdims=True))
    return tf.broadcast_to(eta, tf.shape(h_x))


def project_categorical(
    probs: tf.Tensor, old_probs: tf.Tensor, entropy_bound: tf.Tensor, kl_bound: float, per_state: bool
) -> tuple[tf.Tensor, ProjectionInfo]:
    """Projects ``probs`` onto ``{H(p) >= entropy_bound, KL(p || old_probs) <= kl_bound}``.

    Step 1 interpolates towards the uniform distribution with ``h = bound - H(p)`` (convex),
    step 2 towards ``old_probs`` with ``h = KL(p || q) - eps`` (convex in ``p``).

    Args:
        probs: network probabilities ``(batch, n)``.
        old_probs: probabilities of the data-generating policy ``(batch, n)``.
        entropy_bound: scalar tensor, below ``log n`` and the entropy of ``old_probs``
            (per state, or of their mean); :data:`NO_BOUND` when inactive.
        kl_bound: ``eps > 0``.
        per_state: per-state constraints instead of batch averages.

    Returns:
        ``(projected_probs, info)``.
    """
    bound = tf.cast(entropy_bound, probs.dtype)
    n = tf.cast(tf.shape(probs)[-1], probs.dtype)
    h_x = bound - entropy(probs)
    eta_entropy = _coefficient(h_x, tf.fill(tf.shape(h_x), bound - tf.math.log(n)), per_state)
    probs = mix(probs, tf.ones_like(probs) / n, eta_entropy)
    g_x = kl_divergence(probs, old_probs) - kl_bound
    eta_kl = _coefficient(g_x, tf.fill(tf.shape(g_x), tf.cast(-kl_bound, probs.dtype)), per_state)
    projected = mix(probs, old_probs, eta_kl)
    return projected, ProjectionInfo(_active(eta_entropy), _active(eta_kl))


def _active(eta: tf.Tensor) -> tf.Tensor:
    return tf.cast(eta < 1.0, tf.float32)


def project_gaussian(
    mean: tf.Tensor,
    scale: tf.Tensor,
    old_mean: tf.Tensor,
    old_scale: tf.Tensor,
    entropy_bound: tf.Tensor,
    kl_bound: float,
    per_state: bool,
    diagonal: bool,
) -> tuple[tuple[tf.Tensor, tf.Tensor], ProjectionInfo]:
    """Projects ``N(mean, scale)`` onto ``{H >= bound, KL(. || N(old_mean, old_scale)) <= eps}``.

    Entropy: the exact rescaling ``scale -> c scale`` of
    :func:`~keras_structured.projections.project_gaussian_entropy` (``H`` per state, or its
    batch mean with one shared ``c``). KL: the decomposed projection
    :func:`~keras_structured.projections.project_gaussian_kl` with ``eps / 2`` for the mean
    part and ``eps / 2`` for the covariance part, so the total KL is at most ``eps``.

    Args:
        mean: ``(batch, d)``.
        scale: Cholesky factor ``(d, d)`` (shared) or ``(batch, d, d)``, or standard
            deviations ``(batch, d)`` with ``diagonal=True``.
        old_mean / old_scale: the data-generating policy, same conventions.
        entropy_bound: scalar tensor (:data:`NO_BOUND` when inactive).
        kl_bound: ``eps > 0``.
        per_state: per-state constraints instead of batch averages.
        diagonal: whether scales are standard deviations.

    Returns:
        ``((projected_mean, projected_scale), info)``.
    """
    batch = tf.shape(mean)[:1]
    bound = tf.cast(entropy_bound, mean.dtype)
    entropies = gaussian_entropy(scale, diagonal)
    entropy_active = (entropies if per_state else tf.reduce_mean(entropies)) < bound
    _, scale = project_gaussian_entropy(mean, scale, bound, diagonal, average_over_batch=not per_state)
    half = 0.5 * kl_bound
    kl_mean, kl_cov = gaussian_kl_parts(mean, scale, old_mean, old_scale, diagonal)
    if per_state:
        kl_active = tf.logical_or(kl_mean > half, tf.broadcast_to(kl_cov, batch) > half)
    else:
        kl_active = tf.logical_or(tf.reduce_mean(kl_mean) > half, tf.reduce_mean(kl_cov) > half)
    projected = project_gaussian_kl(mean, scale, old_mean, old_scale, half, half, not per_state, diagonal)
    info = ProjectionInfo(
        tf.cast(tf.broadcast_to(entropy_active, batch), tf.float32),
        tf.cast(tf.broadcast_to(kl_active, batch), tf.float32),
    )
    return projected, info
