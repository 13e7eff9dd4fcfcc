"""The parsing figures (``keras_structured/applications/parsing/figures.py``) write PNGs and
reject bad input."""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from keras_structured.applications.parsing import figures  # noqa: E402

WORDS = ["The", "old", "man", "the", "boat", "."]
TOP = np.array([-1, 3, 3, 0, 5, 3, 3])  # "the old man | the boat": man is the root
SECOND = np.array([-1, 2, 0, 2, 5, 3, 2])  # old is the root, man its object
THIRD = np.array([-1, 3, 3, 0, 5, 3, 5])  # the full stop attached to boat


def png_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of a PNG, checking its signature and that it is not trivially small."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert len(data) > 2000, f"{path} is suspiciously small ({len(data)} bytes)"
    return struct.unpack(">II", data[16:24])


def test_draw_one_and_three_trees(tmp_path):
    one = tmp_path / "one.png"
    figures.draw_trees(WORDS, [(TOP.tolist(), np.float32(1.0))], one)  # lists and numpy scalars are fine
    three = tmp_path / "sub" / "three.png"  # the folder is created
    figures.draw_trees(WORDS, [(TOP, 0.6), (SECOND, 0.3), (THIRD, 0.1)], three, title="dev sentence 0")
    (w1, h1), (w3, h3) = png_size(one), png_size(three)
    assert h3 > 2.5 * h1  # one panel per tree
    assert abs(w3 - w1) < 0.2 * w1


def test_trees_are_sorted_by_weight(tmp_path):
    ordered, shuffled = tmp_path / "ordered.png", tmp_path / "shuffled.png"
    figures.draw_trees(WORDS, [(TOP, 0.6), (SECOND, 0.3), (THIRD, 0.1)], ordered)
    figures.draw_trees(WORDS, [(THIRD, 0.1), (TOP, 0.6), (SECOND, 0.3)], shuffled)
    assert ordered.read_bytes() == shuffled.read_bytes()
    other = tmp_path / "other.png"  # a different top tree highlights different arcs
    figures.draw_trees(WORDS, [(TOP, 0.3), (SECOND, 0.6), (THIRD, 0.1)], other)
    assert other.read_bytes() != ordered.read_bytes()


@pytest.mark.parametrize(
    "words, trees, message",
    [
        (
            WORDS,
            [(TOP, 0.5), (TOP[:-1], 0.5)],
            r"trees\[1\] heads must have shape .* Received: trees\[1\] heads.shape=\(6,\)",
        ),
        (WORDS, [(np.append(TOP, 1), 1.0)], r"Received: trees\[0\] heads.shape=\(8,\)"),
        (WORDS, [(np.array([0, 3, 3, 0, 5, 3, 3]), 1.0)], r"\[0\] must be -1 .* Received: trees\[0\] heads="),
        (WORDS, [(np.array([-1, 3, 3, 0, 5, 3, 7]), 1.0)], r"head in 0..6, .* Received:"),
        (WORDS, [(np.array([-1, 2, 1, 0, 5, 3, 3]), 1.0)], r"must be a tree .* Received: trees\[0\] heads="),
        (
            WORDS,
            [(np.array(["-1", "3", "3", "0", "5", "3", "3"]), 1.0)],
            r"must hold integers. Received: trees\[0\] heads=",
        ),
        (WORDS, [(TOP + 0.5, 1.0)], r"must hold integers. Received: trees\[0\] heads="),
        (WORDS, [(TOP, -0.5)], r"Received: trees\[0\] weight=-0.5"),
        (WORDS, [(TOP, float("nan"))], r"Received: trees\[0\] weight=nan"),
        (WORDS, [], r"Received: trees=\[\]"),
        (WORDS, [TOP], r"must be a \(heads, weight\) pair. Received: trees\[0\]="),
        ([], [(np.array([-1]), 1.0)], r"Received: words=\[\]"),
    ],
)
def test_draw_trees_rejects_bad_input(tmp_path, words, trees, message):
    with pytest.raises(ValueError, match=message):
        figures.draw_trees(words, trees, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


def test_plot_sparsity_one_and_three_series(tmp_path):
    counts = [1] * 30 + [2] * 10 + [3, 5, 9, 10, 40]
    one = tmp_path / "one.png"
    figures.plot_sparsity({"dev": counts}, one, title="vi, sparsemap")
    three = tmp_path / "three.png"
    figures.plot_sparsity({"dev": counts, "test": [1, 1, 2], "en test": np.array([1, 4])}, three)
    png_size(one), png_size(three)
    assert one.read_bytes() != three.read_bytes()


@pytest.mark.parametrize(
    "histograms, message",
    [
        ({}, r"Received: histograms=\{\}"),
        ({"dev": []}, r"Received: histograms\['dev'\]=\[\]"),
        ({"dev": [1, 0, 2]}, r"integers >= 1 .* Received: histograms\['dev'\]=\[1, 0, 2\]"),
        ({"dev": [1.5]}, r"Received: histograms\['dev'\]=\[1.5\]"),
    ],
)
def test_plot_sparsity_rejects_bad_counts(tmp_path, histograms, message):
    with pytest.raises(ValueError, match=message):
        figures.plot_sparsity(histograms, tmp_path / "bad.png")


def test_plot_sparsity_over_training(tmp_path):
    path = tmp_path / "training.png"
    figures.plot_sparsity_over_training([1, 2, 3], [[4, 2, 1], [2, 1, 1], [1, 1, 1]], path, title="en")
    png_size(path)
    single = tmp_path / "single.png"
    figures.plot_sparsity_over_training([7], [[1, 2]], single)
    png_size(single)
    with pytest.raises(ValueError, match=r"Received: len\(epochs\)=2, len\(per_epoch\)=1"):
        figures.plot_sparsity_over_training([1, 2], [[1]], tmp_path / "bad.png")
    with pytest.raises(ValueError, match=r"Received: per_epoch\[1\]=\[\]"):
        figures.plot_sparsity_over_training([1, 2], [[1], []], tmp_path / "bad.png")


def test_plot_learning_curves(tmp_path):
    one = tmp_path / "one.png"
    figures.plot_learning_curves({"crf": ([1, 2, 3], [60.0, 70.5, 72.0])}, one)
    three = tmp_path / "three.png"
    runs = {loss: ([1, 2], [50.0 + i, 60.0 + i]) for i, loss in enumerate(["crf", "hinge", "sparsemap"])}
    figures.plot_learning_curves(runs, three, title="vi")
    png_size(one), png_size(three)
    with pytest.raises(
        ValueError, match=r"runs\['crf'\] must be .* Received: len\(epochs\)=2, len\(values\)=1"
    ):
        figures.plot_learning_curves({"crf": ([1, 2], [60.0])}, tmp_path / "bad.png")
    with pytest.raises(ValueError, match=r"Received: runs=\{\}"):
        figures.plot_learning_curves({}, tmp_path / "bad.png")


def test_figures_import_neither_tensorflow_nor_pyplot_at_module_level():
    tree = ast.parse(Path(figures.__file__).read_text())
    top_level = {
        alias.name.split(".")[0]
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert not top_level & {"tensorflow", "keras", "matplotlib"}, top_level
    assert "tensorflow" not in Path(figures.__file__).read_text()
