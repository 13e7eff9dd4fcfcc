"""Every ```python block of README.md and of the user guide (docs/*.md) runs, so that they cannot rot.

Convention: each ```python block is a self-contained program (its own imports, small
synthetic data) and is run on its own, as a file in a fresh folder, in this process (the
dtype policy is restored afterwards). A block that is not meant to run, an excerpt or a
sketch, is preceded by the line

    <!-- snippet: skip -->

(blank lines may stand between the marker and the block; text after ``skip`` is a
comment, e.g. ``<!-- snippet: skip (excerpt of tests/test_new_structure.py) -->``).
Shell commands go in ```bash blocks, which are never run.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import keras
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = README.parent / "docs"
SKIP = re.compile(r"^<!--\s*snippet:\s*skip\b.*-->$")
FENCE = re.compile(r"^```(\w*)\s*$")


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """``(first line number, code, skipped)`` of every ```python block of a markdown text."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, language = i, match.group(1)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
        if language == "python":
            before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            blocks.append((start + 1, "\n".join(lines[start + 1 : end]) + "\n", bool(SKIP.match(before))))
        i = end + 1
    return blocks


def run_snippet(code: str, folder: Path, name: str = "snippet.py") -> None:
    """Runs ``code`` as the file ``folder/name`` (numba caches need a file); restores the dtype policy."""
    path = folder / name
    path.write_text(code)
    policy = keras.config.dtype_policy()
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        keras.config.set_dtype_policy(policy)


def test_the_parser_finds_blocks_and_markers():
    text = (
        "x\n```python\na = 1\n```\n<!-- snippet: skip (a sketch) -->\n\n```python\nb\n```\n```bash\nls\n```\n"
    )
    assert python_blocks(text) == [(2, "a = 1\n", False), (7, "b\n", True)]


# Excerpts marked <!-- snippet: skip --> are not programs: they are left out, not reported as skipped tests.
BLOCKS = [
    (path, line, code)
    for path in [README, *sorted(DOCS.glob("*.md"))]
    for line, code, excerpt in python_blocks(path.read_text())
    if not excerpt
]


@pytest.mark.parametrize(
    "path, line, code",
    BLOCKS,
    ids=[f"{path.relative_to(README.parent)}:{line}" for path, line, _ in BLOCKS],
)
def test_python_block_runs(path, line, code, tmp_path):
    run_snippet(code, tmp_path, f"{path.stem}_line_{line}.py")
