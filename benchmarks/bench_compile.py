"""Time the first SparseMAP call of a new process, with numba's disk cache empty and warm.

The compiled active-set kernel and the MAP oracles are numba functions cached on
disk: the first process on a machine compiles them, later ones load them. This
script measures both in fresh Python processes, each with its own numba cache
directory (``NUMBA_CACHE_DIR``), so the measurement does not depend on what is
cached already:

* **empty cache**: one process solves one small problem of every built-in
  structure in turn; the time from the start of the first solve to the last
  result (target: <= 30 s for all together);
* **warm cache**: one new process per structure, after the empty-cache run
  filled the cache; the time of its first solve (target: <= 2 s per structure).

Every row also shows the second call of the same process (everything compiled)
and the ratio of the first call to it, a baseline measured in the same run.
``import keras_structured`` (TensorFlow included) is timed separately and is not
part of either number.

Example:
    python benchmarks/bench_compile.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

STRUCTURES = ("sequence", "tree", "matching", "simplex")

_CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import keras_structured as ks
from keras_structured import engine
imported = time.perf_counter() - start
problems = {
    "sequence": (engine.SequenceStructure(), (6, 3)),
    "tree": (engine.DependencyTreeStructure(), (6, 6)),
    "matching": (engine.MatchingStructure(), (4, 5)),
    "simplex": (engine.SimplexStructure(), (5,)),
}
rows = []
for name in sys.argv[1:]:
    structure, shape = problems[name]
    eta_u = np.random.default_rng(0).normal(size=(2,) + shape)
    eta_v = np.zeros((2,) + tuple(structure.v_shape(shape)))
    times = []
    for _ in range(2):
        begin = time.perf_counter()
        engine.solve(structure, eta_u, eta_v)
        times.append(time.perf_counter() - begin)
    rows.append({"structure": name, "first": times[0], "second": times[1]})
print(json.dumps({"import": imported, "rows": rows}))
"""


def run_child(structures: list[str], cache_dir: str) -> dict:
    """Solve ``structures`` in a new process whose numba cache is ``cache_dir``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, TF_CPP_MIN_LOG_LEVEL="3")
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, *structures], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--structures", nargs="+", default=list(STRUCTURES), choices=STRUCTURES, help="structures to time"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache_dir:
        cold = run_child(args.structures, cache_dir)
        warm = [run_child([name], cache_dir) for name in args.structures]
    print(f"import keras_structured: {cold['import']:.1f} s (not counted below)")
    header = ("empty cache s", "warm cache s", "second call s", "warm / second")
    print(f"{'structure':<12}" + "".join(f"{column:>15}" for column in header))
    for row, again in zip(cold["rows"], warm, strict=True):
        warm_row = again["rows"][0]
        print(
            f"{row['structure']:<12}{row['first']:>15.2f}{warm_row['first']:>15.2f}"
            f"{warm_row['second']:>15.4f}{warm_row['first'] / warm_row['second']:>15.0f}"
        )
    total = sum(row["first"] for row in cold["rows"])
    print(f"empty cache, all structures together: {total:.1f} s (target <= 30 s)")
    slowest = max(again["rows"][0]["first"] for again in warm)
    print(f"warm cache, slowest first call: {slowest:.2f} s (target <= 2 s per structure)")


if __name__ == "__main__":
    main()
