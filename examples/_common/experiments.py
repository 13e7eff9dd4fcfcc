"""Command-line and reporting helpers shared by the polynomial network experiments and benchmark."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from _common.cli import DEFAULT_DATA_DIR

if TYPE_CHECKING:  # numpy is imported where it is used: examples import this before parsing arguments
    import numpy as np

_START = time.perf_counter()


def add_common_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """Adds ``--data-dir``, ``--out`` (CSV path, default ``out``) and ``--seed``."""
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="shared data folder")
    parser.add_argument("--out", type=Path, default=Path(out), help="results CSV")
    parser.add_argument("--seed", type=int, default=0, help="seed of splits, solvers and SGD")


def int_list(text: str) -> list[int]:
    """Parses ``"5,10,20"`` into ``[5, 10, 20]`` (argparse ``type``)."""
    values = [int(value) for value in text.split(",") if value]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def float_list(text: str) -> list[float]:
    """Parses ``"1,10,100"`` into ``[1.0, 10.0, 100.0]`` (argparse ``type``)."""
    values = [float(value) for value in text.split(",") if value]
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive numbers separated by commas, got {text!r}")
    return values


def log(message: str) -> None:
    """Prints a progress line, prefixed by the seconds since start, to stderr."""
    print(f"[{time.perf_counter() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def subsample(n: int, max_rows: int | None, seed: int) -> np.ndarray:
    """Sorted indices of ``min(n, max_rows)`` rows drawn without replacement (all rows if ``None``)."""
    import numpy as np

    if max_rows is None or max_rows >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_rows, replace=False))


def holdout(
    n: int, fraction: float, seed: int, stratify: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(fit, validation)`` row indices: a seeded (optionally stratified) split of ``n`` rows."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    return train_test_split(np.arange(n), test_size=fraction, random_state=seed, stratify=stratify)


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    """Writes ``rows`` (dicts sharing the first row's keys) as CSV, whole, creating the folder."""
    from keras_structured import run_directory

    run_directory.make_directory(path.parent)
    columns = list(rows[0])
    run_directory.write_csv(path, columns, [[row.get(column, "") for column in columns] for row in rows])


def markdown_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """The ``columns`` of ``rows`` as a markdown table; floats with 4 significant digits."""

    def cell(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column, "")) for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def report_rows(path: Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    """Writes ``rows`` to the CSV ``path`` and prints their ``columns`` as a markdown table."""
    write_csv(path, rows)
    log(f"wrote {path}")
    print(markdown_table(rows, columns))
