"""Command-line pieces shared by the examples. Standard library only: ``--help`` stays fast.

Every example parses its arguments before it imports TensorFlow (8-11 s to import on a
small machine), so that ``--help`` and argument errors answer at once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"
"""``../shared/data`` next to the repository root: the data sets that the examples read in place."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows every option's default, and keeps the line breaks of the description."""


def make_parser(description: str) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with :class:`HelpFormatter`."""
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)
