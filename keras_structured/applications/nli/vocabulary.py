"""Word ids of the NLI model: learned embeddings, no pretrained vectors.

The paper's ESIM starts from GloVe vectors; none are available offline here, so every
embedding is learned from SICK's training pairs. Ids ``0`` and ``1`` are reserved:

====  ==========  ===========================================================
id    name        use
====  ==========  ===========================================================
0     ``<pad>``   padding of a batch (the Keras mask is ``ids != 0``)
1     ``<unk>``   a word seen fewer than ``min_count`` times in training
====  ==========  ===========================================================

With the default ``min_count=2`` the words seen once in training are unknown, so the
``<unk>`` embedding is trained on rare words and is meaningful for the unseen words of
the trial and test pairs.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from keras_structured.applications.nli.sick_reader import Pair
from keras_structured.validation import check_integer

__all__ = ["PAD_ID", "RESERVED", "UNK_ID", "Vocabulary"]

PAD_ID = 0
UNK_ID = 1
#: The names of the reserved ids 0 and 1.
RESERVED = ("<pad>", "<unk>")


class Vocabulary:
    """Word ids ``2, 3, ...`` of the known words; every other word is ``UNK_ID``.

    Args:
        words: the known words, in id order (lowercase tokens, as the reader makes them).

    Raises:
        ValueError: for a repeated word or one that is not a non-empty string.

    Example:
        >>> pair = Pair(1, ("a", "dog", "runs"), ("a", "dog", "sleeps"), "contradiction", "train")
        >>> vocabulary = Vocabulary.from_pairs([pair])
        >>> vocabulary.words, vocabulary.num_words
        (('a', 'dog'), 4)
        >>> vocabulary.encode(("a", "cat")).tolist()
        [2, 1]
    """

    def __init__(self, words: Sequence[str]) -> None:
        self._words = tuple(words)
        for word in self._words:
            if not isinstance(word, str) or not word:
                raise ValueError(f"words must be non-empty strings. Received: word={word!r}")
        self._ids = {word: len(RESERVED) + i for i, word in enumerate(self._words)}
        if len(self._ids) != len(self._words):
            repeated = sorted(w for w, c in collections.Counter(self._words).items() if c > 1)
            raise ValueError(f"words must not repeat. Received: repeated words {repeated[:10]}")

    @classmethod
    def from_pairs(cls, pairs: Iterable[Pair], min_count: int = 2) -> Vocabulary:
        """The words of ``pairs`` (premises and hypotheses) seen at least ``min_count`` times,
        the most frequent first, ties in order of first appearance.

        Args:
            pairs: the training pairs.
            min_count: the least count of a known word, ``>= 1``.

        Returns:
            The vocabulary.
        """
        min_count = check_integer("min_count", min_count, minimum=1)
        counts: collections.Counter[str] = collections.Counter()
        for pair in pairs:
            counts.update(pair.premise)
            counts.update(pair.hypothesis)
        order = {word: i for i, word in enumerate(counts)}  # first appearance
        kept = [word for word, count in counts.items() if count >= min_count]
        return cls(sorted(kept, key=lambda word: (-counts[word], order[word])))

    @property
    def words(self) -> tuple[str, ...]:
        """The known words, word ``i`` having id ``i + 2``."""
        return self._words

    @property
    def num_words(self) -> int:
        """The size of the embedding table: known words plus the two reserved ids."""
        return len(self._words) + len(RESERVED)

    def encode(self, tokens: Sequence[str]) -> np.ndarray:
        """The int32 ids of ``tokens`` (``UNK_ID`` for unknown words)."""
        return np.array([self._ids.get(token, UNK_ID) for token in tokens], np.int32)

    def get_config(self) -> dict[str, Any]:
        """A JSON-able description (``Vocabulary.from_config`` inverts it)."""
        return {"words": list(self._words)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Vocabulary:
        """The vocabulary of :meth:`get_config`."""
        return cls(config["words"])
