"""Figures of the SparseMAP parsing experiments (the paper's Figures 3 and 4), as PNG files.

SparseMAP returns a sparse distribution over dependency trees, ``p in simplex``, with only a
few trees ``s`` such that ``p_s > 0``. The figures show that sparsity:

* :func:`draw_trees`: the trees one sentence's distribution puts weight on, one panel per
  tree, arcs above the words, those that differ from the top-weight tree highlighted
  (Figure 3);
* :func:`plot_sparsity`: the distribution of the number of trees per sentence (Figure 4);
* :func:`plot_sparsity_over_training`: how that number shrinks as training goes on;
* :func:`plot_learning_curves`: dev UAS against epoch, one line per run.

A tree of ``n`` words is a head vector of shape ``(n + 1,)`` as in
:class:`~keras_structured.applications.parsing.conllu_reader.Sentence`: entry 0, the root, is ``-1`` and
entry ``i`` is the head of word ``i`` (``0`` for the root).

Matplotlib (an optional dependency) is imported inside the functions, never TensorFlow. Each
figure is drawn on its own ``Figure`` with an Agg canvas, so the global pyplot state and the
user's backend are left alone and the functions may run in threads.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["draw_trees", "plot_learning_curves", "plot_sparsity", "plot_sparsity_over_training"]

#: Colour of the arcs a tree shares with the top-weight tree, and of the arcs it does not.
SAME_COLOR, DIFFERENT_COLOR = "0.2", "tab:red"
#: The last bin of :func:`plot_sparsity` holds every count ``>= MAX_BIN``.
MAX_BIN = 10
_DPI = 120


def _new_figure(width: float, height: float) -> Any:
    """A ``matplotlib.figure.Figure`` with an Agg canvas (no pyplot, no global backend change)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | os.PathLike) -> None:
    """Write ``fig`` as PNG to ``path`` (parent folders created); missing CJK glyphs are not an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # DejaVu Sans has no CJK glyphs: Chinese and Japanese words are drawn as boxes.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from")
        fig.savefig(path, dpi=_DPI, format="png", bbox_inches="tight")


def _integer_ticks(ax: Any) -> None:
    """Epochs are whole numbers: no ``1.5`` ticks on the x axis."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


# --------------------------------------------------------------------------------------------- checks


def _check_words(words: Sequence[str]) -> list[str]:
    if isinstance(words, str) or not isinstance(words, Sequence) or not words:
        raise ValueError(f"words must be a non-empty list of strings. Received: words={words!r}")
    if not all(isinstance(word, str) for word in words):
        raise ValueError(f"words must be a non-empty list of strings. Received: words={list(words)!r}")
    return list(words)


def _check_heads(heads: Any, n: int, name: str) -> np.ndarray:
    """``heads`` as int64, checked to be a tree over ``n`` words rooted at position 0."""
    array = np.asarray(heads)
    if array.shape != (n + 1,):
        raise ValueError(
            f"{name} must have shape (n + 1,) = ({n + 1},) for n = {n} words. "
            f"Received: {name}.shape={array.shape}"
        )
    whole_floats = np.issubdtype(array.dtype, np.floating) and np.array_equal(array, np.round(array))
    if not (np.issubdtype(array.dtype, np.integer) or whole_floats):
        raise ValueError(f"{name} must hold integers. Received: {name}={array.tolist()}")
    array = array.astype(np.int64)
    words = np.arange(1, n + 1)
    if array[0] != -1 or np.any(array[1:] < 0) or np.any(array[1:] > n) or np.any(array[1:] == words):
        raise ValueError(
            f"{name}[0] must be -1 and every other head in 0..{n}, not the word itself. "
            f"Received: {name}={array.tolist()}"
        )
    # Following heads from every word must reach the root within n steps, otherwise there is a cycle.
    reach = array.copy()
    reach[0] = 0
    position = words.copy()
    for _ in range(n):
        position = reach[position]
    if np.any(position != 0):
        raise ValueError(
            f"{name} must be a tree (no cycle; every word reaches 0). Received: {name}={array.tolist()}"
        )
    return array


def _check_weight(weight: Any, name: str) -> float:
    if isinstance(weight, np.ndarray) and weight.ndim == 0:
        weight = weight.item()
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight):
        raise ValueError(f"{name} must be a finite number >= 0. Received: {name}={weight!r}")
    if weight < -1e-9:  # solver round-off may leave -1e-17 on a dropped tree
        raise ValueError(f"{name} must be a finite number >= 0. Received: {name}={weight!r}")
    return max(float(weight), 0.0)


def _check_counts(counts: Any, name: str) -> np.ndarray:
    """Trees-per-sentence counts: a non-empty list of integers >= 1."""
    array = np.asarray(counts)
    if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer) or np.any(array < 1):
        shown = array.tolist() if array.size <= 20 else f"{array.tolist()[:20]}... ({array.size} values)"
        raise ValueError(
            f"{name} must be a non-empty list of integers >= 1 (trees per sentence). Received: {name}={shown}"
        )
    return array.astype(np.int64)


def _check_series(name: str, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.size == 0 or x.shape != y.shape:
        raise ValueError(
            f"{name} must be two non-empty lists of the same length. "
            f"Received: len(epochs)={x.size}, len(values)={y.size}"
        )
    return x, y


# ---------------------------------------------------------------------------------------------- trees


def _arc_height(span: int) -> float:
    """Peak height of an arc over ``span`` words: grows with the span, sub-linearly to stay compact."""
    return 0.6 * span**0.75


def _draw_tree(
    ax: Any, labels: list[str], heads: np.ndarray, top: np.ndarray, weight: float, top_y: float
) -> int:
    """Draw one tree on ``ax``; return the number of arcs that differ from ``top``."""
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.path import Path as MplPath

    differing = 0
    for dependent in range(1, len(heads)):
        head = int(heads[dependent])
        differs = bool(head != top[dependent])
        differing += differs
        # Quadratic Bezier from head to dependent: its peak is half-way to the control point.
        control = (0.5 * (head + dependent), 0.1 + 2 * _arc_height(abs(head - dependent)))
        path = MplPath(
            [(head, 0.1), control, (dependent, 0.1)], [MplPath.MOVETO, MplPath.CURVE3, MplPath.CURVE3]
        )
        ax.add_patch(
            FancyArrowPatch(
                path=path,
                arrowstyle="-|>",
                mutation_scale=9,
                linewidth=1.8 if differs else 0.9,
                color=DIFFERENT_COLOR if differs else SAME_COLOR,
                zorder=3 if differs else 2,
            )
        )
    for position, label in enumerate(labels):
        ax.text(
            position,
            0.0,
            label,
            ha="center",
            va="top",
            fontsize=9,
            fontweight="bold" if position == 0 else None,
        )
        ax.text(position, -0.45, str(position), ha="center", va="top", fontsize=6, color="0.5")
    verb = "arc differs" if differing == 1 else "arcs differ"
    note = f"p = {weight:.2f}" + (f"   ({differing} {verb} from the top tree)" if differing else "")
    ax.text(
        -0.6, top_y, note, ha="left", va="top", fontsize=10, color=DIFFERENT_COLOR if differing else "black"
    )
    ax.set_xlim(-0.7, len(labels) - 0.3)
    ax.set_ylim(-0.8, top_y)
    ax.axis("off")
    return differing


def draw_trees(
    words: list[str],
    trees: list[tuple[np.ndarray, float]],
    path: str | os.PathLike,
    title: str | None = None,
) -> None:
    """Draw the dependency trees a SparseMAP distribution puts weight on (the paper's Figure 3).

    One panel per tree, heaviest first: the words on a line after ``ROOT``, each arc an
    arrow above them from head to dependent, and the tree's weight ``p = ...`` written on
    its panel. Arcs where a tree differs from the top-weight tree are drawn thicker, in
    :data:`DIFFERENT_COLOR`. Trees of equal weight keep their order.

    Args:
        words: the ``n`` words of the sentence (no root).
        trees: ``(heads, weight)`` pairs, in any order: ``heads`` of shape ``(n + 1,)``,
            ``-1`` at position 0 and the head of word ``i`` (``0`` = ROOT) at ``i``;
            ``weight`` the tree's probability (``>= 0``). One tree is fine.
        path: the PNG file to write (its folder is created).
        title: drawn above the first panel, e.g. the sentence id.

    Returns:
        None; the figure is written to ``path``.

    Raises:
        ValueError: if ``words`` or ``trees`` is empty, a ``heads`` array has the wrong
            shape or is not a tree over the words, or a weight is negative or not finite.

    Example:
        >>> import pathlib, tempfile
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "trees.png"
        >>> trees = [(np.array([-1, 2, 0, 2]), 0.7), (np.array([-1, 2, 0, 1]), 0.3)]
        >>> draw_trees(["I", "saw", "her"], trees, out, title="dev sentence 3")
        >>> out.read_bytes()[:4]
        b'\\x89PNG'
    """
    words = _check_words(words)
    n = len(words)
    if isinstance(trees, (str, bytes)) or not isinstance(trees, Sequence) or len(trees) == 0:
        raise ValueError(
            f"trees must be a non-empty list of (heads, weight) pairs. Received: trees={trees!r}"
        )
    checked = []
    for index, tree in enumerate(trees):
        if not isinstance(tree, Sequence) or len(tree) != 2:
            raise ValueError(
                f"trees[{index}] must be a (heads, weight) pair. Received: trees[{index}]={tree!r}"
            )
        heads, weight = tree
        checked.append(
            (_check_heads(heads, n, f"trees[{index}] heads"), _check_weight(weight, f"trees[{index}] weight"))
        )
    checked.sort(key=lambda tree: -tree[1])  # stable: equal weights keep their order

    labels = ["ROOT", *words]
    longest = max(len(label) for label in labels)
    unit = min(max(0.12 * longest + 0.25, 0.6), 1.4)  # inches per word
    top_y = 0.4 + max(
        _arc_height(span) for heads, _ in checked for span in np.abs(heads[1:] - np.arange(1, n + 1))
    )
    panel = 0.5 + 0.3 * (top_y + 0.8)
    fig = _new_figure(max(3.0, unit * (n + 1)), panel * len(checked) + (0.3 if title else 0.0))
    axes = fig.subplots(len(checked), 1, squeeze=False)[:, 0]
    top = checked[0][0]
    for ax, (heads, weight) in zip(axes, checked, strict=True):
        _draw_tree(ax, labels, heads, top, weight, top_y)
    if title:
        axes[0].set_title(title, loc="left", fontsize=11)
    _save(fig, path)


# ------------------------------------------------------------------------------------------- sparsity


def _binned_percent(counts: np.ndarray, max_bin: int) -> np.ndarray:
    """Percent of sentences with 1, 2, ..., ``max_bin - 1`` and ``>= max_bin`` trees."""
    clipped = np.minimum(counts, max_bin)
    return 100.0 * np.bincount(clipped, minlength=max_bin + 1)[1:] / counts.size


def plot_sparsity(
    histograms: Mapping[str, Sequence[int]],
    path: str | os.PathLike,
    title: str | None = None,
) -> None:
    """Bar chart of the number of trees per sentence, one series per label (the paper's Figure 4).

    The x axis counts the trees with nonzero weight, ``1, 2, ...`` up to a last bin
    ``>= 10``; the y axis is the percentage of the series' sentences, so that sets of
    different sizes (dev and test, several treebanks) compare directly. The legend gives
    each series' size and mean.

    Args:
        histograms: label (e.g. ``"dev"``, ``"test"``, a loss or a language) -> trees per
            sentence, one integer ``>= 1`` per sentence, as in ``eval_{split}.json``.
        path: the PNG file to write (its folder is created).
        title: the figure title.

    Returns:
        None; the figure is written to ``path``.

    Raises:
        ValueError: if ``histograms`` is empty or a series is empty or holds a value that
            is not an integer ``>= 1``.

    Example:
        >>> import pathlib, tempfile
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "sparsity.png"
        >>> plot_sparsity({"dev": [1, 1, 2, 3, 12], "test": [1, 2, 2]}, out, title="vi, sparsemap")
        >>> out.stat().st_size > 0
        True
    """
    if not isinstance(histograms, Mapping) or not histograms:
        raise ValueError(
            f"histograms must be a non-empty dict label -> counts. Received: histograms={histograms!r}"
        )
    series = {
        str(label): _check_counts(counts, f"histograms[{label!r}]") for label, counts in histograms.items()
    }
    fig = _new_figure(6.5, 3.8)
    ax = fig.subplots()
    bins = np.arange(1, MAX_BIN + 1)
    width = 0.8 / len(series)
    for index, (label, counts) in enumerate(series.items()):
        ax.bar(
            bins - 0.4 + width * (index + 0.5),
            _binned_percent(counts, MAX_BIN),
            width=width,
            label=f"{label} ({counts.size} sentences, mean {counts.mean():.2f})",
        )
    ax.set_xticks(bins, [str(b) for b in bins[:-1]] + [f">= {MAX_BIN}"])
    ax.set(xlabel="trees with nonzero weight", ylabel="% of sentences", title=title or "")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def plot_sparsity_over_training(
    epochs: Sequence[int],
    per_epoch: Sequence[Sequence[int]],
    path: str | os.PathLike,
    title: str | None = None,
) -> None:
    """Two panels against epoch: mean trees per sentence and the % of sentences with one tree.

    Args:
        epochs: the epoch numbers, e.g. read from ``sparsity_dev.jsonl``.
        per_epoch: for each epoch, the trees per dev sentence (integers ``>= 1``).
        path: the PNG file to write (its folder is created).
        title: the figure title.

    Returns:
        None; the figure is written to ``path``.

    Raises:
        ValueError: if the lists are empty or of different lengths, or a count is not an
            integer ``>= 1``.

    Example:
        >>> import pathlib, tempfile
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "over_training.png"
        >>> plot_sparsity_over_training([1, 2, 3], [[3, 5, 1], [2, 1, 1], [1, 1, 1]], out)
        >>> out.stat().st_size > 0
        True
    """
    if len(epochs) == 0 or len(epochs) != len(per_epoch):
        raise ValueError(
            "epochs and per_epoch must be non-empty and of the same length. "
            f"Received: len(epochs)={len(epochs)}, len(per_epoch)={len(per_epoch)}"
        )
    counts = [_check_counts(c, f"per_epoch[{i}]") for i, c in enumerate(per_epoch)]
    x = np.asarray(epochs, dtype=float)
    fig = _new_figure(6.0, 4.8)
    mean_ax, one_ax = fig.subplots(2, 1, sharex=True)
    mean_ax.plot(x, [c.mean() for c in counts], marker="o")
    mean_ax.set(ylabel="mean trees / sentence", title=title or "")
    one_ax.plot(x, [100.0 * np.mean(c == 1) for c in counts], marker="o", color="tab:green")
    one_ax.set(xlabel="epoch", ylabel="% sentences with 1 tree", ylim=(-2, 102))
    for ax in (mean_ax, one_ax):
        ax.grid(alpha=0.3)
    _integer_ticks(one_ax)
    _save(fig, path)


def plot_learning_curves(
    runs: Mapping[str, tuple[Sequence[int], Sequence[float]]],
    path: str | os.PathLike,
    title: str | None = None,
    ylabel: str = "dev UAS (%)",
) -> None:
    """Dev UAS (or any per-epoch score) against epoch, one line per run label.

    Args:
        runs: label (e.g. ``"sparsemap lr=0.002"``) -> ``(epochs, scores)``, two lists of
            the same length, e.g. the ``epoch`` and ``dev_uas`` columns of ``progress.csv``.
        path: the PNG file to write (its folder is created).
        title: the figure title.
        ylabel: the y axis label.

    Returns:
        None; the figure is written to ``path``.

    Raises:
        ValueError: if ``runs`` is empty, or a run's lists are empty or of different lengths.

    Example:
        >>> import pathlib, tempfile
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "curves.png"
        >>> plot_learning_curves({"crf": ([1, 2], [70.1, 74.0]), "hinge": ([1, 2], [69.0, 73.5])}, out)
        >>> out.stat().st_size > 0
        True
    """
    if not isinstance(runs, Mapping) or not runs:
        raise ValueError(f"runs must be a non-empty dict label -> (epochs, scores). Received: runs={runs!r}")
    fig = _new_figure(6.5, 4.0)
    ax = fig.subplots()
    for label, pair in runs.items():
        if not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(
                f"runs[{label!r}] must be an (epochs, scores) pair. Received: runs[{label!r}]={pair!r}"
            )
        x, y = _check_series(f"runs[{label!r}]", *pair)
        ax.plot(x, y, marker="o", markersize=3, label=str(label))
    ax.set(xlabel="epoch", ylabel=ylabel, title=title or "")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _integer_ticks(ax)
    _save(fig, path)
