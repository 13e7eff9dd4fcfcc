"""Sentences stacked and cut into padded chunks of similar lengths, and their arc scores.

An :class:`ArcBatch` holds the token features of its sentences stacked into one sparse
matrix, and chunks of consecutive sentences (by increasing length) padded to their longest
sentence: the padded score arrays that :func:`keras_structured.engine.solve` and
``best_trees`` receive together with ``lengths``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from keras_structured.applications.parsing.bilinear_features import SentenceFeatures
from keras_structured.applications.parsing.tracenorm.models import Model, bilinear_block
from keras_structured.validation import check_integer


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


def arc_scores(model: Model, batch: ArcBatch) -> list[np.ndarray]:
    """The padded ``(b, size, size)`` scores of every chunk (zero off arcs)."""
    if model.dim != batch.dim:
        raise ValueError(
            f"The sentences' features must have the model's dimension d={model.dim}. "
            f"Received: feature dimension {batch.dim}"
        )
    result = []
    for chunk in batch.chunks:
        left, right = model.token_factors(batch.phi[chunk.token_start : chunk.token_stop])
        scores = model.distance_weights[chunk.index]
        for b in range(chunk.stop - chunk.start):
            lo = batch.offsets[chunk.start + b] - chunk.token_start
            n1 = chunk.lengths[b] + 1
            scores[b, :n1, :n1] += bilinear_block(left[lo : lo + n1], right[lo : lo + n1])
        scores[~chunk.valid] = 0.0
        result.append(scores)
    return result
