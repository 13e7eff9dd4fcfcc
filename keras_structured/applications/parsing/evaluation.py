"""Unlabeled and labeled attachment scores (UAS, LAS) of predicted dependency trees.

UAS is the percentage of words whose predicted head is their gold head; LAS the percentage
of words whose predicted head and relation are both right. Two variants of each:

* ``uas``, ``las``: every word counts, punctuation included: the convention of the CoNLL
  2017 and 2018 shared tasks on UD parsing (the SparseMAP paper's Table 1 uses that data).
* ``uas_no_punct``, ``las_no_punct``: words whose gold UPOS tag is ``"PUNCT"`` are left
  out, the older convention of English Penn Treebank parsing (Kiperwasser & Goldberg report
  both). UD tags every punctuation mark, and only punctuation marks, ``PUNCT``.

Relations are compared as the CoNLL 2018 evaluation script compares them: by their universal
part, the subtype after ``:`` stripped (``nmod:poss`` is right for a gold ``nmod``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["PUNCT_TAG", "attachment_scores", "universal_relation"]

#: The UPOS tag of the words that ``uas_no_punct`` leaves out.
PUNCT_TAG = "PUNCT"


def _percent(correct: int, total: int) -> float:
    return 100.0 * correct / total if total else float("nan")


def universal_relation(relation: str) -> str:
    """The universal part of a dependency relation, its subtype stripped.

    Example:
        >>> universal_relation("nmod:poss"), universal_relation("nsubj")
        ('nmod', 'nsubj')
    """
    return relation.split(":", 1)[0]


def _check_sentence_count(name: str, values, gold_heads) -> None:
    if values is not None and len(values) != len(gold_heads):
        raise ValueError(
            f"{name} must hold one sequence per sentence. "
            f"Received: len({name})={len(values)}, len(gold_heads)={len(gold_heads)}"
        )


def attachment_scores(
    predicted_heads: Sequence[np.ndarray],
    gold_heads: Sequence[np.ndarray],
    tags: Sequence[Sequence[str]] | None = None,
    predicted_relations: Sequence[Sequence[str]] | None = None,
    gold_relations: Sequence[Sequence[str]] | None = None,
) -> dict[str, float | int]:
    """Attachment scores over a corpus, in percent (micro-averaged over words).

    Each sentence of ``n`` words is given as a head vector of shape ``(n + 1,)``, as in
    :attr:`~keras_structured.applications.parsing.conllu_reader.Sentence.heads`: entry ``i`` in
    ``1..n`` is the head of word ``i`` (0 for the root); entry 0, the root, is ignored.
    To score padded batches, cut each row to its sentence first (``row[: n + 1]``).
    Relations (given both, or neither) are sequences of ``n`` labels, without the root, as in
    ``Sentence.relations``; they are compared without their subtypes
    (:func:`universal_relation`).

    Args:
        predicted_heads: one head vector per sentence.
        gold_heads: one head vector per sentence, the same shapes.
        tags: the gold UPOS tags, one sequence of ``n`` tags per sentence (no root), as
            in ``Sentence.tags``; needed for ``uas_no_punct`` and ``las_no_punct`` only.
        predicted_relations: the predicted relations, for the LAS.
        gold_relations: the gold relations, for the LAS.

    Returns:
        ``{"uas": float, "uas_no_punct": float, "tokens": int, "tokens_no_punct": int}``:
        the scores in percent (0-100) and the number of words each is computed over; with
        relations, ``"las"`` and ``"las_no_punct"`` too (over the same words). A score over
        no word is NaN; without ``tags``, the scores without punctuation are NaN and
        ``tokens_no_punct`` is 0.

    Raises:
        ValueError: if the numbers of sentences differ, a sentence's predicted heads, gold
            heads, tags or relations disagree in length, or one of the relations is given
            without the other.

    Example:
        >>> gold = [np.array([-1, 2, 0, 2])]
        >>> predicted = [np.array([-1, 2, 0, 1])]
        >>> scores = attachment_scores(predicted, gold, tags=[("NOUN", "VERB", "PUNCT")])
        >>> round(scores["uas"], 2), scores["uas_no_punct"], scores["tokens_no_punct"]
        (66.67, 100.0, 2)
        >>> scores = attachment_scores(
        ...     predicted, gold, [("NOUN", "VERB", "PUNCT")],
        ...     predicted_relations=[("nsubj:pass", "root", "punct")],
        ...     gold_relations=[("nsubj", "root", "punct")],
        ... )
        >>> round(scores["las"], 2), scores["las_no_punct"]
        (66.67, 100.0)
    """
    if len(predicted_heads) != len(gold_heads):
        raise ValueError(
            "predicted_heads and gold_heads must hold the same number of sentences. "
            f"Received: len(predicted_heads)={len(predicted_heads)}, len(gold_heads)={len(gold_heads)}"
        )
    if (predicted_relations is None) != (gold_relations is None):
        raise ValueError(
            "predicted_relations and gold_relations go together: give both for the LAS, or neither. "
            f"Received: predicted_relations {'without' if gold_relations is None else 'None with'} "
            "gold_relations"
        )
    _check_sentence_count("tags", tags, gold_heads)
    _check_sentence_count("predicted_relations", predicted_relations, gold_heads)
    _check_sentence_count("gold_relations", gold_relations, gold_heads)
    labelled = predicted_relations is not None
    correct = total = correct_no_punct = total_no_punct = 0
    labelled_correct = labelled_correct_no_punct = 0
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
        if labelled:
            for name, relations in (
                ("predicted_relations", predicted_relations[index]),
                ("gold_relations", gold_relations[index]),
            ):
                if len(relations) != hits.size:
                    raise ValueError(
                        f"Each sentence's {name} must have one relation per word (n, without the root). "
                        f"Received: sentence {index} with {len(relations)} relations and {hits.size} words"
                    )
            same = [
                universal_relation(p) == universal_relation(g)
                for p, g in zip(predicted_relations[index], gold_relations[index], strict=True)
            ]
            labelled_hits = hits & np.array(same, dtype=bool)
            labelled_correct += int(labelled_hits.sum())
        if tags is not None:
            if len(tags[index]) != hits.size:
                raise ValueError(
                    "Each sentence's tags must have one tag per word (n, without the root). "
                    f"Received: sentence {index} with {len(tags[index])} tags and {hits.size} words"
                )
            counted = np.array([tag != PUNCT_TAG for tag in tags[index]], dtype=bool)
            correct_no_punct += int(hits[counted].sum())
            total_no_punct += int(counted.sum())
            if labelled:
                labelled_correct_no_punct += int(labelled_hits[counted].sum())
    scores = {
        "uas": _percent(correct, total),
        "uas_no_punct": _percent(correct_no_punct, total_no_punct),
        "tokens": total,
        "tokens_no_punct": total_no_punct,
    }
    if labelled:
        scores["las"] = _percent(labelled_correct, total)
        scores["las_no_punct"] = _percent(labelled_correct_no_punct, total_no_punct)
    return scores
