"""Algorithm 1 (gradient descent through the interpolation projection) on toy convex problems.

A linear objective ``f(x) = <c, x>`` is minimised over (i) an l2 ball with an anchor away
from its center, (ii) a polytope and (iii) a minimum-entropy constraint on a categorical
distribution (iterates are logits, the projection acts on ``softmax(logits)``). For each:

(a) the suboptimality ``f(average of g(x_k)) - f*`` of Algorithm 1 for several budgets
    ``K`` on a log-log plot, with the fitted slope (the paper proves ``O(1/sqrt(K))``);
(b) Algorithm 1 against the naive "gradient step then interpolate" baseline of the
    paper's Figure 1, which stalls away from the optimum.

Optima in closed form: ``center - r c / ||c||`` for the ball, ``scipy.optimize.linprog``
for the polytope, and ``softmax(-c / T)`` with the temperature ``T`` bisected so that the
entropy equals the bound.

Run:  python examples/projection_toy.py [--steps 10000] [--out-dir runs/projection_toy]
"""

from __future__ import annotations

import argparse
import os

from _common.cli import make_parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    parser.add_argument("--steps", type=int, default=10000, help="largest iteration budget K")
    parser.add_argument("--out-dir", default=os.path.join("runs", "projection_toy"), help="where PNGs go")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps must be >= 2. Received: {args.steps}")
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from scipy.optimize import linprog  # noqa: E402

from keras_structured.projections import EntropyLowerBound, L2Ball, Polytope, entropy  # noqa: E402
from keras_structured.projections.minimize import minimize, projected_interpolation_descent  # noqa: E402


def linear(c: np.ndarray):
    c = tf.constant(c, tf.float64)
    return lambda x: tf.reduce_sum(x * c, axis=-1)


def entropy_optimum(c: np.ndarray, min_entropy: float, iters: int = 200) -> np.ndarray:
    """``argmin <c, p>`` s.t. ``H(p) >= min_entropy``: ``softmax(-c / T)``, ``T`` by bisection."""

    def at(temperature: float) -> np.ndarray:
        z = -c / temperature
        p = np.exp(z - z.max())
        return p / p.sum()

    lo, hi = 1e-4, 1e4  # H(softmax(-c/T)) increases with T
    for _ in range(iters):
        mid = np.sqrt(lo * hi)
        p = at(mid)
        if -(p * np.log(np.maximum(p, 1e-300))).sum() < min_entropy:
            lo = mid
        else:
            hi = mid
    return at(hi)


def problems() -> list[dict]:
    rng = np.random.default_rng(0)
    c_ball = np.array([0.3, 1.0])
    angles = np.linspace(0.0, 2 * np.pi, 8)[:-1] + 0.3
    A = np.stack([np.cos(angles), np.sin(angles)], axis=1) * rng.uniform(0.7, 1.3, size=(7, 1))
    b = np.ones(7)
    c_poly = np.array([0.3, 1.0])
    lp = linprog(c_poly, A_ub=A, b_ub=b, bounds=[(None, None)] * 2)
    c_cat = np.array([0.9, -0.4, 0.3, -1.0, 0.5])
    min_entropy = 0.8
    return [
        dict(
            name="l2_ball",
            title="l2 ball (r=1, anchor (0.5, 0))",
            c=c_ball,
            constraint=L2Ball(1.0),
            x_init=np.array([0.5, 0.0]),
            anchor=np.array([0.5, 0.0]),
            optimum=-c_ball @ c_ball / np.linalg.norm(c_ball),
            beta_scale=None,
            naive_step=None,
            feasible=lambda x: float(np.linalg.norm(x) - 1.0),
        ),
        dict(
            name="polytope",
            title="polytope (7 faces, anchor (0.3, 0.2))",
            c=c_poly,
            constraint=Polytope(A, b, interior_point=[0.3, 0.2]),
            x_init=np.array([0.3, 0.2]),
            anchor=None,
            optimum=float(lp.fun),
            beta_scale=None,
            naive_step=None,
            feasible=lambda x: float(np.max(A @ x - b)),
        ),
        dict(
            name="entropy",
            title=f"entropy >= {min_entropy} (K=5, logits)",
            c=c_cat,
            constraint=EntropyLowerBound(min_entropy, from_logits=True),
            x_init=np.zeros(5),
            anchor=None,
            optimum=float(c_cat @ entropy_optimum(c_cat, min_entropy)),
            beta_scale=5.0,  # beta = 5 / sqrt(K) in logit space
            naive_step=1.0,
            feasible=lambda x: float(min_entropy - entropy(tf.constant(x)).numpy()),
        ),
    ]


def run_problem(problem: dict, budgets: list[int], steps: int) -> dict:
    f = linear(problem["c"])
    kwargs = dict(anchor=problem["anchor"])

    def step_for(k: int):
        return None if problem["beta_scale"] is None else problem["beta_scale"] / np.sqrt(k)

    subopt = []
    for k in budgets:
        x = minimize(f, problem["constraint"], problem["x_init"], steps=k, step_size=step_for(k), **kwargs)
        subopt.append(float(f(x)) - problem["optimum"])
    x, history = minimize(
        f, problem["constraint"], problem["x_init"], steps=steps, step_size=step_for(steps),
        return_history=True, **kwargs,
    )  # fmt: skip
    naive, naive_history = projected_interpolation_descent(
        f, problem["constraint"], problem["x_init"], steps=steps, step_size=problem["naive_step"],
        return_history=True, **kwargs,
    )  # fmt: skip
    subopt = np.maximum(np.array(subopt), 1e-16)
    slope = np.polyfit(np.log(budgets), np.log(subopt), 1)[0] if len(budgets) > 1 else float("nan")
    return dict(
        subopt=subopt,
        slope=float(slope),
        history=history.numpy() - problem["optimum"],
        naive_history=naive_history.numpy() - problem["optimum"],
        final=float(f(x)) - problem["optimum"],
        naive_final=float(f(naive)) - problem["optimum"],
        violation=problem["feasible"](x.numpy()),
        naive_violation=problem["feasible"](naive.numpy()),
    )


def plot(problem: dict, result: dict, budgets: list[int], out_dir: str) -> str:
    fig, (ax_rate, ax_naive) = plt.subplots(1, 2, figsize=(10, 4))
    ax_rate.loglog(budgets, result["subopt"], "o-", label=f"Algorithm 1 (slope {result['slope']:.2f})")
    ref = result["subopt"][0] * np.sqrt(budgets[0] / np.asarray(budgets, dtype=float))
    ax_rate.loglog(budgets, ref, "k--", alpha=0.5, label="1/sqrt(K)")
    ax_rate.set_xlabel("iterations K")
    ax_rate.set_ylabel("f(average) - f*")
    ax_rate.legend()
    ax_rate.set_title(problem["title"])
    k = np.arange(1, len(result["history"]) + 1)
    ax_naive.loglog(k, np.maximum(result["history"], 1e-16), label="Algorithm 1 (running average)")
    ax_naive.loglog(k, np.maximum(result["naive_history"], 1e-16), label="naive: step on f, then g")
    ax_naive.set_xlabel("iteration")
    ax_naive.set_ylabel("f - f*")
    ax_naive.legend()
    ax_naive.set_title("naive projected interpolation stalls")
    fig.tight_layout()
    path = os.path.join(out_dir, f"{problem['name']}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    budgets = sorted({int(round(k)) for k in np.geomspace(min(10, args.steps), args.steps, 7)})
    for problem in problems():
        result = run_problem(problem, budgets, args.steps)
        path = plot(problem, result, budgets, args.out_dir)
        print(f"[{problem['name']}] f* = {problem['optimum']:.6f}")
        print("  K:        ", " ".join(f"{k:>9d}" for k in budgets))
        print("  subopt:   ", " ".join(f"{s:9.2e}" for s in result["subopt"]))
        print(f"  fitted log-log slope: {result['slope']:.3f} (theory: -0.5 or steeper)")
        print(
            f"  after K={args.steps}: Algorithm 1 subopt {result['final']:.3e} "
            f"(max h = {result['violation']:.2e}), naive subopt {result['naive_final']:.3e} "
            f"(max h = {result['naive_violation']:.2e})"
        )
        print(f"  saved {path}")


if __name__ == "__main__":
    main()
