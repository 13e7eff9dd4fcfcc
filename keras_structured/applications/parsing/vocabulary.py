"""Word, tag and relation ids for a dependency parser, and word dropout.

Ids ``0``, ``1`` and ``2`` are reserved, for words and tags alike:

====  ==========  =====================================================
id    name        use
====  ==========  =====================================================
0     ``<pad>``   padding of a batch (embedding rows that are never read)
1     ``<unk>``   a word or tag not in the vocabulary, or a dropped word
2     ``<root>``  position 0 of every encoded sentence, the artificial root
====  ==========  =====================================================

Dependency relations (the DEPREL column, full labels such as ``nmod:poss``) have ids of their
own, for the arc-label classifier: ``0`` is ``<unk>`` (a relation not seen in training), the
training relations follow from ``1``, and ``-1`` marks the root and the padding of a batch.
The vocabulary also keeps where each relation was seen in training, attached to the root or
to a word (:meth:`Vocabulary.relation_mask`): a word the parser attaches to the root is given
a relation seen there (UD's ``root``), never ``punct``, and another word never ``root``.

Word dropout (Kiperwasser & Goldberg, 2016, "Simple and Accurate Dependency Parsing
Using Bidirectional LSTM Feature Representations") replaces, during training, a word
``w`` seen ``#(w)`` times in the training data by ``<unk>`` with probability

    p(w) = alpha / (alpha + #(w)),

so that rare words are often dropped (``p = 0.2`` for a word seen once, at
``alpha = 0.25``) and frequent ones almost never, and the ``<unk>`` embedding is trained
on words that behave like the unknown words of the test data.
"""

from __future__ import annotations

import collections
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_structured.applications.parsing.conllu_reader import TAG_COLUMNS, Sentence
from keras_structured.applications.parsing.evaluation import universal_relation
from keras_structured.validation import check_bool, check_integer, check_number, check_one_of

__all__ = [
    "NUMBER",
    "NUM_RESERVED",
    "PAD_ID",
    "RESERVED",
    "ROOT_ID",
    "UNK_ID",
    "UNK_RELATION_ID",
    "Vocabulary",
    "word_dropout",
]

PAD_ID = 0
UNK_ID = 1
ROOT_ID = 2
#: The names of the reserved ids 0, 1, 2.
RESERVED = ("<pad>", "<unk>", "<root>")
NUM_RESERVED = len(RESERVED)
#: The word that stands for every number under ``collapse_numbers`` (Kiperwasser & Goldberg's "NUM").
NUMBER = "<num>"
#: The id of a relation not in the vocabulary (its name is ``RESERVED[UNK_ID]``, ``"<unk>"``).
UNK_RELATION_ID = 0


def _index(items: Sequence[str], name: str, first: int = NUM_RESERVED) -> dict[str, int]:
    """Ids of ``items`` from ``first`` on; reserved names in the data get their own id."""
    ids = {item: first + i for i, item in enumerate(items)}
    if len(ids) != len(items):
        duplicates = sorted(item for item, count in collections.Counter(items).items() if count > 1)
        raise ValueError(f"{name} must not repeat an entry. Received: duplicates={duplicates[:10]}")
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{name} must hold strings. Received: {item!r}")
    return ids


class Vocabulary:
    """Word, tag and relation ids of a treebank, with the training counts of the words.

    Words are kept as written (case preserved: "The" and "the" are two words) unless
    ``lowercase=True``, which lowercases words when the vocabulary is built and when
    sentences are encoded; ``collapse_numbers=True`` makes every word whose first character
    is an ASCII digit ("3", "1,000", "2nd") the one word :data:`NUMBER`. Both together are
    Kiperwasser & Goldberg's normalisation, which the SparseMAP paper's parser uses. Tags
    are never normalised; ``tag_column`` says which tags of a sentence are looked up: the
    universal tags (``"upos"``, :attr:`Sentence.tags`), the treebank's own (``"xpos"``,
    :attr:`Sentence.xpos`, which Kiperwasser & Goldberg's parser reads), or none
    (``"none"``: a parser of words alone, which reads plain tokenised text; the vocabulary
    then has no tag ids, :attr:`num_tags` is 0 and :meth:`encode` returns no tag ids).

    Args:
        words: the known words (normalised), given ids ``3, 4, ...`` in this order.
        tags: the known tags, given ids ``3, 4, ...`` in this order (none for ``"none"``).
        counts: the training count of each word in ``words`` (default: zeros).
        lowercase: whether words are lowercased before look-up.
        collapse_numbers: whether words starting with a digit are looked up as :data:`NUMBER`.
        tag_column: ``"upos"``, ``"xpos"`` or ``"none"``, the tags that :meth:`encode` reads.
        relations: the known dependency relations (full labels), given ids ``1, 2, ...`` in
            this order (id 0 is the unknown relation). A vocabulary written before relations
            were kept has none.
        root_relations: the relations seen attached to the root in training, and
        word_relations: those seen attached to a word (both subsets of ``relations``).
            None (a vocabulary written before they were kept): UD's rule, that a word is
            attached to the root if and only if its relation is ``root`` (subtypes such as
            ``root:x`` included), or every relation when none is ``root``.

    Raises:
        ValueError: for repeated words, tags or relations, counts that are not one
            non-negative integer per word, another ``tag_column``, tags with ``"none"``, or
            root or word relations that are not among ``relations``.

    Example:
        >>> sentence = Sentence(("The", "dog", "barks"), ("DET", "NOUN", "VERB"),
        ...                     np.array([-1, 2, 3, 0]), ("det", "nsubj", "root"))
        >>> vocabulary = Vocabulary.from_sentences([sentence])
        >>> vocabulary.num_words, vocabulary.num_tags, vocabulary.num_relations
        (6, 6, 4)
        >>> [ids.tolist() for ids in vocabulary.encode(sentence)]
        [[2, 3, 4, 5], [2, 3, 4, 5]]
        >>> vocabulary.encode_relations(sentence).tolist()
        [-1, 1, 2, 3]
    """

    def __init__(
        self,
        words: Sequence[str],
        tags: Sequence[str],
        counts: Sequence[int] | None = None,
        lowercase: bool = False,
        collapse_numbers: bool = False,
        tag_column: str = "upos",
        relations: Sequence[str] = (),
        root_relations: Sequence[str] | None = None,
        word_relations: Sequence[str] | None = None,
    ) -> None:
        self._lowercase = check_bool("lowercase", lowercase)
        self._collapse_numbers = check_bool("collapse_numbers", collapse_numbers)
        self._tag_column = check_one_of("tag_column", tag_column, TAG_COLUMNS)
        self._words = tuple(words)
        self._tags = tuple(tags)
        self._relations = tuple(relations)
        if self._tags and self._tag_column == "none":
            raise ValueError(
                f"A vocabulary with tag_column='none' has no tags. Received: {len(self._tags)} tags "
                f"({list(self._tags[:5])}...)"
            )
        self._word_ids = _index(self._words, "words")
        self._tag_ids = _index(self._tags, "tags")
        self._relation_ids = _index(self._relations, "relations", first=UNK_RELATION_ID + 1)
        if root_relations is None and word_relations is None:
            at_root = [r for r in self._relations if universal_relation(r) == "root"]
            root_relations = at_root or self._relations
            word_relations = [r for r in self._relations if r not in at_root] if at_root else self._relations
        self._positions = {}
        for name, given in (("root_relations", root_relations), ("word_relations", word_relations)):
            unknown = sorted(set(given or ()) - set(self._relations))
            if given is None or unknown:
                raise ValueError(
                    f"{name} must list relations of the vocabulary, given with the other list. "
                    f"Received: {name}={None if given is None else unknown[:10]}"
                )
            self._positions[name] = tuple(given)
        if counts is None:
            counts = [0] * len(self._words)
        counts = np.asarray(counts)
        if counts.shape != (len(self._words),) or (
            counts.size and (not np.issubdtype(counts.dtype, np.integer) or counts.min() < 0)
        ):
            raise ValueError(
                "counts must hold one non-negative integer per word. "
                f"Received: counts with shape {counts.shape} and dtype {counts.dtype} "
                f"for {len(self._words)} words"
            )
        self._counts = np.concatenate([np.zeros(NUM_RESERVED, np.int64), counts.astype(np.int64)])
        self._counts.setflags(write=False)

    @classmethod
    def from_sentences(
        cls,
        sentences: Iterable[Sentence],
        min_count: int = 1,
        lowercase: bool = False,
        collapse_numbers: bool = False,
        tag_column: str = "upos",
    ) -> Vocabulary:
        """The vocabulary of a training set.

        Words seen at least ``min_count`` times get an id, the most frequent first (ties in
        order of first appearance); rarer words are unknown (id 1). Every tag and every
        dependency relation gets an id, the most frequent first.

        Args:
            sentences: the training sentences.
            min_count: the fewest occurrences for a word to get an id.
            lowercase: whether to lowercase words (case is preserved by default).
            collapse_numbers: whether words starting with a digit count as :data:`NUMBER`.
            tag_column: ``"upos"``, ``"xpos"`` or ``"none"``, the tags to count and look up.

        Returns:
            The vocabulary, with the word counts.

        Raises:
            ValueError: if ``min_count`` is not an integer >= 1, or for ``"xpos"`` when a
                sentence has no XPOS tags.

        Example:
            >>> s = Sentence(("a", "b", "a"), ("X", "X", "X"), np.array([-1, 0, 1, 1]), "rrr")
            >>> Vocabulary.from_sentences([s], min_count=2).counts.tolist()
            [0, 0, 0, 2]
        """
        min_count = check_integer("min_count", min_count, minimum=1)
        empty = cls([], [], lowercase=lowercase, collapse_numbers=collapse_numbers, tag_column=tag_column)
        word_counts: collections.Counter = collections.Counter()
        tag_counts: collections.Counter = collections.Counter()
        relation_counts: collections.Counter = collections.Counter()
        root_relations, word_relations = set(), set()
        for sentence in sentences:
            word_counts.update(map(empty.normalize, sentence.words))
            tag_counts.update(empty.sentence_tags(sentence))
            relation_counts.update(sentence.relations)
            for head, relation in zip(sentence.heads[1:], sentence.relations, strict=True):
                (root_relations if head == 0 else word_relations).add(relation)
        kept = [(word, count) for word, count in word_counts.most_common() if count >= min_count]
        relations = [relation for relation, _ in relation_counts.most_common()]
        return cls(
            words=[word for word, _ in kept],
            tags=[tag for tag, _ in tag_counts.most_common()],
            counts=np.array([count for _, count in kept], dtype=np.int64),
            lowercase=lowercase,
            collapse_numbers=collapse_numbers,
            tag_column=tag_column,
            relations=relations,
            root_relations=[relation for relation in relations if relation in root_relations],
            word_relations=[relation for relation in relations if relation in word_relations],
        )

    @property
    def num_words(self) -> int:
        """The number of word ids, reserved ids included (the size of a word embedding)."""
        return NUM_RESERVED + len(self._words)

    @property
    def num_tags(self) -> int:
        """The number of tag ids, reserved ids included (the size of a tag embedding); 0 when
        the vocabulary reads no tags (``tag_column="none"``)."""
        return 0 if self._tag_column == "none" else NUM_RESERVED + len(self._tags)

    @property
    def num_relations(self) -> int:
        """The number of relation ids, the unknown relation (id 0) included (the number of
        classes of the arc-label classifier)."""
        return UNK_RELATION_ID + 1 + len(self._relations)

    @property
    def lowercase(self) -> bool:
        """Whether words are lowercased before look-up."""
        return self._lowercase

    @property
    def collapse_numbers(self) -> bool:
        """Whether words starting with a digit are looked up as :data:`NUMBER`."""
        return self._collapse_numbers

    @property
    def tag_column(self) -> str:
        """``"upos"``, ``"xpos"`` or ``"none"``: the tags of a sentence that are looked up."""
        return self._tag_column

    def sentence_tags(self, sentence: Sentence) -> tuple[str, ...]:
        """The tags of ``sentence`` that this vocabulary looks up (:attr:`tag_column`; none
        for ``"none"``).

        Raises:
            ValueError: for ``"xpos"`` and a sentence without XPOS tags.
        """
        if self._tag_column == "none":
            return ()
        if self._tag_column == "upos" or sentence.length == 0:
            return sentence.tags
        if not sentence.xpos:
            raise ValueError(
                "The vocabulary looks up XPOS tags, and the sentence has none. "
                f"Received: sentence at {sentence.location or '(built by hand)'!r} with xpos=()"
            )
        return sentence.xpos

    def normalize(self, word: str) -> str:
        """The form under which ``word`` is counted and looked up.

        Example:
            >>> vocabulary = Vocabulary([], [], lowercase=True, collapse_numbers=True)
            >>> [vocabulary.normalize(w) for w in ("The", "1,000", "2nd", "Sept.")]
            ['the', '<num>', '<num>', 'sept.']
        """
        if self._collapse_numbers and "0" <= word[:1] <= "9":
            return NUMBER
        return word.lower() if self._lowercase else word

    @property
    def counts(self) -> np.ndarray:
        """``(num_words,)`` int64: the training count of each word id, 0 for the reserved ids."""
        return self._counts

    @property
    def words(self) -> tuple[str, ...]:
        """The word of each id, the reserved names at ids 0, 1, 2."""
        return RESERVED + self._words

    @property
    def tags(self) -> tuple[str, ...]:
        """The tag of each id, the reserved names at ids 0, 1, 2 (none for ``"none"``)."""
        return () if self._tag_column == "none" else RESERVED + self._tags

    @property
    def relations(self) -> tuple[str, ...]:
        """The relation of each id, ``"<unk>"`` at id 0."""
        return (RESERVED[UNK_ID], *self._relations)

    def word_id(self, word: str) -> int:
        """The id of ``word`` (normalised first, :meth:`normalize`), ``UNK_ID`` if unknown."""
        return self._word_ids.get(self.normalize(word), UNK_ID)

    def tag_id(self, tag: str) -> int:
        """The id of ``tag``, ``UNK_ID`` if unknown."""
        return self._tag_ids.get(tag, UNK_ID)

    def relation_mask(self, at_root: bool) -> np.ndarray:
        """Which relation ids a word may take: ``(num_relations,)`` booleans, True for the
        relations seen in training attached to the root (``at_root``) or to a word; never the
        unknown relation (id 0). When training saw none there, every known relation.

        Example:
            >>> vocabulary = Vocabulary([], [], relations=["punct", "root"], root_relations=["root"],
            ...                         word_relations=["punct"])
            >>> vocabulary.relation_mask(True).tolist(), vocabulary.relation_mask(False).tolist()
            ([False, False, True], [False, True, False])
        """
        allowed = self._positions["root_relations" if at_root else "word_relations"] or self._relations
        mask = np.zeros(self.num_relations, bool)
        mask[[self._relation_ids[relation] for relation in allowed]] = True
        return mask

    def relation_id(self, relation: str) -> int:
        """The id of the dependency relation ``relation`` (a full label), ``UNK_RELATION_ID`` (0)
        if unknown."""
        return self._relation_ids.get(relation, UNK_RELATION_ID)

    def encode_relations(self, sentence: Sentence) -> np.ndarray:
        """The relation ids of a sentence's words: ``(n + 1,)`` int32, ``-1`` at the root (position 0)."""
        ids = np.fromiter(map(self.relation_id, sentence.relations), np.int32, sentence.length)
        return np.concatenate([np.array([-1], np.int32), ids])

    def encode(self, sentence: Sentence) -> tuple[np.ndarray, np.ndarray | None]:
        """The word ids and tag ids of a sentence, the root first.

        Args:
            sentence: a sentence of ``n`` words.

        Returns:
            ``(word_ids, tag_ids)``, each of shape ``(n + 1,)`` and dtype int32, with
            ``ROOT_ID`` (2) at position 0 and ``UNK_ID`` (1) for unknown words and tags;
            ``tag_ids`` is None for a vocabulary without tags (``tag_column="none"``).

        Example:
            >>> vocabulary = Vocabulary(words=["dog"], tags=["NOUN"])
            >>> s = Sentence(("dog", "cat"), ("NOUN", "NOUN"), np.array([-1, 0, 1]), "rr")
            >>> vocabulary.encode(s)[0].tolist()
            [2, 3, 1]
        """
        word_ids = np.fromiter((self.word_id(word) for word in sentence.words), np.int32, sentence.length)
        root = np.array([ROOT_ID], np.int32)
        if self._tag_column == "none":
            return np.concatenate([root, word_ids]), None
        tags = self.sentence_tags(sentence)
        tag_ids = np.fromiter((self.tag_id(tag) for tag in tags), np.int32, sentence.length)
        return np.concatenate([root, word_ids]), np.concatenate([root, tag_ids])

    def get_config(self) -> dict[str, Any]:
        """A JSON-serialisable dict from which :meth:`from_config` rebuilds the vocabulary.

        Returns:
            ``{"words": [...], "tags": [...], "counts": [...], "lowercase": bool,
            "collapse_numbers": bool, "tag_column": str, "relations": [...],
            "root_relations": [...], "word_relations": [...]}``, the reserved ids left out.
        """
        return {
            "words": list(self._words),
            "tags": list(self._tags),
            "counts": [int(count) for count in self._counts[NUM_RESERVED:]],
            "lowercase": self._lowercase,
            "collapse_numbers": self._collapse_numbers,
            "tag_column": self._tag_column,
            "relations": list(self._relations),
            "root_relations": list(self._positions["root_relations"]),
            "word_relations": list(self._positions["word_relations"]),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Vocabulary:
        """The vocabulary of :meth:`get_config`'s dict.

        Args:
            config: the dict, e.g. read back from JSON (one written before tag columns or
                relations were kept reads UPOS tags and has no relations).

        Returns:
            A vocabulary with the same ids and counts.

        Example:
            >>> vocabulary = Vocabulary(words=["dog"], tags=["NOUN"], counts=[4])
            >>> Vocabulary.from_config(vocabulary.get_config()) == vocabulary
            True
        """
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self.get_config() == other.get_config()

    def __repr__(self) -> str:
        return (
            f"Vocabulary(num_words={self.num_words}, num_tags={self.num_tags}, "
            f"num_relations={self.num_relations}, lowercase={self._lowercase}, "
            f"collapse_numbers={self._collapse_numbers}, tag_column={self._tag_column!r})"
        )


def word_dropout(
    word_ids: tf.Tensor,
    counts: tf.Tensor,
    alpha: float = 0.25,
    seed: int | tf.Tensor | None = None,
) -> tf.Tensor:
    """Replaces each word by ``<unk>`` with probability ``alpha / (alpha + counts[word])``.

    Reserved ids (padding, unknown, root) are never changed. The function is made of
    TensorFlow ops only, so it can run inside ``tf.data.Dataset.map`` and ``tf.function``.

    Randomness: with ``seed=None`` it draws from TensorFlow's global random state (a new
    mask at every call). With a seed the mask is a function of the seed alone
    (``tf.random.stateless_uniform``): the same seed gives the same mask, so a caller that
    wants a new mask per batch and epoch passes a new seed each time, as
    ``make_dataset`` does.

    Args:
        word_ids: integer tensor of any shape, the word ids.
        counts: ``(num_words,)`` tensor, the training count of each word id
            (:attr:`Vocabulary.counts`).
        alpha: the dropout constant, ``>= 0``; ``0`` returns ``word_ids`` unchanged.
        seed: None, a Python int, or a shape-``(2,)`` integer tensor (a stateless seed).

    Returns:
        A tensor like ``word_ids``, some words replaced by ``UNK_ID``.

    Raises:
        ValueError: if ``alpha`` is negative or not a number.

    Example:
        >>> counts = tf.constant([0, 0, 0, 1, 5])
        >>> ids = tf.constant([[2, 3, 4, 0]])
        >>> word_dropout(ids, counts, alpha=0.0).numpy().tolist()
        [[2, 3, 4, 0]]
        >>> word_dropout(ids, counts, alpha=1e9, seed=1).numpy().tolist()  # drops every word
        [[2, 1, 1, 0]]
    """
    alpha = check_number("alpha", alpha, minimum=0.0)
    word_ids = tf.convert_to_tensor(word_ids)
    if alpha == 0.0:
        return word_ids
    word_counts = tf.gather(tf.cast(counts, tf.float32), word_ids)
    keep_probability = word_counts / (alpha + word_counts)
    if seed is None:
        uniform = tf.random.uniform(tf.shape(word_ids))
    else:
        if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
            seed = tf.constant([seed, 0], tf.int64)
        uniform = tf.random.stateless_uniform(tf.shape(word_ids), seed=seed)
    drop = (word_ids >= NUM_RESERVED) & (uniform >= keep_probability)
    return tf.where(drop, tf.constant(UNK_ID, word_ids.dtype), word_ids)
