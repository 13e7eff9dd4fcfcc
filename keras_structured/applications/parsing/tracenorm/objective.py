r"""The objective ``F(A, b)``, the mean loss over the sentences, and its gradient.

With ``M`` the arborescence polytope and ``Y`` the gold arc indicators, the losses
(:data:`LOSSES`) are

===============  ============================================================  ============================
``loss``         value                                                         gradient w.r.t. ``S``
===============  ============================================================  ============================
``"sparsemap"``  ``max_{u in M} <S, u> - ||u||^2/2 - (<S, Y> - ||Y||^2/2)``    ``u* - Y``
``"hinge"``      ``max_{trees T} <S + cost, T> - <S, Y>``                      ``T_hat - Y`` (a subgradient)
===============  ============================================================  ============================

With ``R_s`` the gradient w.r.t. ``S_s``,

    grad_A F = (1/m) sum_s Phi_s^T R_s Phi_s,     grad_b F = (1/m) sum_s sum_{i,j} R_s[i,j] e_{D_s[i,j]},

the first a :class:`~scipy.sparse.linalg.LinearOperator` (:func:`gradient_operator`),
never formed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from keras_structured.applications.parsing.bilinear_features import NUM_DISTANCE_FEATURES, SentenceFeatures
from keras_structured.applications.parsing.tracenorm.arc_batches import ArcBatch, arc_scores
from keras_structured.applications.parsing.tracenorm.models import Model
from keras_structured.engine import DependencyTreeStructure, solve
from keras_structured.engine.dependency_tree import best_trees
from keras_structured.validation import check_one_of

LOSSES = ("sparsemap", "hinge")


def _as_batch(data: ArcBatch | Sequence[SentenceFeatures]) -> ArcBatch:
    return data if isinstance(data, ArcBatch) else ArcBatch(data)


def _trees_indicator(heads: np.ndarray, size: int) -> np.ndarray:
    """``(b, size, size)`` arc indicators ``[head, dependent]`` of ``(b, size)`` heads (-1: none)."""
    arcs = np.zeros((heads.shape[0], size, size))
    b, d = np.nonzero(heads >= 0)
    arcs[b, heads[b, d], d] = 1.0
    return arcs


def example_losses(
    batch: ArcBatch, scores: list[np.ndarray], loss: str
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per-sentence losses (chunk order) and the gradients ``R`` w.r.t. the scores, per chunk."""
    losses, residuals = [], []
    for chunk, s in zip(batch.chunks, scores, strict=True):
        y = chunk.gold
        if loss == "sparsemap":
            # No Jacobian is needed: stop at the tolerance, not at the exact support (much faster
            # on the many near-ties of small scores).
            u = solve(DependencyTreeStructure(), s, lengths=chunk.lengths, exact_jacobian=False).u
            value = (
                np.einsum("bij,bij->b", s, u - y) - 0.5 * np.einsum("bij,bij->b", u, u) + 0.5 * chunk.lengths
            )
        else:
            augmented = s + (chunk.valid & (y == 0))
            u = _trees_indicator(best_trees(augmented, chunk.lengths), s.shape[1])
            value = np.einsum("bij,bij->b", augmented, u) - np.einsum("bij,bij->b", s, y)
        losses.append(value)
        residuals.append(u - y)
    return np.concatenate(losses), residuals


def gradient_operator(phi: sp.spmatrix, residual: sp.spmatrix, scale: float = 1.0) -> LinearOperator:
    """``G = scale * Phi^T R Phi`` as a ``(d, d)`` linear operator, never formed.

    ``v -> scale * Phi^T (R (Phi v))`` and ``w -> scale * Phi^T (R^T (Phi w))`` cost
    ``O(nnz(Phi) + nnz(R))`` each. For the gradient of the loss w.r.t. ``A``, ``Phi``
    stacks the sentences' token features and ``R`` is block-diagonal, one block
    ``dL/dS_s`` per sentence.

    Args:
        phi: ``(T, d)`` sparse token features.
        residual: ``(T, T)`` sparse matrix ``R``.
        scale: a factor (``1/m`` for a mean).

    Returns:
        A float64 :class:`~scipy.sparse.linalg.LinearOperator` of shape ``(d, d)``.

    Raises:
        ValueError: if the shapes do not fit.

    Example:
        >>> phi = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 2.0]]))
        >>> residual = sp.csr_matrix(np.array([[0.0, 1.0], [0.0, 0.0]]))
        >>> gradient_operator(phi, residual) @ np.array([0.0, 1.0])
        array([2., 0.])
    """
    phi, residual = sp.csr_matrix(phi), sp.csr_matrix(residual)
    if residual.shape != (phi.shape[0], phi.shape[0]):
        raise ValueError(
            f"residual must be (T, T) for phi of shape (T, d). Received: phi.shape={phi.shape}, "
            f"residual.shape={residual.shape}"
        )
    phi_t, residual_t = phi.T.tocsr(), residual.T.tocsr()

    def forward(x):
        return scale * (phi_t @ (residual @ (phi @ x)))

    def backward(x):
        return scale * (phi_t @ (residual_t @ (phi @ x)))

    d = phi.shape[1]
    return LinearOperator(
        (d, d), matvec=forward, rmatvec=backward, matmat=forward, rmatmat=backward, dtype=float
    )


@dataclasses.dataclass
class LossGradient:
    """The objective and its gradient at a model.

    Attributes:
        objective: ``F``, the mean loss over the sentences.
        losses: ``(m,)`` the losses, in the order of the sentences given.
        grad_A: ``grad_A F`` as a ``(d, d)`` :class:`~scipy.sparse.linalg.LinearOperator`.
        grad_distance_weights: ``(15,)`` ``grad_b F``, w.r.t. the distance weights ``b``.
        inner: ``<x, grad F>`` with ``x = (A, b)`` the model.
        residual: ``(T, T)`` block-diagonal sparse ``R / m`` (token order of the batch).
    """

    objective: float
    losses: np.ndarray
    grad_A: LinearOperator
    grad_distance_weights: np.ndarray
    inner: float
    residual: sp.csr_matrix


def objective_gradient(
    batch: ArcBatch, scores: list[np.ndarray], residuals: list[np.ndarray], losses: np.ndarray
):
    scale = 1.0 / len(batch)
    rows, columns, values = [], [], []
    grad_distance_weights = np.zeros(NUM_DISTANCE_FEATURES)
    inner = 0.0
    for chunk, s, r in zip(batch.chunks, scores, residuals, strict=True):
        b, i, j = np.nonzero(r)
        base = batch.offsets[chunk.start + b]
        rows.append(base + i)
        columns.append(base + j)
        values.append(r[b, i, j])
        grad_distance_weights += np.bincount(
            chunk.index[b, i, j], weights=r[b, i, j], minlength=NUM_DISTANCE_FEATURES
        )
        inner += float(np.einsum("bij,bij->", s, r))
    tokens = batch.phi.shape[0]
    residual = sp.csr_matrix(
        (scale * np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))),
        shape=(tokens, tokens),
    )
    unsorted = np.empty_like(losses)
    unsorted[batch.order] = losses
    return LossGradient(
        objective=float(losses.mean()),
        losses=unsorted,
        grad_A=gradient_operator(batch.phi, residual),
        grad_distance_weights=scale * grad_distance_weights,
        inner=scale * inner,
        residual=residual,
    )


def loss_and_gradient(
    model: Model, data: ArcBatch | Sequence[SentenceFeatures], loss: str = "sparsemap"
) -> LossGradient:
    """The objective ``F(A, b) = (1/m) sum_s loss(S_s, Y_s)`` and its gradient.

    See the module docstring for the losses (SparseMAP: ``u* - Y`` from
    :func:`keras_structured.engine.solve` on padded chunks with ``lengths``; hinge:
    ``T_hat - Y`` from ``best_trees`` on cost-augmented scores).

    Args:
        model: a :class:`TraceNormModel` or :class:`BilinearModel`.
        data: the sentences (:class:`SentenceFeatures`) or an :class:`ArcBatch` of them.
        loss: ``"sparsemap"`` or ``"hinge"``.

    Returns:
        A :class:`LossGradient`.

    Raises:
        ValueError: for an unknown loss, no sentence, a dimension mismatch, or scores
            that are NaN or infinite.

    Example:
        >>> from keras_structured.applications.parsing.bilinear_features import featurize
        >>> from keras_structured.applications.parsing.tracenorm import TraceNormModel
        >>> from keras_structured.applications.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> result = loss_and_gradient(TraceNormModel(dim=8), featurize([s], dim=8))
        >>> round(result.objective, 6), result.grad_A.shape
        (0.5, (8, 8))
    """
    loss = check_one_of("loss", loss, LOSSES)
    batch = _as_batch(data)
    scores = arc_scores(model, batch)
    _check_finite_scores(scores)
    losses, residuals = example_losses(batch, scores, loss)
    return objective_gradient(batch, scores, residuals, losses)


def _check_finite_scores(scores: list[np.ndarray]) -> None:
    if not all(np.isfinite(s).all() for s in scores):
        raise ValueError(
            "The model's arc scores must be finite. Received: scores with NaN or infinite values"
        )


def objective(model: Model, data: ArcBatch | Sequence[SentenceFeatures], loss: str = "sparsemap") -> float:
    """The mean loss ``F(A, b)`` over the sentences (see :func:`loss_and_gradient`).

    Args:
        model: a :class:`TraceNormModel` or :class:`BilinearModel`.
        data: the sentences or an :class:`ArcBatch`.
        loss: ``"sparsemap"`` or ``"hinge"``.

    Returns:
        The objective (NaN if some score is not finite).

    Example:
        >>> from keras_structured.applications.parsing.bilinear_features import featurize
        >>> from keras_structured.applications.parsing.tracenorm import TraceNormModel
        >>> from keras_structured.applications.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> objective(TraceNormModel(dim=8), featurize([s], dim=8), loss="hinge")  # both heads wrong
        2.0
    """
    loss = check_one_of("loss", loss, LOSSES)
    batch = _as_batch(data)
    scores = arc_scores(model, batch)
    if not all(np.isfinite(s).all() for s in scores):
        return float("nan")
    return float(example_losses(batch, scores, loss)[0].mean())
