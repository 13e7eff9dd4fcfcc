"""Entropy and KL trust-region projections of Gaussian policies (Akrour et al. 2019).

A Gaussian ``N(m, Sigma)`` is given by its mean ``m`` (``(batch, d)``) and a scale: either
the lower-triangular Cholesky factor ``L`` of ``Sigma = L L^T`` (``(batch, d, d)``, or
``(d, d)`` shared by all states; nonzero diagonal, whose signs do not matter since only
``L L^T`` does; the strict upper triangle is ignored)
or, with ``diagonal=True``, the standard deviations ``s`` (``(batch, d)`` or ``(d,)``,
positive) of ``Sigma = diag(s^2)``.

* :func:`project_gaussian_entropy` enforces ``H(N(m, Sigma)) >= min_entropy`` by the exact
  rescaling ``L -> c L`` with the smallest ``c >= 1``.
* :func:`project_gaussian_kl` enforces the decomposed KL trust region of Akrour et al. 2019
  ("Projections for approximate policy iteration algorithms", ICML) to an old Gaussian
  ``N(b, Q)``, with the KL taken in the direction ``KL(new || old)`` (``KL(pi || q)`` in the
  paper, ``q`` the data-generating policy)::

      KL(N(m, S) || N(b, Q)) = KL_mean(m) + KL_cov(S),
      KL_mean(m) = 0.5 (m - b)^T Q^{-1} (m - b)                    = KL(N(m, Q) || N(b, Q)),
      KL_cov(S)  = 0.5 [tr(Q^{-1} S) - d + log det Q - log det S]  = KL(N(b, S) || N(b, Q)).

  ``KL_mean`` is convex in ``m`` and ``KL_cov`` is convex in ``S`` (trace is linear,
  ``-log det`` is convex), and both vanish at the old distribution, so the interpolation
  projection (:mod:`keras_structured.projections.interpolate`) with the old mean / old
  covariance as anchor (``h(anchor) = -epsilon``) is feasible. The covariance is
  interpolated as a matrix, ``S' = t S + (1 - t) Q`` (positive definite as a convex
  combination), and re-factorised by Cholesky; the mean as ``m' = b + t (m - b)``. The two
  parts are independent (``KL_mean`` only involves ``Q``), so the covariance-then-mean order
  of the paper gives the same result as any other order, and the total KL is at most
  ``epsilon_mean + epsilon_cov``.

Both bounds at once: :func:`~keras_structured.projections.policy.project_gaussian` applies
the entropy projection first, then the KL projection, the order that keeps both (see
:mod:`keras_structured.projections.policy`). The bounds may be tensors: a scalar for the
batch, or one value per state.

Written with ``keras.ops``: the projections run on TensorFlow, JAX and PyTorch.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from keras_structured.projections._tensors import (
    assert_finite,
    broadcast_batch,
    broadcast_like,
    is_tensor,
    static_rank,
)
from keras_structured.projections._tensors import mean as mean_of_all  # ``mean`` names the Gaussians' means
from keras_structured.projections.constraints import Bound, bound_tensor, check_bound
from keras_structured.projections.interpolate import interpolation_coefficient, mix

__all__ = [
    "gaussian_entropy",
    "gaussian_kl_parts",
    "project_gaussian_entropy",
    "project_gaussian_kl",
]


def _scalar_if_averaged(name: str, bound: Bound, average_over_batch: bool) -> None:
    rank = static_rank(bound) if is_tensor(bound) else np.ndim(bound)
    if average_over_batch and rank:
        raise ValueError(
            f"With average_over_batch=True, {name} must be a scalar (one bound for the batch mean). "
            f"Received: {name}={bound!r}"
        )


def _as_float(x, dtype=None, name: str = "x"):
    x = ops.convert_to_tensor(x, dtype=None if is_tensor(x) or isinstance(x, np.ndarray) else dtype)
    if not keras.backend.is_float_dtype(x.dtype):
        dtype_name = keras.backend.standardize_dtype(x.dtype)
        raise TypeError(f"{name} must be a floating-point tensor. Received: dtype={dtype_name}")
    if dtype is not None:
        x = ops.cast(x, dtype)
    return assert_finite(x, f"{name} has NaN or infinite entries")


def _prepare_scale(scale, diagonal: bool, dtype, name: str):
    scale = _as_float(scale, dtype, name)
    rank = static_rank(scale)
    if diagonal:
        if rank is not None and rank not in (1, 2):
            raise ValueError(f"{name} must have shape (batch, d) or (d,). Received: shape={scale.shape}")
        return scale
    if rank is not None and rank not in (2, 3):
        raise ValueError(f"{name} must have shape (batch, d, d) or (d, d). Received: shape={scale.shape}")
    return ops.tril(scale)


def _log_det_scale(scale, diagonal: bool):
    """``sum log diag(L)`` (``0.5 log det Sigma``), shape = batch shape of ``scale``."""
    diag = scale if diagonal else ops.diagonal(scale, axis1=-2, axis2=-1)
    return ops.sum(ops.log(ops.abs(diag)), axis=-1)


def _dimension(scale):
    """``d``, the size of the last axis, as a scalar of ``scale``'s dtype."""
    return ops.cast(ops.shape(scale)[-1], scale.dtype)


def gaussian_entropy(scale_tril, diagonal: bool = False):
    """Entropy ``0.5 d log(2 pi e) + sum log diag(L)`` of ``N(m, L L^T)`` (nats).

    Args:
        scale_tril: Cholesky factors ``(..., d, d)``, or standard deviations ``(..., d)``
            with ``diagonal=True``.
        diagonal: whether ``scale_tril`` holds standard deviations.

    Returns:
        The entropies, shape ``(...)``.

    Example:
        >>> round(float(gaussian_entropy(np.eye(2))), 6)
        2.837877
    """
    scale = ops.convert_to_tensor(scale_tril)
    if not diagonal:
        scale = ops.tril(scale)
    return 0.5 * _dimension(scale) * math.log(2.0 * math.pi * math.e) + _log_det_scale(scale, diagonal)


def _whiten(scale_old, x, diagonal: bool, vector: bool):
    """``L_old^{-1} x`` for vectors ``x`` (``(..., d)``) or matrices ``x`` (``(..., d, d)``)."""
    if diagonal:
        return x / scale_old
    rhs = x[..., None] if vector else x
    lhs, rhs = broadcast_batch(scale_old, rhs, core=2)
    out = ops.solve_triangular(lhs, rhs, lower=True)
    return out[..., 0] if vector else out


def _kl_mean(mean, old_mean, old_scale, diagonal: bool):
    whitened = _whiten(old_scale, mean - old_mean, diagonal, vector=True)
    return 0.5 * ops.sum(ops.square(whitened), axis=-1)


def _kl_cov(scale, old_scale, diagonal: bool):
    whitened = _whiten(old_scale, scale, diagonal, vector=diagonal)
    axes = (-1,) if diagonal else (-2, -1)
    trace = ops.sum(ops.square(whitened), axis=axes)
    half_excess = 0.5 * (trace - _dimension(scale))  # summed in this order, as before the port
    return half_excess + _log_det_scale(old_scale, diagonal) - _log_det_scale(scale, diagonal)


def gaussian_kl_parts(mean, scale_tril, old_mean, old_scale_tril, diagonal: bool = False) -> tuple:
    """The two parts of ``KL(N(m, S) || N(b, Q)) = KL_mean + KL_cov`` (Akrour et al. 2019).

    ``KL_mean = 0.5 (m - b)^T Q^{-1} (m - b)`` and
    ``KL_cov = 0.5 [tr(Q^{-1} S) - d + log det Q - log det S]``.

    Args:
        mean: new means ``(batch, d)``.
        scale_tril: new Cholesky factors ``(batch, d, d)`` or ``(d, d)`` (or standard
            deviations ``(batch, d)`` / ``(d,)`` with ``diagonal=True``).
        old_mean: old means, shaped like ``mean``.
        old_scale_tril: old scales, same conventions as ``scale_tril``.
        diagonal: whether the scales are standard deviations.

    Returns:
        ``(kl_mean, kl_cov)``: ``kl_mean`` has shape ``(batch,)``; ``kl_cov`` the broadcast
        batch shape of the scales (a scalar when both are shared).

    Example:
        >>> kl_m, kl_c = gaussian_kl_parts([[1.0, 0.0]], [[1.0, 1.0]], [[0.0, 0.0]], [[1.0, 1.0]], True)
        >>> ops.convert_to_numpy(kl_m), ops.convert_to_numpy(kl_c)
        (array([0.5], dtype=float32), array([0.], dtype=float32))
    """
    mean = ops.convert_to_tensor(mean)
    dtype = mean.dtype
    scale = _prepare_scale(scale_tril, diagonal, dtype, "scale_tril")
    old_mean = ops.convert_to_tensor(old_mean, dtype)
    old_scale = _prepare_scale(old_scale_tril, diagonal, dtype, "old_scale_tril")
    return _kl_mean(mean, old_mean, old_scale, diagonal), _kl_cov(scale, old_scale, diagonal)


def project_gaussian_entropy(
    mean,
    scale_tril,
    min_entropy: Bound,
    diagonal: bool = False,
    average_over_batch: bool = False,
    return_coefficient: bool = False,
) -> tuple:
    """Projects ``N(m, L L^T)`` onto ``{H >= min_entropy}`` by rescaling ``L``.

    Solves exactly, per batch row, ``min c`` s.t. ``c >= 1`` and ``H(N(m, c^2 L L^T)) >=
    min_entropy``: since ``H(c L) = H(L) + d log c``, ``c = exp((min_entropy - H) / d)`` where
    ``H < min_entropy`` (the projected entropy equals the bound up to round-off) and
    ``c = 1`` elsewhere, where ``L`` is returned exactly. The mean is unchanged. ``c`` is
    differentiable in ``L``, so gradients flow through the rescaling. With
    ``average_over_batch`` the constraint is on the batch mean of ``H`` and one ``c`` rescales
    every row.

    Args:
        mean: means ``(batch, d)`` (returned as is, after the NaN check).
        scale_tril: Cholesky factors ``(batch, d, d)`` or shared ``(d, d)`` with positive
            diagonal (the strict upper triangle is ignored), or standard deviations
            ``(batch, d)`` / ``(d,)`` with ``diagonal=True``.
        min_entropy: the bound in nats: a finite number, or a scalar tensor (e.g. a bound
            that changes inside one compiled training step), or a ``(batch,)`` array or
            tensor (one bound per state; not with ``average_over_batch``). A per-state
            bound gives a shared scale a batch axis.
        diagonal: whether ``scale_tril`` holds standard deviations.
        average_over_batch: bound the batch mean of the entropies instead of each one.
        return_coefficient: also return ``c``, with the batch shape of the entropies (a
            scalar for a shared scale or with ``average_over_batch``), exactly 1 where the
            scale is returned unchanged.

    Returns:
        ``(mean, projected_scale)``, ``projected_scale`` shaped like ``scale_tril`` (with
        a batch axis for a shared scale and a per-state bound); with
        ``return_coefficient``, ``(mean, projected_scale, c)``.

    Raises:
        ValueError: if ``min_entropy`` is known and not finite, has a rank above 1, or
            is per state with ``average_over_batch``.
        tf.errors.InvalidArgumentError: on TensorFlow, if the inputs have NaN or infinite
            entries, or a symbolic ``min_entropy`` (inside a ``tf.function``) does (see
            :func:`~keras_structured.projections.constraints.check_bound`); ``ValueError``
            on JAX and PyTorch where the values are known.

    Example:
        >>> m, s = project_gaussian_entropy(np.zeros([1, 2]), np.full([1, 2], 0.1), 2.0, diagonal=True)
        >>> round(float(gaussian_entropy(s, diagonal=True)[0]), 6), keras.backend.standardize_dtype(s.dtype)
        (2.0, 'float64')
    """
    min_entropy = check_bound("min_entropy", min_entropy)
    _scalar_if_averaged("min_entropy", min_entropy, average_over_batch)
    mean = _as_float(mean, name="mean")
    scale = _prepare_scale(scale_tril, diagonal, mean.dtype, "scale_tril")
    entropy = gaussian_entropy(scale, diagonal)
    if average_over_batch:
        entropy = mean_of_all(entropy)
    min_entropy = bound_tensor(min_entropy, entropy)
    violated = entropy < min_entropy
    log_c = ops.where(violated, (min_entropy - entropy) / _dimension(scale), ops.zeros_like(entropy))
    c = ops.exp(log_c)
    rescaled = c[..., None] * scale if diagonal else c[..., None, None] * scale
    keep = violated[..., None] if diagonal else violated[..., None, None]
    projected = ops.where(keep, rescaled, scale)
    return (mean, projected, c) if return_coefficient else (mean, projected)


def _as_bound(bound: Bound, dtype):
    """A Python float as is (exact in float64 arithmetic with tensors), anything else cast."""
    return bound if isinstance(bound, float) else ops.cast(ops.convert_to_tensor(bound), dtype)


def project_gaussian_kl(
    mean,
    scale_tril,
    old_mean,
    old_scale_tril,
    epsilon_mean: Bound,
    epsilon_cov: Bound,
    average_over_batch: bool = False,
    diagonal: bool = False,
    margin: float = 0.0,
    return_coefficients: bool = False,
) -> tuple:
    """Decomposed KL trust-region projection of ``N(m, S)`` towards ``N(b, Q)`` (Akrour et al. 2019).

    With ``S = L L^T``, ``Q = L_old L_old^T`` and the parts of :func:`gaussian_kl_parts`
    (``KL(new || old)``), this returns a point satisfying

    * ``average_over_batch=False`` (per state): for every batch row ``s``,
      ``KL_mean_s <= epsilon_mean`` and ``KL_cov_s <= epsilon_cov``, with one coefficient
      per state for the mean and one for the covariance;
    * ``average_over_batch=True``: ``mean_s KL_mean_s <= epsilon_mean`` and
      ``mean_s KL_cov_s <= epsilon_cov`` (the KL averaged over the batch of states, as in
      the paper's ``E_s[KL]`` constraint), with a single ``t`` for all means and a single
      ``t`` for the covariance(s); a shared covariance ``(d, d)`` stays shared.

    Each part is projected by interpolation with ``h = KL_part - epsilon`` and the old
    parameters as anchor (``h(anchor) = -epsilon < 0``): ``t = epsilon / KL_part`` where
    violated (:func:`~keras_structured.projections.interpolate.interpolation_coefficient`),
    first ``S' = t S + (1 - t) Q`` (re-factorised by Cholesky), then
    ``m' = b + t' (m - b)``. Convexity of ``KL_cov`` in ``S`` and of ``KL_mean`` in ``m``
    (jointly over the batch for the averages) makes the result feasible; in particular
    ``KL(N(m', S') || N(b, Q)) <= epsilon_mean + epsilon_cov``. It is not the KL-closest point.
    Feasible inputs are returned exactly, and gradients flow through ``t``.

    Args:
        mean: new means ``(batch, d)``.
        scale_tril: new Cholesky factors ``(batch, d, d)`` or shared ``(d, d)``, positive
            diagonal, strict upper triangle ignored; standard deviations ``(batch, d)`` or
            ``(d,)`` with ``diagonal=True``.
        old_mean: old means ``b``, shaped like ``mean``.
        old_scale_tril: old scales, same conventions as ``scale_tril``.
        epsilon_mean: bound on the mean part, a finite number > 0, or a scalar tensor, or
            a ``(batch,)`` array or tensor (one bound per state; not with
            ``average_over_batch``). Symbolic tensors are checked when the function runs.
        epsilon_cov: bound on the covariance part, same conventions.
        average_over_batch: constrain the batch averages with a single ``t`` per part.
        diagonal: whether the scales are standard deviations (``Sigma = diag(s^2)``; the
            variances are interpolated and no Cholesky is needed).
        margin: in ``[0, 1)``: the parts end below ``(1 - margin) epsilon``.
        return_coefficients: also return the coefficients ``t_mean`` and ``t_cov``, of shape
            ``(batch,)`` per state and ``(1,)`` averaged (1 exactly where that part is
            returned unchanged).

    Returns:
        ``(projected_mean, projected_scale)``; the scale has the broadcast shape of
        ``scale_tril`` and ``old_scale_tril`` (with a batch axis in the per-state variant when
        either one has one). With ``return_coefficients``,
        ``(projected_mean, projected_scale, t_mean, t_cov)``.

    Raises:
        ValueError: if an epsilon is known and not a finite number > 0, has a rank above
            1, or is per state with ``average_over_batch``.
        tf.errors.InvalidArgumentError: on TensorFlow, if the inputs have NaN or infinite
            entries, or a symbolic epsilon (inside a ``tf.function``) is not a finite number
            > 0 (see :func:`~keras_structured.projections.constraints.check_bound`);
            ``ValueError`` on JAX and PyTorch where the values are known.

    Example:
        >>> b, q = np.zeros([1, 2]), np.ones([1, 2])
        >>> m, s = project_gaussian_kl(b + 3.0, 3.0 * q, b, q, 0.1, 0.2, diagonal=True)
        >>> kl_m, kl_c = gaussian_kl_parts(m, s, b, q, diagonal=True)
        >>> bool(kl_m[0] <= 0.1 + 1e-9), bool(kl_c[0] <= 0.2 + 1e-9)
        (True, True)
    """
    epsilon_mean = check_bound("epsilon_mean", epsilon_mean, positive=True)
    epsilon_cov = check_bound("epsilon_cov", epsilon_cov, positive=True)
    _scalar_if_averaged("epsilon_mean", epsilon_mean, average_over_batch)
    _scalar_if_averaged("epsilon_cov", epsilon_cov, average_over_batch)
    mean = _as_float(mean, name="mean")
    old_mean = _as_float(old_mean, mean.dtype, "old_mean")
    scale = _prepare_scale(scale_tril, diagonal, mean.dtype, "scale_tril")
    old_scale = _prepare_scale(old_scale_tril, diagonal, mean.dtype, "old_scale_tril")
    dtype = mean.dtype
    matrix_rank = 1 if diagonal else 2

    # Covariance part.
    kl_cov = _kl_cov(scale, old_scale, diagonal)
    if average_over_batch:
        kl_cov = ops.reshape(mean_of_all(kl_cov), (1,))
        scale, old_scale = broadcast_batch(scale, old_scale, core=matrix_rank)
    else:
        kl_cov = broadcast_like(kl_cov, mean[..., 0])  # (batch,)
        states = mean if diagonal else mean[..., None, :]  # the batch axis of the means
        scale, _ = broadcast_batch(scale, states, core=matrix_rank)
        old_scale, _ = broadcast_batch(old_scale, states, core=matrix_rank)
    epsilon_cov = _as_bound(epsilon_cov, dtype)
    coefficient_cov = interpolation_coefficient(
        kl_cov - epsilon_cov, -epsilon_cov * ops.ones_like(kl_cov), margin=margin
    )
    if diagonal:
        cov, old_cov = ops.square(scale), ops.square(old_scale)
    else:
        cov = scale @ ops.swapaxes(scale, -1, -2)
        old_cov = old_scale @ ops.swapaxes(old_scale, -1, -2)
    # ``mix`` reshapes the coefficient ((batch,) per state, (1,) averaged) to broadcast over the
    # matrices, and returns the covariance itself where it is kept.
    new_cov = mix(cov, old_cov, coefficient_cov)
    new_scale = ops.sqrt(new_cov) if diagonal else ops.cholesky(new_cov)
    keep = ops.reshape(coefficient_cov >= 1.0, (-1,) + (1,) * (static_rank(scale) - 1))
    projected_scale = ops.where(keep, scale, new_scale)

    # Mean part (only involves the old covariance, so it is independent of the above).
    kl_mean = _kl_mean(mean, old_mean, old_scale, diagonal)
    if average_over_batch:
        kl_mean = ops.reshape(mean_of_all(kl_mean), (1,))
    epsilon_mean = _as_bound(epsilon_mean, dtype)
    coefficient_mean = interpolation_coefficient(
        kl_mean - epsilon_mean, -epsilon_mean * ops.ones_like(kl_mean), margin=margin
    )
    projected_mean = mix(mean, old_mean, coefficient_mean)
    if return_coefficients:
        return projected_mean, projected_scale, coefficient_mean, coefficient_cov
    return projected_mean, projected_scale
