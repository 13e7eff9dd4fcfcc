"""Resident memory of a model with an ``LPSparseMAP`` layer over many steps, on each backend.

A model ``Dense(4) -> LPSparseMAP`` over a graph of 4 variables (a budget of 2, a Pair, an
XOR; the graph of issue 56's leak) trains ``--steps`` steps of ``model.fit`` (mean squared
error on the marginals, so that the layer's gradient runs) and predicts ``--batches``
batches, at ``--batch`` examples, after ``--warmup`` steps and batches of each (tracing,
compiling, the allocator's first pools). Printed per backend: the growth of the resident
set size (RSS) per 1000 fit steps and per 1000 predict batches after the warm-up, beside the
same for the baseline ``Dense(4) -> Dense(4)`` in its own process, so that what the backend
and Keras hold by themselves shows; the difference is the layer's. Also the batches left in
the host call's stores (nothing should be left once a step's backward call has run).

Each backend and model runs in a fresh process (``KERAS_BACKEND`` is fixed at import);
backends whose package is missing are left out with a message. Before the fix of issue 56
the layer grew by about 500 MiB per 1000 fit steps on TensorFlow (SuperLU factors freed in
another thread), and its store kept every predict batch.

Example:
    python benchmarks/bench_lp_memory.py --steps 1000 --batches 1000
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("tensorflow", "jax", "torch")
MODELS = ("lp_sparsemap", "dense")
BASELINE = "dense"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="RSS growth per 1000 fit steps and predict batches of a model with an LPSparseMAP "
        "layer, beside a Dense-only model, on each backend.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS), help="backends")
    parser.add_argument("--steps", type=int, default=1000, help="fit steps measured")
    parser.add_argument("--batches", type=int, default=1000, help="predict batches measured")
    parser.add_argument("--warmup", type=int, default=100, help="fit steps and predict batches first")
    parser.add_argument("--batch", type=int, default=32, help="examples per batch")
    parser.add_argument("--worker", choices=MODELS, help=argparse.SUPPRESS)  # run one model here
    return parser.parse_args(argv)


def resident_mib() -> float:
    """This process's resident set size, in MiB (Linux: ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build_model(kind: str):
    """The measured model (``"lp_sparsemap"``) or the baseline (``"dense"``), compiled."""
    import keras

    import keras_structured as ks
    from keras_structured.engine.lp import Budget, FactorGraph, Pair, Xor

    inputs = keras.Input((3,))
    scores = keras.layers.Dense(4)(inputs)
    if kind == "lp_sparsemap":
        graph = FactorGraph(4, [Budget([0, 1, 2, 3], 2), Pair(0, 1), Xor([2, 3])])
        outputs = ks.LPSparseMAP(graph)(scores)
    else:
        outputs = keras.layers.Dense(4)(scores)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse")
    return model


def kept_batches() -> int:
    """The batches left in the host call's stores (LP-SparseMAP's solutions, SparseMAP's supports)."""
    from keras_structured.ops.host_call import SUPPORTS
    from keras_structured.ops.lp_sparsemap_host import SOLUTIONS

    return len(SOLUTIONS) + len(SUPPORTS)


def measure(
    model: str = "lp_sparsemap", steps: int = 1000, batches: int = 1000, warmup: int = 100, batch: int = 32
):
    """Fit ``steps`` steps and predict ``batches`` batches after ``warmup`` of each.

    Returns:
        A dict: ``fit_mib``, ``predict_mib`` (RSS growth per 1000 steps or batches after the
        warm-up), ``fit_s``, ``predict_s`` (seconds per 1000), ``kept`` (batches the run left
        in the stores: what the process held before, from other calls, is not counted).
    """
    kept_before = kept_batches()
    network = build_model(model)
    rng = np.random.default_rng(0)

    def data(count: int):
        x = rng.normal(size=(count * batch, 3)).astype("float32")
        return x, rng.uniform(size=(count * batch, 4)).astype("float32")

    def grown(run, count: int) -> tuple[float, float]:
        run(warmup)
        gc.collect()
        before, start = resident_mib(), time.perf_counter()
        run(count)
        seconds = time.perf_counter() - start
        gc.collect()
        return (resident_mib() - before) * 1000 / count, seconds * 1000 / count

    fit_mib, fit_s = grown(lambda n: network.fit(*data(n), batch_size=batch, epochs=1, verbose=0), steps)
    predict_mib, predict_s = grown(
        lambda n: network.predict(data(n)[0], batch_size=batch, verbose=0), batches
    )
    return {
        "fit_mib": fit_mib,
        "predict_mib": predict_mib,
        "fit_s": fit_s,
        "predict_s": predict_s,
        "kept": kept_batches() - kept_before,
    }


def run_worker(backend: str, model: str, args: argparse.Namespace) -> dict:
    """:func:`measure` of ``model`` in a fresh process of ``backend``."""
    command = [sys.executable, __file__, "--worker", model]
    command += ["--steps", str(args.steps), "--batches", str(args.batches)]
    command += ["--warmup", str(args.warmup), "--batch", str(args.batch)]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if completed.returncode:
        raise RuntimeError(f"The {backend} worker of {model} failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict[str, dict]]) -> list[str]:
    """Markdown rows: per backend, the layer's and the baseline's growth, and their difference."""
    rows = [
        "| backend | fit MiB/1000 steps | baseline | difference | predict MiB/1000 batches | baseline "
        "| difference | fit s/1000 steps | batches kept |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for backend, by_model in results.items():
        layer, base = by_model["lp_sparsemap"], by_model[BASELINE]
        cells = [backend]
        for key in ("fit_mib", "predict_mib"):
            cells += [f"{layer[key]:.1f}", f"{base[key]:.1f}", f"{layer[key] - base[key]:+.1f}"]
        cells += [f"{layer['fit_s']:.1f}", str(layer["kept"])]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        result = measure(args.worker, args.steps, args.batches, args.warmup, args.batch)
        print(json.dumps(result))
        return
    results = {}
    for backend in args.backends:
        if importlib.util.find_spec(backend) is None:
            print(f"{backend}: left out, its package is not installed")
            continue
        results[backend] = {model: run_worker(backend, model, args) for model in MODELS}
    print(
        f"RSS growth after {args.warmup} warm-up steps and batches, batch {args.batch}, per 1000 "
        f"({args.steps} fit steps and {args.batches} predict batches measured):\n"
    )
    print("\n".join(table(results)))
    print("\nCompare each difference with the baseline of the same run (same backend, same machine).")


if __name__ == "__main__":
    main()
