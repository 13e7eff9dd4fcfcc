"""Time interpolation projections against Euclidean projections and inside ``model.fit``.

Three comparisons, each timed in the same run so that the ratios (not the absolute
times) are what to compare on a noisy machine:

1. **Convex solver.** ``EntropyLowerBound(b)`` and ``KLTrustRegion(eps)`` interpolation
   projections, forward+backward inside ``tf.function`` (``GradientTape`` w.r.t. the
   input, one random upstream gradient), against the orthogonal (Euclidean) projection
   onto the same set ``{p in simplex : H(p) >= b}`` / ``{p in simplex : KL(p || q) <= eps}``
   solved by cvxpy. cvxpy solves one problem per example (a parametrised, compiled-once
   problem, so only the solve is timed); ``--solver-examples`` examples are solved and
   the mean time per example is extrapolated to the whole batch. cvxpy is timed
   forward only (differentiating through the solution would cost more; cvxpylayers has
   no TensorFlow support), so the ratio ``cvxpy / ours`` understates the gap. Both
   outputs are checked for feasibility, and the distance to the input of the
   interpolation output is compared with that of the Euclidean projection.
2. **Closed forms.** ``L2Ball(r)`` interpolation against ``x * min(1, r / ||x||)``, and
   ``EntropyLowerBound(b)`` interpolation against ``keras_structured.sparsemax`` (the
   closed-form Euclidean projection onto the simplex, as a cost reference), all
   forward+backward inside ``tf.function``: ratio ``ours / closed form``.
3. **Training step.** ``Dense(256, relu) - Dense(classes, softmax)`` with and without a
   final ``InterpolationProjection(EntropyLowerBound(b))`` layer: median time of one
   ``model.train_on_batch`` step (Adam, categorical cross-entropy, random data)
   after warm-up: ratio ``with / without``.

Calls of the two sides of each comparison are interleaved and the median is kept.
cvxpy is a benchmark-only dependency (``pip install cvxpy``); without it part 1 is
skipped with a message.

Example:
    python benchmarks/bench_projections.py --batch 1024 --classes 10 --repeats 50
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

import keras_structured
from keras_structured.projections import EntropyLowerBound, InterpolationProjection, KLTrustRegion, L2Ball

WARMUP = 3
FEASIBILITY_TOL_OURS = 1e-5  # float32 outputs, h evaluated in float64
FEASIBILITY_TOL_SOLVER = 1e-6  # interior-point tolerance


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="Interpolation projections vs cvxpy, closed-form projections, and in a training step.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--batch", type=int, default=1024, help="rows per batch")
    parser.add_argument("--classes", type=int, default=10, help="categories (last axis)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per measurement (median kept)")
    parser.add_argument(
        "--solver-examples", type=int, default=32, help="examples solved by cvxpy (extrapolated to --batch)"
    )
    parser.add_argument("--solver", default="CLARABEL", help="cvxpy solver (needs exponential cones)")
    parser.add_argument(
        "--min-entropy", type=float, default=1.0, help="entropy bound b (nats), < log(classes)"
    )
    parser.add_argument("--epsilon", type=float, default=0.1, help="KL trust-region size (nats)")
    parser.add_argument("--radius", type=float, default=1.0, help="l2-ball radius")
    parser.add_argument("--logit-scale", type=float, default=3.0, help="std of the random logits")
    parser.add_argument("--features", type=int, default=64, help="input features of the model in part 3")
    parser.add_argument(
        "--layer-entropy", type=float, default=0.5, help="entropy bound of the layer (part 3)"
    )
    parser.add_argument("--steps", type=int, default=50, help="timed train steps per model (part 3)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--skip-cvxpy", action="store_true", help="skip part 1")
    return parser.parse_args(argv)


def sync() -> None:
    """Waits for queued device work (no-op on CPU)."""
    tf.test.experimental.sync_devices()


def interleaved_medians(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall seconds of each call, the calls alternating, after ``WARMUP`` untimed rounds."""
    for _ in range(WARMUP):
        for call in calls.values():
            call()
    sync()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            sync()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def forward_backward(
    fn: Callable[..., tf.Tensor],
) -> Callable[..., tf.Tensor]:
    """A ``tf.function`` ``(x, upstream, *extra) -> upstream^T d fn(x, *extra) / dx``."""

    @tf.function
    def run(x: tf.Tensor, upstream: tf.Tensor, *extra: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x, *extra)
        return tape.gradient(y, x, output_gradients=upstream)

    return run


def np_entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) over the last axis, ``0 log 0 = 0``; negative entries are ignored."""
    positive = np.where(p > 0, p, 1.0)
    return -np.sum(np.where(p > 0, p * np.log(positive), 0.0), axis=-1)


def np_kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``KL(p || q)`` over the last axis, ``0 log 0 = 0``; negative entries of ``p`` are ignored."""
    positive = np.where(p > 0, p, 1.0)
    return np.sum(np.where(p > 0, p * (np.log(positive) - np.log(q)), 0.0), axis=-1)


def simplex_violation(p: np.ndarray) -> float:
    """``max(max(-p), max |sum p - 1|)``: how far the rows are from the simplex."""
    return float(max(np.max(-p), np.max(np.abs(p.sum(axis=-1) - 1.0))))


def softmax_np(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64."""
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------- part 1: cvxpy


def cvxpy_projectors(classes: int, min_entropy: float, epsilon: float, solver: str):
    """Parametrised cvxpy problems ``(entropy_fn(x), kl_fn(x, q))`` returning Euclidean projections."""
    import cvxpy as cp

    x_ent = cp.Parameter(classes)
    p_ent = cp.Variable(classes)
    entropy_problem = cp.Problem(
        cp.Minimize(cp.sum_squares(p_ent - x_ent)),
        [cp.sum(p_ent) == 1, p_ent >= 0, cp.sum(cp.entr(p_ent)) >= min_entropy],
    )
    # KL(p || q) = -H(p) - <p, log q> on the simplex; log q as a parameter keeps the problem DPP.
    x_kl = cp.Parameter(classes)
    log_q = cp.Parameter(classes)
    p_kl = cp.Variable(classes)
    kl_problem = cp.Problem(
        cp.Minimize(cp.sum_squares(p_kl - x_kl)),
        [cp.sum(p_kl) == 1, p_kl >= 0, -cp.sum(cp.entr(p_kl)) - log_q @ p_kl <= epsilon],
    )
    assert entropy_problem.is_dcp(dpp=True) and kl_problem.is_dcp(dpp=True)

    def solve(problem, variable) -> np.ndarray:
        problem.solve(solver=solver)
        if problem.status not in ("optimal", "optimal_inaccurate"):
            raise RuntimeError(f"cvxpy returned status {problem.status!r}")
        return np.array(variable.value)

    def entropy_fn(x: np.ndarray) -> np.ndarray:
        x_ent.value = x
        return solve(entropy_problem, p_ent)

    def kl_fn(x: np.ndarray, q: np.ndarray) -> np.ndarray:
        x_kl.value = x
        log_q.value = np.log(q)
        return solve(kl_problem, p_kl)

    return entropy_fn, kl_fn


def time_solver(fn: Callable[..., np.ndarray], *rows: np.ndarray) -> tuple[np.ndarray, float]:
    """Solves every row (after one untimed warm-up solve); returns solutions and seconds per example."""
    fn(*(r[0] for r in rows))  # compiles the parametrised problem
    outputs = []
    start = time.perf_counter()
    for i in range(rows[0].shape[0]):
        outputs.append(fn(*(r[i] for r in rows)))
    return np.stack(outputs), (time.perf_counter() - start) / rows[0].shape[0]


def part_cvxpy(args: argparse.Namespace, rng: np.random.Generator) -> list[list[str]]:
    """Rows of the cvxpy table (and prints the feasibility / distance notes)."""
    try:
        import cvxpy as cp
    except ImportError:
        print("\ncvxpy is not installed (`pip install cvxpy`): part 1 skipped.")
        return []
    n, k, m = args.batch, args.classes, min(args.solver_examples, args.batch)
    p = softmax_np(args.logit_scale * rng.standard_normal((n, k)))
    q = softmax_np(rng.standard_normal((n, k)))
    upstream = tf.constant(rng.standard_normal((n, k)), tf.float32)
    p_tf, q_tf = tf.constant(p, tf.float32), tf.constant(q, tf.float32)

    entropy_c = EntropyLowerBound(args.min_entropy)
    kl_c = KLTrustRegion(args.epsilon)
    ent_fb = forward_backward(lambda x: entropy_c.project(x))
    kl_fb = forward_backward(lambda x, ref: kl_c.project(x, reference=ref))
    ours = interleaved_medians(
        {
            "entropy": lambda: ent_fb(p_tf, upstream),
            "kl": lambda: kl_fb(p_tf, upstream, q_tf),
        },
        args.repeats,
    )
    ours_ent = entropy_c.project(p_tf).numpy().astype(np.float64)
    ours_kl = kl_c.project(p_tf, reference=q_tf).numpy().astype(np.float64)

    entropy_fn, kl_fn = cvxpy_projectors(k, args.min_entropy, args.epsilon, args.solver)
    cvx_ent, t_ent = time_solver(entropy_fn, p[:m])
    cvx_kl, t_kl = time_solver(kl_fn, p[:m], q[:m])

    print(
        f"\n## 1. Interpolation (fwd+bwd, tf.function) vs Euclidean projection by cvxpy {cp.__version__} "
        f"({args.solver}, fwd only)\n"
    )
    print(
        f"Inputs: p = softmax({args.logit_scale} * N(0, 1)) of shape ({n}, {k}); q = softmax(N(0, 1)). "
        f"cvxpy solved the first {m} examples one by one; its batch time = mean per example x {n}."
    )
    rows = []
    checks = [
        (
            f"H(p) >= {args.min_entropy}",
            ours["entropy"],
            t_ent,
            args.min_entropy - np_entropy(p),
            args.min_entropy - np_entropy(ours_ent),
            args.min_entropy - np_entropy(cvx_ent),
            ours_ent,
            cvx_ent,
        ),
        (
            f"KL(p||q) <= {args.epsilon}",
            ours["kl"],
            t_kl,
            np_kl(p, q) - args.epsilon,
            np_kl(ours_kl, q) - args.epsilon,
            np_kl(cvx_kl, q[:m]) - args.epsilon,
            ours_kl,
            cvx_kl,
        ),
    ]
    notes = []
    for name, t_ours, t_cvx, h_in, h_ours, h_cvx, out_ours, out_cvx in checks:
        ours_ok = h_ours.max() <= FEASIBILITY_TOL_OURS and simplex_violation(out_ours) <= FEASIBILITY_TOL_OURS
        cvx_ok = (
            h_cvx.max() <= FEASIBILITY_TOL_SOLVER and simplex_violation(out_cvx) <= FEASIBILITY_TOL_SOLVER
        )
        rows.append(
            [
                name,
                f"{1e3 * t_ours:.3f}",
                f"{1e3 * t_cvx:.3f}",
                f"{1e3 * t_cvx * n:.1f}",
                f"{t_cvx * n / t_ours:.0f}x",
                f"{'yes' if ours_ok else 'NO'} (max h {h_ours.max():.1e})",
                f"{'yes' if cvx_ok else 'NO'} (max h {h_cvx.max():.1e})",
            ]
        )
        violated = h_in[:m] > 0
        if violated.any():
            d_ours = np.linalg.norm(out_ours[:m] - p[:m], axis=-1)[violated]
            d_cvx = np.linalg.norm(out_cvx - p[:m], axis=-1)[violated]
            notes.append(
                f"- {name}: {violated.mean():.0%} of the solved inputs are infeasible "
                f"({np.mean(h_in > 0):.0%} of the batch); on those, ||interp - p|| / ||euclid - p|| "
                f"has median {np.median(d_ours / d_cvx):.2f} (>= 1: the interpolation is not the "
                f"closest point)."
            )
    print_table(
        [
            "constraint",
            "ours fwd+bwd ms/batch",
            "cvxpy fwd ms/example",
            f"cvxpy fwd ms/batch ({n}, extrapolated)",
            "cvxpy / ours",
            f"ours feasible (tol {FEASIBILITY_TOL_OURS:g})",
            f"cvxpy feasible (tol {FEASIBILITY_TOL_SOLVER:g})",
        ],
        rows,
    )
    print()
    print("\n".join(notes))
    return rows


# ---------------------------------------------------------------------------- part 2: closed forms


def l2_closed_form(radius: float) -> Callable[[tf.Tensor], tf.Tensor]:
    """``x * min(1, r / ||x||)`` per row (the Euclidean projection onto the l2 ball)."""

    def project(x: tf.Tensor) -> tf.Tensor:
        norm = tf.norm(x, axis=-1, keepdims=True)
        return x * tf.minimum(1.0, radius / tf.maximum(norm, 1e-12))

    return project


def part_closed_form(args: argparse.Namespace, rng: np.random.Generator) -> None:
    """Times interpolation projections against closed-form Euclidean projections."""
    n, k = args.batch, args.classes
    # l2: norms around the radius, so that about half of the rows are projected.
    x = rng.standard_normal((n, k)) * args.radius / math.sqrt(k) * rng.uniform(0.5, 1.5, (n, 1))
    x_tf = tf.constant(x, tf.float32)
    logits = tf.constant(args.logit_scale * rng.standard_normal((n, k)), tf.float32)
    probs = tf.nn.softmax(logits)
    upstream = tf.constant(rng.standard_normal((n, k)), tf.float32)

    ball = L2Ball(args.radius)
    entropy_c = EntropyLowerBound(args.min_entropy)
    entropy_logits = EntropyLowerBound(args.min_entropy, from_logits=True)
    fns = {
        "l2 interp": forward_backward(lambda v: ball.project(v)),
        "l2 closed": forward_backward(l2_closed_form(args.radius)),
        "ent interp probs": forward_backward(lambda v: entropy_c.project(v)),
        "ent interp logits": forward_backward(lambda v: entropy_logits.project(v)),
        "sparsemax": forward_backward(keras_structured.sparsemax),
    }
    inputs = {
        "l2 interp": x_tf,
        "l2 closed": x_tf,
        "ent interp probs": probs,
        "ent interp logits": logits,
        "sparsemax": logits,
    }
    times = interleaved_medians(
        {name: (lambda fn=fn, v=inputs[name]: fn(v, upstream)) for name, fn in fns.items()}, args.repeats
    )
    diff = float(tf.reduce_max(tf.abs(ball.project(x_tf) - l2_closed_form(args.radius)(x_tf))))

    def row(ours: str, label: str, reference: str, reference_label: str) -> list[str]:
        ratio = times[ours] / times[reference]
        return [
            label,
            reference_label,
            f"{1e3 * times[ours]:.3f}",
            f"{1e3 * times[reference]:.3f}",
            f"{ratio:.2f}x",
            "yes" if ratio <= 2.0 else "NO",
        ]

    print(
        "\n## 2. Interpolation vs closed-form Euclidean projection "
        f"(fwd+bwd, tf.function, ({n}, {k}) float32)\n"
    )
    print_table(
        ["ours", "closed form", "ours ms", "closed form ms", "ours / closed form", "<= 2x"],
        [
            row("l2 interp", f"L2Ball({args.radius:g}).project", "l2 closed", "x * min(1, r / ||x||)"),
            row(
                "ent interp probs",
                f"EntropyLowerBound({args.min_entropy:g}) on probs",
                "sparsemax",
                "sparsemax",
            ),
            row(
                "ent interp logits",
                f"EntropyLowerBound({args.min_entropy:g}, from_logits=True)",
                "sparsemax",
                "sparsemax",
            ),
        ],
    )
    print(
        f"\n- max |L2Ball.project - closed form| = {diff:.2g} (the interpolation from the center is the "
        "radial projection). sparsemax is the projection onto the simplex, not onto the entropy set: "
        "a cost reference only."
    )


# ---------------------------------------------------------------------------- part 3: training step


def build_model(features: int, classes: int, entropy_bound: float | None, seed: int) -> keras.Model:
    """``Dense(256, relu) - Dense(classes, softmax)`` [``- InterpolationProjection(EntropyLowerBound)``]."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((features,))
    hidden = keras.layers.Dense(256, activation="relu")(inputs)
    outputs = keras.layers.Dense(classes, activation="softmax")(hidden)
    if entropy_bound is not None:
        outputs = InterpolationProjection(EntropyLowerBound(entropy_bound))(outputs)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    return model


def part_train_step(args: argparse.Namespace, rng: np.random.Generator) -> None:
    """Median ``train_on_batch`` time with and without the projection layer."""
    n, k = args.batch, args.classes
    x = rng.standard_normal((n, args.features)).astype(np.float32)
    y = np.eye(k, dtype=np.float32)[rng.integers(0, k, n)]
    plain = build_model(args.features, k, None, args.seed)
    projected = build_model(args.features, k, args.layer_entropy, args.seed)
    active_before = float(
        np.mean(np_entropy(plain.predict_on_batch(x).astype(np.float64)) < args.layer_entropy)
    )
    times = interleaved_medians(
        {
            "plain": lambda: plain.train_on_batch(x, y),
            "projected": lambda: projected.train_on_batch(x, y),
        },
        args.steps,
    )
    h_out = args.layer_entropy - np_entropy(projected.predict_on_batch(x).astype(np.float64))
    active_after = float(
        np.mean(np_entropy(plain.predict_on_batch(x).astype(np.float64)) < args.layer_entropy)
    )
    ratio = times["projected"] / times["plain"]
    print(
        f"\n## 3. Training step overhead (train_on_batch, batch {n}, {args.features} -> 256 -> {k}, "
        f"median of {args.steps} interleaved steps after {WARMUP} warm-up steps)\n"
    )
    print_table(
        ["model", "ms / step", "ratio to plain", "<= 1.3x"],
        [
            ["Dense-Dense(softmax)", f"{1e3 * times['plain']:.3f}", "1.00x", ""],
            [
                f"+ InterpolationProjection(EntropyLowerBound({args.layer_entropy:g}))",
                f"{1e3 * times['projected']:.3f}",
                f"{ratio:.2f}x",
                "yes" if ratio <= 1.3 else "NO",
            ],
        ],
    )
    print(
        f"\n- projected model outputs: max (b - H(output)) = {h_out.max():.1e} (<= 0 up to round-off: "
        f"feasible). Rows of the plain model below the bound (where the layer changes the output): "
        f"{active_before:.0%} before, {active_after:.0%} after the timed steps; the layer costs the "
        "same either way (it is branch-free)."
    )


# ---------------------------------------------------------------------------- output


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """A Markdown table."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    print(line(header))
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print(line(row))


def main(argv: list[str] | None = None) -> None:
    """Runs the three comparisons and prints Markdown tables."""
    args = parse_args(argv)
    if args.min_entropy >= math.log(args.classes) or args.layer_entropy >= math.log(args.classes):
        raise SystemExit(f"entropy bounds must be < log(classes) = {math.log(args.classes):.3f}")
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    devices = ", ".join(d.device_type for d in tf.config.list_logical_devices()) or "?"
    print(
        f"# Interpolation projections: batch {args.batch}, {args.classes} classes, float32, "
        f"median of {args.repeats} interleaved calls\n\n"
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, devices: {devices}. "
        "Compare the ratios (same run), not the absolute times."
    )
    if args.skip_cvxpy:
        print("\npart 1 (cvxpy) skipped (--skip-cvxpy).")
    else:
        part_cvxpy(args, rng)
    part_closed_form(args, rng)
    part_train_step(args, rng)
    print(f"\ntotal time {time.perf_counter() - start:.1f} s (imports excluded)")


if __name__ == "__main__":
    main()
