"""Alignment heatmaps of the NLI models (the SparseMAP paper's Figure 5), as PNG files.

A figure shows, for one sentence pair, the attention of each model as a premise-by-hypothesis
grid: rows are premise words, columns hypothesis words, the cell's darkness its weight in
``[0, 1]``. Two panels per model: ``P2H`` (each row is one premise word's weights over the
hypothesis) and ``H2P`` transposed (each column is one hypothesis word's weights over the
premise). The softmax puts weight everywhere; the SparseMAP alignments on a few cells, each
nonzero cell written out.

Matplotlib (an optional dependency) is imported inside the functions, never TensorFlow. Each
figure is drawn on its own ``Figure`` with an Agg canvas.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_alignments"]

_DPI = 120


def _check_panel(name: str, matrix: Any, rows: Sequence[str], columns: Sequence[str]) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=float)
    if matrix.shape != (len(rows), len(columns)):
        raise ValueError(
            f"{name} must have one row per premise word and one column per hypothesis word, shape "
            f"({len(rows)}, {len(columns)}). Received: {name}.shape={matrix.shape}"
        )
    if not np.all(np.isfinite(matrix)):
        raise ValueError(f"{name} must be finite. Received: {matrix.tolist()}")
    return matrix


def plot_alignments(
    premise: Sequence[str],
    hypothesis: Sequence[str],
    models: Mapping[str, tuple[Any, Any]],
    path: str | os.PathLike,
    title: str | None = None,
) -> Path:
    """Draw the attention of several models on one pair, a row of two panels per model.

    Args:
        premise: the ``m`` premise tokens.
        hypothesis: the ``n`` hypothesis tokens.
        models: ``{name: (p2h (m, n), h2p (n, m))}``, in drawing order.
        path: the PNG file (parent folders are created).
        title: the figure's title.

    Returns:
        The path written.

    Example:
        >>> import tempfile
        >>> eye = np.eye(2)
        >>> path = plot_alignments(["a", "dog"], ["a", "cat"], {"matching": (eye, eye)},
        ...                        Path(tempfile.mkdtemp()) / "pair.png")
        >>> path.stat().st_size > 0
        True
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    premise, hypothesis = list(premise), list(hypothesis)
    if not premise or not hypothesis or not models:
        raise ValueError(
            "premise, hypothesis and models must not be empty. "
            f"Received: premise={premise!r}, hypothesis={hypothesis!r}, models={list(models)!r}"
        )
    panels = []
    for name, (p2h, h2p) in models.items():
        p2h = _check_panel(f"{name} p2h", p2h, premise, hypothesis)
        h2p = _check_panel(f"{name} h2p transposed", np.asarray(h2p, dtype=float).T, premise, hypothesis)
        panels.append((name, p2h, h2p))
    m, n = len(premise), len(hypothesis)
    cell = 0.42
    fig = Figure(figsize=(2 * (n * cell + 1.6), len(panels) * (m * cell + 1.4) + (0.4 if title else 0)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 2, squeeze=False)
    for row, (name, p2h, h2p) in enumerate(panels):
        for column, (matrix, direction) in enumerate(((p2h, "P2H"), (h2p, "H2P (transposed)"))):
            ax = axes[row, column]
            ax.imshow(matrix, cmap="Blues", vmin=0.0, vmax=1.0, aspect="equal")
            nonzero = np.count_nonzero(matrix)
            ax.set_title(f"{name}: {direction}, {nonzero}/{matrix.size} nonzero", fontsize=9)
            ax.set_xticks(range(n), hypothesis, rotation=60, ha="right", fontsize=8)
            ax.set_yticks(range(m), premise, fontsize=8)
            if name != "softmax":
                for i, j in zip(*np.nonzero(matrix), strict=True):
                    value = matrix[i, j]
                    ax.text(
                        j,
                        i,
                        f"{value:.2f}".lstrip("0"),
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if value > 0.6 else "black",
                    )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI, format="png")
    return path
