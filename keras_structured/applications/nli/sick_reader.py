"""Reading the SICK sentence pairs (``sick.tsv``) into tokenised :class:`Pair` objects.

SICK (Marelli et al., LREC 2014) labels English sentence pairs ``entailment``,
``neutral`` or ``contradiction`` (premise ``sentence_a`` -> hypothesis ``sentence_b``)
and splits them into ``train`` (4,439 pairs), ``trial`` (495, SemEval's development set)
and ``test`` (4,906). The file read here is a tab-separated table with the header
``pair_id sentence_a sentence_b label split``; it is licensed CC BY-NC-SA 3.0 (non-commercial
use only) and is not part of this package: by default it is read from
``../shared/data/nli/sick.tsv`` relative to the repository root (:data:`DEFAULT_SICK`).

Tokenisation (:func:`tokenize`), a deterministic rule with no external tokeniser:

1. the sentence is lowercased;
2. the clitics ``n't`` and ``'s`` are split off the word before them, as in the Penn
   Treebank (``isn't`` -> ``is n't``, ``man's`` -> ``man 's``), so that the negation
   ``n't`` is a word of its own;
3. tokens are then the maximal runs of letters and digits, hyphenated compounds kept whole
   (``t-shirt``, ``go-kart``), plus the two clitics; every other character (commas, full
   stops, slashes, stray hyphens) separates tokens and is dropped.

A sentence with no token left is an error, as are an unknown label or split and bytes
that are not UTF-8: every error names the file and the line number.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import pathlib
import re
from collections.abc import Iterable

from keras_structured.validation import read_utf8

__all__ = ["DEFAULT_SICK", "LABELS", "SPLITS", "Pair", "read_sick", "tokenize"]

#: The three classes, in the order of the model's outputs.
LABELS = ("entailment", "neutral", "contradiction")
#: The splits of SICK ("trial" is the development set).
SPLITS = ("train", "trial", "test")
#: The columns of ``sick.tsv``, in order.
COLUMNS = ("pair_id", "sentence_a", "sentence_b", "label", "split")
#: Where ``sick.tsv`` is looked for by default: ``../shared/data/nli/sick.tsv`` from the repository root.
DEFAULT_SICK = (
    pathlib.Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "nli" / "sick.tsv"
).resolve()

_HEADER = "\t".join(COLUMNS)
_CLITIC = re.compile(r"(n't|'s)\b")
_TOKEN = re.compile(r"n't|'s|[a-z0-9]+(?:-[a-z0-9]+)*")


def tokenize(sentence: str) -> tuple[str, ...]:
    """The tokens of ``sentence`` by the rule of the module docstring.

    Args:
        sentence: a sentence, any case.

    Returns:
        The lowercase tokens (empty when the sentence holds no letter or digit).

    Example:
        >>> tokenize("The man isn't wearing a T-shirt, the dog's ball is red.")
        ('the', 'man', 'is', "n't", 'wearing', 'a', 't-shirt', 'the', 'dog', "'s", 'ball', 'is', 'red')
    """
    if not isinstance(sentence, str):
        raise ValueError(f"sentence must be a string. Received: sentence={sentence!r}")
    return tuple(_TOKEN.findall(_CLITIC.sub(r" \1", sentence.lower())))


@dataclasses.dataclass(frozen=True)
class Pair:
    """One SICK pair: the tokenised premise and hypothesis, the label and where it came from.

    Attributes:
        pair_id: SICK's ``pair_ID``.
        premise: tokens of ``sentence_a`` (at least one).
        hypothesis: tokens of ``sentence_b`` (at least one).
        label: one of :data:`LABELS`.
        split: one of :data:`SPLITS`.
        line: the line of the file the pair was read from (the header is line 1).
    """

    pair_id: int
    premise: tuple[str, ...]
    hypothesis: tuple[str, ...]
    label: str
    split: str
    line: int = 0

    @property
    def label_id(self) -> int:
        """The index of :attr:`label` in :data:`LABELS`."""
        return LABELS.index(self.label)


def _error(path, line: int, message: str) -> ValueError:
    return ValueError(f"{path}, line {line}: {message}")


def read_sick(
    path: str | os.PathLike = DEFAULT_SICK, splits: Iterable[str] = SPLITS
) -> dict[str, list[Pair]]:
    """Read and tokenise the pairs of ``sick.tsv``, by split.

    Args:
        path: the ``.tsv`` file (header ``pair_id sentence_a sentence_b label split``), UTF-8
            encoded (a leading byte-order mark is allowed).
        splits: the splits to return (the others are read and checked too).

    Returns:
        ``{split: [Pair, ...]}`` for every split asked for, pairs in file order.

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: naming the file and line, for bytes that are not UTF-8, a wrong header,
            a row without five fields, a ``pair_id`` that is not an integer, an unknown label
            or split, or a sentence with no token after tokenisation; also for an unknown split
            asked for.

    Example:
        >>> import tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "pairs.tsv"
        >>> _ = path.write_text("pair_id\\tsentence_a\\tsentence_b\\tlabel\\tsplit\\n"
        ...                     "1\\tA dog runs\\tA dog isn't running\\tcontradiction\\ttrain\\n")
        >>> read_sick(path)["train"][0].hypothesis
        ('a', 'dog', 'is', "n't", 'running')
    """
    splits = tuple(splits)
    for split in splits:
        if split not in SPLITS:
            raise ValueError(f"splits must be among {SPLITS}. Received: split={split!r}")
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No SICK file (sick.tsv) at the path; SICK is not distributed with this package "
            f"(license CC BY-NC-SA 3.0). Received: path={str(path)!r}"
        )
    result: dict[str, list[Pair]] = {split: [] for split in splits}
    with io.StringIO(read_utf8(path, where="{path}, line {line}"), newline="") as handle:
        rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header is None or tuple(header) != COLUMNS:
            raise _error(path, 1, f"expected the header {_HEADER!r}. Received: header={header!r}")
        for row in rows:
            line = rows.line_num
            if row == []:
                continue
            if len(row) != len(COLUMNS):
                raise _error(path, line, f"expected {len(COLUMNS)} tab-separated fields. Received: {row!r}")
            pair_id, sentence_a, sentence_b, label, split = row
            try:
                number = int(pair_id)
            except ValueError:
                raise _error(
                    path, line, f"pair_id must be an integer. Received: pair_id={pair_id!r}"
                ) from None
            if label not in LABELS:
                raise _error(path, line, f"label must be one of {LABELS}. Received: label={label!r}")
            if split not in SPLITS:
                raise _error(path, line, f"split must be one of {SPLITS}. Received: split={split!r}")
            premise, hypothesis = tokenize(sentence_a), tokenize(sentence_b)
            for name, sentence, tokens in (
                ("sentence_a", sentence_a, premise),
                ("sentence_b", sentence_b, hypothesis),
            ):
                if not tokens:
                    raise _error(
                        path, line, f"{name} has no token after tokenisation. Received: {name}={sentence!r}"
                    )
            if split in result:
                result[split].append(Pair(number, premise, hypothesis, label, split, line))
    return result
