"""The README tagger's training step on each Keras backend, against TensorFlow, in one run.

Each backend runs in its own process (``KERAS_BACKEND`` is fixed at import), all started at
once with the same data, model and batch: the README's tagger (``Embedding`` ->
``Dense`` -> ``SequenceScores``, ``SparseMAPLoss``, Adam) on its synthetic data (words
``% labels`` as tags, padded sentences). A step is ``model.train_on_batch`` on one batch:
TensorFlow's ``tf.function`` step, the jitted step of the JAX trainer, PyTorch's eager
step (Keras's defaults on CPU). After ``--warmup`` steps (tracing, compiling), not timed,
the processes take turns: in each of ``--rounds`` rounds every backend times ``--steps``
steps, the order rotating from round to round, so that a slow period of a shared machine
hits them alike. The table gives the median and 90th percentile of the step times and the
medians' ratio to TensorFlow's.

Then each process measures the overhead of SparseMAP's host call per forward+backward step
with :mod:`benchmarks.bench_host_call` (the same functions: ``ks.sparsemap`` against the
engine called directly, eagerly and compiled), on ``--host-cases``.

No environment may have every backend: give each backend's interpreter
(``--python-jax``, ``--python-torch``; default this one). PyTorch's process runs with
``OMP_WAIT_POLICY=PASSIVE`` (see ``docs/performance.md``).

Example:
    python benchmarks/bench_backends.py --rounds 5 --steps 10
    python benchmarks/bench_backends.py --python-jax venv-jax/bin/python --python-torch venv-torch/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("tensorflow", "jax", "torch")
BASELINE = "tensorflow"
#: Environment of each backend's process, besides ``KERAS_BACKEND``.
BACKEND_ENV = {"torch": {"OMP_WAIT_POLICY": "PASSIVE"}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="Training step time of the README tagger on each Keras backend, and the host call's "
        "overhead per step, in one run.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS), help="backends")
    for backend in BACKENDS:
        parser.add_argument(
            f"--python-{backend}", default=sys.executable, help=f"interpreter of the {backend} process"
        )
    parser.add_argument("--batch", type=int, default=16, help="sentences per batch (the README's 16)")
    parser.add_argument("--length", type=int, default=8, help="words per sentence, padding included")
    parser.add_argument("--labels", type=int, default=3, help="tags")
    parser.add_argument("--batches", type=int, default=8, help="distinct batches, cycled over")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (tracing, compiling)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds in which every backend takes turns")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per backend and round")
    parser.add_argument(
        "--host-cases",
        nargs="*",
        default=["sequence"],
        help="problems of benchmarks/bench_host_call.py timed for the host call's overhead (none: skip)",
    )
    parser.add_argument("--host-repeats", type=int, default=20, help="timed pairs per host-call measurement")
    parser.add_argument(
        "--torch-compile-backend", default="inductor", help="torch.compile backend (host call)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the weights")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # a backend's process
    return parser.parse_args(argv)


# --- one backend's process -----------------------------------------------------------------


def tagger_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """The README's synthetic data, ``args.batches`` batches: words (0 pads) and tags (-1 pads)."""
    rng = np.random.default_rng(args.seed)
    size, vocabulary = args.batch * args.batches, 4 * args.labels
    words = rng.integers(1, vocabulary, size=(size, args.length))
    tags = words % args.labels
    lengths = rng.integers(max(1, args.length // 2), args.length + 1, size=size)
    padding = np.arange(args.length) >= lengths[:, None]
    words[padding], tags[padding] = 0, -1
    return words, tags


def tagger(args: argparse.Namespace):
    """The README's tagger, compiled with the SparseMAP loss."""
    import keras

    import keras_structured as ks
    from keras_structured.engine import SequenceStructure

    keras.utils.set_random_seed(args.seed)
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(4 * args.labels, 16, mask_zero=True)(tokens)
    scores = ks.SequenceScores(use_boundary=True)(keras.layers.Dense(args.labels)(hidden))
    model = keras.Model(tokens, scores)
    model.compile(keras.optimizers.Adam(0.05), ks.SparseMAPLoss(SequenceStructure()))
    return model


def host_call_overheads(args: argparse.Namespace) -> list[dict]:
    """The host call's overhead per forward+backward step, by :mod:`benchmarks.bench_host_call`:
    medians of ``ks.sparsemap``, of the engine, and of their paired differences, in ms."""
    import functools

    from benchmarks import bench_host_call

    rows = []
    for name in args.host_cases:
        structure, scores, cotangents = bench_host_call.problem(name)
        engine = functools.partial(bench_host_call.engine_step, structure, scores, cotangents)
        for compiled in (False, True):
            op = bench_host_call.op_step(structure, scores, cotangents, compiled, args.torch_compile_backend)
            times = bench_host_call.paired_milliseconds(op, engine, args.host_repeats)
            op_ms, engine_ms = np.median(times, axis=0)
            overhead_ms = float(np.median(times[:, 0] - times[:, 1]))
            mode = "compiled" if compiled else "eager"
            rows.append(dict(case=name, mode=mode, engine_ms=engine_ms, op_ms=op_ms, overhead_ms=overhead_ms))
    return rows


def worker(args: argparse.Namespace) -> None:
    """A backend's process: warms the tagger up, then answers the commands read from stdin
    (``steps N``: the seconds of N steps; ``host``: the host call's overheads), one JSON line each."""
    import warnings

    from keras_structured.engine import SparseMAPConvergenceWarning

    warnings.simplefilter("ignore", SparseMAPConvergenceWarning)
    words, tags = tagger_data(args)
    batches = [
        (words[i : i + args.batch], tags[i : i + args.batch]) for i in range(0, len(words), args.batch)
    ]
    model = tagger(args)
    step = 0

    def train_step():
        nonlocal step
        model.train_on_batch(*batches[step % len(batches)])
        step += 1

    for _ in range(args.warmup):
        train_step()
    _reply({"ready": True})
    for line in sys.stdin:
        command = line.split()
        if command[0] == "steps":
            seconds = []
            for _ in range(int(command[1])):
                start = time.perf_counter()
                train_step()
                seconds.append(time.perf_counter() - start)
            _reply({"seconds": seconds})
        elif command[0] == "host":
            _reply({"host": host_call_overheads(args)})


def _reply(message: dict) -> None:
    print(json.dumps(message, default=float), flush=True)


# --- the run: one process per backend ----------------------------------------------------


class Backend:
    """A backend's worker process, started at once; :meth:`ask` sends a command and reads the answer."""

    def __init__(self, backend: str, python: str, argv: list[str]):
        self.name = backend
        env = {
            **os.environ,
            "KERAS_BACKEND": backend,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            **BACKEND_ENV.get(backend, {}),
        }
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [python, "-m", "benchmarks.bench_backends", *argv, "--worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def read(self) -> dict:
        """The worker's next JSON line; a RuntimeError with its stderr if it ended instead."""
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"the {self.name} process ended:\n{self.process.stderr.read()[-3000:]}")

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=60)


def step_table(seconds: dict[str, list[float]]) -> list[str]:
    """Markdown rows: median and p90 step ms per backend, the medians' ratio to TensorFlow's."""
    medians = {backend: float(np.median(values)) for backend, values in seconds.items()}
    rows = [
        "| backend | steps | median ms | p90 ms | median / TensorFlow |",
        "| --- | --- | --- | --- | --- |",
    ]
    for backend, values in seconds.items():
        ratio = f"{medians[backend] / medians[BASELINE]:.2f}" if BASELINE in medians else "n/a"
        p90 = float(np.percentile(values, 90))
        rows.append(
            f"| {backend} | {len(values)} | {1e3 * medians[backend]:.1f} | {1e3 * p90:.1f} | {ratio} |"
        )
    return rows


def host_table(host: dict[str, list[dict]]) -> list[str]:
    """Markdown rows of the host call's overheads (``benchmarks/bench_host_call.py``'s columns)."""
    rows = ["| backend | mode | case | engine ms | op ms | overhead ms (median of pairs) |"]
    rows.append("| --- | --- | --- | --- | --- | --- |")
    for backend, results in host.items():
        for r in results:
            cells = f"{r['engine_ms']:.2f} | {r['op_ms']:.2f} | {r['overhead_ms']:.2f}"
            rows.append(f"| {backend} | {r['mode']} | {r['case']} | {cells} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    shared = _without_values(argv, {f"--python-{backend}" for backend in BACKENDS})
    backends = [Backend(b, getattr(args, f"python_{b}"), shared) for b in args.backends]
    try:
        ready = {}
        for backend in backends:
            try:
                ready[backend.name] = backend.read()
            except RuntimeError as error:
                print(f"{backend.name}: skipped, {error}", file=sys.stderr)
        running = [backend for backend in backends if backend.name in ready]
        seconds = {backend.name: [] for backend in running}
        for r in range(args.rounds):
            for backend in running[r % len(running) :] + running[: r % len(running)]:
                seconds[backend.name] += backend.ask(f"steps {args.steps}")["seconds"]
        size = f"batch {args.batch} x {args.length} words, {args.labels} tags"
        print(f"README tagger, {size}: train_on_batch steps")
        print("\n".join(step_table(seconds)))
        if args.host_cases:
            host = {backend.name: backend.ask("host")["host"] for backend in running}
            print("\nSparseMAP's host call per forward+backward step (benchmarks/bench_host_call.py)")
            print("\n".join(host_table(host)))
    finally:
        for backend in backends:
            backend.close()


def _without_values(argv: list[str], options: set[str]) -> list[str]:
    """``argv`` without the ``options`` and their values (``--opt value`` or ``--opt=value``)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif arg.split("=", 1)[0] not in options:
            kept.append(arg)
    return kept


if __name__ == "__main__":
    main()
