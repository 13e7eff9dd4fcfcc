"""Unlabeled attachment score (UAS) of predicted dependency trees.

UAS is the percentage of words whose predicted head is their gold head. Two variants:

* ``uas``: every word counts, punctuation included: the convention of the CoNLL 2017
  and 2018 shared tasks on UD parsing (the SparseMAP paper's Table 1 uses that data).
* ``uas_no_punct``: words whose gold UPOS tag is ``"PUNCT"`` are left out, the older
  convention of English Penn Treebank parsing (Kiperwasser & Goldberg report both).
  UD tags every punctuation mark, and only punctuation marks, ``PUNCT``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["PUNCT_TAG", "attachment_scores"]

#: The UPOS tag of the words that ``uas_no_punct`` leaves out.
PUNCT_TAG = "PUNCT"


def _percent(correct: int, total: int) -> float:
    return 100.0 * correct / total if total else float("nan")


def attachment_scores(
    predicted_heads: Sequence[np.ndarray],
    gold_heads: Sequence[np.ndarray],
    tags: Sequence[Sequence[str]] | None = None,
) -> dict[str, float | int]:
    """Unlabeled attachment scores over a corpus, in percent (micro-averaged over words).

    Each sentence of ``n`` words is given as a head vector of shape ``(n + 1,)``, as in
    :attr:`~keras_structured.applications.parsing.conllu_reader.Sentence.heads`: entry ``i`` in
    ``1..n`` is the head of word ``i`` (0 for the root); entry 0, the root, is ignored.
    To score padded batches, cut each row to its sentence first (``row[: n + 1]``).

    Args:
        predicted_heads: one head vector per sentence.
        gold_heads: one head vector per sentence, the same shapes.
        tags: the gold UPOS tags, one sequence of ``n`` tags per sentence (no root), as
            in ``Sentence.tags``; needed for ``uas_no_punct`` only.

    Returns:
        ``{"uas": float, "uas_no_punct": float, "tokens": int, "tokens_no_punct": int}``:
        the scores in percent (0-100) and the number of words each is computed over. A
        score over no word is NaN; without ``tags``, ``uas_no_punct`` is NaN and
        ``tokens_no_punct`` is 0.

    Raises:
        ValueError: if the numbers of sentences differ, or a sentence's predicted heads,
            gold heads or tags disagree in length.

    Example:
        >>> gold = [np.array([-1, 2, 0, 2])]
        >>> predicted = [np.array([-1, 2, 0, 1])]
        >>> scores = attachment_scores(predicted, gold, tags=[("NOUN", "VERB", "PUNCT")])
        >>> round(scores["uas"], 2), scores["uas_no_punct"], scores["tokens_no_punct"]
        (66.67, 100.0, 2)
    """
    if len(predicted_heads) != len(gold_heads):
        raise ValueError(
            "predicted_heads and gold_heads must hold the same number of sentences. "
            f"Received: len(predicted_heads)={len(predicted_heads)}, len(gold_heads)={len(gold_heads)}"
        )
    if tags is not None and len(tags) != len(gold_heads):
        raise ValueError(
            "tags must hold one tag sequence per sentence. "
            f"Received: len(tags)={len(tags)}, len(gold_heads)={len(gold_heads)}"
        )
    correct = total = correct_no_punct = total_no_punct = 0
    for index, (predicted, gold) in enumerate(zip(predicted_heads, gold_heads, strict=True)):
        predicted, gold = np.asarray(predicted), np.asarray(gold)
        if predicted.ndim != 1 or predicted.shape != gold.shape:
            raise ValueError(
                "Each sentence's predicted and gold heads must be vectors of the same length n + 1. "
                f"Received: sentence {index} with predicted shape {predicted.shape} and gold shape "
                f"{gold.shape}"
            )
        hits = predicted[1:] == gold[1:]
        correct += int(hits.sum())
        total += hits.size
        if tags is not None:
            if len(tags[index]) != hits.size:
                raise ValueError(
                    "Each sentence's tags must have one tag per word (n, without the root). "
                    f"Received: sentence {index} with {len(tags[index])} tags and {hits.size} words"
                )
            counted = np.array([tag != PUNCT_TAG for tag in tags[index]], dtype=bool)
            correct_no_punct += int(hits[counted].sum())
            total_no_punct += int(counted.sum())
    return {
        "uas": _percent(correct, total),
        "uas_no_punct": _percent(correct_no_punct, total_no_punct),
        "tokens": total,
        "tokens_no_punct": total_no_punct,
    }
