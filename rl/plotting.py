"""Learning curves of several runs, grouped by run name (the directory name without its seed)."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from keras_structured.run_directory import save_output_file
from rl.logger import read_progress

_SEED_SUFFIX = re.compile(r"[_\-]+s(eed)?\d+$")


def run_group(run_dir: str | Path) -> str:
    """The run name without a trailing seed (``..._s3``, ``...-seed3``), used to group seeds.

    Example:
        >>> run_group("runs/rl/CartPole-v1__ppo__s3")
        'CartPole-v1__ppo'
    """
    return _SEED_SUFFIX.sub("", Path(run_dir).name)


def learning_curves(
    run_dirs: list[str | Path], key: str = "charts/episodic_return", points: int = 100
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per group: ``(steps, values)`` with ``values`` of shape ``(num_seeds, points)``.

    Each run is interpolated linearly on a shared grid of ``global_step`` up to the shortest
    run of its group (rows where ``key`` is empty are skipped).
    """
    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for run_dir in run_dirs:
        rows = [r for r in read_progress(run_dir) if not math.isnan(r.get(key, math.nan))]
        if rows:
            groups[run_group(run_dir)].append(
                (np.array([r["global_step"] for r in rows]), np.array([r[key] for r in rows]))
            )
    curves = {}
    for name, runs in sorted(groups.items()):
        end = min(steps[-1] for steps, _ in runs)
        start = max(steps[0] for steps, _ in runs)
        grid = np.linspace(start, max(end, start), points)
        curves[name] = (grid, np.stack([np.interp(grid, steps, values) for steps, values in runs]))
    return curves


def plot(run_dirs: list[str | Path], output: str | Path, key: str = "charts/episodic_return") -> Path:
    """Writes a PNG of ``key`` against ``global_step``: per group the seed mean and min-max band.

    Args:
        run_dirs: the run directories.
        output: the PNG file, written whole (a temporary file renamed over it).
        key: the ``progress.csv`` column.

    Returns:
        ``output``.

    Raises:
        ValueError: if no run has a value for ``key``.
        UnsafePathError: ``output`` or its folder is a symlink (nothing is written through it).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = learning_curves(run_dirs, key)
    if not curves:
        raise ValueError(f"No run has values for {key!r}. Received: run_dirs={[str(d) for d in run_dirs]}")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, (steps, values) in curves.items():
        line = ax.plot(steps, values.mean(axis=0), label=f"{name} ({len(values)} seeds)")[0]
        ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(key)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    output = Path(output)
    try:  # the user's path: symlinked folders followed, a symlink as the file refused
        save_output_file(output, lambda path: fig.savefig(path, dpi=120), follow_file_link=False)
    finally:
        plt.close(fig)
    return output
