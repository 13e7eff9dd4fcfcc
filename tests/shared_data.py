"""The datasets that sit next to the repository (``../shared/data``), and a skip without them.

A clone without that folder (anyone's clone) runs the README's test command all the same:
the tests that read a shared dataset are skipped with a message naming the missing path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = (Path(__file__).resolve().parents[1].parent / "shared" / "data").resolve()


def requires_shared(*parts: str) -> pytest.MarkDecorator:
    """Skip the test unless ``../shared/data/{parts}`` exists (the message names the path)."""
    path = SHARED_DATA.joinpath(*parts)
    return pytest.mark.skipif(
        not path.exists(), reason=f"needs the shared dataset {path}, which is not next to this checkout"
    )
