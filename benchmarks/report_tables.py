"""The pieces of the runners' ``results.md``: numbers, seed cells, tables and the file itself.

Every runner's ``report`` writes Markdown sections (:func:`write_results`); the cells are
formatted here alike: :func:`fmt` for a number, :func:`seed_cell` for a mean over seeds,
:func:`rate_table` for the grid of the tuning runs, :func:`missing_run_lines` for what is
not finished yet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.run_plans import FinishedRun, RunPlan
from keras_structured.run_directory import make_directory, write_text

RESULTS_FILE = "results.md"


def fmt(value: float, digits: int = 1) -> str:
    """Fixed-point with ``digits`` decimals, ``n/a`` for NaN / inf."""
    return "n/a" if not math.isfinite(value) else f"{value:.{digits}f}"


def mean_and_spread(values: Sequence[float]) -> tuple[float, float, int]:
    """``(mean, (max - min) / 2, count)`` of the finite values; NaNs for none."""
    finite = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if finite.size == 0:
        return math.nan, math.nan, 0
    return float(finite.mean()), float(finite.max() - finite.min()) / 2, int(finite.size)


def finite_median(values: np.ndarray) -> float:
    """The median of the finite ``values``, NaN for none."""
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else math.nan


def seed_cell(values: Sequence[float], expected: int, digits: int = 2, bold: bool = False) -> str:
    """``mean ± spread (n seeds)``, ``(k of n seeds)`` when some are missing, ``missing`` for none.

    Args:
        values: one value per seed (NaN for a seed without it).
        expected: the seeds the suite plans.
        digits: decimals of the mean and spread.
        bold: the mean and spread in bold (the best of a row).

    Example:
        >>> seed_cell([80.0, 81.0], 3), seed_cell([80.0], 1), seed_cell([], 2)
        ('80.50 ± 0.50 (2 of 3 seeds)', '80.00', 'missing')
    """
    mean, spread, count = mean_and_spread(values)
    if count == 0:
        return "missing"
    text = f"{mean:.{digits}f}" + (f" ± {spread:.{digits}f}" if count > 1 else "")
    text = f"**{text}**" if bold else text
    if count < expected:
        text += f" ({count} of {expected} seeds)"
    elif count > 1:
        text += f" ({count} seeds)"
    return text


def rate_table(
    labels: Sequence[str],
    rates: Sequence[float],
    rows: Mapping[tuple[str, ...], Mapping[float, float]],
    chosen: Mapping[tuple[str, ...], float],
) -> list[str]:
    """A Markdown table of the tuning runs' scores by learning rate, the chosen rate in bold.

    Args:
        labels: the header of the row labels (``("language", "loss")``).
        rates: the learning rates, one column each.
        rows: the score of each row's finished runs by learning rate (``–`` for the others),
            in table order.
        chosen: each row's chosen rate.

    Returns:
        The lines of the table.

    Example:
        >>> rate_table(["loss"], [0.001, 0.002], {("crf",): {0.002: 81.0}}, {("crf",): 0.002})[2]
        '| crf | – | **81.00** |'
    """
    lines = [
        f"| {' | '.join(labels)} | {' | '.join(f'lr {lr:g}' for lr in rates)} |",
        "|---" * (len(labels) + len(rates)) + "|",
    ]
    for row, scores in rows.items():
        cells = []
        for lr in rates:
            value = scores.get(lr)
            text = "–" if value is None else fmt(value, 2)
            cells.append(f"**{text}**" if chosen.get(row) == lr and value is not None else text)
        lines.append(f"| {' | '.join(row)} | {' | '.join(cells)} |")
    return lines


def finished_line(runs: Sequence[FinishedRun], root: Path) -> str:
    """``N finished runs under `root`, generated DATE``: how a report's first paragraph starts."""
    return f"{len(runs)} finished runs under `{root}`, generated {time.strftime('%Y-%m-%d %H:%M')}"


def threads_per_job(runs: Iterable[FinishedRun]) -> str:
    """The CPU threads per job that the runs' training processes had (``bench_state.json``)."""
    threads = sorted({int(r.state["threads"]) for r in runs if r.state.get("threads")})
    return ", ".join(map(str, threads)) or "unknown"


def missing_run_lines(plan: RunPlan, evaluations: Callable[[Any], str], waiting: Iterable[str]) -> list[str]:
    """The Markdown list of the planned runs not finished and evaluated, for ``results.md``.

    Args:
        plan: the plan.
        evaluations: the evaluations a run needs, in words (``"dev and test"``).
        waiting: one line per entry of ``plan.waiting``.

    Returns:
        The lines, or one saying that nothing is missing.
    """
    lines = [f"- `{spec.name}`: trained, not evaluated on {evaluations(spec)}" for spec in plan.evaluate]
    lines += [f"- `{spec.name}`: partial (checkpoint), to resume" for spec in plan.resume]
    lines += [f"- `{spec.name}`: not started (or failed before a checkpoint)" for spec in plan.start]
    lines += waiting
    return lines or ["None: every planned run is finished and evaluated."]


def write_results(root: Path, sections: Sequence[str]) -> Path:
    """Write the Markdown ``sections`` to ``{root}/results.md``; return its path."""
    make_directory(root)
    path = root / RESULTS_FILE
    write_text(path, "\n\n".join(sections) + "\n")
    return path
