"""Tolerances shared by the two active-set solvers (the compiled kernel and the readable
reference), so that both terminate on the same rules.

Scales: ``scale`` is ``max(1, |objective|)``; squared distances are relative to ``||m||^2``.
"""

from __future__ import annotations

import numpy as np

# Squared distance (relative to ||m||^2) below which a unary vector counts as lying in
# the affine hull of the active ones.
AFFINE_TOL = 1e-10
# Once within ``tol`` (exact only), a structure whose relative Schur complement is below
# this is measured directly (its distance to the hull, with refined affine coefficients):
# the Schur complement from the incrementally updated ``K^{-1}`` errs by up to cond(K)
# times rounding (1e-3 relative measured at 50 words), and a structure in the hull taken
# for one off it makes ``K`` nearly singular and the Jacobian wrong (1.8e-3 on a tree of
# 50 words), while the weight slack keeps it active.
VERIFY_TOL = 1e-2
# KKT residual (relative to the scores) above which the incremental inverse is rebuilt.
RESIDUAL_TOL = 1e-9
# Distance of the weights' sum from one above which a point is not taken as a solution
# (its KKT system is solved again): a point off the polytope by d has a Wolfe gap off by
# about d |objective| (issue 56: 3.6e-6 gave gaps of -1.2e-4). Rounding leaves 1e-15.
SUM_TOL = 1e-12
# Relative Wolfe gap that counts as zero when an exact support is asked for: a few
# rounding errors of the objective. Larger values stop on incomplete supports (the gaps
# of missing structures fall to 1e-13 relative on trees of 50 words).
ROUNDING_GAP = 4 * np.finfo(np.float64).eps
# Steps of iterative refinement of a KKT solution (before the exact termination is
# decided, and of every solution near the optimum).
REFINEMENTS = 2
# The face certificate (exact only): before terminating, two MAP calls at the scores
# perturbed by +-r, r a random direction orthogonal to the support's affine hull, of norm
# CERTIFICATE_STEP * scale, must both return structures in the hull; a structure outside
# it whose gap is within FACE_GAP * scale of zero lies on the solution's face and enters.
# A structure further off shrinks r tenfold, at most CERTIFICATE_SHRINKS times. Face gaps
# are rounding error (2e-14 relative on trees of 300 words); a structure off the face by
# 4e-11 that entered under a looser FACE_GAP (1e-10) took face structures out with it,
# and the certificate cycled.
CERTIFICATE_STEP = 1e-6
FACE_GAP = 1e-12
CERTIFICATE_SHRINKS = 6
# Relative Wolfe gap (or ``tol``, if larger) from which the solver works to rounding
# (exact only): every KKT solution refined, the weight slack below, structures near the
# hull measured directly. Tied to ``tol`` alone, a tight ``tol`` (1e-14) never got there
# and cycled on the rounding error of unrefined weights.
NEAR_GAP = 1e-6
# Near the optimum (exact only), weights of the face's structures are rounding error of
# either sign: those above -WEIGHT_SLACK stay active at weight zero instead of leaving
# and coming back.
WEIGHT_SLACK = 1e-12
