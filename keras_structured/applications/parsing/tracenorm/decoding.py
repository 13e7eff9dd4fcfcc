"""Parsing with a trained model (Chu-Liu-Edmonds) and its unlabeled attachment scores."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from keras_structured.applications.parsing.bilinear_features import SentenceFeatures
from keras_structured.applications.parsing.evaluation import attachment_scores
from keras_structured.applications.parsing.tracenorm.arc_batches import ArcBatch, arc_scores
from keras_structured.applications.parsing.tracenorm.models import Model
from keras_structured.engine.dependency_tree import best_trees


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
        >>> from keras_structured.applications.parsing.bilinear_features import featurize
        >>> from keras_structured.applications.parsing.tracenorm import TraceNormModel
        >>> from keras_structured.applications.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> model = TraceNormModel(dim=8)
        >>> model.distance_weights[0] = 1.0  # favour a head just before its dependent
        >>> parse(model, featurize([s], dim=8))[0].tolist()
        [-1, 0, 1]
    """
    batch = ArcBatch(sentences, chunk_size)
    heads: list[np.ndarray] = [np.empty(0)] * len(batch)
    for chunk, s in zip(batch.chunks, arc_scores(model, batch), strict=True):
        trees = best_trees(s, chunk.lengths)
        for b in range(chunk.stop - chunk.start):
            heads[batch.order[chunk.start + b]] = trees[b, : chunk.lengths[b] + 1]
    return heads


def evaluate(model: Model, sentences: Sequence[SentenceFeatures]) -> dict[str, float | int]:
    """Unlabeled attachment scores of the parsed sentences (see
    :func:`~keras_structured.applications.parsing.evaluation.attachment_scores`).

    Args:
        model: a :class:`TraceNormModel` or :class:`BilinearModel`.
        sentences: the sentences' :class:`SentenceFeatures` with gold heads and tags.

    Returns:
        ``{"uas", "uas_no_punct", "tokens", "tokens_no_punct"}``.

    Example:
        >>> from keras_structured.applications.parsing.bilinear_features import featurize
        >>> from keras_structured.applications.parsing.tracenorm import TraceNormModel
        >>> from keras_structured.applications.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> evaluate(TraceNormModel(dim=8), featurize([s], dim=8))["tokens"]
        2
    """
    predicted = parse(model, sentences)
    return attachment_scores(predicted, [s.heads for s in sentences], [s.tags for s in sentences])
