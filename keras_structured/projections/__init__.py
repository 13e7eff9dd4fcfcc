"""Interpolation-based projections onto convex sets ``{x : h(x) <= 0}``.

``g(x) = x`` if ``h(x) <= 0`` else ``x0 + t (x - x0)`` with ``t = h(x0) / (h(x0) - h(x))``
for a strictly feasible anchor ``x0``: cheap, always feasible, differentiable.

Constraints declare their input space (``Constraint.input_space``: points, probabilities
or logits) and accept tensor bounds (one for the batch, or one per row).
:func:`project_categorical` and :func:`project_gaussian` project policies onto an entropy
bound and a KL trust region, entropy first (:mod:`keras_structured.projections.policy`).

Written with ``keras.ops``: the constraints, the projections and both layers run on TensorFlow,
JAX and PyTorch. The solvers :func:`minimize` and :func:`projected_interpolation_descent` run
on TensorFlow only.
"""

from keras_structured.projections.categorical import EntropyLowerBound, KLTrustRegion, entropy, kl_divergence
from keras_structured.projections.constraints import (
    INPUT_SPACES,
    LOGITS,
    POINTS,
    PROBABILITIES,
    Constraint,
    Intersection,
    UserConstraint,
    check_bound,
    project,
)
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
from keras_structured.projections.policy import ProjectionInfo, project_categorical, project_gaussian
from keras_structured.projections.polytopes import (
    Halfspace,
    Monotone,
    Polytope,
    affine_rows_interpolation_coefficient,
)
from keras_structured.projections.polytopes import affine_rows_eta as affine_rows_eta  # deprecated

__all__ = [
    "INPUT_SPACES",
    "LOGITS",
    "POINTS",
    "PROBABILITIES",
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
    "ProjectionInfo",
    "UserConstraint",
    "affine_rows_interpolation_coefficient",
    "check_bound",
    "entropy",
    "gaussian_entropy",
    "gaussian_kl_parts",
    "interpolate",
    "interpolation_coefficient",
    "kl_divergence",
    "minimize",
    "mix",
    "project",
    "project_categorical",
    "project_gaussian",
    "project_gaussian_entropy",
    "project_gaussian_kl",
    "projected_interpolation_descent",
]
