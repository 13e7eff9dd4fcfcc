"""Gold trees are checked when a CoNLL-U file is read, and odd files get a clear error.

Every bad tree below is refused by :func:`read_conllu` with ``file:line`` of its
sentence: a cycle, a self-loop, no word attached to the root, two root words under the
single-root constraint, a head past the sentence. So are empty and comments-only files;
a UTF-8 byte-order mark is accepted.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

from keras_structured.applications.parsing.conllu_reader import read_conllu
from tests.shared_data import SHARED_DATA

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("conllu") is None,
    reason="the optional conllu package is not installed (pip install conllu)",
)

# The shared treebanks sit next to the repository (see shared/data/ud/README.md).
UD = SHARED_DATA / "ud"


def _line(token_id: int, head: int) -> str:
    return "\t".join(
        [str(token_id), f"w{token_id}", f"w{token_id}", "X", "_", "_", str(head), "dep", "_", "_"]
    )


def _write(tmp_path, heads: list[int], text_prefix: str = "", encoding: str = "utf-8") -> pathlib.Path:
    """A file of a good two-word sentence (lines 1-2), then the sentence of ``heads`` (from line 5)."""
    good = [_line(1, 0), _line(2, 1)]
    bad = [_line(position, head) for position, head in enumerate(heads, start=1)]
    path = tmp_path / "gold.conllu"
    path.write_text(text_prefix + "\n".join([*good, "", "# sent_id = 2", *bad, "", ""]), encoding=encoding)
    return path


# Each case: the heads of the second sentence (words 1..n, lines 5..), the line named
# (the sentence's first word; for a head out of range, that word's line) and the message.
NOT_TREES = {
    "cycle": ([0, 3, 4, 2], 5, r"words 2 -> 3 -> 4 -> 2 form a cycle"),
    "self_loop": ([0, 2, 1], 5, r"word 2 is its own head"),
    "no_root": ([2, 3, 1], 5, r"no word is attached to the root \(HEAD 0\); words 1 -> 2 -> 3 -> 1 form"),
    "head_out_of_range": ([0, 1, 7], 7, r"HEAD must be in 0\.\.3"),
}


@pytest.mark.parametrize("name", sorted(NOT_TREES))
def test_a_gold_head_vector_that_is_not_a_tree_is_refused_with_file_and_line(tmp_path, name):
    heads, line, message = NOT_TREES[name]
    path = _write(tmp_path, heads)
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}:{line}: .*{message}"):
        read_conllu(path)


def test_two_root_words_are_refused_only_under_the_single_root_constraint(tmp_path):
    path = _write(tmp_path, [0, 1, 0])
    first, second = read_conllu(path)
    assert second.heads.tolist() == [-1, 0, 1, 0]
    assert read_conllu(path, single_root=False) == [first, second]
    with pytest.raises(
        ValueError,
        match=f"{re.escape(str(path))}:5: .*2 words are attached to the root \\(words 1 and 3\\); "
        "the single-root constraint allows one",
    ):
        read_conllu(path, single_root=True)
    with pytest.raises(ValueError, match="single_root must be True or False. Received: single_root=1"):
        read_conllu(path, single_root=1)


def test_a_file_with_a_byte_order_mark_is_read(tmp_path):
    plain = read_conllu(_write(tmp_path, [2, 0]))
    for prefix in ("", "# newdoc\n"):  # the mark before a token line, and before a comment
        path = _write(tmp_path, [2, 0], text_prefix="\ufeff" + prefix, encoding="utf-8")
        sentences = read_conllu(path)
        assert [s.words for s in sentences] == [s.words for s in plain]
        assert [s.heads.tolist() for s in sentences] == [s.heads.tolist() for s in plain]


@pytest.mark.parametrize("text", ["", "\n\n", "# newdoc id = x\n# text = nothing\n\n# sent_id = 2\n"])
def test_an_empty_or_comments_only_file_is_refused_naming_the_file(tmp_path, text):
    path = tmp_path / "xx_tb-ud-dev.conllu"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} holds no sentence"):
        read_conllu(path)


def test_bytes_that_are_not_utf8_are_refused_with_file_and_line(tmp_path):
    path = tmp_path / "latin1.conllu"
    data = ("\n".join([_line(1, 0), _line(2, 1), "", "# text = caf\xe9"]) + "\n").encode("latin-1")
    path.write_bytes(data)
    offset = data.index(b"\xe9")
    with pytest.raises(
        ValueError, match=f"{re.escape(str(path))}:4: .*not valid UTF-8.*byte offset {offset}"
    ):
        read_conllu(path)


@pytest.mark.slow  # about 25 s: every split of the nine shared treebanks
def test_the_shared_treebanks_hold_only_trees():
    """Every split of every shared UD treebank passes the tree check, single root included."""
    folders = sorted(path for path in UD.glob("*") if path.is_dir()) if UD.is_dir() else []
    if not folders:
        pytest.skip(f"the shared UD treebanks are not next to the repository: {UD.resolve()}")
    for folder in folders:
        for path in sorted(folder.glob("*.conllu")):
            assert read_conllu(path, single_root=True), path
