"""Sparse token features ``phi(w, i)`` and distance features ``d(i, j)`` for a bilinear parser.

The bilinear parser of :mod:`keras_structured.applications.parsing.tracenorm` scores the arc from head
``i`` to dependent ``j`` of a sentence ``w`` as

    f(i, j) = phi(w, i)^T A phi(w, j) + b^T d(i, j),

with ``A`` a ``dim x dim`` matrix and ``b`` a short vector, the distance weights. This module computes both
feature maps.

**Token features** ``phi(w, i)``: a row of ``dim`` counts, one row per token, the root
(position 0) included. Each token emits the indicator strings below; each string is hashed
(CRC-32 of its UTF-8 bytes, so the same on every run and platform, unlike Python's salted
``hash``) to a column in ``0..dim-1``, and the row counts how many strings fell in each
column (several may collide, more so for a small ``dim``; any ``dim >= 1`` works). By
default each row is then scaled to unit Euclidean norm (``normalize=True``): every token
weighs the same, and ``|phi_i^T A phi_j| <= sigma_max(A) <= ||A||_*``, so the radius ``C``
of the trace-norm ball bounds every bilinear score.

=================  ===========================================  ===========================
template           value                                        example ("Dogs", NOUN)
=================  ===========================================  ===========================
``bias``           (none)                                       ``bias``
``upos``           the UPOS tag                                 ``upos=NOUN``
``shape``          the word shape (below)                       ``shape=Xx``
``prefix2/3``      the first 2 / 3 characters, lowercased       ``prefix2=do``
``suffix2/3``      the last 2 / 3 characters, lowercased        ``suffix3=ogs``
``word``           the word, lowercased                         ``word=dogs``
``prev_upos``      the UPOS tag of the previous token           ``prev_upos=<ROOT>``
``next_upos``      the UPOS tag of the next token (``<END>``)   ``next_upos=VERB``
=================  ===========================================  ===========================

All but ``word`` generalise to unseen words: a new word still has a tag, a shape, affixes
and neighbours. The word shape maps upper-case letters to ``X``, lower-case letters to
``x``, digits to ``d``, keeps other characters and collapses runs (``"McDonald's"`` ->
``"XxXx'x"``, ``"3.14"`` -> ``"d.d"``). A word shorter than an affix length gives its whole
lowercased form as that affix. The root token (word ``<ROOT>``, tag ``<ROOT>``) emits
``bias``, ``upos=<ROOT>``, ``word=<ROOT>`` and ``next_upos`` only: affixes and shape of a
made-up word would only collide with real ones.

**Distance features** ``d(i, j)``: one-hot, exactly one of :data:`NUM_DISTANCE_FEATURES`
= 15 features is on for every arc. With ``delta = j - i`` (dependent minus head):

=========  =====================================================================
feature    arcs
=========  =====================================================================
0..6       head before the dependent (``delta > 0``), ``|delta|`` in the buckets
7..13      head after the dependent (``delta < 0``), ``|delta|`` in the buckets
14         arcs from the root (``i = 0``), whatever the position of ``j``
=========  =====================================================================

The buckets of ``|delta|`` are ``1, 2, 3, 4, 5, 6..10, 11+`` (:data:`DISTANCE_BUCKETS`):
one feature per distance where most arcs are (in the training sets of UD 2.0 English EWT
and Vietnamese VTB, 86-87% of the arcs between words span 5 words or fewer, 94-95% span 10
or fewer), two coarse ones for the tail. One-hot features let the parser store ``d(i, j)`` as
one index per arc (:func:`distance_index`): the distance score is ``b[index]`` and the
gradient w.r.t. ``b`` a weighted count of indices. A bias over all arcs would be useless:
every tree of a sentence has the same number of arcs.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import zlib
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from keras_structured.applications.parsing.conllu_reader import Sentence
from keras_structured.validation import check_bool, check_integer

__all__ = [
    "DEFAULT_DIM",
    "DISTANCE_BUCKETS",
    "NUM_DISTANCE_FEATURES",
    "ROOT_FEATURE",
    "ROOT_TOKEN",
    "SentenceFeatures",
    "distance_index",
    "featurize",
    "token_feature_matrix",
    "token_feature_strings",
    "word_shape",
]

#: The default hashing dimension ``d`` of the token features.
DEFAULT_DIM = 2**12
#: Lower bounds of the buckets of ``|j - i|``: ``1, 2, 3, 4, 5, 6..10, 11+``.
DISTANCE_BUCKETS = (1, 2, 3, 4, 5, 6, 11)
#: Two directions times the buckets, plus the root-arc feature.
NUM_DISTANCE_FEATURES = 2 * len(DISTANCE_BUCKETS) + 1
#: The index of the root-arc feature in ``b``.
ROOT_FEATURE = NUM_DISTANCE_FEATURES - 1
#: The word and the tag of the root token.
ROOT_TOKEN = "<ROOT>"
_END_TAG = "<END>"
_AFFIX_LENGTHS = (2, 3)
_SHAPE_RUNS = re.compile(r"(.)\1+")


def word_shape(word: str) -> str:
    """The shape of a word: ``X`` for upper case, ``x`` lower case, ``d`` digits, runs collapsed.

    Args:
        word: a word form.

    Returns:
        The shape; other characters are kept.

    Example:
        >>> word_shape("McDonald's"), word_shape("3.14"), word_shape("e-mail")
        ("XxXx'x", 'd.d', 'x-x')
    """
    mapped = "".join("X" if c.isupper() else "x" if c.islower() else "d" if c.isdigit() else c for c in word)
    return _SHAPE_RUNS.sub(r"\1", mapped)


def token_feature_strings(sentence: Sentence) -> list[list[str]]:
    """The indicator strings of every token of a sentence, the root (position 0) first.

    Args:
        sentence: a :class:`~keras_structured.applications.parsing.conllu_reader.Sentence`.

    Returns:
        ``n + 1`` lists of strings (see the module docstring for the templates).

    Example:
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> token_feature_strings(s)[0]
        ['bias', 'upos=<ROOT>', 'word=<ROOT>', 'next_upos=NOUN']
        >>> token_feature_strings(s)[1][:4]
        ['bias', 'upos=NOUN', 'shape=Xx', 'prefix2=do']
    """
    tags = (ROOT_TOKEN, *sentence.tags, _END_TAG)
    rows = [["bias", f"upos={ROOT_TOKEN}", f"word={ROOT_TOKEN}", f"next_upos={tags[1]}"]]
    for position, word in enumerate(sentence.words, start=1):
        lower = word.lower()
        rows.append(
            [
                "bias",
                f"upos={tags[position]}",
                f"shape={word_shape(word)}",
                *(f"prefix{k}={lower[:k]}" for k in _AFFIX_LENGTHS),
                *(f"suffix{k}={lower[-k:]}" for k in _AFFIX_LENGTHS),
                f"word={lower}",
                f"prev_upos={tags[position - 1]}",
                f"next_upos={tags[position + 1]}",
            ]
        )
    return rows


@functools.lru_cache(maxsize=2**18)
def _hash(feature: str) -> int:
    return zlib.crc32(feature.encode("utf-8"))


def token_feature_matrix(sentence: Sentence, dim: int = DEFAULT_DIM, normalize: bool = True) -> sp.csr_matrix:
    """The hashed token features ``Phi`` of a sentence: row ``i`` is ``phi(w, i)``.

    Args:
        sentence: a :class:`~keras_structured.applications.parsing.conllu_reader.Sentence` of ``n`` words.
        dim: the hashing dimension ``d``, an integer >= 1.
        normalize: scale every row to unit Euclidean norm.

    Returns:
        A ``(n + 1, dim)`` float64 CSR matrix of counts (row 0 is the root), rows of
        norm 1 with ``normalize``.

    Raises:
        ValueError: if ``dim`` is not an integer >= 1.

    Example:
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> phi = token_feature_matrix(s, dim=64, normalize=False)
        >>> phi.shape, phi.sum(axis=1).A.ravel().tolist()
        ((3, 64), [4.0, 10.0, 10.0])
        >>> sp.linalg.norm(token_feature_matrix(s, dim=64), axis=1).round(12).tolist()
        [1.0, 1.0, 1.0]
    """
    dim = check_integer("dim", dim, minimum=1)
    normalize = check_bool("normalize", normalize)
    strings = token_feature_strings(sentence)
    rows = np.repeat(np.arange(len(strings)), [len(row) for row in strings])
    columns = np.array([_hash(feature) % dim for row in strings for feature in row], dtype=np.int64)
    matrix = sp.csr_matrix((np.ones(len(columns)), (rows, columns)), shape=(len(strings), dim))
    matrix.sum_duplicates()
    if normalize:
        norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
        matrix = sp.csr_matrix(sp.diags(1.0 / norms) @ matrix)
    return matrix


@functools.lru_cache(maxsize=512)
def distance_index(length: int) -> np.ndarray:
    """The distance feature of every arc of a sentence of ``length`` words, ``[head, dependent]``.

    Args:
        length: the number of words ``n`` (the root not included), an integer >= 0.

    Returns:
        A read-only ``(n + 1, n + 1)`` int64 array: entry ``[i, j]`` is the index in
        ``0..NUM_DISTANCE_FEATURES-1`` of the one distance feature of the arc ``i -> j``,
        and ``-1`` where there is no arc (column 0, into the root, and the diagonal).

    Raises:
        ValueError: if ``length`` is not an integer >= 0.

    Example:
        >>> distance_index(3)
        array([[-1, 14, 14, 14],
               [-1, -1,  0,  1],
               [-1,  7, -1,  0],
               [-1,  8,  7, -1]])
    """
    length = check_integer("length", length, minimum=0)
    positions = np.arange(length + 1)
    delta = positions[None, :] - positions[:, None]
    bucket = np.searchsorted(DISTANCE_BUCKETS, np.abs(delta), side="right") - 1
    index = np.where(delta > 0, bucket, len(DISTANCE_BUCKETS) + bucket)
    index[0, :] = ROOT_FEATURE
    index[:, 0] = -1
    index[positions, positions] = -1
    index.flags.writeable = False
    return index


@dataclasses.dataclass(frozen=True, eq=False)
class SentenceFeatures:
    """A sentence as the bilinear parser sees it: token features, gold heads and tags.

    Attributes:
        phi: ``(n + 1, dim)`` CSR token features (row 0 is the root).
        heads: ``(n + 1,)`` gold heads, ``-1`` at position 0 (as ``Sentence.heads``).
        tags: the ``n`` UPOS tags (for the UAS without punctuation).
    """

    phi: sp.csr_matrix
    heads: np.ndarray
    tags: tuple[str, ...]

    @property
    def length(self) -> int:
        """The number of words ``n``."""
        return self.phi.shape[0] - 1

    @property
    def dim(self) -> int:
        """The hashing dimension ``d``."""
        return self.phi.shape[1]

    @property
    def distance(self) -> np.ndarray:
        """:func:`distance_index` of the sentence's length."""
        return distance_index(self.length)

    def gold_arcs(self) -> np.ndarray:
        """The gold tree as a ``(n + 1, n + 1)`` indicator matrix ``y[head, dependent]``."""
        y = np.zeros((self.length + 1, self.length + 1))
        y[self.heads[1:], np.arange(1, self.length + 1)] = 1.0
        return y


def featurize(
    sentences: Sequence[Sentence], dim: int = DEFAULT_DIM, normalize: bool = True
) -> list[SentenceFeatures]:
    """The :class:`SentenceFeatures` of every sentence, hashed to ``dim`` columns.

    Args:
        sentences: :class:`~keras_structured.applications.parsing.conllu_reader.Sentence` objects, e.g.
            from ``read_conllu``.
        dim: the hashing dimension ``d``, an integer >= 1.
        normalize: scale every token's features to unit Euclidean norm.

    Returns:
        One :class:`SentenceFeatures` per sentence, in order.

    Raises:
        ValueError: if ``dim`` is not an integer >= 1.

    Example:
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> [features] = featurize([s], dim=8)
        >>> features.phi.shape, features.gold_arcs()[0].tolist()
        ((3, 8), [0.0, 0.0, 1.0])
    """
    dim = check_integer("dim", dim, minimum=1)
    normalize = check_bool("normalize", normalize)
    return [SentenceFeatures(token_feature_matrix(s, dim, normalize), s.heads, s.tags) for s in sentences]
