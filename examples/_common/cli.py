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


def add_tagging_arguments(parser: argparse.ArgumentParser) -> None:
    """The synthetic tagging task's and its training's options (``sparsemap_tagger``'s data)."""
    parser.add_argument("--epochs", type=int, default=10, help="training epochs")
    parser.add_argument("--sentences", type=int, default=1200, help="training sentences")
    parser.add_argument("--test-sentences", type=int, default=300, help="held-out sentences")
    parser.add_argument("--tags", type=int, default=6, help="number of tags K")
    parser.add_argument("--words", type=int, default=40, help="vocabulary size")
    parser.add_argument("--max-length", type=int, default=12, help="longest sentence")
    parser.add_argument("--hidden", type=int, default=32, help="embedding and hidden width")
    parser.add_argument("--batch-size", type=int, default=32, help="Adam batch size")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the weights")
