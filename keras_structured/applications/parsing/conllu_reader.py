"""Reading Universal Dependencies treebanks in CoNLL-U into :class:`Sentence` objects.

A CoNLL-U file holds one token per line in ten tab-separated columns
``ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC``, sentences separated by blank
lines and preceded by ``#`` comments. Three kinds of ID occur:

* ``7``: a syntactic word, numbered ``1..n`` in each sentence; its HEAD is ``0`` (the
  root) or the ID of another word. These are the nodes of the dependency tree.
* ``3-4``: a multiword token (the surface form of words 3 and 4, e.g. Spanish "del");
* ``8.1``: an empty node of the enhanced graph (elided predicates).

A parser sees only the words: :func:`read_conllu` skips the other two kinds and keeps
every tree as it is, non-projective ones included, after checking that it is a tree
(:func:`tree_problems`: every word reaches the root, with no cycle; with the single-root
constraint, one word attached to the root). The head vector of a sentence has
``n + 1`` entries, the first one for the root (``-1``), the same convention as the
dependency-tree structure of :mod:`keras_structured.engine.dependency_tree`. A file to be
parsed (trees optional, every line written back) is read by
:mod:`keras_structured.applications.parsing.conllu_files` instead.

Lines are parsed by the ``conllu`` package (an optional dependency, imported when a file
is read). Each line is checked before ``conllu`` sees it, so that malformed input fails
with the file and line number instead of an exception somewhere inside ``conllu``.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pathlib
import re
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TextIO

import numpy as np

from keras_structured.validation import check_bool, read_utf8

__all__ = [
    "SPLITS",
    "TAG_COLUMNS",
    "UNSPECIFIED",
    "Sentence",
    "read_conllu",
    "tree_problems",
    "treebank_paths",
]

#: The three splits of a UD treebank, in the order of the file names' suffixes.
SPLITS = ("train", "dev", "test")

_NUM_COLUMNS = 10
_ID, _FORM, _UPOS, _HEAD, _DEPREL = 0, 1, 3, 6, 7
_COLUMN_NAMES = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
_WORD_ID = re.compile(r"[1-9][0-9]*")
_RANGE_ID = re.compile(r"[1-9][0-9]*-[1-9][0-9]*")
_EMPTY_NODE_ID = re.compile(r"(?:0|[1-9][0-9]*)\.[1-9][0-9]*")
_HEAD_VALUE = re.compile(r"0|[1-9][0-9]*")
#: The tag columns a parser can embed: universal (UPOS, :attr:`Sentence.tags`) or the
#: treebank's own (XPOS, :attr:`Sentence.xpos`).
TAG_COLUMNS = ("upos", "xpos", "none")  # "none": no tags, a parser of the words alone
#: The value of a CoNLL-U column that the file leaves unspecified (a DEPREL ``_``: no relation).
UNSPECIFIED = "_"


@dataclasses.dataclass(frozen=True, eq=False)
class Sentence:
    """One sentence of a treebank: its words, their part-of-speech tags and its dependency tree.

    Words are numbered ``1..n`` as in the file; position ``0`` of :attr:`heads` stands
    for the artificial root. The array is stored as a read-only int64 copy, so a
    ``Sentence`` is immutable; equality compares every field, array included.

    Args:
        words: the ``n`` word forms (FORM column), without the root.
        tags: the ``n`` universal part-of-speech tags (UPOS column).
        heads: shape ``(n + 1,)``: ``heads[0] = -1`` (the root has no head) and, for
            ``i`` in ``1..n``, ``heads[i]`` is the head of word ``i`` (``0`` for the root).
        relations: the ``n`` dependency relations (DEPREL column).
        location: where the sentence comes from, ``"path:line"`` of its first word line
            (empty for sentences built by hand).
        xpos: the ``n`` language-specific tags (XPOS column, ``"_"`` where the file has
            none), or empty (sentences built by hand).

    Raises:
        ValueError: if the lengths disagree, ``heads[0] != -1`` or a head lies outside
            ``0..n``.

    Example:
        >>> s = Sentence(("I", "run"), ("PRON", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> s.length, s.is_projective()
        (2, True)
    """

    words: tuple[str, ...]
    tags: tuple[str, ...]
    heads: np.ndarray
    relations: tuple[str, ...]
    location: str = ""
    xpos: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("words", "tags", "relations", "xpos"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        n = len(self.words)
        if len(self.tags) != n or len(self.relations) != n or len(self.xpos) not in (0, n):
            raise ValueError(
                "words, tags, relations (and xpos, unless empty) must have the same length. Received: "
                f"len(words)={n}, len(tags)={len(self.tags)}, len(relations)={len(self.relations)}, "
                f"len(xpos)={len(self.xpos)}"
            )
        heads = np.array(self.heads, dtype=np.int64)
        if heads.shape != (n + 1,):
            raise ValueError(
                f"heads must have shape (n + 1,) = ({n + 1},) for n = {n} words. "
                f"Received: heads.shape={heads.shape}"
            )
        if heads[0] != -1 or np.any(heads[1:] < 0) or np.any(heads[1:] > n):
            raise ValueError(
                f"heads[0] must be -1 and every other head in 0..{n}. Received: heads={heads.tolist()}"
            )
        heads.setflags(write=False)
        object.__setattr__(self, "heads", heads)

    @property
    def length(self) -> int:
        """The number of words ``n`` (the root not included)."""
        return len(self.words)

    def is_projective(self) -> bool:
        """Whether no two arcs cross, the arcs from the root (position 0) included.

        Arcs ``(h, d)`` and ``(h', d')`` cross when their spans interleave:
        ``min(h, d) < min(h', d') < max(h, d) < max(h', d')``. For a tree rooted at
        position 0 this is the usual definition (every word between a head and its
        dependent descends from that head).

        Returns:
            True for a projective tree.

        Example:
            >>> Sentence("abcd", "XXXX", np.array([-1, 3, 4, 0, 3]), "rrrr").is_projective()
            False
        """
        dependents = np.arange(1, self.length + 1)
        left = np.minimum(self.heads[1:], dependents)
        right = np.maximum(self.heads[1:], dependents)
        crossing = (
            (left[:, None] < left[None, :])
            & (left[None, :] < right[:, None])
            & (right[:, None] < right[None, :])
        )
        return not bool(crossing.any())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sentence):
            return NotImplemented
        return (
            self.words == other.words
            and self.tags == other.tags
            and self.xpos == other.xpos
            and self.relations == other.relations
            and self.location == other.location
            and np.array_equal(self.heads, other.heads)
        )

    def __hash__(self) -> int:
        return hash((self.words, self.tags, self.xpos, self.relations, self.location, self.heads.tobytes()))


@dataclasses.dataclass
class _Block:
    """The token lines of one blank-line-separated block: ``(line number, columns)`` each."""

    lines: list[tuple[int, list[str]]] = dataclasses.field(default_factory=list)


class _CheckedLines:
    """The lines of an open CoNLL-U file, checked one by one as ``conllu`` reads them.

    ``conllu.parse_incr`` iterates over its input line by line. This wrapper checks each
    token line before handing it on (so per-line errors carry the exact line number), and
    queues the token lines of every block (every run of non-blank lines, as ``conllu``
    splits them), so that the reader can match each parsed sentence with its line numbers
    however far ahead ``conllu`` reads.
    """

    def __init__(self, handle: TextIO, path: str) -> None:
        self._lines = enumerate(handle, start=1)
        self._path = path
        self._current: _Block | None = None
        self.blocks: deque[_Block] = deque()

    def read(self, size: int = -1) -> str:  # conllu.parse_incr asks for a file-like object
        raise NotImplementedError("_CheckedLines is read by iteration only")

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        number, line = next(self._lines)
        text = line.rstrip("\r\n")
        if not text.strip():
            self._current = None
            return line
        if self._current is None:
            self._current = _Block()
            self.blocks.append(self._current)
        if not text.strip().startswith("#"):
            self._current.lines.append((number, _check_line(text, f"{self._path}:{number}")))
        return line


def _check_line(text: str, where: str, head_required: bool = True) -> list[str]:
    """The ten columns of a token line, checked: column count, ID form, integer HEAD of words
    (or ``_`` as well, without ``head_required``: a file to be parsed need not have trees)."""
    columns = text.split("\t")
    if len(columns) != _NUM_COLUMNS:
        raise ValueError(
            f"Malformed CoNLL-U line at {where}: expected {_NUM_COLUMNS} tab-separated columns. "
            f"Received: {len(columns)} columns in line={text!r}"
        )
    for name, value in zip(_COLUMN_NAMES, columns, strict=True):
        if not value:
            raise ValueError(
                f"Malformed CoNLL-U line at {where}: column {name} is empty (use '_'). "
                f"Received: line={text!r}"
            )
    token_id = columns[_ID]
    if _WORD_ID.fullmatch(token_id):
        if not (_HEAD_VALUE.fullmatch(columns[_HEAD]) or (columns[_HEAD] == "_" and not head_required)):
            required = "a non-negative integer" if head_required else "'_' or a non-negative integer"
            raise ValueError(
                f"Malformed CoNLL-U line at {where}: HEAD must be {required}. "
                f"Received: head={columns[_HEAD]!r}"
            )
        return columns
    is_range = _RANGE_ID.fullmatch(token_id) is not None
    if not (is_range or _EMPTY_NODE_ID.fullmatch(token_id)):
        raise ValueError(
            f"Malformed CoNLL-U line at {where}: ID must be an integer, a range such as '3-4' or an "
            f"empty node such as '8.1'. Received: id={token_id!r}"
        )
    if is_range and int(token_id.split("-")[0]) > int(token_id.split("-")[1]):
        raise ValueError(
            f"Malformed CoNLL-U line at {where}: a multiword range must not decrease. "
            f"Received: id={token_id!r}"
        )
    if columns[_HEAD] != "_" and not _HEAD_VALUE.fullmatch(columns[_HEAD]):
        raise ValueError(
            f"Malformed CoNLL-U line at {where}: HEAD of a multiword token or empty node must be '_' or "
            f"an integer. Received: head={columns[_HEAD]!r}"
        )
    return columns


def tree_problems(heads: np.ndarray, single_root: bool = False) -> list[str]:
    """Why the head vector ``heads`` is not a dependency tree: an empty list for a tree.

    With heads in ``0..n`` (one per word), the arcs form a tree rooted at position 0
    exactly when following heads from every word reaches the root: no cycle (a word that
    is its own head included), hence at least one word attached to the root.

    Args:
        heads: shape ``(n + 1,)``, ``heads[0] = -1`` and every other head in ``0..n``, as
            in :attr:`Sentence.heads`.
        single_root: also require exactly one word attached to the root.

    Returns:
        One sentence per problem found, naming the words (numbered ``1..n``).

    Example:
        >>> tree_problems(np.array([-1, 2, 0]))
        []
        >>> tree_problems(np.array([-1, 0, 3, 2]))
        ['words 2 -> 3 -> 2 form a cycle']
        >>> tree_problems(np.array([-1, 0, 0]), single_root=True)
        ['2 words are attached to the root (words 1 and 2); the single-root constraint allows one']
    """
    problems = []
    roots = (np.flatnonzero(heads[1:] == 0) + 1).tolist()
    if not roots:
        problems.append("no word is attached to the root (HEAD 0)")
    # 0: not seen yet; 1: on the path being followed; 2: done (reaches the root, or a cycle reported).
    state = np.zeros(len(heads), dtype=np.int8)
    state[0] = 2
    for start in range(1, len(heads)):
        path, node = [], start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = int(heads[node])
        if state[node] == 1:  # back on the current path: a cycle through node
            cycle = path[path.index(node) :]
            problems.append(
                f"word {node} is its own head"
                if len(cycle) == 1
                else f"words {' -> '.join(map(str, [*cycle, node]))} form a cycle"
            )
        state[path] = 2
    if single_root and len(roots) > 1:
        listed = ", ".join(map(str, roots[:-1])) + f" and {roots[-1]}"
        problems.append(
            f"{len(roots)} words are attached to the root (words {listed}); the single-root constraint "
            "allows one"
        )
    return problems


def _sentence(tokens: Sequence, block: _Block, path: str, single_root: bool) -> Sentence | None:
    """The :class:`Sentence` of one parsed block, checked against its lines; None for comments only."""
    word_lines = [(number, columns) for number, columns in block.lines if _WORD_ID.fullmatch(columns[_ID])]
    if len(tokens) != len(block.lines):
        raise ValueError(  # a bug of the line bookkeeping (or of conllu), not of the file
            f"Internal error reading {path}:{block.lines[0][0] if block.lines else '?'}: conllu parsed "
            f"{len(tokens)} tokens from {len(block.lines)} token lines."
        )
    if not block.lines:
        return None
    words = [token for token in tokens if isinstance(token["id"], int)]
    n = len(word_lines)
    if n == 0:
        number = block.lines[0][0]
        raise ValueError(f"Malformed CoNLL-U sentence at {path}:{number}: the sentence has no word line.")
    heads = np.empty(n + 1, dtype=np.int64)
    heads[0] = -1
    for position, ((number, columns), token) in enumerate(zip(word_lines, words, strict=True), start=1):
        where = f"{path}:{number}"
        if int(columns[_ID]) != position:
            raise ValueError(
                f"Malformed CoNLL-U sentence at {where}: word IDs must be 1..n in order; expected "
                f"ID {position}. Received: id={columns[_ID]!r}"
            )
        if token["form"] != columns[_FORM] or token["deprel"] != columns[_DEPREL]:
            raise ValueError(  # conllu also splits on two spaces, which CoNLL-U allows in FORM
                f"CoNLL-U line at {where} was split differently by the conllu package "
                f"(two consecutive spaces in a field?). Received: line={chr(9).join(columns)!r}"
            )
        head = token["head"]
        if not 0 <= head <= n:
            raise ValueError(
                f"Malformed CoNLL-U sentence at {where}: HEAD must be in 0..{n} (the sentence has "
                f"{n} words). Received: head={head}"
            )
        heads[position] = head
    problems = tree_problems(heads, single_root)
    if problems:
        raise ValueError(
            f"Malformed CoNLL-U sentence at {path}:{word_lines[0][0]}: the heads do not form a dependency "
            f"tree: {'; '.join(problems)}. Received: heads={heads[1:].tolist()} (words 1..{n})"
        )
    return Sentence(
        words=tuple(token["form"] for token in words),
        tags=tuple(token["upos"] for token in words),
        heads=heads,
        relations=tuple(token["deprel"] for token in words),
        location=f"{path}:{word_lines[0][0]}",
        xpos=tuple(token["xpos"] or "_" for token in words),
    )


def read_conllu(path: str | os.PathLike, single_root: bool = False) -> list[Sentence]:
    """The sentences of a CoNLL-U file, with multiword tokens and empty nodes skipped.

    Every line is checked: ten tab-separated non-empty columns, an ID that is a word
    (``7``), a multiword range (``3-4``) or an empty node (``8.1``), and for words an
    integer HEAD. Every sentence is checked too: word IDs ``1..n`` in order, heads in
    ``0..n``, and a dependency tree (:func:`tree_problems`: no cycle, a word attached to
    the root, and with ``single_root`` only one), as UD guarantees. Trees are kept as they
    are: non-projective trees are not filtered.

    Args:
        path: the file, UTF-8 encoded (a leading byte-order mark is allowed).
        single_root: also require exactly one word attached to the root in every
            sentence, as a parser trained or evaluated with that constraint needs.

    Returns:
        The sentences in file order (at least one); blocks of comments without token lines
        are dropped.

    Raises:
        FileNotFoundError: if ``path`` is not a file.
        ValueError: on malformed input (bytes that are not UTF-8 included), naming the file
            and the line number; for a file with no sentence (empty, or comments only).
        ImportError: if the ``conllu`` package is not installed.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "tiny.conllu"
        >>> _ = path.write_text(
        ...     "# text = Dogs bark.\\n"
        ...     "1\\tDogs\\tdog\\tNOUN\\t_\\t_\\t2\\tnsubj\\t_\\t_\\n"
        ...     "2\\tbark\\tbark\\tVERB\\t_\\t_\\t0\\troot\\t_\\t_\\n"
        ...     "3\\t.\\t.\\tPUNCT\\t_\\t_\\t2\\tpunct\\t_\\t_\\n\\n"
        ... )
        >>> [sentence] = read_conllu(path)
        >>> sentence.words, sentence.heads.tolist()
        (('Dogs', 'bark', '.'), [-1, 2, 0, 2])
    """
    try:
        import conllu
        from conllu.exceptions import ParseException
    except ImportError as error:  # an optional dependency: pip install conllu
        raise ImportError("read_conllu needs the conllu package: pip install conllu") from error
    single_root = check_bool("single_root", single_root)
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CoNLL-U file not found. Received: path='{path}'")
    sentences = []
    # Universal newlines (newline=None), as open() would read the file.
    lines = _CheckedLines(io.StringIO(read_utf8(path), newline=None), str(path))
    parsed = iter(conllu.parse_incr(lines))
    while True:
        try:
            tokens = next(parsed)
        except StopIteration:
            break
        except ParseException as error:  # not expected after _check_line
            block = lines.blocks[0] if lines.blocks else _Block()
            number = block.lines[0][0] if block.lines else "?"
            raise ValueError(f"Malformed CoNLL-U sentence at {path}:{number}: {error}") from error
        sentence = _sentence(tokens, lines.blocks.popleft(), str(path), single_root)
        if sentence is not None:
            sentences.append(sentence)
    if not sentences:
        raise ValueError(
            f"The CoNLL-U file {path} holds no sentence: it is empty or has only comments and blank "
            f"lines. Received: path='{path}'"
        )
    return sentences


def treebank_paths(folder: str | os.PathLike, splits: Sequence[str] = SPLITS) -> dict[str, pathlib.Path]:
    """The CoNLL-U files of a treebank folder, ``<lang>_<treebank>-ud-<split>.conllu``.

    Args:
        folder: a folder such as ``shared/data/ud/en_ewt-2.0``.
        splits: the splits that must be there, among ``"train"``, ``"dev"``, ``"test"``
            (some folders hold dev and test only).

    Returns:
        A dict from each requested split to its file, in the order of ``splits``.

    Raises:
        FileNotFoundError: if ``folder`` is not a folder, or lacks one of the splits
            (the message names the split and lists the CoNLL-U files found).
        ValueError: for an unknown split, or a folder with two files for one split.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "vi_vtb-ud-dev.conllu").write_text("")
        >>> {split: path.name for split, path in treebank_paths(folder, splits=("dev",)).items()}
        {'dev': 'vi_vtb-ud-dev.conllu'}
    """
    if isinstance(splits, str) or not splits:
        raise ValueError(f"splits must be a non-empty sequence of split names. Received: splits={splits!r}")
    for split in splits:
        if split not in SPLITS:
            raise ValueError(f"Each split must be one of {list(SPLITS)}. Received: split={split!r}")
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            "Treebank folder not found: expected a folder holding <lang>_<treebank>-ud-{train,dev,test}"
            f".conllu files. Received: folder='{folder}'"
        )
    paths = {}
    for split in splits:
        matches = sorted(folder.glob(f"*-ud-{split}.conllu"))
        if not matches:
            found = sorted(path.name for path in folder.glob("*.conllu"))
            raise FileNotFoundError(
                f"The treebank folder '{folder}' has no {split} split: no file *-ud-{split}.conllu. "
                f"Received: splits={list(splits)}; CoNLL-U files in the folder: {found}"
            )
        if len(matches) > 1:
            raise ValueError(
                f"The treebank folder '{folder}' has several {split} files. "
                f"Received: {[path.name for path in matches]}"
            )
        paths[split] = matches[0]
    return paths
