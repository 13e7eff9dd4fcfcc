"""Tests of the trace-norm bilinear parser trained by Hazan's algorithm, its features and its CLI.

The small problem: hashed features of dimension ``d = 10`` of the 10 shortest sentences of
``tests/data/en_ewt_sample.conllu`` (9 to 16 words), the SparseMAP loss, ``C = 0.5``,
``lam = 1`` (the constraint is active there: a larger ``C`` reaches a lower objective).

**The projection onto the ball** ``B = {(A, b): ||A||_* + lam ||b||_2 <= C}`` that the
projected-gradient reference needs. Let ``A0 = P diag(s) Q^T`` (SVD) and ``r = ||b0||``.

1. Reduction. For any ``(A, b)``, ``||A - A0||_F >= ||sigma(A) - s||_2`` (Mirsky's
   inequality, singular values sorted) and ``||b - b0|| >= | ||b|| - r |``; both hold
   with equality for ``A = P diag(sigma) Q^T`` and ``b = t b0 / r``. Membership in ``B``
   depends on ``(sigma(A), ||b||)`` only, so the projection is
   ``(P diag(sigma') Q^T, t' b0 / r)`` with
   ``(sigma', t') = argmin ||sigma - s||^2 + (t - r)^2  s.t.  sum(sigma) + lam t <= C, sigma, t >= 0``:
   the projection onto a weighted l1 ball (weights ``1, ..., 1, lam``) of the vector
   ``(s_1, ..., s_d, r)``, which is nonnegative already.
2. KKT. If ``sum(s) + lam r <= C`` the point is its own projection. Otherwise, with a
   multiplier ``theta > 0`` for the budget, stationarity of
   ``1/2 ||sigma - s||^2 + 1/2 (t - r)^2 + theta (sum(sigma) + lam t - C)`` over
   ``sigma, t >= 0`` gives ``sigma'_i = max(s_i - theta, 0)`` and ``t' = max(r - lam theta, 0)``,
   and the budget is tight: ``g(theta) = sum_i max(s_i - theta, 0) + lam max(r - lam theta, 0) = C``.
   ``g`` is continuous, piecewise linear, nonincreasing, ``g(0) > C`` and ``g = 0`` from
   ``theta = max(s_1, r / lam)`` on, so the root is unique on that interval: found by Brent's
   method to machine precision.

The reference minimiser is FISTA (accelerated projected gradient) with that projection and
the step ``1 / L``, ``L = ||J||_2^2 / m`` with ``J`` the matrix that maps ``(A, b)`` to the
arc scores of all sentences: the SparseMAP loss has a 1-Lipschitz gradient in the scores
(``u*`` is a Euclidean projection), so ``L`` bounds the curvature of the mean loss. Its own
Frank-Wolfe gap certifies how close it gets.
"""

from __future__ import annotations

import csv
import json
import pathlib
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import brentq
from scipy.sparse.linalg import aslinearoperator

from keras_structured.applications.parsing import tracenorm as tn
from keras_structured.applications.parsing.bilinear_features import (
    NUM_DISTANCE_FEATURES,
    ROOT_FEATURE,
    distance_index,
    featurize,
    token_feature_matrix,
)
from keras_structured.applications.parsing.conllu_reader import Sentence, read_conllu
from keras_structured.divergence import DivergenceError
from keras_structured.engine import DependencyTreeStructure, solve
from keras_structured.engine.dependency_tree import best_trees

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "en_ewt_sample.conllu"
CLI = ROOT / "examples" / "tracenorm_parser.py"
DIM, C, LAM, STEPS = 10, 0.5, 1.0, 500


@pytest.fixture(scope="module")
def sentences() -> list[Sentence]:
    return sorted(read_conllu(SAMPLE), key=lambda s: s.length)[:20]


@pytest.fixture(scope="module")
def small(sentences):
    """The small problem: the 10 shortest sentences (500 Frank-Wolfe steps on the 20 shortest
    took 23 s, and FISTA 10 s, for the same checks)."""
    return featurize(sentences[:10], dim=DIM)


def _exact_norm(model: tn.TraceNormModel) -> float:
    """``||A||_* + lam ||b||`` from an SVD of the dense ``A``."""
    return float(
        np.linalg.svd(model.dense_matrix(), compute_uv=False).sum()
        + LAM * np.linalg.norm(model.distance_weights)
    )


@pytest.fixture(scope="module")
def standard_run(small):
    """500 standard Frank-Wolfe steps on the small problem, the exact norm after each."""
    norms = []
    trainer = tn.HazanTrainer(
        small,
        tn.HazanConfig(C=C, lam=LAM, steps=STEPS),
        callback=lambda trainer, record: norms.append(_exact_norm(trainer.model)),
    )
    trainer.train()
    return trainer, np.array(norms)


# ---------------------------------------------------------------------------------------
# Hazan's algorithm on the small problem


def test_iterates_stay_in_the_ball(standard_run):
    trainer, norms = standard_run
    assert len(norms) == STEPS
    assert norms.max() <= C + 1e-8
    assert max(record["norm_bound"] for record in trainer.history) <= C + 1e-8
    assert norms[-1] > 0.9 * C  # the iterate does use the budget


def test_rank_after_k_steps_is_at_most_k(standard_run):
    trainer, _ = standard_run
    ranks = np.array([record["rank"] for record in trainer.history])
    steps = np.array([record["step"] for record in trainer.history])
    assert np.all(ranks <= steps)
    a_atoms = np.cumsum([record["atom"] == "A" for record in trainer.history])
    np.testing.assert_array_equal(ranks, a_atoms)  # no compression: one factor per A step
    assert np.linalg.matrix_rank(trainer.model.dense_matrix()) <= min(ranks[-1], DIM)


def test_gap_is_nonnegative_and_decreases_like_one_over_k(standard_run):
    trainer, _ = standard_run
    gaps = np.array([record["gap"] for record in trainer.history])
    assert gaps.min() >= -1e-12
    k = np.arange(1, len(gaps) + 1)
    best = np.minimum.accumulate(gaps)
    slope = np.polyfit(np.log(k[9:]), np.log(best[9:]), 1)[0]
    assert slope <= -0.8, slope


def _project(matrix: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Euclidean projection onto ``||A||_* + LAM ||b|| <= C`` (module docstring)."""
    p, s, q_t = np.linalg.svd(matrix)
    r = np.linalg.norm(weights)
    if s.sum() + LAM * r <= C:
        return matrix, weights
    budget = lambda theta: np.maximum(s - theta, 0).sum() + LAM * max(r - LAM * theta, 0) - C  # noqa: E731
    theta = brentq(budget, 0.0, max(s[0], r / LAM), xtol=1e-15, rtol=1e-15)
    t = max(r - LAM * theta, 0.0)
    return (p * np.maximum(s - theta, 0)) @ q_t, (weights * (t / r) if r > 0 else weights)


def test_projection_lands_on_the_sphere():
    rng = np.random.default_rng(0)
    matrix, weights = _project(rng.standard_normal((DIM, DIM)), rng.standard_normal(NUM_DISTANCE_FEATURES))
    norm = np.linalg.svd(matrix, compute_uv=False).sum() + LAM * np.linalg.norm(weights)
    assert norm == pytest.approx(C, rel=1e-10)


def _curvature(sentences) -> float:
    """``||J||^2 / m``: ``J`` maps ``(vec A, b)`` to the scores of every arc."""
    rows = []
    for s in sentences:
        phi, index = s.phi.toarray(), s.distance
        for i, j in zip(*np.nonzero(index >= 0), strict=True):
            rows.append(
                np.concatenate([np.outer(phi[i], phi[j]).ravel(), np.eye(NUM_DISTANCE_FEATURES)[index[i, j]]])
            )
    return np.linalg.norm(np.array(rows), 2) ** 2 / len(sentences)


def test_objective_matches_projected_gradient_descent(standard_run, small):
    batch = tn.ArcBatch(small)
    step = 1.0 / _curvature(small)

    def gradient(matrix, weights):
        result = tn.loss_and_gradient(tn.BilinearModel(matrix, weights), batch)
        return result, result.grad_A @ np.eye(DIM), result.grad_distance_weights

    x = previous = (np.zeros((DIM, DIM)), np.zeros(NUM_DISTANCE_FEATURES))
    t = 1.0
    for _ in range(200):  # FISTA
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        w = (t - 1) / t_next
        y = tuple(a + w * (a - b) for a, b in zip(x, previous, strict=True))
        _, grad_matrix, grad_weights = gradient(*y)
        previous, x, t = x, _project(y[0] - step * grad_matrix, y[1] - step * grad_weights), t_next
    result, grad_matrix, grad_weights = gradient(*x)
    reference_gap = result.inner + C * tn.linear_minimizer(grad_matrix, grad_weights, C, LAM).dual_norm
    assert 0 <= reference_gap < 1e-5  # the reference is certified optimal to 1e-5
    trainer, _ = standard_run
    frank_wolfe = tn.objective(trainer.model, batch)
    assert frank_wolfe == pytest.approx(result.objective, rel=1e-4)
    assert frank_wolfe >= result.objective - reference_gap


def test_line_search_decreases_the_objective_monotonically(small):
    norms = []
    trainer = tn.HazanTrainer(
        small,
        tn.HazanConfig(C=C, lam=LAM, steps=40, step_rule="line_search"),
        callback=lambda trainer, record: norms.append(_exact_norm(trainer.model)),
    )
    trainer.train()
    objectives = np.array(
        [record["objective"] for record in trainer.history] + [tn.objective(trainer.model, small)]
    )
    assert np.all(np.diff(objectives) <= 1e-7), np.diff(objectives).max()
    assert objectives[-1] < objectives[0] - 0.5
    assert max(norms) <= C + 1e-8
    assert all(0 <= record["step_size"] <= 1 for record in trainer.history)


def test_stochastic_variant_stays_feasible(small):
    norms = []
    trainer = tn.HazanTrainer(
        small,
        tn.HazanConfig(C=C, lam=LAM, steps=15, batch_size=5, svd="svds"),
        callback=lambda trainer, record: norms.append(_exact_norm(trainer.model)),
    )
    trainer.train()
    assert max(norms) <= C + 1e-8
    assert tn.objective(trainer.model, small) < tn.objective(tn.TraceNormModel(DIM), small)


# ---------------------------------------------------------------------------------------
# Gradient, scores, compression


def _random_model(dim: int, rank: int, seed: int = 0, scale: float = 1.0) -> tn.TraceNormModel:
    rng = np.random.default_rng(seed)
    model = tn.TraceNormModel(dim)
    for _ in range(rank):
        model.add_factor(scale * rng.uniform(0.5, 1.5), rng.standard_normal(dim), rng.standard_normal(dim))
    model.distance_weights = scale * rng.standard_normal(NUM_DISTANCE_FEATURES)
    return model


def test_gradient_operator_matches_the_dense_gradient(sentences):
    dim = 6
    features = featurize(sentences[:4], dim=dim)
    model = _random_model(dim, rank=3, seed=1)
    result = tn.loss_and_gradient(model, features)
    dense, grad_weights, losses = np.zeros((dim, dim)), np.zeros(NUM_DISTANCE_FEATURES), []
    for s in features:  # one sentence at a time, no padding, dense algebra
        phi, y, index = s.phi.toarray(), s.gold_arcs(), s.distance
        scores = phi @ model.dense_matrix() @ phi.T + model.distance_weights[index]
        scores[index < 0] = 0
        u = solve(DependencyTreeStructure(), scores[None], exact_jacobian=False).u[0]
        dense += phi.T @ (u - y) @ phi / len(features)
        np.add.at(grad_weights, index[index >= 0], (u - y)[index >= 0] / len(features))
        losses.append(np.sum(scores * u) - np.sum(u * u) / 2 - np.sum(scores * y) + np.sum(y) / 2)
    rng = np.random.default_rng(2)
    for v in rng.standard_normal((3, dim)):
        np.testing.assert_allclose(result.grad_A.matvec(v), dense @ v, atol=1e-10)
        np.testing.assert_allclose(result.grad_A.rmatvec(v), dense.T @ v, atol=1e-10)
    np.testing.assert_allclose(result.grad_A @ np.eye(dim), dense, atol=1e-10)
    np.testing.assert_allclose(result.grad_distance_weights, grad_weights, atol=1e-10)
    np.testing.assert_allclose(result.losses, losses, atol=1e-9)
    assert result.inner == pytest.approx(
        np.sum(dense * model.dense_matrix()) + grad_weights @ model.distance_weights, abs=1e-9
    )


def test_gradient_is_the_derivative_of_the_objective(sentences):
    dim = 6
    features = featurize(sentences[:4], dim=dim)
    model = _random_model(dim, rank=2, seed=3, scale=2.0)
    result = tn.loss_and_gradient(model, features)
    direction = np.random.default_rng(4).standard_normal((dim, dim))
    epsilon = 1e-4
    values = []
    for sign in (1, -1):
        moved = tn.BilinearModel(model.dense_matrix() + sign * epsilon * direction, model.distance_weights)
        values.append(tn.objective(moved, features))
    numeric = (values[0] - values[1]) / (2 * epsilon)
    assert numeric == pytest.approx(np.sum(direction * (result.grad_A @ np.eye(dim))), rel=1e-3, abs=1e-6)


def test_hinge_loss_and_subgradient(sentences):
    features = featurize(sentences[:3], dim=8)
    model = _random_model(8, rank=2, seed=5)
    result = tn.loss_and_gradient(model, features, loss="hinge")
    for s, value in zip(features, result.losses, strict=True):
        scores, y = model.scores(s), s.gold_arcs()
        cost = (s.distance >= 0) & (y == 0)
        heads = best_trees((scores + cost)[None])[0]
        predicted = np.zeros_like(y)
        predicted[heads[1:], np.arange(1, s.length + 1)] = 1
        assert value == pytest.approx(np.sum((scores + cost) * predicted) - np.sum(scores * y))
        assert value >= 0


def test_scores_match_the_dense_matrix_and_compress_keeps_them(sentences):
    dim = 12
    features = featurize(sentences[:3], dim=dim)
    model = _random_model(dim, rank=30, seed=6)  # more factors than dimensions
    matrix = model.dense_matrix()
    for s in features:
        phi = s.phi.toarray()
        expected = phi @ matrix @ phi.T + model.distance_weights[s.distance]
        expected[s.distance < 0] = 0
        np.testing.assert_allclose(model.scores(s), expected, atol=1e-10)
        np.testing.assert_allclose(
            tn.BilinearModel(matrix, model.distance_weights).scores(s), expected, atol=1e-10
        )
    before = [model.scores(s) for s in features]
    model.compress()
    assert model.rank <= dim
    np.testing.assert_allclose(model.dense_matrix(), matrix, atol=1e-10)
    for s, scores in zip(features, before, strict=True):
        np.testing.assert_allclose(model.scores(s), scores, atol=1e-10)
    nuclear = np.linalg.svd(matrix, compute_uv=False).sum()
    assert model.weights.sum() == pytest.approx(nuclear, rel=1e-10)
    assert model.num_parameters == model.rank * (2 * dim + 1) + NUM_DISTANCE_FEATURES


def test_linear_minimizer_picks_the_larger_dual_norm():
    grad_matrix = np.diag([3.0, 1.0])
    small_weights = np.full(NUM_DISTANCE_FEATURES, 0.1)
    atom = tn.linear_minimizer(grad_matrix, small_weights, C=2.0, lam=1.0)
    assert atom.kind == "A" and atom.dual_norm == pytest.approx(3.0)
    np.testing.assert_allclose(2.0 * np.outer(atom.left, atom.right), [[-2.0, 0], [0, 0]], atol=1e-12)
    atom = tn.linear_minimizer(grad_matrix, small_weights, C=2.0, lam=0.1)  # ||g|| / lam = 3.87 > 3
    assert atom.kind == "b"
    np.testing.assert_allclose(
        atom.distance_weights, -(2.0 / 0.1) * small_weights / np.linalg.norm(small_weights)
    )
    operator = aslinearoperator(sp.csr_matrix(np.diag(np.arange(1.0, 8.0))))
    sigma, u, v = tn.top_singular_triplet(operator, method="svds")
    assert sigma == pytest.approx(7.0, rel=1e-6) and abs(u[-1]) == pytest.approx(1.0, rel=1e-6)
    assert tn.top_singular_triplet(aslinearoperator(sp.csr_matrix((5, 5))), method="svds")[0] == 0.0


# ---------------------------------------------------------------------------------------
# Features


def test_features_distance_and_hashing(sentences):
    index = distance_index(12)
    assert np.all(index[:, 0] == -1) and np.all(np.diag(index) == -1)
    assert np.all(index[0, 1:] == ROOT_FEATURE)
    assert index[1, 2] == 0 and index[2, 1] == 7 and index[1, 12] == 6 and index[12, 1] == 13
    words = index[1:, 1:][index[1:, 1:] >= 0]
    assert set(words.tolist()) == set(range(ROOT_FEATURE))
    sentence = sentences[0]
    phi = token_feature_matrix(sentence, dim=2**12, normalize=False)
    assert phi.shape == (sentence.length + 1, 2**12)
    assert phi[0].sum() == 4 and np.all(phi[1:].sum(axis=1) == 10)
    np.testing.assert_array_equal(
        phi.toarray(), token_feature_matrix(sentence, 2**12, normalize=False).toarray()
    )
    normalised = token_feature_matrix(sentence, dim=1)  # everything collides; still works
    np.testing.assert_allclose(normalised.toarray(), 1.0)
    unseen = Sentence(("Zyxqw",), ("NOUN",), np.array([-1, 0]), ("root",))
    assert token_feature_matrix(unseen, 2**12, normalize=False)[1].nnz >= 9  # ten indicators, few collisions


# ---------------------------------------------------------------------------------------
# Errors, checkpoints, NaN


def test_bad_inputs_raise_clear_errors(small):
    with pytest.raises(ValueError, match=r"C must be .*Received: C=0"):
        tn.HazanConfig(C=0)
    with pytest.raises(ValueError, match=r"C must be .*Received: C=-1.0"):
        tn.HazanConfig(C=-1.0)
    with pytest.raises(ValueError, match=r"lam must be .*Received: lam=0.0"):
        tn.HazanConfig(lam=0.0)
    with pytest.raises(ValueError, match=r"lam must be .*Received: lam=-2"):
        tn.linear_minimizer(np.eye(2), np.ones(NUM_DISTANCE_FEATURES), C=1.0, lam=-2)
    with pytest.raises(ValueError, match=r"dim must be an integer >= 1. Received: dim=0"):
        featurize([], dim=0)
    with pytest.raises(ValueError, match=r"dim must be an integer >= 1. Received: dim=0"):
        tn.TraceNormModel(0)
    with pytest.raises(ValueError, match="empty.*Received: 0 sentences"):
        tn.HazanTrainer([], tn.HazanConfig())
    with pytest.raises(ValueError, match="empty.*Received: 0 sentences"):
        tn.train_frobenius([])
    with pytest.raises(ValueError, match="Received: 0 sentences"):
        tn.loss_and_gradient(tn.TraceNormModel(DIM), [])
    with pytest.raises(ValueError, match=r"dimension d=7.*Received: feature dimension 10"):
        tn.loss_and_gradient(tn.TraceNormModel(7), small)
    with pytest.raises(ValueError, match="step_rule"):
        tn.HazanConfig(step_rule="exact")
    with pytest.raises(ValueError, match="batch_size=4, step_rule='line_search'"):
        tn.HazanConfig(batch_size=4, step_rule="line_search")


def _assert_same_model(first: tn.TraceNormModel, second: tn.TraceNormModel) -> None:
    for name in ("weights", "left", "right", "distance_weights"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name), err_msg=name)


@pytest.mark.parametrize("batch_size", [None, 4])
def test_resumed_run_repeats_the_uninterrupted_run(small, tmp_path, batch_size):
    config = tn.HazanConfig(
        C=2.0, lam=LAM, steps=12, batch_size=batch_size, checkpoint_every=3, compress_every=5
    )
    whole = tn.HazanTrainer(small[:8], config)
    whole.train()
    first = tn.HazanTrainer(small[:8], config, logdir=tmp_path)
    first.train(steps=7)  # checkpoints at steps 3, 6 and 7 (the end)
    resumed = tn.HazanTrainer(small[:8], config, logdir=tmp_path)
    assert resumed.step_count == 7 and len(resumed.history) == 7
    resumed.train()
    _assert_same_model(whole.model, resumed.model)
    for a, b in zip(whole.history, resumed.history, strict=True):
        assert {k: v for k, v in a.items() if k != "time"} == {k: v for k, v in b.items() if k != "time"}
    with open(tmp_path / "progress.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(row["step"]) for row in rows] == list(range(1, 13))
    model, step, history, saved = tn.load_checkpoint(tmp_path / tn.CHECKPOINT_NAME)
    assert step == 12 and len(history) == 12 and saved["C"] == 2.0
    _assert_same_model(model, whole.model)
    with pytest.raises(ValueError, match="other settings"):
        tn.HazanTrainer(small[:8], tn.HazanConfig(C=3.0, steps=12), logdir=tmp_path)


def _rewrite_in_the_old_format(path: pathlib.Path) -> None:
    """Rewrite a checkpoint as written before the distance weights were renamed.

    Its distance weights are under ``eta`` and the atoms of its history that moved them are
    ``"eta"`` (``"b"`` now); the other arrays are unchanged.
    """
    model, step, history, config = tn.load_checkpoint(path)
    state = model.state()
    state["eta"] = state.pop("distance_weights")
    history = [{**record, "atom": "eta" if record["atom"] == "b" else record["atom"]} for record in history]
    with open(path, "wb") as handle:
        np.savez(
            handle,
            **state,
            step=np.int64(step),
            history=np.array(json.dumps(history)),
            config=np.array(json.dumps(config)),
        )


def test_a_checkpoint_of_the_old_format_loads_and_resumes(small, tmp_path):
    config = tn.HazanConfig(C=2.0, lam=LAM, steps=12, checkpoint_every=3)
    whole = tn.HazanTrainer(small[:8], config)
    whole.train()
    assert {record["atom"] for record in whole.history} == {"A", "b"}  # both kinds of atoms
    first = tn.HazanTrainer(small[:8], config, logdir=tmp_path)
    first.train(steps=6)
    path = tmp_path / tn.CHECKPOINT_NAME
    _rewrite_in_the_old_format(path)
    with np.load(path) as data:
        assert "eta" in data.files and "distance_weights" not in data.files
        assert '"atom": "eta"' in str(data["history"])
    model, step, history, _ = tn.load_checkpoint(path)
    assert step == 6
    _assert_same_model(model, first.model)
    assert history == first.history  # the old "eta" atoms read as "b"
    resumed = tn.HazanTrainer(small[:8], config, logdir=tmp_path)
    assert resumed.step_count == 6
    resumed.train()
    _assert_same_model(whole.model, resumed.model)
    for a, b in zip(whole.history, resumed.history, strict=True):
        assert {k: v for k, v in a.items() if k != "time"} == {k: v for k, v in b.items() if k != "time"}
    with open(tmp_path / "progress.csv") as handle:
        assert {row["atom"] for row in csv.DictReader(handle)} == {"A", "b"}
    with np.load(path) as data:  # the next checkpoint has the new format
        assert "distance_weights" in data.files and "eta" not in data.files


def test_a_state_with_the_old_key_of_the_distance_weights_still_loads():
    state = tn.TraceNormModel(3).state()
    state["eta"] = state.pop("distance_weights") + 1.0
    np.testing.assert_array_equal(tn.TraceNormModel.from_state(state).distance_weights, 1.0)


def test_nan_objective_stops_and_keeps_the_last_good_checkpoint(small, tmp_path):
    def poison(trainer, record):
        if record["step"] == 4:
            trainer.model.distance_weights[:] = np.nan

    trainer = tn.HazanTrainer(
        small[:5], tn.HazanConfig(C=1.0, steps=10, checkpoint_every=2), logdir=tmp_path, callback=poison
    )
    with pytest.raises(DivergenceError, match=r"not finite at step 5.*last good checkpoint, step 4"):
        trainer.train()
    model, step, history, _ = tn.load_checkpoint(tmp_path / tn.CHECKPOINT_NAME)
    assert step == 4 and len(history) == 4
    assert np.isfinite(model.distance_weights).all() and np.isfinite(model.weights).all()
    assert np.isfinite(tn.objective(model, small[:5]))
    with open(tmp_path / "progress.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 4


# ---------------------------------------------------------------------------------------
# Baseline and evaluation


def test_frobenius_baseline_learns_and_counts_parameters(small):
    model, history = tn.train_frobenius(small, tn.FrobeniusConfig(steps=15, learning_rate=0.05, mu=1e-3))
    assert model.num_parameters == DIM**2 + NUM_DISTANCE_FEATURES
    assert history[-1]["objective"] < history[0]["objective"]
    scores = tn.evaluate(model, small)
    assert 0 <= scores["uas"] <= 100 and scores["tokens"] == sum(s.length for s in small)


def test_dev_evaluation_is_recorded(small):
    trainer = tn.HazanTrainer(small[:6], tn.HazanConfig(C=1.0, steps=4, eval_every=2), dev=small[6:9])
    trainer.train()
    assert [("dev_uas" in record) for record in trainer.history] == [False, True, False, True]
    heads = tn.parse(trainer.model, small[6:9])
    assert [len(h) for h in heads] == [s.length + 1 for s in small[6:9]]
    assert trainer.history[-1]["dev_uas"] == tn.evaluate(trainer.model, small[6:9])["uas"]


# ---------------------------------------------------------------------------------------
# Command line


def test_cli_help_answers_without_heavy_imports():
    result = subprocess.run(
        [sys.executable, str(CLI), "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "train" in result.stdout and "sweep" in result.stdout and "frobenius" in result.stdout
    result = subprocess.run(
        [sys.executable, str(CLI), "train", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    for option in ("--treebank", "--C", "--lam", "--steps", "--loss", "--step-rule", "--batch-size", "--dim"):
        assert option in result.stdout
    assert "--time-limit" in result.stdout


def write_tiny_treebank(folder: pathlib.Path) -> pathlib.Path:
    """The 30 sample sentences cut into train (20), dev (5) and test (5) files in ``folder`` (created)."""
    blocks = [block for block in SAMPLE.read_text().split("\n\n") if block.strip()]
    folder.mkdir()
    for split, part in (("train", blocks[:20]), ("dev", blocks[20:25]), ("test", blocks[25:])):
        (folder / f"en_tiny-ud-{split}.conllu").write_text("\n\n".join(part) + "\n\n")
    return folder


def cli_module() -> types.ModuleType:
    """``examples/tracenorm_parser.py`` imported as the module ``tracenorm_parser``."""
    sys.path.insert(0, str(CLI.parent))
    try:
        import tracenorm_parser
    finally:
        sys.path.remove(str(CLI.parent))
    return tracenorm_parser


@pytest.fixture
def tiny_treebank(tmp_path):
    return write_tiny_treebank(tmp_path / "treebank")


def test_cli_train_evaluate_and_sweep_write_their_files(tiny_treebank, tmp_path, capsys):
    tracenorm_parser = cli_module()
    logdir = tmp_path / "run"
    common = ["--treebank", str(tiny_treebank), "--steps", "3", "--dim", "16", "--loss", "hinge"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert tracenorm_parser.main(["train", *common, "--C", "2", "--logdir", str(logdir)]) == 0
        assert tracenorm_parser.main(["evaluate", "--logdir", str(logdir), "--split", "test"]) == 0
        sweep = tmp_path / "sweep"
        assert tracenorm_parser.main(["sweep", *common, "--Cs", "1,4", "--logdir", str(sweep)]) == 0
    with open(logdir / "progress.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 3
    for name in ("rank.png", "objective_gap.png", "checkpoint.npz", "final.json", "eval_test.json"):
        assert (logdir / name).is_file(), name
    assert (logdir / "rank.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((logdir / "final.json").read_text())["dev"]["tokens"] > 0
    with open(sweep / "sweep.csv") as handle:
        assert [float(row["C"]) for row in csv.DictReader(handle)] == [1.0, 4.0]
    assert (sweep / "uas_vs_C.png").is_file() and (sweep / "C_4" / "progress.csv").is_file()
    assert '"split": "test"' in capsys.readouterr().out


def test_cli_time_limit_stops_with_a_checkpoint_and_the_same_command_resumes(tiny_treebank, tmp_path, capsys):
    cli = cli_module()
    logdir = tmp_path / "run"
    command = ["train", "--treebank", str(tiny_treebank), "--steps", "4", "--dim", "16", "--C", "2"]
    command += ["--checkpoint-every", "10", "--logdir", str(logdir), "--time-limit", "1e-9"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(command) == 0  # the limit passes during the first step
        assert not (logdir / "final.json").exists() and (logdir / "checkpoint.npz").is_file()
        assert tn.load_checkpoint(logdir / "checkpoint.npz")[1] == 1
        assert "Time limit of 1e-09 min reached after step 1 of 4" in capsys.readouterr().err
        assert cli.main(command[:-2]) == 0  # resumed, no limit
    with open(logdir / "progress.csv") as handle:
        assert [int(row["step"]) for row in csv.DictReader(handle)] == [1, 2, 3, 4]
    final = json.loads((logdir / "final.json").read_text())
    assert final["steps"] == 4 and final["peak_memory_mib"] > 0


def test_cli_frobenius_trains_and_evaluates_the_dense_baseline(tiny_treebank, tmp_path, capsys):
    cli = cli_module()
    logdir = tmp_path / "frobenius"
    command = ["frobenius", "--treebank", str(tiny_treebank), "--steps", "3", "--dim", "8", "--mu", "1e-3"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main([*command, "--learning-rate", "0.1", "--logdir", str(logdir)]) == 0
    final = json.loads((logdir / "final.json").read_text())
    assert final["steps"] == 3 and final["num_parameters"] == 8**2 + NUM_DISTANCE_FEATURES
    assert final["dev"] == json.loads((logdir / "eval_dev.json").read_text())
    assert json.loads((logdir / "eval_test.json").read_text())["tokens"] > 0
    assert json.loads((logdir / "config.json").read_text())["frobenius"]["mu"] == 1e-3
    with open(logdir / "progress.csv") as handle:
        assert [row["step"] for row in csv.DictReader(handle)] == ["1", "2", "3"]
    assert '"test_uas"' in capsys.readouterr().out
    with pytest.raises(SystemExit, match="is a Frobenius run: it keeps no model"):
        cli.main(["evaluate", "--logdir", str(logdir), "--split", "test"])
