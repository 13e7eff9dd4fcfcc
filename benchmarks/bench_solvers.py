"""Compare the SparseMAP solvers on random linear-chain (sequence) problems.

Every method of :func:`keras_structured.engine.solve` is run on the same batch of
random instances (unary and transition scores drawn from a centred normal,
standard deviation ``--scale``):

* once at ``tol=1e-12`` with the history recorded, to get the reference optimum
  ``f*`` of every instance (the best objective any solver reaches) and the
  convergence curves that are plotted;
* ``--repeats`` times at ``tol=--target-gap`` (the solver's own stopping rule,
  a relative Wolfe gap ``gap <= tol * max(1, |objective|)``), timed after one
  untimed warm-up call; the MAP calls, supports and objectives reported come
  from these runs.

The active set is timed twice: as the library runs it by default (the compiled
kernel, ``compiled=True``) and as the Python reference implementation
(``compiled=False``), which is written like the Frank-Wolfe solvers. Ratios are
taken to the latter, so they compare algorithms rather than implementations.
Recording the history forces the Python solvers, so the reference runs and the
plot use them for every method.

All instances of a run go through one batched ``solve`` call, as in the library.
Wall times are noisy, so the table gives every solver's cost relative to the
baseline measured in the same run.

Example:
    python benchmarks/bench_solvers.py --instances 20 --length 20 --labels 10
"""

from __future__ import annotations

import argparse
import pathlib
import time
import warnings

import numpy as np

from keras_structured.engine import SequenceStructure, SparseMAPConvergenceWarning, SparseMAPSolution, solve

# Timed configurations: label -> (method, compiled).
SOLVERS = {
    "active_set": ("active_set", True),
    "active_set_python": ("active_set", False),
    "frank_wolfe": ("frank_wolfe", False),
    "away_frank_wolfe": ("away_frank_wolfe", False),
    "pairwise_frank_wolfe": ("pairwise_frank_wolfe", False),
}
BASELINE = "active_set_python"
REFERENCE_TOL = 1e-12
SUBOPTIMALITY_FLOOR = 1e-16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="MAP calls, wall time and convergence of the SparseMAP solvers on random sequences.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--instances", type=int, default=20, help="number of random problems (one batch)")
    parser.add_argument("--length", type=int, default=20, help="sequence length n")
    parser.add_argument("--labels", type=int, default=10, help="number of labels K")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the scores")
    parser.add_argument("--scale", type=float, default=1.0, help="standard deviation of the scores")
    parser.add_argument("--max-iter", type=int, default=2000, help="MAP calls allowed after the warm start")
    parser.add_argument(
        "--target-gap", type=float, default=1e-6, help="relative duality gap to reach (the solver's tol)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per solver (the median is kept)")
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("runs/bench_solvers.png"), help="convergence plot"
    )
    return parser.parse_args(argv)


def random_instances(
    instances: int, length: int, labels: int, seed: int, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Normal unary ``(B, n, K)`` and transition ``(B, n - 1, K, K)`` scores, std ``scale``."""
    rng = np.random.default_rng(seed)
    eta_u = scale * rng.standard_normal((instances, length, labels))
    eta_v = scale * rng.standard_normal((instances, length - 1, labels, labels))
    return eta_u, eta_v


def run_solver(
    method: str,
    eta_u: np.ndarray,
    eta_v: np.ndarray,
    tol: float,
    max_iter: int,
    record_history: bool = False,
    compiled: bool = False,
) -> tuple[SparseMAPSolution, float]:
    """One batched ``solve`` call; returns the solution and its wall time in seconds.

    Problems that stop at ``max_iter`` are reported by the tables, so the
    convergence warning is silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseMAPConvergenceWarning)
        start = time.perf_counter()
        solution = solve(
            SequenceStructure(),
            eta_u,
            eta_v,
            method=method,
            tol=tol,
            max_iter=max_iter,
            # Every solver stops at the target gap: the active set's run on to the exact
            # support (the default) would be extra work the others do not do.
            exact_jacobian=False,
            record_history=record_history,
            compiled=compiled,
        )
        return solution, time.perf_counter() - start


def objective_curves(solution: SparseMAPSolution, length: int) -> np.ndarray:
    """Objective after ``k = 1 .. length`` MAP calls, shape ``(batch, length)``.

    ``history[b][i]`` holds the objective of the point in use at MAP call ``i + 2``,
    i.e. after ``i + 1`` calls; the final objective follows. A problem that stopped
    earlier keeps its final objective.
    """
    curves = np.empty((len(solution.history), length))
    for b, history in enumerate(solution.history):
        values = np.append(history[:, 0], solution.objective[b])[:length]
        curves[b, : values.size] = values
        curves[b, values.size :] = values[-1]
    return curves


def relative_suboptimality(f_star: np.ndarray, objective: np.ndarray) -> np.ndarray:
    """``(f* - objective) / max(1, |f*|)``, the scale of the solvers' relative gap."""
    return (f_star - objective) / np.maximum(1.0, np.abs(f_star))


def print_summary(
    solutions: dict[str, SparseMAPSolution], times: dict[str, list[float]], f_star: np.ndarray
) -> None:
    """Per-solver table: MAP calls, instances that reached the target, time, support, ratios."""
    base_calls = solutions[BASELINE].map_calls.mean()
    base_time = float(np.median(times[BASELINE]))
    header = (
        f"{'solver':<22}{'reached':>9}{'med calls':>11}{'mean calls':>12}{'calls/base':>12}"
        f"{'med time s':>12}{'time/base':>11}{'support':>9}{'max subopt':>12}"
    )
    print(header)
    print("-" * len(header))
    censored = False
    for label, solution in solutions.items():
        reached = int(solution.converged.sum())
        mark = "" if reached == solution.converged.size else ">="
        censored = censored or bool(mark)
        calls = solution.map_calls
        seconds = float(np.median(times[label]))
        support = np.mean([np.count_nonzero(w > 0) for w in solution.weights])
        subopt = relative_suboptimality(f_star, solution.objective).max()
        print(
            f"{label:<22}{f'{reached}/{calls.size}':>9}{mark + f'{np.median(calls):g}':>11}"
            f"{mark + f'{calls.mean():.1f}':>12}{mark + f'{calls.mean() / base_calls:.2f}':>12}"
            f"{seconds:>12.3f}{seconds / base_time:>11.2f}{support:>9.1f}{subopt:>12.1e}"
        )
    print(
        f"base = {BASELINE}. calls/base: mean MAP calls over the base's; time/base: median wall time of "
        "the batched solve over the base's;\nsupport: mean number of structures with weight > 0; "
        "max subopt: max over instances of (f* - objective) / max(1, |f*|)."
    )
    if censored:
        print(">= : some instances stopped at --max-iter without reaching the target (lower bounds).")


def print_per_instance(solutions: dict[str, SparseMAPSolution]) -> None:
    """MAP calls (``solution.map_calls``) of every instance and solver; ``*`` = target not reached."""
    print(f"{'instance':>8}" + "".join(f"{label:>21}" for label in solutions))
    for b in range(next(iter(solutions.values())).map_calls.size):
        cells = []
        for solution in solutions.values():
            flag = "" if solution.converged[b] else "*"
            cells.append(f"{f'{solution.map_calls[b]}{flag}':>21}")
        print(f"{b:>8}" + "".join(cells))
    print("* : target not reached within --max-iter.")


def plot_convergence(
    curves: dict[str, np.ndarray], f_star: np.ndarray, target_gap: float, out: pathlib.Path
) -> None:
    """Median suboptimality ``f* - objective`` vs MAP calls with interquartile bands (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, curve in curves.items():
        gap = np.maximum(f_star[:, None] - curve, SUBOPTIMALITY_FLOOR)
        low, median, high = np.percentile(gap, [25, 50, 75], axis=0)
        calls = np.arange(1, curve.shape[1] + 1)
        (line,) = ax.plot(calls, median, label=method)
        ax.fill_between(calls, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    target = target_gap * np.median(np.maximum(1.0, np.abs(f_star)))
    ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"{target_gap:g} x max(1, |f*|)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("MAP calls")
    ax.set_ylabel("f* - objective (median, IQR band)")
    ax.set_title(f"SparseMAP solvers on {f_star.size} random sequences")
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark, print the tables and write the plot."""
    args = parse_args(argv)
    start = time.perf_counter()
    eta_u, eta_v = random_instances(args.instances, args.length, args.labels, args.seed, args.scale)
    print(
        f"{args.instances} random sequences, n={args.length}, K={args.labels}, seed={args.seed}, "
        f"score std {args.scale:g}; "
        f"target relative gap {args.target_gap:g}, max_iter={args.max_iter}, {args.repeats} timed repeats"
    )

    curves = {}
    for method in dict.fromkeys(method for method, _ in SOLVERS.values()):
        reference, _ = run_solver(method, eta_u, eta_v, REFERENCE_TOL, args.max_iter, record_history=True)
        curves[method] = objective_curves(reference, int(reference.map_calls.max()))
    f_star = np.max([curve.max(axis=1) for curve in curves.values()], axis=0)

    for method, compiled in SOLVERS.values():  # warm-up: compiles or loads the numba kernels
        run_solver(method, eta_u, eta_v, args.target_gap, 1, compiled=compiled)
    solutions: dict[str, SparseMAPSolution] = {}
    times: dict[str, list[float]] = {label: [] for label in SOLVERS}
    for _ in range(args.repeats):
        for label, (method, compiled) in SOLVERS.items():  # interleaved: machine drift hits all alike
            solutions[label], seconds = run_solver(
                method, eta_u, eta_v, args.target_gap, args.max_iter, compiled=compiled
            )
            times[label].append(seconds)

    print()
    print_summary(solutions, times, f_star)
    print()
    print_per_instance(solutions)
    plot_convergence(curves, f_star, args.target_gap, args.out)
    print(f"\nconvergence plot (reference runs at tol={REFERENCE_TOL:g}): {args.out}")
    print(f"total time {time.perf_counter() - start:.1f} s (imports excluded)")


if __name__ == "__main__":
    main()
