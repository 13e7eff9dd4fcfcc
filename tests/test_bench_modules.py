"""The benchmark scripts are modules of the package ``benchmarks``, and still run as scripts.

The tests import them as modules (``from benchmarks import bench_parsing``); the documented
commands run them as scripts (``python benchmarks/bench_parsing.py``) or as modules
(``python -m benchmarks.bench_parsing``), from the repository root.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The runners that import the runner core (and so put the repository root on ``sys.path``
#: when they run as scripts).
RUNNERS = ("bench_parsing", "bench_nli", "bench_tracenorm", "bench_rl")

#: Run in a fresh interpreter outside the repository: import every benchmark as a module, then
#: run each runner's ``report --help`` as ``python benchmarks/NAME.py`` would, ``benchmarks``
#: forgotten in between (the script's folder first on ``sys.path``, the repository not on it).
SCRIPT = """
import importlib, runpy, sys
root, names, runners = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
sys.path.insert(0, root)
for name in names:
    module = importlib.import_module(f"benchmarks.{name}")
    assert module.__file__ == f"{root}/benchmarks/{name}.py", module.__file__
path = [entry for entry in sys.path if entry != root]
for runner in runners:
    for name in [name for name in sys.modules if name.split(".")[0] == "benchmarks"]:
        del sys.modules[name]
    script = f"{root}/benchmarks/{runner}.py"
    sys.path[:] = [f"{root}/benchmarks", *path]
    sys.argv = [script, "report", "--help"]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        assert exit.code == 0, (runner, exit.code)
"""


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``argv`` in a fresh interpreter, its output captured."""
    return subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_every_benchmark_imports_as_a_module_and_every_runner_runs_as_a_script(tmp_path):
    names = sorted(path.stem for path in (ROOT / "benchmarks").glob("*.py") if path.stem != "__init__")
    assert {*RUNNERS, "resumable_runs", "run_plans", "runner_core", "report_tables"} <= set(names)
    result = run(["-c", SCRIPT, str(ROOT), " ".join(names), " ".join(RUNNERS)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("usage: ")] == [
        f"usage: {runner}.py report [-h] [--root ROOT]" + ("" if runner == "bench_rl" else " [--debug]")
        for runner in RUNNERS  # the runners of benchmarks.runner_core offer --debug
    ]


def test_a_runner_runs_as_a_script_from_any_directory(tmp_path):
    result = run([str(ROOT / "benchmarks" / "bench_parsing.py"), "report", "--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: bench_parsing.py report")


def test_a_runner_runs_as_a_module_from_the_repository_root():
    result = run(["-m", "benchmarks.bench_nli", "run", "--help"], ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ") and "--attentions" in result.stdout
