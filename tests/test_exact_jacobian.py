"""SparseMAP Jacobians at realistic sizes and default settings against finite differences.

The solution map ``eta -> (u, v)`` is piecewise affine, so a central difference of
tightly solved forwards is exact within a piece, up to the forwards' rounding. The
Jacobian products of the default solve (``tol=1e-6``, ``exact_jacobian=True``) must
match it: median relative error <= 1e-4, maximum <= 1e-2 over 12 random instances.

An instance is excluded only by an automatic test saying that its scores lie on a
piece boundary, where the Jacobian jumps and no single answer is right: the forward
and backward differences disagree (a kink within the step). At most two instances in
twelve may be excluded. Structures of weight zero in the support are no sign of a
boundary: the support must span the face of the solution (all the structures of equal
best score), and on a face with more vertices than its dimension plus one, the
solution may lie on the boundary of the simplex of the vertices that span it.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import (
    BudgetStructure,
    DependencyTreeStructure,
    MatchingStructure,
    SequenceStructure,
    solve,
)
from keras_structured.engine.options import DEFAULT_MAX_ITER

BATCH = 12
STEP = 1e-5

CASES = {
    "tree10": (DependencyTreeStructure(), (11, 11), None),
    "tree30": (DependencyTreeStructure(), (31, 31), None),
    "tree50": (DependencyTreeStructure(), (51, 51), None),
    "tree80": (DependencyTreeStructure(), (81, 81), None),
    "tree30-single-root": (DependencyTreeStructure(single_root=True), (31, 31), None),
    "sequence30x20": (SequenceStructure(), (30, 20), (29, 20, 20)),
    "matching20x20": (MatchingStructure(), (20, 20), None),
    "matching15x25": (MatchingStructure(), (15, 25), None),
    "budget5of30": (BudgetStructure(5), (30,), None),
    "budget-at-most-5of30": (BudgetStructure(5, exact=False), (30,), None),
}


def _flat(solution):
    return np.concatenate([solution.u.reshape(BATCH, -1), solution.v.reshape(BATCH, -1)], axis=1)


def _relative(a, b):
    return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_default_jacobian_matches_finite_differences(case):
    structure, u_shape, v_shape = case
    rng = np.random.default_rng(0)
    eta_u = rng.normal(size=(BATCH,) + u_shape)
    eta_v = None if v_shape is None else rng.normal(size=(BATCH,) + v_shape)
    d_u = rng.normal(size=eta_u.shape)
    d_v = None if v_shape is None else rng.normal(size=eta_v.shape)

    solution = solve(structure, eta_u, eta_v)  # the defaults under test
    assert solution.converged.all()
    j_u, j_v = solution.jacobian_product(d_u, d_v)
    jacobian = np.concatenate([j_u.reshape(BATCH, -1), j_v.reshape(BATCH, -1)], axis=1)

    def tight(sign):
        shifted_v = None if v_shape is None else eta_v + sign * STEP * d_v
        return _flat(solve(structure, eta_u + sign * STEP * d_u, shifted_v, tol=1e-14, max_iter=5000))

    plus, center, minus = tight(1), tight(0), tight(-1)
    central = (plus - minus) / (2 * STEP)
    boundary = _relative((plus - center) / STEP, (center - minus) / STEP) > 1e-3
    assert boundary.sum() <= 2, f"{boundary.sum()} of {BATCH} instances on piece boundaries"

    errors = _relative(jacobian, central)[~boundary]
    assert np.median(errors) <= 1e-4, errors
    assert errors.max() <= 1e-2, errors


def test_approximate_jacobian_is_the_documented_cheaper_option():
    """``exact_jacobian=False`` stops at ``tol``: fewer MAP calls, a Jacobian off by far more."""
    structure = DependencyTreeStructure()
    rng = np.random.default_rng(0)
    eta = rng.normal(size=(BATCH, 31, 31))
    direction = rng.normal(size=eta.shape)
    exact = solve(structure, eta)
    approximate = solve(structure, eta, exact_jacobian=False)
    assert approximate.map_calls.sum() < exact.map_calls.sum()
    np.testing.assert_allclose(approximate.u, exact.u, atol=1e-3)
    reference = solve(structure, eta, tol=1e-14, max_iter=5000).jacobian_product(direction)[0]
    error_exact = _relative(
        exact.jacobian_product(direction)[0].reshape(BATCH, -1), reference.reshape(BATCH, -1)
    )
    error_approximate = _relative(
        approximate.jacobian_product(direction)[0].reshape(BATCH, -1), reference.reshape(BATCH, -1)
    )
    assert np.median(error_exact) < 1e-6 < 1e-2 < np.median(error_approximate)


def test_op_gradient_is_the_exact_jacobian_product():
    """``ks.sparsemap``'s gradient at its defaults is the engine's exact Jacobian product."""
    structure = DependencyTreeStructure()
    rng = np.random.default_rng(1)
    eta = rng.normal(size=(4, 31, 31))
    weights = rng.normal(size=eta.shape)
    scores = tf.constant(eta)
    with tf.GradientTape() as tape:
        tape.watch(scores)
        u, _ = ks.sparsemap(structure, scores)
        objective = tf.reduce_sum(u * weights)
    gradient = tape.gradient(objective, scores).numpy()
    reference = solve(structure, eta, tol=1e-14, max_iter=5000)
    np.testing.assert_allclose(u.numpy(), reference.u, atol=1e-6)
    np.testing.assert_allclose(gradient, reference.jacobian_product(weights)[0], atol=1e-6)


@pytest.mark.parametrize("exact_jacobian", [True, False])
def test_layers_store_the_jacobian_option(exact_jacobian):
    layer = ks.SparseMAPDependencyTree(exact_jacobian=exact_jacobian)
    assert layer.get_config()["exact_jacobian"] is exact_jacobian
    clone = ks.SparseMAPDependencyTree.from_config(layer.get_config())
    assert clone.exact_jacobian is exact_jacobian


def _long_tree_case(words: int, batch: int):
    """N(0, 1) scores of ``batch`` trees of ``words`` words and a direction."""
    rng = np.random.default_rng(words)
    eta = rng.normal(size=(batch, words + 1, words + 1))
    return eta, rng.normal(size=eta.shape)


def _long_tree_errors(words: int, batch: int, most_calls: int, pick=slice(None), compiled=True):
    """Default solves of long trees (those ``pick`` selects of the first ``batch``; with
    ``compiled=False``, the Python reference solver's) terminate (face certificate
    included) within ``most_calls`` MAP calls. Returns their Jacobians' relative errors
    against finite differences (central, or one-sided where a kink lies within the step)."""
    structure = DependencyTreeStructure()
    eta, direction = _long_tree_case(words, batch)
    eta, direction = eta[pick], direction[pick]
    batch = eta.shape[0]
    solution = solve(structure, eta, compiled=compiled)
    assert solution.converged.all() and solution.map_calls.max() <= most_calls, solution.map_calls
    jacobian = solution.jacobian_product(direction)[0].reshape(batch, -1)

    def tight(sign):
        shifted = eta + sign * STEP * direction
        return solve(structure, shifted, tol=1e-14, max_iter=10_000).u.reshape(batch, -1)

    plus, center, minus = tight(1), tight(0), tight(-1)
    # Long trees have many pieces: near a kink, the Jacobian is that of one side.
    differences = ((plus - minus) / (2 * STEP), (plus - center) / STEP, (center - minus) / STEP)
    return np.min([_relative(jacobian, difference) for difference in differences], axis=0)


def _assert_exact_on_long_trees(words: int, batch: int, most_calls: int, pick=slice(None)):
    """:func:`_long_tree_errors` of the compiled solver, all within 1e-4."""
    errors = _long_tree_errors(words, batch, most_calls, pick)
    assert errors.max() <= 1e-4, errors


def test_trees_of_150_words_terminate_with_exact_jacobians():
    """Before the face certificate, 13 of 32 such trees terminated within 1,000 MAP calls
    (the MAP oracle's tie-breaking kept returning the same structures of the solution's
    face), and a support stopped short gave Jacobians 17% off."""
    _assert_exact_on_long_trees(150, batch=3, most_calls=1000)


def test_trees_of_150_words_reach_the_exact_solution_without_cycling():
    """Near the solution, the weights of the face's structures are rounding error of the
    incremental inverse's; dropping structures on those unrefined weights made 9 of these
    16 trees cycle (enter one, drop two) until ``max_iter``, 5 and 9 among them."""
    eta, _ = _long_tree_case(150, 16)
    solution = solve(DependencyTreeStructure(), eta)
    assert solution.converged.all() and solution.map_calls.max() <= 1000, solution.map_calls
    _assert_exact_on_long_trees(150, batch=16, most_calls=1000, pick=[5, 9])


def test_the_reference_solver_certifies_the_face_as_the_kernel_does():
    """The Python reference solver (``compiled=False``: structures with Python oracles)
    runs the kernel's face certificate, weight slack, cycle guard and hull verification.
    Without them its Jacobians on these six trees were 15-36% off. One tree's support
    spans the right hull through a badly conditioned basis (smallest singular value 2e-6,
    against 2e-2 for the kernel's): the Gram-based factors then lose digits (7e-4)."""
    errors = _long_tree_errors(50, batch=6, most_calls=400, compiled=False)
    assert np.median(errors) <= 1e-8 and errors.max() <= 1e-3, errors


@pytest.mark.slow
def test_trees_of_300_words_terminate_within_the_default_max_iter():
    _assert_exact_on_long_trees(300, batch=2, most_calls=DEFAULT_MAX_ITER)
