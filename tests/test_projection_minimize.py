"""Tests of Algorithm 1 (gradient descent through the interpolation projection) and its naive baseline."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_structured.projections import EntropyLowerBound, Halfspace, L2Ball, Polytope, entropy
from keras_structured.projections.minimize import (
    default_step_size,
    minimize,
    projected_interpolation_descent,
)
from tests.cli_runs import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def linear(c):
    c = tf.constant(c, tf.float64)
    return lambda x: tf.reduce_sum(x * c, axis=-1)


def hexagon():
    angles = np.linspace(0.0, 2 * np.pi, 7)[:-1] + 0.3
    A = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return A, np.ones(6)


@pytest.mark.parametrize("anchor", [None, [0.5, 0.0]])
def test_l2_ball_linear_objective_converges_and_is_feasible(anchor):
    c = np.array([0.3, 1.0])
    x, history = minimize(
        linear(c), L2Ball(1.0), np.array([0.5, 0.0]), anchor=anchor, steps=4000, return_history=True
    )
    optimum = -np.linalg.norm(c)
    assert float(c @ x.numpy()) - optimum < 0.06
    assert np.linalg.norm(x.numpy()) <= 1.0 + 1e-9
    assert history.shape == (4000,)
    np.testing.assert_allclose(history[-1].numpy(), c @ x.numpy(), rtol=1e-9)
    assert history[-1] < history[100]


def test_polytope_linear_objective_converges_and_is_feasible():
    from scipy.optimize import linprog

    A, b = hexagon()
    c = np.array([0.3, 1.0])
    optimum = linprog(c, A_ub=A, b_ub=b, bounds=[(None, None)] * 2).fun
    constraint = Polytope(A, b, interior_point=[0.3, 0.2])
    x = minimize(linear(c), constraint, np.array([0.3, 0.2]), steps=4000).numpy()
    assert c @ x - optimum < 0.06
    assert np.max(A @ x - b) <= 1e-9
    # More iterations help: O(1/sqrt(K)).
    x_short = minimize(linear(c), constraint, np.array([0.3, 0.2]), steps=100).numpy()
    assert c @ x - optimum < 0.5 * (c @ x_short - optimum)


def test_batch_of_problems():
    c = tf.constant([[1.0, 0.0], [0.0, -2.0]], tf.float64)
    x, history = minimize(
        lambda x: tf.reduce_sum(x * c, -1), L2Ball(2.0), np.zeros((2, 2)), steps=2000, return_history=True
    )
    assert x.shape == (2, 2) and history.shape == (2000, 2)
    np.testing.assert_allclose(x.numpy(), [[-2.0, 0.0], [0.0, 2.0]], atol=0.15)
    assert np.all(np.linalg.norm(x.numpy(), axis=-1) <= 2.0 + 1e-9)


def test_entropy_constraint_from_logits():
    c = np.array([0.9, -0.4, 0.3, -1.0, 0.5])
    constraint = EntropyLowerBound(0.8, from_logits=True)
    with pytest.raises(ValueError, match="step_size"):
        minimize(linear(c), constraint, np.zeros(5), steps=10)
    p = minimize(linear(c), constraint, np.zeros(5), steps=2000, step_size=5.0 / np.sqrt(2000))
    assert abs(float(tf.reduce_sum(p)) - 1.0) < 1e-9
    assert float(entropy(p)) >= 0.8 - 1e-9
    assert float(c @ p.numpy()) < -0.74  # optimum -0.7814 (softmax(-c / T) with entropy 0.8)


def test_naive_baseline_stalls_figure_1():
    # Figure 1: sphere objective, linear constraint; the unconstrained path from the anchor
    # to the origin leaves C at (-0.8, -0.2), while the optimum is (-0.5, -0.5).
    sphere = lambda x: tf.reduce_sum(x**2, axis=-1)  # noqa: E731
    constraint = Halfspace([1.0, 1.0], -1.0, interior_point=[-2.0, -0.5])
    start = np.array([-2.0, -0.5])
    for alpha in (0.01, 0.1, 0.4):
        x = projected_interpolation_descent(sphere, constraint, start, steps=2000, step_size=alpha)
        assert float(sphere(x)) - 0.5 > 0.15  # stuck near f = 0.68
        np.testing.assert_allclose(x.numpy(), [-0.8, -0.2], atol=1e-3)
    # Differentiating through g instead moves along the boundary towards the optimum.
    x = minimize(sphere, constraint, start, steps=3000)
    assert float(sphere(x)) - 0.5 < 0.06
    assert float(np.sum(x.numpy())) <= -1.0 + 1e-9


def test_naive_baseline_stalls_with_linear_objective():
    c = np.array([0.3, 1.0])
    optimum = -np.linalg.norm(c)
    start = np.array([0.5, 0.0])
    naive, history = projected_interpolation_descent(
        linear(c), L2Ball(1.0), start, anchor=start, steps=3000, return_history=True
    )
    assert float(c @ naive.numpy()) - optimum > 0.15
    assert abs(float(history[-1] - history[-1000])) < 1e-6  # converged to a wrong point
    x = minimize(linear(c), L2Ball(1.0), start, anchor=start, steps=3000)
    assert float(c @ x.numpy()) - optimum < 0.06


def test_default_step_size_and_validation():
    beta = default_step_size(linear([3.0, 4.0]), L2Ball(2.0), np.zeros(2), steps=100)
    # R = 2, L = 5, H = 1 / 2 (h / |h(x0)| = ||x|| / 2 - 1): beta = 2 / (5 * 2 * 10).
    np.testing.assert_allclose(beta.numpy(), [0.02], rtol=1e-6)
    with pytest.raises(ValueError, match="steps"):
        minimize(linear([1.0, 0.0]), L2Ball(1.0), np.zeros(2), steps=0)
    with pytest.raises(ValueError, match="step_size"):
        minimize(linear([1.0, 0.0]), L2Ball(1.0), np.zeros(2), steps=5, step_size=-1.0)
    with pytest.raises(ValueError, match="strictly feasible"):
        minimize(linear([1.0, 0.0]), L2Ball(1.0), np.zeros(2), anchor=[3.0, 0.0], steps=5)


@pytest.mark.application
def test_example_script_runs(tmp_path, capsys):
    """``python examples/projection_toy.py``, run in this process (``tests.cli_runs.run_script``)."""
    run_script(
        os.path.join(ROOT, "examples", "projection_toy.py"), "--steps", "50", "--out-dir", str(tmp_path)
    )
    assert sorted(os.listdir(tmp_path)) == ["entropy.png", "l2_ball.png", "polytope.png"]
    assert capsys.readouterr().out.count("fitted log-log slope") == 3
