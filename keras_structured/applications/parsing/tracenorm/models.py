r"""The two arc scorers: the factored trace-norm model and the dense baseline.

Both score the arc ``i -> j`` of a sentence as ``S = Phi A Phi^T + b[D]`` (see
:mod:`keras_structured.applications.parsing.tracenorm`). :class:`TraceNormModel` stores ``A`` as a list
of rank-one factors ``A = sum_k c_k u_k v_k^T`` (``c_k > 0``), so the scores are
``(Phi U) diag(c) (Phi V)^T + b[D]`` and the ``d x d`` matrix is never formed;
:meth:`TraceNormModel.compress` merges the factors by a thin SVD of ``A``.

**Storage.** After ``k`` steps the model stores ``k (2 d + 1) + 15`` numbers
(:attr:`TraceNormModel.num_parameters`; fewer after :meth:`TraceNormModel.compress`),
against ``d^2 + 15`` for the dense baseline :class:`BilinearModel` trained by
:func:`~keras_structured.applications.parsing.tracenorm.frobenius.train_frobenius`. At ``d = 2**14``
that is 268 million numbers (2 GiB) for the dense ``A``, 3.3 million for 100 factors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from keras_structured.applications.parsing.bilinear_features import NUM_DISTANCE_FEATURES, SentenceFeatures
from keras_structured.validation import check_integer, check_number


class TraceNormModel:
    """The bilinear parser ``S = Phi A Phi^T + b[D]`` with ``A = sum_k c_k u_k v_k^T``.

    Starts at ``A = 0, b = 0``. The factors are stored as rows of two ``(rank, d)``
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
        self.distance_weights = np.zeros(NUM_DISTANCE_FEATURES)
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
        """The numbers stored: ``rank (2 d + 1) + len(b)``."""
        return self._rank * (2 * self.dim + 1) + self.distance_weights.size

    def norm_bound(self, lam: float) -> float:
        """``sum_k c_k + lam ||b||``, an upper bound on ``||A||_* + lam ||b||``."""
        return float(self.weights.sum() + lam * np.linalg.norm(self.distance_weights))

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
        """Multiply ``A`` and ``b`` by ``factor`` (``0`` drops every factor)."""
        self._weights[: self._rank] *= factor
        self.distance_weights *= factor
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
        model.distance_weights = self.distance_weights.copy()
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
            "distance_weights": self.distance_weights.copy(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> TraceNormModel:
        """The model of :meth:`state` (also an older state, whose distance weights are under ``"eta"``)."""
        model = cls(int(np.shape(state["left"])[1]))
        model.set_factors(state["weights"], state["left"], state["right"])
        key = "distance_weights" if "distance_weights" in state else "eta"
        model.distance_weights = np.array(state[key], dtype=np.float64)
        return model


class BilinearModel:
    """The bilinear parser with a dense ``A`` (``d^2 + 15`` parameters): the baseline.

    Args:
        matrix: ``(d, d)`` the matrix ``A``.
        distance_weights: ``(15,)`` the distance weights ``b`` (default zeros; the
            deprecated keyword ``eta=`` is still accepted).

    Raises:
        ValueError: for a matrix that is not square and non-empty, or a wrong ``distance_weights`` shape.

    Example:
        >>> BilinearModel(np.eye(4)).num_parameters
        31
    """

    def __init__(self, matrix: np.ndarray, distance_weights: np.ndarray | None = None) -> None:
        self.matrix = np.array(matrix, dtype=np.float64)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != self.matrix.shape[1] or self.matrix.size == 0:
            raise ValueError(
                f"matrix must be a non-empty square (d, d) array. Received: shape={self.matrix.shape}"
            )
        self.distance_weights = (
            np.zeros(NUM_DISTANCE_FEATURES)
            if distance_weights is None
            else np.array(distance_weights, dtype=np.float64)
        )
        if self.distance_weights.shape != (NUM_DISTANCE_FEATURES,):
            raise ValueError(
                f"distance_weights must have shape ({NUM_DISTANCE_FEATURES},). "
                f"Received: distance_weights.shape={self.distance_weights.shape}"
            )

    @property
    def dim(self) -> int:
        """The feature dimension ``d``."""
        return self.matrix.shape[0]

    @property
    def num_parameters(self) -> int:
        """``d^2 + len(b)``."""
        return self.matrix.size + self.distance_weights.size

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


def bilinear_block(left: np.ndarray, right) -> np.ndarray:
    """``left @ right.T`` for a dense or sparse ``right``."""
    if sp.issparse(right):
        return np.asarray((right @ left.T).T)
    return left @ right.T


def _sentence_scores(model: Model, features: SentenceFeatures) -> np.ndarray:
    _check_dims(model, [features])
    left, right = model.token_factors(features.phi)
    index = features.distance
    scores = bilinear_block(left, right) + model.distance_weights[index]
    scores[index < 0] = 0.0
    return scores


def _check_dims(model: Model, sentences: Sequence[SentenceFeatures]) -> None:
    dims = {s.dim for s in sentences}
    if dims - {model.dim}:
        raise ValueError(
            f"The sentences' features must have the model's dimension d={model.dim}. "
            f"Received: feature dimensions {sorted(dims)}"
        )


def count_non_finite(*arrays: np.ndarray) -> int:
    """The number of NaN and infinite values in ``arrays``."""
    return sum(int(array.size - np.count_nonzero(np.isfinite(array))) for array in arrays)
