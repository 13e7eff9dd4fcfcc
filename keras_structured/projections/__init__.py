"""Interpolation-based projections onto convex sets ``{x : h(x) <= 0}``.

``g(x) = x`` if ``h(x) <= 0`` else ``x0 + eta (x - x0)`` with ``eta = h(x0) / (h(x0) - h(x))``
for a strictly feasible anchor ``x0``: cheap, always feasible, differentiable.
"""

from keras_structured.projections.categorical import EntropyLowerBound, KLTrustRegion, entropy, kl_divergence
from keras_structured.projections.constraints import Constraint, Intersection, UserConstraint, project
from keras_structured.projections.gaussian import (
    gaussian_entropy,
    gaussian_kl_parts,
    project_gaussian_entropy,
    project_gaussian_kl,
)
from keras_structured.projections.gaussian_layer import GaussianProjection
from keras_structured.projections.interpolate import interpolate, interpolation_coefficient, mix
from keras_structured.projections.layer import InterpolationProjection
from keras_structured.projections.minimize import minimize, projected_interpolation_descent
from keras_structured.projections.norm_balls import L1Ball, L2Ball, LinfBall
from keras_structured.projections.polytopes import Halfspace, Monotone, Polytope, affine_rows_eta

__all__ = [
    "Constraint",
    "EntropyLowerBound",
    "GaussianProjection",
    "Halfspace",
    "Intersection",
    "InterpolationProjection",
    "KLTrustRegion",
    "L1Ball",
    "L2Ball",
    "LinfBall",
    "Monotone",
    "Polytope",
    "UserConstraint",
    "affine_rows_eta",
    "entropy",
    "gaussian_entropy",
    "gaussian_kl_parts",
    "interpolate",
    "interpolation_coefficient",
    "kl_divergence",
    "minimize",
    "mix",
    "project",
    "project_gaussian_entropy",
    "project_gaussian_kl",
    "projected_interpolation_descent",
]
