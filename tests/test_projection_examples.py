"""Smoke tests: the projection examples run end to end (as ``__main__``, in this process) and their
constraints hold on the test set."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from tests.cli_runs import run_script
from tests.shared_data import requires_shared

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _run(script: str, *args: str) -> str:
    """The output of ``python examples/SCRIPT ARGS``, run in this process (``run_script``)."""
    with contextlib.redirect_stdout(io.StringIO()) as output:
        run_script(EXAMPLES / script, *args)
    return output.getvalue()


def _table_row(output: str, model: str) -> list[str]:
    for line in output.splitlines():
        if line.startswith(f"| {model}"):
            return [cell.strip() for cell in line.strip().strip("|").split("|")]
    raise AssertionError(f"No results row for {model!r} in:\n{output}")


@requires_shared("multiclass", "satellite.csv")
def test_entropy_bounded_classifier_runs_and_respects_bound():
    out = _run("entropy_bounded_classifier.py", "--epochs", "1", "--max-train", "500", "--seed", "1")
    header = _table_row(out, "model")
    assert header[:6] == ["model", "accuracy", "NLL", "ECE (15 bins)", "mean entropy", "min entropy"]
    for model in ("softmax", "confidence penalty", "projected (EntropyLowerBound)"):
        assert len(_table_row(out, model)) == len(header)
    bound = float(re.search(r"^bound: ([0-9.]+)$", out, re.M).group(1))
    min_entropy = float(re.search(r"^projected min entropy: ([0-9.]+)$", out, re.M).group(1))
    assert bound > 0
    assert min_entropy >= bound
    assert float(_table_row(out, "projected (EntropyLowerBound)")[5]) >= round(bound, 4)
    assert "constraint satisfied: True" in out


def test_noncrossing_quantiles_runs_and_never_crosses():
    out = _run("noncrossing_quantiles.py", "--epochs", "2", "--max-train", "200", "--seed", "1")
    header = _table_row(out, "model")
    crossing_col = header.index("crossing rate")
    for model in ("unconstrained", "unconstrained + sort", "projected (Monotone)"):
        row = _table_row(out, model)
        assert len(row) == len(header)
        assert float(row[1]) > 0  # mean pinball loss
    assert float(_table_row(out, "unconstrained + sort")[crossing_col]) == 0.0
    assert float(_table_row(out, "projected (Monotone)")[crossing_col]) == 0.0
    assert re.search(r"^projected crossing rate: 0\.0$", out, re.M)
