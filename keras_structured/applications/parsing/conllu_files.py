"""Whole CoNLL-U documents and pre-tokenised text as a parser's input, CoNLL-U as its output.

:func:`~keras_structured.applications.parsing.conllu_reader.read_conllu` reads a treebank for
training and evaluation: it keeps the words only and requires a gold tree in every sentence.
A file to be parsed is another thing: every line of it must come back unchanged but for the
trees, and it need not have trees at all. This module reads and writes such files:

* :func:`read_document` reads a CoNLL-U file whole: every line is kept (comments, multiword
  tokens ``3-4``, empty nodes ``8.1``, blank lines, all ten columns). Lines are checked as
  :func:`~keras_structured.applications.parsing.conllu_reader.read_conllu` checks them, with
  the file and line number in the message, except that the HEAD of a word may be ``_``;
  word IDs must run ``1..n`` in each sentence. Neither HEAD nor DEPREL is read.
* :func:`read_text` reads pre-tokenised text (one sentence per line, tokens separated by
  whitespace, blank lines skipped) into the CoNLL-U document of those words: each sentence
  gets the comments ``# sent_id = k`` (``k`` counted from 1) and ``# text = ...`` (its tokens
  joined by single spaces), and its word lines ``_`` in every column but ID and FORM.
* :meth:`Document.conllu` is the document with the HEAD and DEPREL of every word line
  replaced by a parser's; every other line, and every other column, is the one read. Line
  ends are written ``\\n`` (a file read with ``\\r\\n`` ends comes back with ``\\n``); a
  leading byte-order mark is dropped; a file that does not end with a line end still does
  not.
* :func:`trees_jsonl`: the trees SparseMAP puts weight on, one JSON line per sentence.
* :func:`check_outputs` and :func:`write_output`: output files are never the input, never
  replace a file unless asked to, and are written whole (a temporary file renamed over the
  target), or to standard output for ``-``. Their paths are the user's: symlinked folders
  are followed. Everything that can be checked is checked before the work starts, by
  :func:`check_outputs`; the temporary file that a killed writer left beside an output is
  deleted when the output is next written.

Example:
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "words.txt"
    >>> _ = path.write_text("Dogs bark .\\n\\nCats   sleep\\n")
    >>> document = read_text(path)
    >>> [sentence.words for sentence in document.sentences]
    [('Dogs', 'bark', '.'), ('Cats', 'sleep')]
    >>> heads = [np.array([-1, 2, 0, 2]), np.array([-1, 2, 0])]
    >>> print(document.conllu(heads).replace("\\t", " "), end="")
    # sent_id = 1
    # text = Dogs bark .
    1 Dogs _ _ _ _ 2 _ _ _
    2 bark _ _ _ _ 0 _ _ _
    3 . _ _ _ _ 2 _ _ _
    <BLANKLINE>
    # sent_id = 2
    # text = Cats sleep
    1 Cats _ _ _ _ 2 _ _ _
    2 sleep _ _ _ _ 0 _ _ _
    <BLANKLINE>
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pathlib
import re
import sys
from collections.abc import Mapping, Sequence

import numpy as np

from keras_structured.applications.parsing.conllu_reader import (
    _DEPREL,
    _FORM,
    _HEAD,
    _ID,
    _UPOS,
    _WORD_ID,
    Sentence,
    _check_line,
)
from keras_structured.run_directory import save_output_file
from keras_structured.validation import check_one_of, read_utf8

__all__ = [
    "INPUT_FORMATS",
    "STANDARD_OUTPUT",
    "Document",
    "check_outputs",
    "input_format",
    "read_document",
    "read_input",
    "read_text",
    "trees_jsonl",
    "write_output",
]

#: The formats of a parser's input: CoNLL-U, or pre-tokenised text.
INPUT_FORMATS = ("conllu", "text")
#: The format of an input file, from its suffix (lowercased).
_SUFFIX_FORMATS = {".conllu": "conllu", ".conll": "conllu", ".txt": "text"}
#: The output path that stands for standard output.
STANDARD_OUTPUT = "-"
_XPOS = 4
_SENT_ID = re.compile(r"#\s*sent_id\s*=\s*(.*?)\s*")


@dataclasses.dataclass(frozen=True)
class Document:
    """A CoNLL-U document: its lines as read, and the sentences a parser reads from them.

    Attributes:
        path: the file read.
        lines: every line of the CoNLL-U text, without its line end: the text is
            ``"\\n".join(lines)`` (so a text that ends with a line end has ``""`` last).
        sentences: one :class:`Sentence` per sentence, in order, with the FORM, UPOS, XPOS
            and DEPREL columns of its word lines and the location ``"path:line"`` of its
            first word line. The file's heads are not read (they may be ``_``): every word
            of :attr:`Sentence.heads` is attached to the root.
        word_lines: per sentence, the indices in :attr:`lines` of its word lines (line
            ``i`` of a CoNLL-U file, counted from 1, is ``lines[i - 1]``).
        sent_ids: per sentence, the value of its ``# sent_id = ...`` comment, or None.
    """

    path: str
    lines: tuple[str, ...]
    sentences: tuple[Sentence, ...]
    word_lines: tuple[tuple[int, ...], ...]
    sent_ids: tuple[str | None, ...]

    def conllu(
        self,
        heads: Sequence[np.ndarray],
        relations: Sequence[Sequence[str] | None] | None = None,
    ) -> str:
        """The CoNLL-U text of the document with the HEAD and DEPREL of every word replaced.

        Every other line and column is the one read: comments, multiword tokens, empty
        nodes (their HEAD, DEPREL and DEPS too), blank lines, and LEMMA, UPOS, XPOS, FEATS,
        DEPS and MISC of the words.

        Args:
            heads: per sentence, its head vector of shape ``(n + 1,)``, ``-1`` at the root,
                as :attr:`Sentence.heads` (entry 0 is not written).
            relations: per sentence, its ``n`` dependency relations, or None; None for all
                sentences. A sentence without relations gets DEPREL ``_`` (unavailable):
                the file's relations belong to the file's heads, not to the new ones.

        Returns:
            The text, ``"\\n"`` between lines.

        Raises:
            ValueError: for a number of sentences, a head vector or a number of relations
                that does not fit the document, a head outside ``0..n``, or a relation that
                is empty or holds whitespace.
        """
        count = len(self.sentences)
        if relations is None:
            relations = [None] * count
        if len(heads) != count or len(relations) != count:
            raise ValueError(
                f"heads and relations must hold one entry per sentence of the document ({count}). "
                f"Received: len(heads)={len(heads)}, len(relations)={len(relations)}"
            )
        lines = list(self.lines)
        for sentence, indices, sentence_heads, sentence_relations in zip(
            self.sentences, self.word_lines, heads, relations, strict=True
        ):
            n = len(indices)
            where = sentence.location
            sentence_heads = np.asarray(sentence_heads)
            out_of_range = np.any(sentence_heads[1:] < 0) or np.any(sentence_heads > n)
            if sentence_heads.shape != (n + 1,) or out_of_range:
                raise ValueError(
                    f"The heads of the sentence at {where} must have shape ({n + 1},) and values in "
                    f"0..{n}. Received: heads={sentence_heads.tolist()}"
                )
            if sentence_relations is None:
                sentence_relations = ("_",) * n
            if len(sentence_relations) != n or not all(
                isinstance(relation, str) and relation and not any(c.isspace() for c in relation)
                for relation in sentence_relations
            ):
                raise ValueError(
                    f"The sentence at {where} needs {n} relations, non-empty strings without whitespace. "
                    f"Received: relations={list(sentence_relations)}"
                )
            for position, index in enumerate(indices, start=1):
                columns = lines[index].split("\t")
                columns[_HEAD] = str(int(sentence_heads[position]))
                columns[_DEPREL] = sentence_relations[position - 1]
                lines[index] = "\t".join(columns)
        return "\n".join(lines)


def _lines(path: pathlib.Path, what: str) -> list[str]:
    """The lines of a UTF-8 file, universal line ends (``\\r\\n`` and ``\\r`` end lines too)."""
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found. Received: path='{path}'")
    return io.StringIO(read_utf8(path), newline=None).read().split("\n")


def _no_sentence(path: pathlib.Path, what: str, only: str) -> ValueError:
    return ValueError(
        f"The {what} {path} holds no sentence: it is empty or has only {only}. Received: path='{path}'"
    )


def read_document(path: str | os.PathLike) -> Document:
    """A CoNLL-U file as a :class:`Document`, every line kept; its trees are not needed.

    A sentence is a run of non-blank lines with at least one token line; ``#`` lines are
    comments. Runs of comments alone are kept as they are, and are not sentences.

    Args:
        path: the file, UTF-8 encoded (a leading byte-order mark is allowed).

    Returns:
        The document (at least one sentence).

    Raises:
        FileNotFoundError: if ``path`` is not a file.
        ValueError: on malformed input, naming the file and the line number: a token line
            without ten tab-separated non-empty columns, a malformed ID, a HEAD that is
            neither ``_`` nor an integer, word IDs that do not run ``1..n``, a sentence with
            no word line, bytes that are not UTF-8; or a file with no sentence.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "untagged.conllu"
        >>> _ = path.write_text("# sent_id = a\\n1\\tHi\\t_\\tINTJ\\t_\\t_\\t_\\t_\\t_\\t_\\n\\n")
        >>> document = read_document(path)
        >>> document.sentences[0].words, document.sent_ids, document.word_lines
        (('Hi',), ('a',), ((1,),))
    """
    path = pathlib.Path(path)
    lines = _lines(path, "CoNLL-U file")
    sentences, word_lines, sent_ids = [], [], []
    block: list[int] = []  # the indices of the current run of non-blank lines
    for index, line in enumerate([*lines, ""]):  # the last "" closes the last run
        if line.strip():
            block.append(index)
            continue
        if block:
            sentence = _block_sentence(lines, block, path)
            if sentence is not None:
                sentences.append(sentence[0])
                word_lines.append(sentence[1])
                sent_ids.append(sentence[2])
        block = []
    if not sentences:
        raise _no_sentence(path, "CoNLL-U file", "comments and blank lines")
    return Document(str(path), tuple(lines), tuple(sentences), tuple(word_lines), tuple(sent_ids))


def _block_sentence(lines: Sequence[str], block: Sequence[int], path: pathlib.Path):
    """``(sentence, word line indices, sent_id)`` of a run of non-blank lines; None for comments only."""
    sent_id, tokens = None, []
    for index in block:
        text = lines[index]
        if text.strip().startswith("#"):
            match = _SENT_ID.fullmatch(text.strip())
            if match and sent_id is None:
                sent_id = match.group(1)
            continue
        tokens.append((index, _check_line(text, f"{path}:{index + 1}", head_required=False)))
    if not tokens:
        return None
    words = [(index, columns) for index, columns in tokens if _WORD_ID.fullmatch(columns[_ID])]
    if not words:
        raise ValueError(
            f"Malformed CoNLL-U sentence at {path}:{tokens[0][0] + 1}: the sentence has no word line."
        )
    for position, (index, columns) in enumerate(words, start=1):
        if int(columns[_ID]) != position:
            raise ValueError(
                f"Malformed CoNLL-U sentence at {path}:{index + 1}: word IDs must be 1..n in order; "
                f"expected ID {position}. Received: id={columns[_ID]!r}"
            )
    n = len(words)
    sentence = Sentence(
        words=tuple(columns[_FORM] for _, columns in words),
        tags=tuple(columns[_UPOS] for _, columns in words),
        heads=np.array([-1] + [0] * n),
        relations=tuple(columns[_DEPREL] for _, columns in words),
        location=f"{path}:{words[0][0] + 1}",
        xpos=tuple(columns[_XPOS] for _, columns in words),
    )
    return sentence, tuple(index for index, _ in words), sent_id


def read_text(path: str | os.PathLike) -> Document:
    """Pre-tokenised text as the CoNLL-U :class:`Document` of its words.

    One sentence per line, tokens separated by whitespace (spaces, tabs, any character that
    ``str.split`` splits on); blank lines are skipped. Every token is a word. The sentences
    have no tags: UPOS and XPOS are ``_``.

    Args:
        path: the file, UTF-8 encoded (a leading byte-order mark is allowed).

    Returns:
        The document: per sentence the comments ``# sent_id = k`` (``k`` = 1, 2, ... in
        order) and ``# text = ...`` (the tokens joined by single spaces), the word lines
        ``ID FORM _ _ _ _ _ _ _ _`` and a blank line. Each sentence's location is the
        text file's line.

    Raises:
        FileNotFoundError: if ``path`` is not a file.
        ValueError: for bytes that are not UTF-8 (naming the line), or a file with no token.
    """
    path = pathlib.Path(path)
    lines, sentences, word_lines, sent_ids = [], [], [], []
    for number, line in enumerate(_lines(path, "Text file"), start=1):
        tokens = line.split()
        if not tokens:
            continue
        sent_id = str(len(sentences) + 1)
        lines += [f"# sent_id = {sent_id}", f"# text = {' '.join(tokens)}"]
        word_lines.append(tuple(range(len(lines), len(lines) + len(tokens))))
        lines += ["\t".join([str(i), token, *("_",) * 8]) for i, token in enumerate(tokens, start=1)]
        lines.append("")
        blanks = ("_",) * len(tokens)
        root_heads = np.array([-1] + [0] * len(tokens))
        sentences.append(Sentence(tuple(tokens), blanks, root_heads, blanks, f"{path}:{number}", blanks))
        sent_ids.append(sent_id)
    if not sentences:
        raise _no_sentence(path, "text file", "blank lines")
    lines.append("")  # the text ends with a line end
    return Document(str(path), tuple(lines), tuple(sentences), tuple(word_lines), tuple(sent_ids))


def input_format(path: str | os.PathLike) -> str:
    """The format of an input file from its suffix: ``"conllu"`` for ``.conllu`` and ``.conll``,
    ``"text"`` for ``.txt`` (case ignored).

    Raises:
        ValueError: for another suffix (the format must then be given).

    Example:
        >>> input_format("en_ewt-ud-test.conllu"), input_format("NEWS.TXT")
        ('conllu', 'text')
    """
    suffix = pathlib.Path(path).suffix.lower()
    if suffix not in _SUFFIX_FORMATS:
        raise ValueError(
            f"Cannot tell the input format from the file name: name it *.conllu or *.conll (CoNLL-U) or "
            f"*.txt (text), or give the format (--input-format {' or '.join(INPUT_FORMATS)}). "
            f"Received: input={str(path)!r}"
        )
    return _SUFFIX_FORMATS[suffix]


def read_input(path: str | os.PathLike, file_format: str | None = None) -> Document:
    """A parser's input file: :func:`read_document` for ``"conllu"``, :func:`read_text` for
    ``"text"``; by default the format of its suffix (:func:`input_format`)."""
    if file_format is None:
        file_format = input_format(path)
    file_format = check_one_of("file_format", file_format, INPUT_FORMATS)
    return read_document(path) if file_format == "conllu" else read_text(path)


def trees_jsonl(
    document: Document, trees: Sequence[Sequence[tuple[np.ndarray, float]]], converged: Sequence[bool]
) -> str:
    """The trees SparseMAP puts weight on, one JSON line per sentence of ``document``.

    Each line is ``{"index": i, "sent_id": ..., "location": "path:line", "converged": bool,
    "trees": [{"heads": [h_1, ..., h_n], "weight": w}, ...]}``: ``index`` counts the
    sentences from 0, ``sent_id`` is the sentence's ``# sent_id`` (None without one),
    ``heads`` the HEAD of words ``1..n`` as in the CoNLL-U column (0: the root), the trees
    by decreasing weight; ``converged`` is False when SparseMAP stopped before it finished
    (the weights are then those of its last iterate).

    Args:
        document: the parsed document.
        trees: per sentence, ``[(heads, weight), ...]`` with heads of shape ``(n + 1,)``.
        converged: per sentence, whether SparseMAP finished.

    Returns:
        The lines, each ending with ``"\\n"``.
    """
    if len(trees) != len(document.sentences) or len(converged) != len(document.sentences):
        raise ValueError(
            f"trees and converged must hold one entry per sentence ({len(document.sentences)}). "
            f"Received: len(trees)={len(trees)}, len(converged)={len(converged)}"
        )
    lines = []
    for index, (sentence, sent_id, support, done) in enumerate(
        zip(document.sentences, document.sent_ids, trees, converged, strict=True)
    ):
        record = {
            "index": index,
            "sent_id": sent_id,
            "location": sentence.location,
            "converged": bool(done),
            "trees": [{"heads": np.asarray(heads)[1:].tolist(), "weight": float(w)} for heads, w in support],
        }
        lines.append(json.dumps(record) + "\n")
    return "".join(lines)


def check_outputs(
    input_path: str | os.PathLike | None, outputs: Mapping[str, str | None], overwrite: bool
) -> None:
    """Refuse output files that would destroy the input or another output, replace a file, or
    cannot be written: called before the work starts, so that nothing is computed in vain.

    Symlinks in the paths are followed (the folders are the user's). An output's folder may
    be missing (it is created), but its nearest existing folder must be a folder that this
    process may write into.

    Args:
        input_path: the input file (None: none to protect).
        outputs: each output option's path (None: not written), by option name
            (``{"--output": ..., "--trees": ...}``); ``-`` is standard output.
        overwrite: whether an existing file may be replaced.

    Raises:
        ValueError: an output is the input file, or two outputs are the same file, or an
            output is a folder, or a folder of its path is a file.
        FileExistsError: an output file exists and ``overwrite`` is False.
        PermissionError: an output's folder cannot be written into.
    """
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        if path != STANDARD_OUTPUT:
            path = pathlib.Path(path)
            if path.is_dir():
                raise ValueError(f"{option} must be a file, not a folder. Received: {option} {str(path)!r}")
            if input_path is not None and _same_file(path, pathlib.Path(input_path)):
                raise ValueError(
                    f"{option} must not be the input file, which writing would destroy. "
                    f"Received: {option} {str(path)!r} and --input {str(input_path)!r}"
                )
            if path.exists() and not overwrite:
                raise FileExistsError(
                    f"{option} names a file that exists: pass --overwrite to replace it. "
                    f"Received: {option} {str(path)!r}"
                )
            _check_folder(option, path)
        key = path if path == STANDARD_OUTPUT else str(pathlib.Path(path).resolve())
        if key in seen:
            raise ValueError(
                f"{seen[key]} and {option} must be different outputs. "
                f"Received: {seen[key]} {str(path)!r} and {option} {str(path)!r}"
            )
        seen[key] = option


def _check_folder(option: str, path: pathlib.Path) -> None:
    """Refuse an output whose folder cannot be made or written into (its nearest existing one)."""
    folder = path.resolve().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(
            f"{option} cannot be written: {str(folder)!r} in its path is a file, not a folder. "
            f"Received: {option} {str(path)!r}"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(
            f"{option} cannot be written: no permission to write into the folder {str(folder)!r}. "
            f"Received: {option} {str(path)!r}"
        )


def _same_file(path: pathlib.Path, other: pathlib.Path) -> bool:
    """Whether two paths name one file (through symlinks and hard links too)."""
    if path.exists() and other.exists():
        return os.path.samefile(path, other)
    return path.resolve() == other.resolve()


def write_output(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole, its folder created (a crash leaves the old file
    or the new one, never half of it; the temporary file a killed writer left is deleted the
    next time: :func:`~keras_structured.run_directory.save_output_file`), through symlinked
    folders; ``-`` writes it to standard output."""
    if str(path) == STANDARD_OUTPUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    save_output_file(path, lambda temporary: temporary.write_bytes(text.encode("utf-8")))
