"""The dense baseline: ``min F(A, b) + mu (||A||_F^2 + ||b||^2)`` by Adam.

:func:`train_frobenius` trains a
:class:`~keras_structured.applications.parsing.tracenorm.models.BilinearModel` (``d^2 + 15``
parameters) on the objective of :mod:`~keras_structured.applications.parsing.tracenorm.objective`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

import numpy as np

from keras_structured.applications.parsing.bilinear_features import SentenceFeatures
from keras_structured.applications.parsing.tracenorm.arc_batches import ArcBatch, arc_scores
from keras_structured.applications.parsing.tracenorm.models import BilinearModel, count_non_finite
from keras_structured.applications.parsing.tracenorm.objective import (
    LOSSES,
    example_losses,
    objective_gradient,
)
from keras_structured.divergence import DivergenceError
from keras_structured.validation import check_integer, check_number, check_one_of


@dataclasses.dataclass(frozen=True)
class FrobeniusConfig:
    """Settings of the baseline ``min F(A, b) + mu (||A||_F^2 + ||b||^2)`` by Adam.

    Attributes:
        mu: the penalty weight, a number >= 0.
        learning_rate: Adam's step, a number > 0.
        steps: Adam steps, an integer >= 0.
        loss: ``"sparsemap"`` or ``"hinge"``.
        batch_size: sentences per step (None: all).
        seed: seeds the minibatches.
        beta1, beta2, epsilon: Adam's constants.
    """

    mu: float = 1e-3
    learning_rate: float = 1e-2
    steps: int = 100
    loss: str = "sparsemap"
    batch_size: int | None = None
    seed: int = 0
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8

    def __post_init__(self) -> None:
        check_number("mu", self.mu, minimum=0.0)
        check_number("learning_rate", self.learning_rate, minimum=0.0, open_minimum=True)
        check_integer("steps", self.steps, minimum=0)
        check_one_of("loss", self.loss, LOSSES)
        check_integer("batch_size", self.batch_size, minimum=1, allow_none=True)
        check_integer("seed", self.seed, minimum=0)
        check_number("beta1", self.beta1, minimum=0.0, maximum=1.0, open_maximum=True)
        check_number("beta2", self.beta2, minimum=0.0, maximum=1.0, open_maximum=True)
        check_number("epsilon", self.epsilon, minimum=0.0, open_minimum=True)


def train_frobenius(
    train: Sequence[SentenceFeatures], config: FrobeniusConfig | None = None
) -> tuple[BilinearModel, list[dict]]:
    """The baseline: a dense ``A`` (``d^2`` parameters) trained by Adam in numpy.

    Minimises ``F(A, b) + mu (||A||_F^2 + ||b||_2^2)`` from ``A = 0, b = 0``. The
    gradient w.r.t. ``A`` is formed as a dense ``d x d`` array: fine for ``d`` up to a few
    thousand (``d = 2**12`` takes 128 MiB per copy, and Adam keeps three).

    Args:
        train: the training sentences' :class:`SentenceFeatures`.
        config: a :class:`FrobeniusConfig`.

    Returns:
        ``(model, history)``: records with ``step``, ``objective`` (loss plus penalty, at
        the point the step started from) and ``time``.

    Raises:
        ValueError: for no training sentence or bad settings.
        DivergenceError: if the objective or the weights become NaN or infinite (the
            message names the step).

    Example:
        >>> from keras_structured.applications.parsing.bilinear_features import featurize
        >>> from keras_structured.applications.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> config = FrobeniusConfig(steps=20, learning_rate=0.1)
        >>> model, history = train_frobenius(featurize([s], dim=8), config)
        >>> model.num_parameters, bool(history[-1]["objective"] < history[0]["objective"])
        (79, True)
    """
    config = FrobeniusConfig() if config is None else config
    if len(train) == 0:
        raise ValueError("The training treebank is empty: give at least one sentence. Received: 0 sentences")
    train = list(train)
    full = ArcBatch(train)
    model = BilinearModel(np.zeros((full.dim, full.dim)))
    moments = [np.zeros_like(model.matrix), np.zeros_like(model.distance_weights)]
    squares = [np.zeros_like(model.matrix), np.zeros_like(model.distance_weights)]
    history, elapsed = [], 0.0
    for k in range(config.steps):
        started = time.perf_counter()
        batch = full
        if config.batch_size is not None and config.batch_size < len(train):
            rng = np.random.default_rng([config.seed, k])
            batch = ArcBatch(
                [train[i] for i in np.sort(rng.choice(len(train), config.batch_size, replace=False))]
            )
        scores = arc_scores(model, batch)
        penalty = config.mu * (np.sum(model.matrix**2) + np.sum(model.distance_weights**2))
        value = objective_value = float("nan")
        if all(np.isfinite(s).all() for s in scores):
            losses, residuals = example_losses(batch, scores, config.loss)
            result = objective_gradient(batch, scores, residuals, losses)
            value = result.objective
            objective_value = value + penalty
        if not math.isfinite(objective_value):
            _diverged(f"The objective is not finite at step {k + 1}", f"objective={objective_value}")
        grad_matrix = (batch.phi.T @ result.residual @ batch.phi).toarray() + 2 * config.mu * model.matrix
        grads = [grad_matrix, result.grad_distance_weights + 2 * config.mu * model.distance_weights]
        for params, grad, m, v in zip(
            (model.matrix, model.distance_weights), grads, moments, squares, strict=True
        ):
            m *= config.beta1
            m += (1 - config.beta1) * grad
            v *= config.beta2
            v += (1 - config.beta2) * grad**2
            m_hat = m / (1 - config.beta1 ** (k + 1))
            v_hat = v / (1 - config.beta2 ** (k + 1))
            params -= config.learning_rate * m_hat / (np.sqrt(v_hat) + config.epsilon)
        bad = count_non_finite(model.matrix, model.distance_weights)
        if bad:
            _diverged(f"The weights are not finite after step {k + 1}", f"non_finite_values={bad}")
        elapsed += time.perf_counter() - started
        history.append({"step": k + 1, "objective": objective_value, "loss": value, "time": elapsed})
    return model, history


def _diverged(what: str, received: str) -> None:
    """Raise a :class:`DivergenceError`: ``what`` happened (it names the step)."""
    raise DivergenceError(f"{what}: training stops. Lower the learning rate. Received: {received}")
