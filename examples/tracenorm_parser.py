"""Train, evaluate and sweep the trace-norm bilinear dependency parser (Hazan's algorithm).

The parser and its training are :mod:`keras_structured.parsing.tracenorm`: arc scores
``phi_i^T A phi_j + eta^T d(i, j)`` over hashed token features, trained by Frank-Wolfe on
``min mean loss  s.t.  ||A||_* + lam ||eta||_2 <= C``.

Subcommands:

* ``train``: one run into ``--logdir`` (resumed if the folder holds a checkpoint):
  ``config.json`` (the settings), ``progress.csv`` (one row per step: objective, gap,
  rank, ...), ``checkpoint.npz``, ``final.json`` (dev UAS, parameters, time, the process's
  peak resident memory), and the plots ``rank.png`` (rank against steps) and
  ``objective_gap.png`` (objective and Frank-Wolfe gap against steps, log axes). With
  ``--time-limit M`` the process takes no new step after M minutes: it writes the
  checkpoint and the plots but no ``final.json``, and exits with status 0; the same
  command resumes the run.
* ``evaluate``: UAS of a run's checkpoint on a split; prints JSON, writes ``eval_<split>.json``.
* ``sweep``: one ``train`` per value of ``--Cs`` (into ``<logdir>/C_<value>``), evaluated
  on dev and test: ``sweep.csv`` and ``uas_vs_C.png``.
* ``frobenius``: the baseline on the same features, a dense ``A`` with the penalty
  ``mu (||A||_F^2 + ||eta||^2)`` trained by Adam (``train_frobenius``; not resumable, no
  checkpoint: the dense model is not kept). Writes ``config.json``, ``progress.csv``
  (step, objective, loss, time), ``final.json`` (as ``train``'s) and ``eval_dev.json`` /
  ``eval_test.json`` (as ``evaluate``'s).

Examples:
    python examples/tracenorm_parser.py train --treebank ../shared/data/ud/vi_vtb-2.0 \\
        --C 50 --lam 1 --steps 200 --dim 4096 --logdir runs/tracenorm/vi-C50
    python examples/tracenorm_parser.py evaluate --logdir runs/tracenorm/vi-C50 --split test
    python examples/tracenorm_parser.py sweep --treebank ../shared/data/ud/vi_vtb-2.0 \\
        --Cs 10,30,100 --steps 200 --logdir runs/tracenorm/vi-sweep
    python examples/tracenorm_parser.py frobenius --treebank ../shared/data/ud/vi_vtb-2.0 \\
        --mu 1e-4 --steps 100 --logdir runs/tracenorm/vi-frobenius
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import pathlib
import sys
import time

# Repeated from keras_structured.parsing.tracenorm so that --help answers without importing it.
_LOSSES = ("sparsemap", "hinge")
_STEP_RULES = ("standard", "line_search")
_SVD_METHODS = ("auto", "dense", "svds")
_SPLITS = ("train", "dev", "test")


def _float_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas. Received: {text!r}"
        ) from error
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number. Received: {text!r}")
    return values


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--treebank", required=True, help="folder with *-ud-{train,dev,test}.conllu files")
    parser.add_argument("--lam", type=float, default=1.0, help="weight of ||eta||_2 in the ball")
    parser.add_argument("--steps", type=int, default=100, help="Frank-Wolfe steps")
    parser.add_argument("--loss", default="sparsemap", choices=_LOSSES)
    parser.add_argument("--step-rule", default="standard", choices=_STEP_RULES, help="2/(k+2) or line search")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="sentences per step (stochastic variant); all if unset"
    )
    parser.add_argument("--dim", type=int, default=4096, help="hashing dimension d of the token features")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--svd", default="auto", choices=_SVD_METHODS, help="top singular pair method")
    parser.add_argument("--svd-tol", type=float, default=1e-6, help="ARPACK's relative tolerance")
    parser.add_argument("--compress-every", type=int, default=0, help="merge factors by SVD every N steps")
    parser.add_argument(
        "--eval-every", type=int, default=0, help="dev UAS every N steps (0: at the end only)"
    )
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--max-train-sentences", type=int, default=None, help="use the first N")
    parser.add_argument("--max-dev-sentences", type=int, default=None, help="use the first N")
    parser.add_argument("--progress", action="store_true", help="show a progress bar (tqdm)")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (no heavy import)."""
    shows_defaults = argparse.ArgumentDefaultsHelpFormatter  # in every command's --help
    parser = argparse.ArgumentParser(
        prog="tracenorm_parser.py",
        description="Trace-norm bilinear dependency parser trained by Hazan's algorithm (Frank-Wolfe) "
        "with the SparseMAP or structured hinge loss.",
        formatter_class=shows_defaults,
    )
    subcommand = functools.partial(argparse.ArgumentParser, formatter_class=shows_defaults)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=subcommand)
    train = commands.add_parser("train", help="train one model into --logdir (resumable)")
    _add_training_arguments(train)
    train.add_argument("--C", type=float, default=10.0, help="radius of the ball ||A||_* + lam ||eta|| <= C")
    train.add_argument("--logdir", required=True, help="run folder")
    train.add_argument(
        "--time-limit",
        type=float,
        default=0.0,
        help="minutes after which no new step starts: checkpoint, no final.json, exit 0; the same "
        "command resumes (0: no limit)",
    )
    evaluate = commands.add_parser("evaluate", help="UAS of a run on a split")
    evaluate.add_argument("--logdir", required=True, help="a folder written by train")
    evaluate.add_argument("--split", default="dev", choices=_SPLITS)
    sweep = commands.add_parser("sweep", help="train and evaluate for several C")
    _add_training_arguments(sweep)
    sweep.add_argument("--Cs", type=_float_list, required=True, help="radii, comma separated, e.g. 1,10,100")
    sweep.add_argument("--logdir", required=True, help="folder of the sweep (one sub-run per C)")
    frobenius = commands.add_parser(
        "frobenius",
        help="the dense baseline: min F + mu (||A||_F^2 + ||eta||^2) by Adam, evaluated on dev and test",
    )
    frobenius.add_argument("--treebank", required=True, help="folder with *-ud-{train,dev,test}.conllu files")
    frobenius.add_argument("--mu", type=float, default=1e-3, help="weight of the Frobenius penalty")
    frobenius.add_argument("--learning-rate", type=float, default=1e-2, help="Adam's step")
    frobenius.add_argument("--steps", type=int, default=100, help="Adam steps")
    frobenius.add_argument("--loss", default="sparsemap", choices=_LOSSES)
    frobenius.add_argument(
        "--batch-size", type=int, default=None, help="sentences per step (minibatches); all if unset"
    )
    frobenius.add_argument(
        "--dim", type=int, default=4096, help="hashing dimension d (the dense A takes 8 d^2 bytes per copy)"
    )
    frobenius.add_argument("--seed", type=int, default=0)
    frobenius.add_argument("--max-train-sentences", type=int, default=None, help="use the first N")
    frobenius.add_argument("--max-dev-sentences", type=int, default=None, help="use the first N")
    frobenius.add_argument("--logdir", required=True, help="run folder")
    return parser


# ---------------------------------------------------------------------------------------
# Commands


def _read_split(treebank: str, split: str, limit: int | None):
    from keras_structured.parsing.conllu_reader import read_conllu, treebank_paths

    sentences = read_conllu(treebank_paths(treebank, splits=(split,))[split])
    return sentences if limit is None else sentences[:limit]


def peak_memory_mib() -> float | None:
    """The peak resident memory of this process so far, in MiB (None where unknown)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def _write_config(logdir: pathlib.Path, args: argparse.Namespace, trainer: str, settings) -> None:
    """``config.json`` (the folder is created): the data options and, under ``trainer``, its settings."""
    logdir.mkdir(parents=True, exist_ok=True)
    config = {
        "treebank": str(args.treebank),
        "dim": args.dim,
        "max_train_sentences": args.max_train_sentences,
        "max_dev_sentences": args.max_dev_sentences,
        trainer: {name: getattr(settings, name) for name in settings.__dataclass_fields__},
    }
    (logdir / "config.json").write_text(json.dumps(config, indent=2))


def _train(args: argparse.Namespace, C: float, logdir: pathlib.Path) -> dict | None:
    """One run (resumed from its checkpoint); None when stopped by ``--time-limit``."""
    from keras_structured.parsing import tracenorm
    from keras_structured.parsing.bilinear_features import featurize

    settings = tracenorm.HazanConfig(
        C=C,
        lam=args.lam,
        steps=args.steps,
        loss=args.loss,
        step_rule=args.step_rule,
        batch_size=args.batch_size,
        seed=args.seed,
        svd=args.svd,
        svd_tol=args.svd_tol,
        compress_every=args.compress_every,
        eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every,
    )
    train = featurize(_read_split(args.treebank, "train", args.max_train_sentences), args.dim)
    dev = featurize(_read_split(args.treebank, "dev", args.max_dev_sentences), args.dim)
    _write_config(logdir, args, "hazan", settings)
    minutes = getattr(args, "time_limit", 0.0) or 0.0
    deadline = time.monotonic() + 60.0 * minutes if minutes > 0 else None
    stopped = []

    def stop_at_the_deadline(trainer: tracenorm.HazanTrainer, record: dict) -> bool:
        if deadline is not None and time.monotonic() >= deadline and trainer.step_count < settings.steps:
            stopped.append(trainer.step_count)
            return False
        return True

    trainer = tracenorm.HazanTrainer(train, settings, dev=dev, logdir=logdir, callback=stop_at_the_deadline)
    try:
        trainer.train(progress=args.progress)
    except FloatingPointError as error:
        print(f"Training stopped: {error}", file=sys.stderr)
        plot_progress(trainer.history, logdir)
        raise SystemExit(1) from error
    plot_progress(trainer.history, logdir)
    if stopped:
        print(
            f"Time limit of {minutes:g} min reached after step {stopped[0]} of {settings.steps}: checkpoint "
            f"written to '{logdir}', no final.json. Run the same command to resume.",
            file=sys.stderr,
        )
        return None
    last = trainer.history[-1] if trainer.history else {}
    final = {
        "steps": trainer.step_count,
        "objective": last.get("objective"),
        "gap": last.get("gap"),
        "rank": trainer.model.rank,
        "num_parameters": trainer.model.num_parameters,
        "dense_parameters": args.dim**2 + trainer.model.eta.size,
        "time": last.get("time"),
        "dev": tracenorm.evaluate(trainer.model, dev),
        "peak_memory_mib": peak_memory_mib(),
    }
    (logdir / "final.json").write_text(json.dumps(final, indent=2))
    print(json.dumps({"logdir": str(logdir), "dev_uas": final["dev"]["uas"], "rank": final["rank"]}))
    return final


def _evaluate(logdir: pathlib.Path, split: str) -> dict:
    from keras_structured.parsing import tracenorm
    from keras_structured.parsing.bilinear_features import featurize

    config_path = logdir / "config.json"
    if not config_path.is_file():
        raise SystemExit(f"No run in '{logdir}': config.json is missing (run train first).")
    config = json.loads(config_path.read_text())
    if "frobenius" in config:
        raise SystemExit(
            f"'{logdir}' is a Frobenius run: it keeps no model, and its eval_dev.json and eval_test.json "
            "were written when it was trained."
        )
    model = tracenorm.load_checkpoint(logdir / tracenorm.CHECKPOINT_NAME)[0]
    limit = config["max_dev_sentences"] if split == "dev" else None
    sentences = featurize(_read_split(config["treebank"], split, limit), config["dim"])
    scores = tracenorm.evaluate(model, sentences)
    (logdir / f"eval_{split}.json").write_text(json.dumps(scores, indent=2))
    print(json.dumps({"split": split, **scores}))
    return scores


def _frobenius(args: argparse.Namespace) -> dict:
    """The dense baseline (not resumable): trained, then evaluated on dev and test."""
    from keras_structured.parsing import tracenorm
    from keras_structured.parsing.bilinear_features import featurize

    settings = tracenorm.FrobeniusConfig(
        mu=args.mu,
        learning_rate=args.learning_rate,
        steps=args.steps,
        loss=args.loss,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    train = featurize(_read_split(args.treebank, "train", args.max_train_sentences), args.dim)
    logdir = pathlib.Path(args.logdir)
    _write_config(logdir, args, "frobenius", settings)
    try:
        model, history = tracenorm.train_frobenius(train, settings)
    except FloatingPointError as error:
        print(f"Training stopped: {error}", file=sys.stderr)
        raise SystemExit(1) from error
    with open(logdir / "progress.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ("step", "objective", "loss", "time"), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(history)
    del train
    scores = {}
    for split in ("dev", "test"):
        limit = args.max_dev_sentences if split == "dev" else None
        sentences = featurize(_read_split(args.treebank, split, limit), args.dim)
        scores[split] = tracenorm.evaluate(model, sentences)
        (logdir / f"eval_{split}.json").write_text(json.dumps(scores[split], indent=2))
    last = history[-1] if history else {}
    final = {
        "steps": len(history),
        "objective": last.get("objective"),
        "loss": last.get("loss"),
        "num_parameters": model.num_parameters,
        "dense_parameters": model.num_parameters,
        "time": last.get("time"),
        "dev": scores["dev"],
        "peak_memory_mib": peak_memory_mib(),
    }
    (logdir / "final.json").write_text(json.dumps(final, indent=2))
    print(
        json.dumps(
            {"logdir": str(logdir), "dev_uas": scores["dev"]["uas"], "test_uas": scores["test"]["uas"]}
        )
    )
    return final


def _sweep(args: argparse.Namespace) -> None:
    root = pathlib.Path(args.logdir)
    rows = []
    for C in args.Cs:
        run = root / f"C_{C:g}"
        final = _train(args, C, run)
        rows.append(
            {
                "C": C,
                "dev_uas": final["dev"]["uas"],
                "test_uas": _evaluate(run, "test")["uas"],
                "objective": final["objective"],
                "gap": final["gap"],
                "rank": final["rank"],
                "steps": final["steps"],
            }
        )
    with open(root / "sweep.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot_sweep({pathlib.Path(args.treebank).name: rows}, root / "uas_vs_C.png")


# ---------------------------------------------------------------------------------------
# Plots (matplotlib, imported here only)


def _figure(width: float = 5.0, height: float = 3.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(figure)
    return figure


def plot_progress(history: list[dict], logdir: pathlib.Path) -> None:
    """``rank.png`` and ``objective_gap.png`` of a run's history."""
    if not history:
        return
    steps = [record["step"] for record in history]
    figure = _figure()
    axes = figure.add_subplot()
    axes.plot(steps, [record["rank"] for record in history], color="tab:blue")
    axes.set(xlabel="Frank-Wolfe step", ylabel="rank (factors of A)", title="Rank of the iterate")
    figure.tight_layout()
    figure.savefig(logdir / "rank.png")
    figure = _figure()
    axes = figure.add_subplot()
    for key, color in (("objective", "tab:blue"), ("gap", "tab:red")):
        points = [
            (s, r[key]) for s, r in zip(steps, history, strict=True) if r[key] > 0 and math.isfinite(r[key])
        ]
        if points:
            axes.plot(*zip(*points, strict=True), color=color, label=key)
    axes.set(xscale="log", yscale="log", xlabel="Frank-Wolfe step", title="Objective and Frank-Wolfe gap")
    axes.legend()
    figure.tight_layout()
    figure.savefig(logdir / "objective_gap.png")


def plot_sweep(rows_by_treebank: dict[str, list[dict]], path: pathlib.Path) -> None:
    """Dev and test UAS against ``C`` (log axis), one pair of lines per treebank (``{label: rows}``)."""
    figure = _figure()
    axes = figure.add_subplot()
    colors = iter(("tab:blue", "tab:orange", "tab:green", "tab:red"))
    for label, rows in rows_by_treebank.items():
        color = next(colors)
        Cs = [row["C"] for row in rows]
        axes.plot(Cs, [row["dev_uas"] for row in rows], "o-", color=color, label=f"{label}: dev")
        axes.plot(Cs, [row["test_uas"] for row in rows], "s--", color=color, label=f"{label}: test")
    Cs = sorted({row["C"] for rows in rows_by_treebank.values() for row in rows})
    axes.set(
        xscale="log", xlabel="C (radius of the trace-norm ball)", ylabel="UAS (%)", title="UAS against C"
    )
    axes.set_xticks(Cs, labels=[f"{C:g}" for C in Cs])
    axes.minorticks_off()
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "train":
        _train(args, args.C, pathlib.Path(args.logdir))
    elif args.command == "evaluate":
        _evaluate(pathlib.Path(args.logdir), args.split)
    elif args.command == "frobenius":
        _frobenius(args)
    else:
        _sweep(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
