r"""A trace-norm bilinear dependency parser, trained by Hazan's algorithm (Frank-Wolfe).

**Model.** A sentence ``w`` of ``n`` words has token features ``Phi`` (``(n + 1) x d``, row
0 the root; :mod:`~keras_structured.parsing.bilinear_features`) and the arc ``i -> j``
(head ``i``, dependent ``j``) the score

    S[i, j] = phi(w, i)^T A phi(w, j) + eta^T d(i, j),   i.e.   S = Phi A Phi^T + eta[D],

where ``D[i, j]`` is the index of the one distance feature of the arc. ``A`` is stored as a
list of rank-one factors ``A = sum_k c_k u_k v_k^T`` (``c_k > 0``), so the scores are
``(Phi U) diag(c) (Phi V)^T + eta[D]`` and the ``d x d`` matrix is never formed.

**Problem.** Over ``m`` training sentences with gold arc indicators ``Y_s``
(``Y[h, j] = 1`` for every gold arc ``h -> j``),

    min_{A, eta}  F(A, eta) = (1/m) sum_s loss(S_s(A, eta), Y_s)
    s.t.          ||A||_* + lam ||eta||_2 <= C,

the mean of the losses (the sum divided by ``m``: same minimiser, and a minibatch's mean
estimates it without bias). The losses, with ``M`` the arborescence polytope:

===============  ============================================================  ============================
``loss``         value                                                         gradient w.r.t. ``S``
===============  ============================================================  ============================
``"sparsemap"``  ``max_{u in M} <S, u> - ||u||^2/2 - (<S, Y> - ||Y||^2/2)``    ``u* - Y``
``"hinge"``      ``max_{trees T} <S + cost, T> - <S, Y>``                      ``T_hat - Y`` (a subgradient)
===============  ============================================================  ============================

``u* = SparseMAP(S)`` comes from :func:`keras_structured.engine.solve`; ``cost[h, j] = 1 -
Y[h, j]`` counts the words with a wrong head (Hamming cost) and ``T_hat`` is the best
cost-augmented tree (:func:`~keras_structured.engine.dependency_tree.best_trees`). Both
losses are convex in ``S``, hence in ``(A, eta)``; the SparseMAP loss is smooth (its
gradient ``u* - Y`` is 1-Lipschitz in ``S``), the hinge is not. With ``R_s`` the gradient
w.r.t. ``S_s``,

    grad_A F = (1/m) sum_s Phi_s^T R_s Phi_s,     grad_eta F = (1/m) sum_s sum_{i,j} R_s[i,j] e_{D_s[i,j]},

the first a :class:`~scipy.sparse.linalg.LinearOperator` (:func:`gradient_operator`).

**Frank-Wolfe (Hazan).** The feasible set is the ball of radius ``C`` of the norm
``N(A, eta) = ||A||_* + lam ||eta||``, whose dual norm is
``N*(G, g) = max(sigma_max(G), ||g|| / lam)``. The linear minimisation
``s = argmin_{N(s) <= C} <s, grad F(x)>`` (:func:`linear_minimizer`) therefore returns a
vertex: the rank-one atom ``(-C u_1 v_1^T, 0)`` from the top singular pair of ``grad_A``
when ``sigma_max(grad_A) >= ||grad_eta|| / lam``, else ``(0, -(C/lam) grad_eta /
||grad_eta||)``, and ``<s, grad F> = -C N*(grad F)``. The Frank-Wolfe gap

    gap(x) = <x - s, grad F(x)> = <x, grad F(x)> + C N*(grad F(x))  >=  F(x) - min F

certifies the iterate (by convexity, for any subgradient). A step moves to
``x + gamma (s - x)``: the weights ``c`` and ``eta`` shrink by ``1 - gamma`` and the atom
joins with weight ``gamma C``, so ``sum_k c_k + lam ||eta|| <= C`` stays true by induction
(``sum_k c_k`` bounds ``||A||_*``), and ``A`` has at most ``k`` factors after ``k`` steps.

Step rules (:data:`STEP_RULES`): ``"standard"`` takes ``gamma_k = 2 / (k + 2)``
(``k = 0, 1, ...``; the first step lands on the atom), for which
``F(x_k) - min F <= 2 C_f / (k + 2)`` (Jaggi 2013; ``C_f`` the curvature constant).
``"line_search"`` minimises ``phi(gamma) = F(x + gamma (s - x))`` on ``[0, 1]``
(:func:`_line_search`); for the SparseMAP loss ``phi`` is convex with a derivative
``phi'(gamma) = (1/m) sum_s <Delta_s, u*_s(gamma) - Y_s>`` (``Delta_s`` the change of the
scores along the direction) that is nondecreasing, piecewise linear and ``Q``-Lipschitz with
``Q = (1/m) sum_s ||Delta_s||^2``. The search starts at the short step
``min(1, gap / Q)``, where ``phi' <= 0`` (so ``phi`` decreased), doubles until ``phi' > 0``
or ``gamma = 1``, then finds the root of ``phi'`` by regula falsi (Illinois), keeping the
best point evaluated: the objective never increases (up to SparseMAP's tolerance).

Stochastic variant: with ``batch_size``, each step uses a seeded random minibatch (the
same for a given ``(seed, step)``, so resumed runs repeat it) and the standard step; its
objective and gap are the minibatch's. A constant batch size does not converge to the
minimiser (stochastic Frank-Wolfe needs growing batches, Hazan & Luo 2016).

**Storage.** After ``k`` steps the model stores ``k (2 d + 1) + 15`` numbers
(:attr:`TraceNormModel.num_parameters`; fewer after :meth:`TraceNormModel.compress`),
against ``d^2 + 15`` for the dense baseline :class:`BilinearModel` trained by
:func:`train_frobenius` (``min F + mu (||A||_F^2 + ||eta||^2)`` by Adam). At ``d = 2**14``
that is 268 million numbers (2 GiB) for the dense ``A``, 3.3 million for 100 factors.

**Top singular pair** (:func:`top_singular_triplet`): ``"dense"`` forms ``grad_A``
(``d`` products) and calls LAPACK: exact, for ``d <= 256`` (``"auto"``); ``"svds"`` calls
``scipy.sparse.linalg.svds(k=1)`` (ARPACK, Lanczos on ``G^T G``) with a relative tolerance
``svd_tol = 1e-6`` on ``sigma_max`` and a start vector drawn from ``seed`` (so runs repeat
exactly). An approximate linear step is enough for Frank-Wolfe's rate as long as its error
stays below ``O(C_f / k)`` (Jaggi 2013); the gap is then underestimated by at most
``C sigma_max svd_tol``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import pathlib
import time
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackError, LinearOperator, svds

from keras_structured._validation import check_integer, check_number, check_one_of
from keras_structured.engine import DependencyTreeStructure, solve
from keras_structured.engine.dependency_tree import best_trees
from keras_structured.parsing.bilinear_features import NUM_DISTANCE_FEATURES, SentenceFeatures
from keras_structured.parsing.evaluation import attachment_scores

__all__ = [
    "CHECKPOINT_NAME",
    "DENSE_SVD_MAX_DIM",
    "LOSSES",
    "PROGRESS_COLUMNS",
    "STEP_RULES",
    "SVD_METHODS",
    "ArcBatch",
    "Atom",
    "BilinearModel",
    "FrobeniusConfig",
    "HazanConfig",
    "HazanTrainer",
    "LossGradient",
    "TraceNormModel",
    "evaluate",
    "gradient_operator",
    "linear_minimizer",
    "load_checkpoint",
    "loss_and_gradient",
    "objective",
    "parse",
    "save_checkpoint",
    "top_singular_triplet",
    "train_frobenius",
    "train_tracenorm",
]

LOSSES = ("sparsemap", "hinge")
STEP_RULES = ("standard", "line_search")
SVD_METHODS = ("auto", "dense", "svds")
#: Largest ``d`` for which ``svd="auto"`` forms ``grad_A`` and calls LAPACK.
DENSE_SVD_MAX_DIM = 256
#: The file name of a trainer's checkpoint in its ``logdir``.
CHECKPOINT_NAME = "checkpoint.npz"
#: The columns of ``progress.csv``, one row per step (see :class:`HazanTrainer`).
PROGRESS_COLUMNS = (
    "step",
    "objective",
    "gap",
    "rank",
    "step_size",
    "atom",
    "dual_norm",
    "norm_bound",
    "time",
    "dev_uas",
)
# Config fields that may change when a run resumes: they do not change the iterates.
_RESUMABLE_FIELDS = ("steps", "eval_every", "checkpoint_every")


# ---------------------------------------------------------------------------------------
# Models


class TraceNormModel:
    """The bilinear parser ``S = Phi A Phi^T + eta[D]`` with ``A = sum_k c_k u_k v_k^T``.

    Starts at ``A = 0, eta = 0``. The factors are stored as rows of two ``(rank, d)``
    arrays (``u_k`` scores the head, ``v_k`` the dependent): ``O(rank d)`` memory.

    Args:
        dim: the feature dimension ``d``, an integer >= 1.

    Raises:
        ValueError: if ``dim`` is not an integer >= 1.

    Example:
        >>> model = TraceNormModel(dim=3)
        >>> model.add_factor(2.0, np.array([1.0, 0, 0]), np.array([0, 1.0, 0]))
        >>> model.dense_matrix()[0].tolist(), model.rank, model.num_parameters
        ([0.0, 2.0, 0.0], 1, 22)
    """

    def __init__(self, dim: int) -> None:
        self.dim = check_integer("dim", dim, minimum=1)
        self.eta = np.zeros(NUM_DISTANCE_FEATURES)
        self._weights = np.zeros(0)
        self._left = np.zeros((0, self.dim))
        self._right = np.zeros((0, self.dim))
        self._rank = 0

    @property
    def rank(self) -> int:
        """The number of stored factors (an upper bound on the rank of ``A``)."""
        return self._rank

    @property
    def weights(self) -> np.ndarray:
        """``(rank,)`` the weights ``c_k`` (views of the storage)."""
        return self._weights[: self._rank]

    @property
    def left(self) -> np.ndarray:
        """``(rank, d)`` the head vectors ``u_k``."""
        return self._left[: self._rank]

    @property
    def right(self) -> np.ndarray:
        """``(rank, d)`` the dependent vectors ``v_k``."""
        return self._right[: self._rank]

    @property
    def num_parameters(self) -> int:
        """The numbers stored: ``rank (2 d + 1) + len(eta)``."""
        return self._rank * (2 * self.dim + 1) + self.eta.size

    def norm_bound(self, lam: float) -> float:
        """``sum_k c_k + lam ||eta||``, an upper bound on ``||A||_* + lam ||eta||``."""
        return float(self.weights.sum() + lam * np.linalg.norm(self.eta))

    def add_factor(self, weight: float, left: np.ndarray, right: np.ndarray) -> None:
        """Add ``weight * left right^T`` to ``A`` (amortised O(d): the storage doubles)."""
        if self._rank == len(self._weights):
            capacity = max(4, 2 * self._rank)
            for name in ("_weights", "_left", "_right"):
                old = getattr(self, name)
                new = np.zeros((capacity,) + old.shape[1:])
                new[: self._rank] = old[: self._rank]
                setattr(self, name, new)
        self._weights[self._rank] = weight
        self._left[self._rank] = left
        self._right[self._rank] = right
        self._rank += 1

    def scale(self, factor: float) -> None:
        """Multiply ``A`` and ``eta`` by ``factor`` (``0`` drops every factor)."""
        self._weights[: self._rank] *= factor
        self.eta *= factor
        if factor == 0:
            self._rank = 0

    def set_factors(self, weights: np.ndarray, left: np.ndarray, right: np.ndarray) -> None:
        """Replace the factors by ``(weights, left, right)``, shapes ``(r,), (r, d), (r, d)``."""
        weights, left, right = (np.array(x, dtype=np.float64) for x in (weights, left, right))
        if left.shape != (len(weights), self.dim) or right.shape != left.shape:
            raise ValueError(
                f"Factors must have shapes (r,), (r, {self.dim}), (r, {self.dim}). Received: "
                f"weights.shape={weights.shape}, left.shape={left.shape}, right.shape={right.shape}"
            )
        self._weights, self._left, self._right, self._rank = weights, left, right, len(weights)

    def copy(self) -> TraceNormModel:
        """An independent copy."""
        model = TraceNormModel(self.dim)
        model.set_factors(self.weights, self.left, self.right)
        model.eta = self.eta.copy()
        return model

    def compress(self, rtol: float = 1e-12) -> TraceNormModel:
        """Merge the factors by a thin SVD of ``A``: the same ``A`` up to rounding.

        With ``U = Q_u R_u`` and ``V = Q_v R_v`` (QR of the stacked factors), ``A = Q_u
        (R_u diag(c) R_v^T) Q_v^T``; the SVD ``P diag(s) Q^T`` of the ``r x r`` core gives
        orthonormal factors ``Q_u P``, ``Q_v Q`` with weights ``s``, so afterwards
        ``sum_k c_k = ||A||_*`` exactly. Singular values at most ``rtol * s_max`` are
        dropped. Costs ``O(d r^2)``.

        Args:
            rtol: relative threshold for dropping singular values, a number >= 0.

        Returns:
            The model itself.

        Example:
            >>> model = TraceNormModel(dim=2)
            >>> for _ in range(3):
            ...     model.add_factor(1.0, np.array([1.0, 0]), np.array([0, 1.0]))
            >>> model.compress().rank, model.weights.round(12).tolist()
            (1, [3.0])
        """
        rtol = check_number("rtol", rtol, minimum=0.0)
        if self._rank == 0:
            return self
        q_u, r_u = np.linalg.qr(self.left.T)
        q_v, r_v = np.linalg.qr(self.right.T)
        p, s, q_t = np.linalg.svd((r_u * self.weights) @ r_v.T)
        keep = s > rtol * s[0]
        self.set_factors(s[keep], (q_u @ p[:, keep]).T, (q_v @ q_t[keep].T).T)
        return self

    def dense_matrix(self) -> np.ndarray:
        """``A`` as a ``(d, d)`` array (for small ``d`` and tests)."""
        return (self.left.T * self.weights) @ self.right

    def token_factors(self, phi: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        """``(Phi U diag(c), Phi V)``: the bilinear scores of the tokens are their products."""
        return phi @ (self.left.T * self.weights), phi @ self.right.T

    def scores(self, features: SentenceFeatures) -> np.ndarray:
        """The ``(n + 1, n + 1)`` arc scores ``[head, dependent]`` of one sentence.

        Entries that are not arcs (column 0, the diagonal) are zero.
        """
        return _sentence_scores(self, features)

    def state(self) -> dict[str, np.ndarray]:
        """The arrays that define the model (for checkpoints)."""
        return {
            "weights": self.weights.copy(),
            "left": self.left.copy(),
            "right": self.right.copy(),
            "eta": self.eta.copy(),
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> TraceNormModel:
        """The model of :meth:`state`."""
        model = cls(int(np.shape(state["left"])[1]))
        model.set_factors(state["weights"], state["left"], state["right"])
        model.eta = np.array(state["eta"], dtype=np.float64)
        return model


class BilinearModel:
    """The bilinear parser with a dense ``A`` (``d^2 + 15`` parameters): the baseline.

    Args:
        matrix: ``(d, d)`` the matrix ``A``.
        eta: ``(15,)`` the distance weights (default zeros).

    Raises:
        ValueError: for a matrix that is not square and non-empty, or a wrong ``eta`` shape.

    Example:
        >>> BilinearModel(np.eye(4)).num_parameters
        31
    """

    def __init__(self, matrix: np.ndarray, eta: np.ndarray | None = None) -> None:
        self.matrix = np.array(matrix, dtype=np.float64)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != self.matrix.shape[1] or self.matrix.size == 0:
            raise ValueError(
                f"matrix must be a non-empty square (d, d) array. Received: shape={self.matrix.shape}"
            )
        self.eta = np.zeros(NUM_DISTANCE_FEATURES) if eta is None else np.array(eta, dtype=np.float64)
        if self.eta.shape != (NUM_DISTANCE_FEATURES,):
            raise ValueError(
                f"eta must have shape ({NUM_DISTANCE_FEATURES},). Received: eta.shape={self.eta.shape}"
            )

    @property
    def dim(self) -> int:
        """The feature dimension ``d``."""
        return self.matrix.shape[0]

    @property
    def num_parameters(self) -> int:
        """``d^2 + len(eta)``."""
        return self.matrix.size + self.eta.size

    def dense_matrix(self) -> np.ndarray:
        """``A``."""
        return self.matrix

    def token_factors(self, phi: sp.csr_matrix) -> tuple[np.ndarray, sp.csr_matrix]:
        """``(Phi A, Phi)``: the bilinear scores of the tokens are their products."""
        return np.asarray(phi @ self.matrix), phi

    def scores(self, features: SentenceFeatures) -> np.ndarray:
        """The ``(n + 1, n + 1)`` arc scores ``[head, dependent]`` of one sentence (see
        :meth:`TraceNormModel.scores`)."""
        return _sentence_scores(self, features)


Model = TraceNormModel | BilinearModel


def _bilinear_block(left: np.ndarray, right) -> np.ndarray:
    """``left @ right.T`` for a dense or sparse ``right``."""
    if sp.issparse(right):
        return np.asarray((right @ left.T).T)
    return left @ right.T


def _sentence_scores(model: Model, features: SentenceFeatures) -> np.ndarray:
    _check_dims(model, [features])
    left, right = model.token_factors(features.phi)
    index = features.distance
    scores = _bilinear_block(left, right) + model.eta[index]
    scores[index < 0] = 0.0
    return scores


def _check_dims(model: Model, sentences: Sequence[SentenceFeatures]) -> None:
    dims = {s.dim for s in sentences}
    if dims - {model.dim}:
        raise ValueError(
            f"The sentences' features must have the model's dimension d={model.dim}. "
            f"Received: feature dimensions {sorted(dims)}"
        )


# ---------------------------------------------------------------------------------------
# Sentences prepared for batched scoring


@dataclasses.dataclass
class _Chunk:
    """Sentences ``start:stop`` of an :class:`ArcBatch` (tokens ``token_start:token_stop``),
    padded to ``size = max n + 1``: distance indices (``-1`` off arcs and in padding),
    gold indicators, numbers of words."""

    start: int
    stop: int
    token_start: int
    token_stop: int
    lengths: np.ndarray
    index: np.ndarray
    gold: np.ndarray

    @property
    def valid(self) -> np.ndarray:
        return self.index >= 0


class ArcBatch:
    """Sentences stacked and cut into chunks of similar lengths, ready to score and solve.

    The sentences are kept in the order given; chunks of at most ``chunk_size``
    consecutive sentences (by increasing length) are padded to their longest sentence,
    which is what :func:`keras_structured.engine.solve` and ``best_trees`` receive
    together with ``lengths``.

    Args:
        sentences: :class:`SentenceFeatures` of one dimension ``d``.
        chunk_size: sentences per padded chunk, an integer >= 1.

    Raises:
        ValueError: for no sentence, mixed dimensions or a bad ``chunk_size``.
    """

    def __init__(self, sentences: Sequence[SentenceFeatures], chunk_size: int = 64) -> None:
        chunk_size = check_integer("chunk_size", chunk_size, minimum=1)
        if len(sentences) == 0:
            raise ValueError(
                "An empty treebank cannot be scored: give at least one sentence. Received: 0 sentences"
            )
        dims = {s.dim for s in sentences}
        if len(dims) != 1:
            raise ValueError(f"All sentences must have the same feature dimension. Received: {sorted(dims)}")
        self.dim = dims.pop()
        lengths = np.array([s.length for s in sentences])
        self.order = np.argsort(lengths, kind="stable")  # chunk position -> sentence index
        self.sentences = [sentences[i] for i in self.order]
        self.phi = sp.vstack([s.phi for s in self.sentences], format="csr")
        self.offsets = np.concatenate([[0], np.cumsum(lengths[self.order] + 1)])
        self.chunks = []
        for start in range(0, len(sentences), chunk_size):
            stop = min(start + chunk_size, len(sentences))
            chunk_lengths = lengths[self.order[start:stop]]
            size = int(chunk_lengths.max()) + 1
            index = np.full((stop - start, size, size), -1, dtype=np.int64)
            gold = np.zeros((stop - start, size, size))
            for b, s in enumerate(self.sentences[start:stop]):
                n1 = s.length + 1
                index[b, :n1, :n1] = s.distance
                gold[b, :n1, :n1] = s.gold_arcs()
            self.chunks.append(
                _Chunk(
                    start, stop, int(self.offsets[start]), int(self.offsets[stop]), chunk_lengths, index, gold
                )
            )

    def __len__(self) -> int:
        return len(self.sentences)


def _as_batch(data: ArcBatch | Sequence[SentenceFeatures]) -> ArcBatch:
    return data if isinstance(data, ArcBatch) else ArcBatch(data)


def _scores(model: Model, batch: ArcBatch) -> list[np.ndarray]:
    """The padded ``(b, size, size)`` scores of every chunk (zero off arcs)."""
    if model.dim != batch.dim:
        raise ValueError(
            f"The sentences' features must have the model's dimension d={model.dim}. "
            f"Received: feature dimension {batch.dim}"
        )
    result = []
    for chunk in batch.chunks:
        left, right = model.token_factors(batch.phi[chunk.token_start : chunk.token_stop])
        scores = model.eta[chunk.index]
        for b in range(chunk.stop - chunk.start):
            lo = batch.offsets[chunk.start + b] - chunk.token_start
            n1 = chunk.lengths[b] + 1
            scores[b, :n1, :n1] += _bilinear_block(left[lo : lo + n1], right[lo : lo + n1])
        scores[~chunk.valid] = 0.0
        result.append(scores)
    return result


def _trees_indicator(heads: np.ndarray, size: int) -> np.ndarray:
    """``(b, size, size)`` arc indicators ``[head, dependent]`` of ``(b, size)`` heads (-1: none)."""
    arcs = np.zeros((heads.shape[0], size, size))
    b, d = np.nonzero(heads >= 0)
    arcs[b, heads[b, d], d] = 1.0
    return arcs


def _losses(batch: ArcBatch, scores: list[np.ndarray], loss: str) -> tuple[np.ndarray, list[np.ndarray]]:
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
        grad_eta: ``(15,)`` ``grad_eta F``.
        inner: ``<x, grad F>`` with ``x = (A, eta)`` the model.
        residual: ``(T, T)`` block-diagonal sparse ``R / m`` (token order of the batch).
    """

    objective: float
    losses: np.ndarray
    grad_A: LinearOperator
    grad_eta: np.ndarray
    inner: float
    residual: sp.csr_matrix


def _gradient(batch: ArcBatch, scores: list[np.ndarray], residuals: list[np.ndarray], losses: np.ndarray):
    scale = 1.0 / len(batch)
    rows, columns, values = [], [], []
    grad_eta = np.zeros(NUM_DISTANCE_FEATURES)
    inner = 0.0
    for chunk, s, r in zip(batch.chunks, scores, residuals, strict=True):
        b, i, j = np.nonzero(r)
        base = batch.offsets[chunk.start + b]
        rows.append(base + i)
        columns.append(base + j)
        values.append(r[b, i, j])
        grad_eta += np.bincount(chunk.index[b, i, j], weights=r[b, i, j], minlength=NUM_DISTANCE_FEATURES)
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
        grad_eta=scale * grad_eta,
        inner=scale * inner,
        residual=residual,
    )


def loss_and_gradient(
    model: Model, data: ArcBatch | Sequence[SentenceFeatures], loss: str = "sparsemap"
) -> LossGradient:
    """The objective ``F(A, eta) = (1/m) sum_s loss(S_s, Y_s)`` and its gradient.

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
        >>> from keras_structured.parsing.bilinear_features import featurize
        >>> from keras_structured.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> result = loss_and_gradient(TraceNormModel(dim=8), featurize([s], dim=8))
        >>> round(result.objective, 6), result.grad_A.shape
        (0.5, (8, 8))
    """
    loss = check_one_of("loss", loss, LOSSES)
    batch = _as_batch(data)
    scores = _scores(model, batch)
    _check_finite_scores(scores)
    losses, residuals = _losses(batch, scores, loss)
    return _gradient(batch, scores, residuals, losses)


def _check_finite_scores(scores: list[np.ndarray]) -> None:
    if not all(np.isfinite(s).all() for s in scores):
        raise ValueError(
            "The model's arc scores must be finite. Received: scores with NaN or infinite values"
        )


def objective(model: Model, data: ArcBatch | Sequence[SentenceFeatures], loss: str = "sparsemap") -> float:
    """The mean loss ``F(A, eta)`` over the sentences (see :func:`loss_and_gradient`).

    Args:
        model: a :class:`TraceNormModel` or :class:`BilinearModel`.
        data: the sentences or an :class:`ArcBatch`.
        loss: ``"sparsemap"`` or ``"hinge"``.

    Returns:
        The objective (NaN if some score is not finite).

    Example:
        >>> from keras_structured.parsing.bilinear_features import featurize
        >>> from keras_structured.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> objective(TraceNormModel(dim=8), featurize([s], dim=8), loss="hinge")  # both heads wrong
        2.0
    """
    loss = check_one_of("loss", loss, LOSSES)
    batch = _as_batch(data)
    scores = _scores(model, batch)
    if not all(np.isfinite(s).all() for s in scores):
        return float("nan")
    return float(_losses(batch, scores, loss)[0].mean())


def parse(model: Model, sentences: Sequence[SentenceFeatures], chunk_size: int = 64) -> list[np.ndarray]:
    """The highest-scoring non-projective tree of every sentence (Chu-Liu-Edmonds).

    Args:
        model: a :class:`TraceNormModel` or :class:`BilinearModel`.
        sentences: the sentences' :class:`SentenceFeatures`.
        chunk_size: sentences decoded per padded batch.

    Returns:
        One ``(n + 1,)`` head vector per sentence (``-1`` at the root), in order.

    Raises:
        ValueError: for no sentence or a dimension mismatch.

    Example:
        >>> from keras_structured.parsing.bilinear_features import featurize
        >>> from keras_structured.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> model = TraceNormModel(dim=8)
        >>> model.eta[0] = 1.0  # favour a head just before its dependent
        >>> parse(model, featurize([s], dim=8))[0].tolist()
        [-1, 0, 1]
    """
    batch = ArcBatch(sentences, chunk_size)
    heads: list[np.ndarray] = [np.empty(0)] * len(batch)
    for chunk, s in zip(batch.chunks, _scores(model, batch), strict=True):
        trees = best_trees(s, chunk.lengths)
        for b in range(chunk.stop - chunk.start):
            heads[batch.order[chunk.start + b]] = trees[b, : chunk.lengths[b] + 1]
    return heads


def evaluate(model: Model, sentences: Sequence[SentenceFeatures]) -> dict[str, float | int]:
    """Unlabeled attachment scores of the parsed sentences (see
    :func:`~keras_structured.parsing.evaluation.attachment_scores`).

    Args:
        model: a :class:`TraceNormModel` or :class:`BilinearModel`.
        sentences: the sentences' :class:`SentenceFeatures` with gold heads and tags.

    Returns:
        ``{"uas", "uas_no_punct", "tokens", "tokens_no_punct"}``.

    Example:
        >>> from keras_structured.parsing.bilinear_features import featurize
        >>> from keras_structured.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> evaluate(TraceNormModel(dim=8), featurize([s], dim=8))["tokens"]
        2
    """
    predicted = parse(model, sentences)
    return attachment_scores(predicted, [s.heads for s in sentences], [s.tags for s in sentences])


# ---------------------------------------------------------------------------------------
# The linear minimisation over the ball


def top_singular_triplet(
    operator: LinearOperator | np.ndarray, method: str = "auto", tol: float = 1e-6, seed: int = 0
) -> tuple[float, np.ndarray, np.ndarray]:
    """The largest singular value of a square operator and its singular vectors.

    Solves ``max_{||u|| = ||v|| = 1} u^T G v``.

    Args:
        operator: ``(d, d)`` a linear operator or an array.
        method: ``"dense"`` (form ``G``, LAPACK: exact), ``"svds"`` (ARPACK with relative
            tolerance ``tol``) or ``"auto"`` (dense for ``d <= DENSE_SVD_MAX_DIM``).
        tol: ARPACK's relative tolerance on the singular value, a number >= 0 (0: machine
            precision).
        seed: seeds ARPACK's start vector.

    Returns:
        ``(sigma, u, v)`` with ``G v = sigma u`` (``sigma = 0`` and unit vectors for ``G = 0``).

    Raises:
        ValueError: for an unknown method or a bad ``tol``.

    Example:
        >>> sigma, u, v = top_singular_triplet(np.array([[0.0, 3.0], [1.0, 0.0]]))
        >>> float(sigma), np.abs(u).tolist(), np.abs(v).tolist()
        (3.0, [1.0, 0.0], [0.0, 1.0])
    """
    method = check_one_of("method", method, SVD_METHODS)
    tol = check_number("tol", tol, minimum=0.0)
    d = operator.shape[1]
    if method == "auto":
        method = "dense" if d <= DENSE_SVD_MAX_DIM else "svds"
    if method == "svds" and d >= 3:
        start = np.random.default_rng(seed).standard_normal(d)
        try:
            u, s, vt = svds(operator, k=1, tol=tol, v0=start, solver="arpack")
        except ArpackError:  # G^T G v0 = 0 for a random v0: G = 0
            start /= np.linalg.norm(start)
            return 0.0, start, start
        return float(s[0]), u[:, 0], vt[0]
    matrix = operator if isinstance(operator, np.ndarray) else operator @ np.eye(d)
    u, s, vt = np.linalg.svd(matrix)
    return float(s[0]), u[:, 0], vt[0]


@dataclasses.dataclass(frozen=True)
class Atom:
    """A vertex ``s = argmin_{||A||_* + lam ||eta|| <= C} <s, grad F>`` of the ball.

    Attributes:
        kind: ``"A"`` for ``s = (C * left right^T, 0)``, ``"eta"`` for ``s = (0, eta)``.
        left: ``(d,)`` unit vector (``-u_1``), or None.
        right: ``(d,)`` unit vector (``v_1``), or None.
        eta: ``(15,)`` the ``eta`` part of ``s`` (zeros for an ``"A"`` atom).
        sigma: ``sigma_max(grad_A)``.
        dual_norm: ``max(sigma_max(grad_A), ||grad_eta|| / lam)``; ``<s, grad F> = -C dual_norm``.
    """

    kind: str
    left: np.ndarray | None
    right: np.ndarray | None
    eta: np.ndarray
    sigma: float
    dual_norm: float


def linear_minimizer(
    grad_A: LinearOperator | np.ndarray,
    grad_eta: np.ndarray,
    C: float,
    lam: float,
    svd: str = "auto",
    svd_tol: float = 1e-6,
    seed: int = 0,
) -> Atom:
    """Frank-Wolfe's linear step: ``argmin <s, grad>`` over ``||A||_* + lam ||eta||_2 <= C``.

    The minimum is ``-C max(sigma_max(grad_A), ||grad_eta|| / lam)`` (the dual norm), at
    ``(-C u_1 v_1^T, 0)`` or ``(0, -(C / lam) grad_eta / ||grad_eta||)``, whichever
    term is larger (``A`` on ties).

    Args:
        grad_A: ``(d, d)`` the gradient w.r.t. ``A`` (operator or array).
        grad_eta: ``(15,)`` the gradient w.r.t. ``eta``.
        C: the radius, a number > 0.
        lam: the weight of ``||eta||``, a number > 0.
        svd: ``"auto"``, ``"dense"`` or ``"svds"`` (see :func:`top_singular_triplet`).
        svd_tol: ARPACK's relative tolerance.
        seed: seeds ARPACK's start vector.

    Returns:
        An :class:`Atom`.

    Raises:
        ValueError: for ``C <= 0``, ``lam <= 0`` or an unknown ``svd``.

    Example:
        >>> atom = linear_minimizer(np.diag([2.0, 1.0]), np.full(15, 0.1), C=3.0, lam=1.0)
        >>> atom.kind, atom.dual_norm, (3.0 * np.outer(atom.left, atom.right))[0, 0]
        ('A', 2.0, np.float64(-3.0))
    """
    C = check_number("C", C, minimum=0.0, open_minimum=True)
    lam = check_number("lam", lam, minimum=0.0, open_minimum=True)
    sigma, u, v = top_singular_triplet(grad_A, svd, svd_tol, seed)
    eta_norm = float(np.linalg.norm(grad_eta))
    if sigma >= eta_norm / lam:
        return Atom("A", -u, v, np.zeros_like(grad_eta), sigma, sigma)
    return Atom("eta", None, None, -(C / lam) * grad_eta / eta_norm, sigma, eta_norm / lam)


def _atom_scores(atom: Atom, C: float, batch: ArcBatch) -> list[np.ndarray]:
    """The padded scores of every chunk under the atom ``s`` as a model."""
    if atom.kind == "A":
        head, dependent = C * (batch.phi @ atom.left), batch.phi @ atom.right
    result = []
    for chunk in batch.chunks:
        scores = atom.eta[chunk.index]
        if atom.kind == "A":
            for b in range(chunk.stop - chunk.start):
                lo, n1 = batch.offsets[chunk.start + b], chunk.lengths[b] + 1
                scores[b, :n1, :n1] += np.outer(head[lo : lo + n1], dependent[lo : lo + n1])
        scores[~chunk.valid] = 0.0
        result.append(scores)
    return result


def _line_search(
    batch: ArcBatch,
    scores: list[np.ndarray],
    target: list[np.ndarray],
    gap: float,
    loss: str,
    first: float,
    max_evals: int,
    rtol: float,
) -> tuple[float, int]:
    """``argmin_{gamma in [0, 1]} phi(gamma) = F(x + gamma (s - x))``, by the derivative.

    ``phi'(0) = -gap < 0``. From ``first`` (the short step for the SparseMAP loss, where
    ``phi' <= 0`` is guaranteed), steps double until ``phi' > 0`` or ``gamma = 1``; regula
    falsi with the Illinois rule then shrinks the bracket ``[a, b]`` (``phi'(a) <= 0 <
    phi'(b)``) until ``|phi'| <= rtol * gap`` or ``max_evals`` evaluations. Returns the
    evaluated ``gamma`` of smallest ``phi`` and the number of evaluations. For the SparseMAP
    loss that ``phi`` is at most ``phi(first) < phi(0)``; for the non-smooth hinge it may
    exceed ``phi(0)`` (no step decreases the objective when the direction is not a descent
    direction, and Frank-Wolfe must move).
    """
    scale = 1.0 / len(batch)
    delta = [t - s for s, t in zip(scores, target, strict=True)]

    def phi(gamma: float) -> tuple[float, float]:
        moved = [s + gamma * d for s, d in zip(scores, delta, strict=True)]
        losses, residuals = _losses(batch, moved, loss)
        slope = scale * sum(
            float(np.einsum("bij,bij->", d, r)) for d, r in zip(delta, residuals, strict=True)
        )
        return float(losses.mean()), slope

    a, slope_a, b, slope_b = 0.0, -gap, None, 0.0
    gamma, evaluated, side = first, [], 0
    for _ in range(max_evals):
        value, slope = phi(gamma)
        evaluated.append((value, gamma))
        if abs(slope) <= rtol * gap or (slope <= 0 and gamma >= 1.0):
            break
        if slope <= 0:
            a, slope_a = gamma, slope
            if side == -1 and b is not None:
                slope_b /= 2  # Illinois: the same end moved twice
            side = -1
        else:
            b, slope_b = gamma, slope
            if side == 1:
                slope_a /= 2
            side = 1
        if b is None:
            gamma = min(1.0, 2.0 * gamma)
        else:
            gamma = a - slope_a * (b - a) / (slope_b - slope_a)
    return min(evaluated)[1], len(evaluated)


# ---------------------------------------------------------------------------------------
# Checkpoints


def save_checkpoint(
    path: str | os.PathLike, model: TraceNormModel, step: int, history: list[dict], config: dict | None = None
) -> None:
    """Write the model, the step, the history and the config to an ``.npz`` file, atomically.

    Arrays ``weights, left, right, eta``; ``step``; ``history`` and ``config`` as JSON
    strings. The file is written beside ``path`` and renamed over it, so a crash never
    leaves a half-written checkpoint.

    Args:
        path: the file.
        model: the :class:`TraceNormModel`.
        step: the number of Frank-Wolfe steps taken.
        history: the per-step records (JSON-serialisable dicts).
        config: the run's settings (JSON-serialisable), or None.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "checkpoint.npz"
        >>> save_checkpoint(path, TraceNormModel(dim=4), 0, [])
        >>> load_checkpoint(path)[1]
        0
    """
    path = pathlib.Path(path)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as handle:
        np.savez(
            handle,
            **model.state(),
            step=np.int64(step),
            history=np.array(json.dumps(history)),
            config=np.array(json.dumps(config)),
        )
    os.replace(temporary, path)


def load_checkpoint(path: str | os.PathLike) -> tuple[TraceNormModel, int, list[dict], dict | None]:
    """Read a checkpoint of :func:`save_checkpoint`.

    Args:
        path: the ``.npz`` file.

    Returns:
        ``(model, step, history, config)``.

    Raises:
        FileNotFoundError: if the file does not exist.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint not found. Received: path='{path}'")
    with np.load(path) as data:
        model = TraceNormModel.from_state({key: data[key] for key in ("weights", "left", "right", "eta")})
        return model, int(data["step"]), json.loads(str(data["history"])), json.loads(str(data["config"]))


# ---------------------------------------------------------------------------------------
# Hazan's algorithm


@dataclasses.dataclass(frozen=True)
class HazanConfig:
    """The settings of a Frank-Wolfe (Hazan) run.

    Attributes:
        C: the radius of the ball ``||A||_* + lam ||eta||_2 <= C``, a number > 0.
        lam: the weight ``lam`` of ``||eta||_2`` in the ball, a number > 0.
        steps: the number of Frank-Wolfe steps, an integer >= 0.
        loss: ``"sparsemap"`` or ``"hinge"``.
        step_rule: ``"standard"`` (``2 / (k + 2)``) or ``"line_search"`` (full batch only).
        batch_size: sentences per step, drawn at random (the stochastic variant); None
            uses every training sentence (deterministic Frank-Wolfe).
        seed: seeds the minibatches and ARPACK's start vector.
        svd: how the top singular pair is computed: ``"auto"``, ``"dense"``, ``"svds"``.
        svd_tol: ARPACK's relative tolerance on ``sigma_max``.
        compress_every: merge the factors by a thin SVD every this many steps (0: never;
            the rank is then the number of steps that chose an ``A`` atom).
        eval_every: parse the dev sentences every this many steps (0: never).
        checkpoint_every: write ``checkpoint.npz`` every this many steps (and at the end).
        line_search_evals: most objective evaluations per line search.
        line_search_rtol: the line search stops when ``|phi'| <= rtol * gap``.
        chunk_size: sentences per padded batch given to the SparseMAP solver.
    """

    C: float = 10.0
    lam: float = 1.0
    steps: int = 100
    loss: str = "sparsemap"
    step_rule: str = "standard"
    batch_size: int | None = None
    seed: int = 0
    svd: str = "auto"
    svd_tol: float = 1e-6
    compress_every: int = 0
    eval_every: int = 0
    checkpoint_every: int = 10
    line_search_evals: int = 10
    line_search_rtol: float = 1e-3
    chunk_size: int = 64

    def __post_init__(self) -> None:
        check_number("C", self.C, minimum=0.0, open_minimum=True)
        check_number("lam", self.lam, minimum=0.0, open_minimum=True)
        check_integer("steps", self.steps, minimum=0)
        check_one_of("loss", self.loss, LOSSES)
        check_one_of("step_rule", self.step_rule, STEP_RULES)
        check_integer("batch_size", self.batch_size, minimum=1, allow_none=True)
        if self.batch_size is not None and self.step_rule != "standard":
            raise ValueError(
                "The stochastic variant (batch_size) takes the standard step 2/(k+2): a line search on a "
                f"minibatch does not search the objective. Received: batch_size={self.batch_size}, "
                f"step_rule={self.step_rule!r}"
            )
        check_integer("seed", self.seed, minimum=0)
        check_one_of("svd", self.svd, SVD_METHODS)
        check_number("svd_tol", self.svd_tol, minimum=0.0)
        for name in ("compress_every", "eval_every"):
            check_integer(name, getattr(self, name), minimum=0)
        check_integer("checkpoint_every", self.checkpoint_every, minimum=1)
        check_integer("line_search_evals", self.line_search_evals, minimum=1)
        check_number("line_search_rtol", self.line_search_rtol, minimum=0.0)
        check_integer("chunk_size", self.chunk_size, minimum=1)


class HazanTrainer:
    """Frank-Wolfe (Hazan's algorithm) on the trace-norm ball, with logs and checkpoints.

    Each step (:meth:`step`) computes ``F`` and its gradient at the iterate ``x_k``, the
    linear step ``s``, the gap ``<x_k - s, grad F>``, a step size, and moves to
    ``x_{k+1}``. Its record, appended to :attr:`history`, holds ``step`` (``k + 1``),
    ``objective`` and ``gap`` (of ``x_k``, the point the gradient was taken at),
    ``rank`` (factors of ``x_{k+1}``), ``step_size``, ``atom`` (``"A"``/``"eta"``),
    ``dual_norm``, ``norm_bound`` (``sum c + lam ||eta||`` of ``x_{k+1}``, at most ``C``),
    ``time`` (seconds of steps so far, resumed runs included) and, every ``eval_every``
    steps, ``dev_uas``.

    With a ``logdir``: every record goes to ``progress.csv`` (:data:`PROGRESS_COLUMNS`)
    and every ``checkpoint_every`` steps the state to ``checkpoint.npz``; a trainer
    created on a ``logdir`` that holds a checkpoint resumes from it (same iterates as an
    uninterrupted run: minibatches and ARPACK's start vector depend only on
    ``(seed, step)``), and rewrites the CSV to the checkpoint's history. A non-finite
    objective stops training with a :class:`FloatingPointError`; the last checkpoint,
    written before, is left as it was.

    Args:
        train: the training sentences' :class:`SentenceFeatures` (one dimension ``d``).
        config: a :class:`HazanConfig`.
        dev: sentences to parse every ``config.eval_every`` steps, or None.
        logdir: a folder for ``progress.csv`` and ``checkpoint.npz``, or None.
        callback: called after every step as ``callback(trainer, record)`` (by
            :meth:`_on_step`, which subclasses may override instead); returning ``False``
            stops training.

    Raises:
        ValueError: for no training sentence, mixed dimensions, or a checkpoint written
            with other settings.

    Example:
        >>> from keras_structured.parsing.bilinear_features import featurize
        >>> from keras_structured.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> trainer = HazanTrainer(featurize([s], dim=8), HazanConfig(C=5.0, steps=3))
        >>> model = trainer.train()
        >>> [record["rank"] <= record["step"] for record in trainer.history]
        [True, True, True]
        >>> model.norm_bound(lam=1.0) <= 5.0
        True
    """

    def __init__(
        self,
        train: Sequence[SentenceFeatures],
        config: HazanConfig | None = None,
        *,
        dev: Sequence[SentenceFeatures] | None = None,
        logdir: str | os.PathLike | None = None,
        callback: Callable[[HazanTrainer, dict], bool | None] | None = None,
    ) -> None:
        self.config = HazanConfig() if config is None else config
        if len(train) == 0:
            raise ValueError(
                "The training treebank is empty: give at least one sentence. Received: 0 sentences"
            )
        self.train_sentences = list(train)
        self._full_batch = ArcBatch(self.train_sentences, self.config.chunk_size)
        self.dev = None if dev is None else list(dev)
        if self.dev is not None and len(self.dev) == 0:
            raise ValueError(
                "The dev treebank is empty: give at least one sentence or None. Received: 0 sentences"
            )
        self.callback = callback
        self.model = TraceNormModel(self._full_batch.dim)
        self.step_count = 0
        self.history: list[dict] = []
        self.checkpoint_step: int | None = None
        self.logdir = None if logdir is None else pathlib.Path(logdir)
        if self.logdir is not None:
            self.logdir.mkdir(parents=True, exist_ok=True)
            if self.checkpoint_path.is_file():
                self._resume()
            self._write_csv(self.history, mode="w")

    @property
    def checkpoint_path(self) -> pathlib.Path:
        """``logdir / checkpoint.npz``."""
        if self.logdir is None:
            raise ValueError("This trainer has no logdir. Received: logdir=None")
        return self.logdir / CHECKPOINT_NAME

    def train(self, steps: int | None = None, progress: bool = False) -> TraceNormModel:
        """Run Frank-Wolfe up to ``steps`` steps in all (default ``config.steps``).

        Args:
            steps: the total number of steps to reach (those of a resumed checkpoint count).
            progress: show a tqdm progress bar (objective, gap, rank) if tqdm is installed.

        Returns:
            The model :attr:`model` (changed in place).

        Raises:
            FloatingPointError: if the objective becomes NaN or infinite.
        """
        target = self.config.steps if steps is None else check_integer("steps", steps, minimum=0)
        bar = _progress_bar(target, self.step_count) if progress else None
        while self.step_count < target:
            record = self.step()
            if (
                self.dev is not None
                and self.config.eval_every
                and self.step_count % self.config.eval_every == 0
            ):
                record["dev_uas"] = evaluate(self.model, self.dev)["uas"]
            self.history.append(record)
            self._write_csv([record], mode="a")
            if self.logdir is not None and self.step_count % self.config.checkpoint_every == 0:
                self.save()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(
                    objective=f"{record['objective']:.4g}", gap=f"{record['gap']:.3g}", rank=record["rank"]
                )
            if not self._on_step(record):
                break
        if bar is not None:
            bar.close()
        if self.logdir is not None and self.checkpoint_step != self.step_count:
            self.save()
        return self.model

    def step(self) -> dict:
        """One Frank-Wolfe step from the current iterate; returns its record (see the class)."""
        config, k = self.config, self.step_count
        started = time.perf_counter()
        batch = self._batch(k)
        scores = _scores(self.model, batch)
        if not all(np.isfinite(s).all() for s in scores):
            self._stop_not_finite(float("nan"))
        losses, residuals = _losses(batch, scores, config.loss)
        result = _gradient(batch, scores, residuals, losses)
        if not math.isfinite(result.objective):
            self._stop_not_finite(result.objective)
        atom = linear_minimizer(
            result.grad_A, result.grad_eta, config.C, config.lam, config.svd, config.svd_tol, config.seed
        )
        gap = result.inner + config.C * atom.dual_norm
        gamma, evals = self._step_size(k, batch, scores, atom, gap)
        self.model.scale(1.0 - gamma)
        if atom.kind == "A" and gamma > 0:
            self.model.add_factor(gamma * config.C, atom.left, atom.right)
        self.model.eta += gamma * atom.eta
        self.step_count = k + 1
        if config.compress_every and self.step_count % config.compress_every == 0:
            self.model.compress()
        elapsed = time.perf_counter() - started
        return {
            "step": self.step_count,
            "objective": result.objective,
            "gap": gap,
            "rank": self.model.rank,
            "step_size": gamma,
            "atom": atom.kind,
            "dual_norm": atom.dual_norm,
            "norm_bound": self.model.norm_bound(config.lam),
            "time": (self.history[-1]["time"] if self.history else 0.0) + elapsed,
            "line_search_evals": evals,
        }

    def _on_step(self, record: dict) -> bool:
        """Called after every step (record logged, checkpoint written); False stops training.

        Calls ``callback``; subclasses may override it.
        """
        return self.callback is None or self.callback(self, record) is not False

    def save(self) -> None:
        """Write ``checkpoint.npz`` (refused for a model with non-finite values)."""
        if not (np.isfinite(self.model.weights).all() and np.isfinite(self.model.eta).all()):
            raise FloatingPointError("The model holds NaN or infinite values: the last checkpoint is kept.")
        save_checkpoint(
            self.checkpoint_path, self.model, self.step_count, self.history, _config_dict(self.config)
        )
        self.checkpoint_step = self.step_count

    # -- the pieces of a step -------------------------------------------------------------

    def _batch(self, k: int) -> ArcBatch:
        size = self.config.batch_size
        if size is None or size >= len(self.train_sentences):
            return self._full_batch
        rng = np.random.default_rng([self.config.seed, k])
        chosen = np.sort(rng.choice(len(self.train_sentences), size=size, replace=False))
        return ArcBatch([self.train_sentences[i] for i in chosen], self.config.chunk_size)

    def _step_size(self, k, batch, scores, atom, gap) -> tuple[float, int]:
        config = self.config
        standard = 2.0 / (k + 2.0)
        if config.step_rule == "standard" or gap <= 0:
            return (standard if gap > 0 else 0.0), 0
        target = _atom_scores(atom, config.C, batch)
        if config.loss == "sparsemap":
            squares = sum(float(np.sum((t - s) ** 2)) for s, t in zip(scores, target, strict=True))
            curvature = squares / len(batch)  # Q: phi' is Q-Lipschitz
            first = min(1.0, gap / curvature) if curvature > 0 else 1.0
        else:
            first = standard
        return _line_search(
            batch,
            scores,
            target,
            gap,
            config.loss,
            first,
            config.line_search_evals,
            config.line_search_rtol,
        )

    def _stop_not_finite(self, value: float) -> None:
        if self.logdir is None:
            kept = "No checkpoint was written (no logdir)."
        elif self.checkpoint_step is None:
            kept = "No checkpoint had been written yet."
        else:
            kept = (
                f"The last good checkpoint, step {self.checkpoint_step}, is kept at '{self.checkpoint_path}'."
            )
        raise FloatingPointError(
            f"The objective is not finite at step {self.step_count + 1}: training stops. {kept} "
            f"Check the features and the model for NaN values, or lower C. Received: objective={value}"
        )

    def _resume(self) -> None:
        model, step, history, saved = load_checkpoint(self.checkpoint_path)
        current = _config_dict(self.config)
        different = {
            name: (saved.get(name), value)
            for name, value in current.items()
            if name not in _RESUMABLE_FIELDS and saved is not None and saved.get(name) != value
        }
        if different or model.dim != self.model.dim:
            different = different or {"dim": (model.dim, self.model.dim)}
            raise ValueError(
                f"The checkpoint '{self.checkpoint_path}' was written with other settings; use another "
                f"logdir or the same settings. Received: (checkpoint, now) = {different}"
            )
        self.model, self.step_count, self.history, self.checkpoint_step = model, step, history, step

    def _write_csv(self, records: list[dict], mode: str) -> None:
        if self.logdir is None:
            return
        path = self.logdir / "progress.csv"
        with open(path, mode, newline="") as handle:
            writer = csv.DictWriter(handle, PROGRESS_COLUMNS, extrasaction="ignore")
            if mode == "w":
                writer.writeheader()
            writer.writerows(records)


def _config_dict(config: HazanConfig) -> dict:
    return dataclasses.asdict(config)


def _progress_bar(total: int, initial: int):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # an optional dependency
        return None
    return tqdm(total=total, initial=initial, desc="Frank-Wolfe", unit="step")


def train_tracenorm(
    train: Sequence[SentenceFeatures],
    *,
    dev: Sequence[SentenceFeatures] | None = None,
    logdir: str | os.PathLike | None = None,
    progress: bool = False,
    **settings,
) -> tuple[TraceNormModel, list[dict]]:
    """Train the trace-norm parser: ``min F(A, eta)`` s.t. ``||A||_* + lam ||eta||_2 <= C``.

    A function over :class:`HazanTrainer`.

    Args:
        train: the training sentences' :class:`SentenceFeatures`.
        dev: sentences parsed every ``eval_every`` steps, or None.
        logdir: folder for the CSV log and the checkpoint (resumed if present), or None.
        progress: show a progress bar.
        **settings: fields of :class:`HazanConfig` (``C``, ``lam``, ``steps``, ...).

    Returns:
        ``(model, history)``.

    Raises:
        ValueError: for bad settings or data (see :class:`HazanConfig`).
        FloatingPointError: if the objective becomes NaN or infinite.

    Example:
        >>> from keras_structured.parsing.bilinear_features import featurize
        >>> from keras_structured.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> model, history = train_tracenorm(featurize([s], dim=8), C=5.0, steps=20, step_rule="line_search")
        >>> history[-1]["objective"] < history[0]["objective"]
        True
    """
    trainer = HazanTrainer(train, HazanConfig(**settings), dev=dev, logdir=logdir)
    model = trainer.train(progress=progress)
    return model, trainer.history


# ---------------------------------------------------------------------------------------
# The Frobenius baseline


@dataclasses.dataclass(frozen=True)
class FrobeniusConfig:
    """Settings of the baseline ``min F(A, eta) + mu (||A||_F^2 + ||eta||^2)`` by Adam.

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

    Minimises ``F(A, eta) + mu (||A||_F^2 + ||eta||_2^2)`` from ``A = 0, eta = 0``. The
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
        FloatingPointError: if the objective becomes NaN or infinite.

    Example:
        >>> from keras_structured.parsing.bilinear_features import featurize
        >>> from keras_structured.parsing.conllu_reader import Sentence
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
    moments = [np.zeros_like(model.matrix), np.zeros_like(model.eta)]
    squares = [np.zeros_like(model.matrix), np.zeros_like(model.eta)]
    history, elapsed = [], 0.0
    for k in range(config.steps):
        started = time.perf_counter()
        batch = full
        if config.batch_size is not None and config.batch_size < len(train):
            rng = np.random.default_rng([config.seed, k])
            batch = ArcBatch(
                [train[i] for i in np.sort(rng.choice(len(train), config.batch_size, replace=False))]
            )
        scores = _scores(model, batch)
        penalty = config.mu * (np.sum(model.matrix**2) + np.sum(model.eta**2))
        value = objective_value = float("nan")
        if all(np.isfinite(s).all() for s in scores):
            losses, residuals = _losses(batch, scores, config.loss)
            result = _gradient(batch, scores, residuals, losses)
            value = result.objective
            objective_value = value + penalty
        if not math.isfinite(objective_value):
            raise FloatingPointError(
                f"The objective is not finite at step {k + 1}: training stops. Lower the learning rate. "
                f"Received: objective={objective_value}"
            )
        grad_matrix = (batch.phi.T @ result.residual @ batch.phi).toarray() + 2 * config.mu * model.matrix
        grads = [grad_matrix, result.grad_eta + 2 * config.mu * model.eta]
        for params, grad, m, v in zip((model.matrix, model.eta), grads, moments, squares, strict=True):
            m *= config.beta1
            m += (1 - config.beta1) * grad
            v *= config.beta2
            v += (1 - config.beta2) * grad**2
            m_hat = m / (1 - config.beta1 ** (k + 1))
            v_hat = v / (1 - config.beta2 ** (k + 1))
            params -= config.learning_rate * m_hat / (np.sqrt(v_hat) + config.epsilon)
        elapsed += time.perf_counter() - started
        history.append({"step": k + 1, "objective": objective_value, "loss": value, "time": elapsed})
    return model, history
