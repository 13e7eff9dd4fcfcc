"""The cost of the host call per training step, on the Keras backend this runs under.

For one batch of SparseMAP (or LP-SparseMAP) problems, it times, alternately (machines are
noisy):

* ``engine``: the numpy engine called directly, ``solve`` and one Jacobian product (the
  work every backend hands to the host);
* ``op``: a forward and a backward pass through ``ks.sparsemap`` (``ks.lp_sparsemap``) with
  the backend's autodiff, eagerly and compiled (``tf.function``, ``jax.jit``,
  ``torch.compile``).

The overhead is the median over pairs of ``op - engine``: the conversions to and from
numpy, the callback or custom-op machinery, the casts and reshapes around the call, and
the store of what the forward call keeps for the backward one (SparseMAP's active sets on
JAX and PyTorch, LP-SparseMAP's solutions everywhere). Problems are ``sequence``: 10
positions, 5 labels, batch 16 (a solve of about a millisecond, where the overhead shows),
``tree``: 30 words, batch 32, and ``lp``: LP-SparseMAP over 4 labels, at most 3 on, with
two Pairs, batch 4 (about 20 ms of ADMM in Python). Run it once per backend:

Example:
    KERAS_BACKEND=jax python benchmarks/bench_host_call.py --repeats 50
    KERAS_BACKEND=torch python benchmarks/bench_host_call.py --cases sequence
"""

from __future__ import annotations

import argparse
import functools
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_structured as ks  # noqa: E402
from keras_structured.engine import DependencyTreeStructure, SequenceStructure, solve  # noqa: E402
from keras_structured.engine.jacobian import jacobian_product  # noqa: E402
from keras_structured.engine.lp import Budget, FactorGraph, Pair, lp_sparsemap_batch  # noqa: E402

_LP_GRAPH = FactorGraph(4, [Budget([0, 1, 2, 3], 3), Pair(0, 1), Pair(2, 3)])

#: name -> (structure or factor graph, shape of eta_u, shape of eta_v): the problems timed.
CASES = {
    "sequence": (SequenceStructure(), (16, 10, 5), (16, 9, 5, 5)),
    "tree": (DependencyTreeStructure(), (32, 31, 31), (32, 0)),
    "lp": (_LP_GRAPH, (4, _LP_GRAPH.num_variables), (4, _LP_GRAPH.v_size)),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="Overhead of the host call per forward+backward step, on the current backend.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=sorted(CASES), help="problems")
    parser.add_argument("--repeats", type=int, default=30, help="timed pairs per measurement (median kept)")
    parser.add_argument(
        "--torch-backend", default="inductor", help="torch.compile backend ('aot_eager' compiles no C++)"
    )
    return parser.parse_args(argv)


def problem(name: str) -> tuple:
    """The structure, float32 scores ``[eta_u, eta_v]`` and cotangents of case ``name``."""
    structure, u_shape, v_shape = CASES[name]
    rng = np.random.default_rng(0)
    scores = [rng.normal(size=shape).astype("float32") for shape in (u_shape, v_shape)]
    cotangents = [rng.normal(size=shape).astype("float32") for shape in (u_shape, v_shape)]
    return structure, scores, cotangents


def engine_step(structure, scores, cotangents):
    """The host's share of a step: solve, then one Jacobian product (LP-SparseMAP: the
    vector-Jacobian product of every example), in float64."""
    batch = scores[0].shape[0]
    wide = [np.asarray(s, np.float64) for s in scores]
    flat = [np.asarray(c, np.float64).reshape(batch, -1) for c in cotangents]
    if isinstance(structure, FactorGraph):
        solutions = lp_sparsemap_batch(structure, *wide)
        pairs = zip(solutions, *flat, strict=True)
        return [s.vjp(g_u, structure.split_additional(g_v)) for s, g_u, g_v in pairs]
    return jacobian_product(solve(structure, *wide).support, *flat)


def op_step(structure, scores, cotangents, compiled: bool, torch_backend: str):
    """A function running one forward and backward pass of ``ks.sparsemap`` (``ks.lp_sparsemap``
    for a factor graph) on this backend."""
    backend = keras.backend.backend()
    solver = ks.lp_sparsemap if isinstance(structure, FactorGraph) else ks.sparsemap

    def marginals(eta_u, eta_v):
        return solver(structure, eta_u, eta_v)

    if backend == "tensorflow":
        import tensorflow as tf

        inputs, upstream = [tf.constant(s) for s in scores], [tf.constant(c) for c in cotangents]

        def step():
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                outputs = marginals(*inputs)
            return tape.gradient(outputs, inputs, output_gradients=upstream)

        run = tf.function(step) if compiled else step
        return lambda: [g.numpy() for g in run()]
    if backend == "jax":
        import jax

        inputs = [jax.numpy.asarray(s) for s in scores]
        upstream = tuple(jax.numpy.asarray(c) for c in cotangents)

        def step(*inputs):
            _, pullback = jax.vjp(marginals, *inputs)
            return pullback(upstream)

        run = jax.jit(step) if compiled else step
        return lambda: jax.block_until_ready(run(*inputs))
    import torch

    upstream = [torch.tensor(c) for c in cotangents]
    forward = torch.compile(marginals, backend=torch_backend) if compiled else marginals

    def step():
        inputs = [torch.tensor(s, requires_grad=True) for s in scores]
        outputs = forward(*inputs)
        torch.autograd.backward(outputs, upstream)
        return [x.grad for x in inputs]

    return step


def paired_milliseconds(first, second, repeats: int) -> np.ndarray:
    """``(repeats, 2)`` milliseconds of ``first`` and ``second``, called alternately after warm-up."""
    for _ in range(3):  # trace, compile and warm up (training runs in the steady state)
        first(), second()
    times = np.empty((repeats, 2))
    for i in range(repeats):
        for j, function in enumerate((first, second)):
            start = time.perf_counter()
            function()
            times[i, j] = (time.perf_counter() - start) * 1e3
    return times


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    backend = keras.backend.backend()
    print("| backend | mode | case | engine ms | op ms | overhead ms (median of pairs) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.cases:
        structure, scores, cotangents = problem(name)
        engine = functools.partial(engine_step, structure, scores, cotangents)
        for compiled in (False, True):
            op = op_step(structure, scores, cotangents, compiled, args.torch_backend)
            times = paired_milliseconds(op, engine, args.repeats)
            op_ms, engine_ms = np.median(times, axis=0)
            overhead = np.median(times[:, 0] - times[:, 1])
            mode = "compiled" if compiled else "eager"
            print(f"| {backend} | {mode} | {name} | {engine_ms:.2f} | {op_ms:.2f} | {overhead:.2f} |")


if __name__ == "__main__":
    main()
