"""Train, evaluate and sweep the trace-norm bilinear dependency parser (Hazan's algorithm).

The parser and its training are :mod:`keras_structured.applications.parsing.tracenorm`: arc scores
``phi_i^T A phi_j + b^T d(i, j)`` over hashed token features, trained by Frank-Wolfe on
``min mean loss  s.t.  ||A||_* + lam ||b||_2 <= C``.

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
  ``mu (||A||_F^2 + ||b||^2)`` trained by Adam (``train_frobenius``; not resumable, no
  checkpoint: the dense model is not kept). Writes ``config.json``, ``progress.csv``
  (step, objective, loss, time), ``final.json`` (as ``train``'s) and ``eval_dev.json`` /
  ``eval_test.json`` (as ``evaluate``'s).

Run directories (:mod:`keras_structured.run_directory`): every command that writes a logdir
holds its lock (a second writer is refused with the holder's pid); every file is written
whole (a temporary file renamed over it) and never through a symlink. A rerun is checked
against the stored ``config.json`` before anything is written: the data options
(``--treebank``, ``--dim``, ``--max-*-sentences``) and the settings must be those of the
run, except ``--eval-every``, ``--checkpoint-every`` and a larger ``--steps`` (which
extends the run: its ``final.json`` and ``eval_*.json`` are dropped). A run whose first
steps failed (``config.json`` but no checkpoint) is started again by the same command.
Options that cannot work (``--C inf``, ``--seed -1``, ...) are refused when parsed, and a
non-finite objective or weight stops training with an error naming the step (exit status
1, no ``final.json``).

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
import contextlib
import dataclasses
import functools
import json
import math
import os
import pathlib
import shlex
import sys
import time
from collections.abc import Callable, Iterator

# Repeated from keras_structured.applications.parsing.tracenorm so that --help answers without importing it.
_LOSSES = ("sparsemap", "hinge")
_STEP_RULES = ("standard", "line_search")
_SVD_METHODS = ("auto", "dense", "svds")
_SPLITS = ("train", "dev", "test")
#: The key of each trainer's settings in ``config.json``.
_TRAINERS = ("hazan", "frobenius")


def _checked(kind: str, **bounds) -> Callable[[str], float | int]:
    """The ``argparse`` type ``keras_structured.command_line.<kind>(**bounds)``.

    It is imported when a value is parsed, so that ``--help`` answers without importing
    TensorFlow.
    """

    def parse(text: str) -> float | int:
        from keras_structured import command_line

        return getattr(command_line, kind)(**bounds)(text)

    parse.__name__ = kind
    return parse


_POSITIVE = _checked("number", minimum=0.0, open_minimum=True)
_NONNEGATIVE = _checked("number", minimum=0.0)
_AT_LEAST_ONE = _checked("integer", minimum=1)
_AT_LEAST_ZERO = _checked("integer", minimum=0)


def _sweep_run(root: pathlib.Path, C: float) -> pathlib.Path:
    """The folder of the sweep's run at radius ``C``."""
    return root / f"C_{C:g}"


def _radii(text: str) -> list[float]:
    """``--Cs``: finite radii > 0, separated by commas, each with a run folder of its own."""
    values = [_POSITIVE(part) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number. Received: {text!r}")
    folders = [_sweep_run(pathlib.Path(), C).name for C in values]
    if len(set(folders)) < len(folders):
        raise argparse.ArgumentTypeError(
            f"two radii would share a run folder ({', '.join(folders)}): give distinct values. "
            f"Received: {text!r}"
        )
    return values


def _add_common_arguments(parser: argparse.ArgumentParser, dim_help: str) -> None:
    """The options of ``train``, ``sweep`` and ``frobenius``: the data, the features, the loss."""
    parser.add_argument("--treebank", required=True, help="folder with *-ud-{train,dev,test}.conllu files")
    parser.add_argument("--dim", type=_AT_LEAST_ONE, default=4096, help=dim_help)
    parser.add_argument("--seed", type=_AT_LEAST_ZERO, default=0)
    parser.add_argument("--max-train-sentences", type=_AT_LEAST_ONE, default=None, help="use the first N")
    parser.add_argument("--max-dev-sentences", type=_AT_LEAST_ONE, default=None, help="use the first N")
    parser.add_argument("--loss", default="sparsemap", choices=_LOSSES)


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    _add_common_arguments(parser, "hashing dimension d of the token features")
    parser.add_argument("--lam", type=_POSITIVE, default=1.0, help="weight of ||b||_2 in the ball")
    parser.add_argument("--steps", type=_AT_LEAST_ONE, default=100, help="Frank-Wolfe steps")
    parser.add_argument("--step-rule", default="standard", choices=_STEP_RULES, help="2/(k+2) or line search")
    parser.add_argument(
        "--batch-size",
        type=_AT_LEAST_ONE,
        default=None,
        help="sentences per step (stochastic variant); all if unset",
    )
    parser.add_argument("--svd", default="auto", choices=_SVD_METHODS, help="top singular pair method")
    parser.add_argument("--svd-tol", type=_NONNEGATIVE, default=1e-6, help="ARPACK's relative tolerance")
    parser.add_argument(
        "--compress-every", type=_AT_LEAST_ZERO, default=0, help="merge factors by SVD every N steps"
    )
    parser.add_argument(
        "--eval-every", type=_AT_LEAST_ZERO, default=0, help="dev UAS every N steps (0: at the end only)"
    )
    parser.add_argument("--checkpoint-every", type=_AT_LEAST_ONE, default=10)
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
    train.add_argument(
        "--C", type=_POSITIVE, default=10.0, help="radius of the ball ||A||_* + lam ||b|| <= C"
    )
    train.add_argument("--logdir", required=True, help="run folder")
    train.add_argument(
        "--time-limit",
        type=_NONNEGATIVE,
        default=0.0,
        help="minutes after which no new step starts: checkpoint, no final.json, exit 0; the same "
        "command resumes (0: no limit)",
    )
    evaluate = commands.add_parser("evaluate", help="UAS of a run on a split")
    evaluate.add_argument("--logdir", required=True, help="a folder written by train")
    evaluate.add_argument("--split", default="dev", choices=_SPLITS)
    sweep = commands.add_parser("sweep", help="train and evaluate for several C")
    _add_training_arguments(sweep)
    sweep.add_argument("--Cs", type=_radii, required=True, help="radii, comma separated, e.g. 1,10,100")
    sweep.add_argument("--logdir", required=True, help="folder of the sweep (one sub-run per C)")
    frobenius = commands.add_parser(
        "frobenius",
        help="the dense baseline: min F + mu (||A||_F^2 + ||b||^2) by Adam, evaluated on dev and test",
    )
    _add_common_arguments(frobenius, "hashing dimension d (the dense A takes 8 d^2 bytes per copy)")
    frobenius.add_argument("--mu", type=_NONNEGATIVE, default=1e-3, help="weight of the Frobenius penalty")
    frobenius.add_argument("--learning-rate", type=_POSITIVE, default=1e-2, help="Adam's step")
    frobenius.add_argument("--steps", type=_AT_LEAST_ONE, default=100, help="Adam steps")
    frobenius.add_argument(
        "--batch-size",
        type=_AT_LEAST_ONE,
        default=None,
        help="sentences per step (minibatches); all if unset",
    )
    frobenius.add_argument("--logdir", required=True, help="run folder")
    return parser


# ---------------------------------------------------------------------------------------
# Run directories


@contextlib.contextmanager
def _locked(logdir: pathlib.Path) -> Iterator[None]:
    """Hold the lock of ``logdir`` (created if missing) for the life of the block."""
    from keras_structured.run_directory import RunLock

    with RunLock(logdir) as lock:
        if lock.previous_holder is not None:
            print(
                f"The last writer of '{logdir}' (pid {lock.previous_holder}) ended without releasing it "
                "(killed?): its lock is taken over.",
                file=sys.stderr,
            )
        yield


def _run_config(args: argparse.Namespace, trainer: str, settings) -> dict:
    """What defines a run (``config.json``): the data options and, under ``trainer``, its settings."""
    return {
        "treebank": args.treebank,  # as given: config.json holds no machine path
        "dim": args.dim,
        "max_train_sentences": args.max_train_sentences,
        "max_dev_sentences": args.max_dev_sentences,
        trainer: dataclasses.asdict(settings),
    }


def _trainer(config: dict) -> str | None:
    """The trainer whose settings ``config`` holds (:data:`_TRAINERS`), or None."""
    return next((name for name in _TRAINERS if isinstance(config.get(name), dict)), None)


def _read_config(logdir: pathlib.Path) -> dict | None:
    """The ``config.json`` of ``logdir`` (None when there is none).

    Raises:
        SystemExit: the file is not the config of a run.
    """
    path = logdir / "config.json"
    if not os.path.lexists(path):
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(config, dict) and isinstance(config.get("treebank"), str) and _trainer(config):
            return config
        problem = "it does not hold a run's settings"
    except (OSError, ValueError) as error:
        problem = str(error)
    raise SystemExit(
        f"'{path}' is not the config.json of a run ({problem}): choose another logdir. "
        f"Received: logdir='{logdir}'"
    )


def _settings(config: dict) -> dict:
    """A config's settings in one dict: the trainer's name, the data options, its settings."""
    trainer = _trainer(config)
    data = {name: value for name, value in config.items() if name not in _TRAINERS}
    data["treebank"] = str(pathlib.Path(data["treebank"]).resolve())  # compared resolved, stored as given
    return {"trainer": trainer, **data, **config[trainer]}


def _incomplete(kept: str) -> str:
    """What the messages call a run with a ``config.json`` but no ``kept`` file."""
    return f"an incomplete run (config.json but no {kept}: its first steps failed or were stopped)"


def _clear(logdir: pathlib.Path) -> str:
    """The command that clears ``logdir``, for the messages."""
    return f"clear it with: rm -r {shlex.quote(str(logdir))}"


def _start_run(logdir: pathlib.Path, config: dict, kept: str, resumable: tuple[str, ...] = ()) -> None:
    """Check the (locked) ``logdir`` against a run of ``config`` before anything is written.

    A new run gets its ``config.json``. A run that ``logdir`` holds continues only with its
    stored settings, data options included; those named in ``resumable`` may change
    (``steps`` only grows: it extends the run, whose ``final.json`` and ``eval_*.json`` are
    then dropped), and ``config.json`` is rewritten to them.

    Args:
        logdir: the run folder, locked by this process.
        config: the run's settings (:func:`_run_config`).
        kept: the file that shows a run made progress (``checkpoint.npz``, ``final.json``).
        resumable: the trainer's settings that a rerun may change.

    Raises:
        SystemExit: other settings than the stored ones, or a ``kept`` file but no
            ``config.json``.
    """
    from keras_structured.run_directory import write_json
    from keras_structured.run_settings import check_resumed_settings

    stored = _read_config(logdir)
    has_progress = os.path.lexists(logdir / kept)
    if stored is None:
        if has_progress:
            raise SystemExit(
                f"'{logdir}' holds a {kept} but no config.json: its settings cannot be checked. Restore "
                f"config.json or choose another logdir. Received: logdir='{logdir}'"
            )
        write_json(logdir / "config.json", config)
        return
    if has_progress:
        extends = " (only a larger --steps extends it)" if "steps" in resumable else ""
        held, remedy = "a run", f"continue it{extends}, or choose another logdir"
    else:
        held, remedy = _incomplete(kept), f"start it again, or {_clear(logdir)}"
    try:
        differences = check_resumed_settings(
            _settings(stored),
            _settings(config),
            may_change=[name for name in resumable if name != "steps"],
            may_grow=[name for name in resumable if name == "steps"],
            advice=f"Rerun with its own settings to {remedy}.",
        )
    except ValueError as error:
        raise SystemExit(f"'{logdir}' holds {held}: {error}") from None
    if not has_progress:
        print(f"'{logdir}' holds {_incomplete(kept)}: starting it again.", file=sys.stderr)
    if "steps" in differences:
        for stale in ("final.json", *(f"eval_{split}.json" for split in _SPLITS)):
            (logdir / stale).unlink(missing_ok=True)
    if differences:
        write_json(logdir / "config.json", config)


# ---------------------------------------------------------------------------------------
# Commands


def _read_split(treebank: str, split: str, limit: int | None):
    from keras_structured.applications.parsing.conllu_reader import read_conllu, treebank_paths

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


def _train(args: argparse.Namespace, C: float, logdir: pathlib.Path) -> dict | None:
    """One run (resumed from its checkpoint); None when stopped by ``--time-limit``."""
    from keras_structured.applications.parsing import tracenorm
    from keras_structured.applications.parsing.bilinear_features import featurize
    from keras_structured.divergence import DivergenceError
    from keras_structured.run_directory import write_json

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
    with _locked(logdir):
        train = featurize(_read_split(args.treebank, "train", args.max_train_sentences), args.dim)
        dev = featurize(_read_split(args.treebank, "dev", args.max_dev_sentences), args.dim)
        config = _run_config(args, "hazan", settings)
        _start_run(logdir, config, tracenorm.CHECKPOINT_NAME, tracenorm.RESUMABLE_FIELDS)
        minutes = getattr(args, "time_limit", 0.0) or 0.0
        deadline = time.monotonic() + 60.0 * minutes if minutes > 0 else None
        stopped = []

        def stop_at_the_deadline(trainer: tracenorm.HazanTrainer, record: dict) -> bool:
            if deadline is not None and time.monotonic() >= deadline and trainer.step_count < settings.steps:
                stopped.append(trainer.step_count)
                return False
            return True

        trainer = tracenorm.HazanTrainer(
            train, settings, dev=dev, logdir=logdir, callback=stop_at_the_deadline
        )
        try:
            trainer.train(progress=args.progress)
        except DivergenceError as error:
            print(f"Training stopped: {error}", file=sys.stderr)
            plot_progress(trainer.history, logdir)
            raise SystemExit(1) from error
        plot_progress(trainer.history, logdir)
        if stopped:
            print(
                f"Time limit of {minutes:g} min reached after step {stopped[0]} of {settings.steps}: "
                f"checkpoint written to '{logdir}', no final.json. Run the same command to resume.",
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
            "dense_parameters": args.dim**2 + trainer.model.distance_weights.size,
            "time": last.get("time"),
            "dev": tracenorm.evaluate(trainer.model, dev),
            "peak_memory_mib": peak_memory_mib(),
        }
        write_json(logdir / "final.json", final)
    print(json.dumps({"logdir": str(logdir), "dev_uas": final["dev"]["uas"], "rank": final["rank"]}))
    return final


def _evaluate(logdir: pathlib.Path, split: str) -> dict:
    from keras_structured.applications.parsing import tracenorm
    from keras_structured.applications.parsing.bilinear_features import featurize
    from keras_structured.run_directory import write_json

    missing = f"No run in '{logdir}': config.json is missing (run train first)."
    if not logdir.is_dir():
        raise SystemExit(missing)
    with _locked(logdir):
        config = _read_config(logdir)
        if config is None:
            raise SystemExit(missing)
        if _trainer(config) == "frobenius":
            raise SystemExit(
                f"'{logdir}' is a Frobenius run: it keeps no model, and its eval_dev.json and eval_test.json "
                "were written when it was trained."
            )
        checkpoint = logdir / tracenorm.CHECKPOINT_NAME
        if not os.path.lexists(checkpoint):
            raise SystemExit(
                f"'{logdir}' holds {_incomplete(checkpoint.name)}: there is no model to evaluate. The "
                f"same train command starts it again; or {_clear(logdir)}"
            )
        model = tracenorm.load_checkpoint(checkpoint)[0]
        limit = config["max_dev_sentences"] if split == "dev" else None
        sentences = featurize(_read_split(config["treebank"], split, limit), config["dim"])
        scores = tracenorm.evaluate(model, sentences)
        write_json(logdir / f"eval_{split}.json", scores)
    print(json.dumps({"split": split, **scores}))
    return scores


def _frobenius(args: argparse.Namespace) -> dict:
    """The dense baseline (not resumable): trained, then evaluated on dev and test."""
    from keras_structured.applications.parsing import tracenorm
    from keras_structured.applications.parsing.bilinear_features import featurize
    from keras_structured.divergence import DivergenceError
    from keras_structured.run_directory import write_csv, write_json

    settings = tracenorm.FrobeniusConfig(
        mu=args.mu,
        learning_rate=args.learning_rate,
        steps=args.steps,
        loss=args.loss,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    logdir = pathlib.Path(args.logdir)
    with _locked(logdir):
        train = featurize(_read_split(args.treebank, "train", args.max_train_sentences), args.dim)
        _start_run(logdir, _run_config(args, "frobenius", settings), "final.json")
        try:
            model, history = tracenorm.train_frobenius(train, settings)
        except DivergenceError as error:
            print(f"Training stopped: {error}", file=sys.stderr)
            raise SystemExit(1) from error
        columns = ("step", "objective", "loss", "time")
        write_csv(
            logdir / "progress.csv", columns, [[record[name] for name in columns] for record in history]
        )
        del train
        scores = {}
        for split in ("dev", "test"):
            limit = args.max_dev_sentences if split == "dev" else None
            sentences = featurize(_read_split(args.treebank, split, limit), args.dim)
            scores[split] = tracenorm.evaluate(model, sentences)
            write_json(logdir / f"eval_{split}.json", scores[split])
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
        write_json(logdir / "final.json", final)
    print(
        json.dumps(
            {"logdir": str(logdir), "dev_uas": scores["dev"]["uas"], "test_uas": scores["test"]["uas"]}
        )
    )
    return final


def _sweep(args: argparse.Namespace) -> None:
    from keras_structured.run_directory import write_csv

    root = pathlib.Path(args.logdir)
    with _locked(root):
        rows = []
        for C in args.Cs:
            run = _sweep_run(root, C)
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
        write_csv(root / "sweep.csv", list(rows[0]), [list(row.values()) for row in rows])
        plot_sweep({pathlib.Path(args.treebank).name: rows}, root / "uas_vs_C.png")


# ---------------------------------------------------------------------------------------
# Plots (matplotlib, imported here only)


def _figure(width: float = 5.0, height: float = 3.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(figure)
    return figure


def _save_figure(figure, path: pathlib.Path) -> None:
    """Write ``figure`` to ``path`` whole, never through a symlink (the format from the suffix)."""
    from keras_structured.run_directory import save_file

    save_file(path, lambda temporary: figure.savefig(temporary, format=path.suffix.lstrip(".")))


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
    _save_figure(figure, logdir / "rank.png")
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
    _save_figure(figure, logdir / "objective_gap.png")


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
    _save_figure(figure, path)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    A run directory held by another process, or a symlink planted in it, ends the command
    with the error's message (exit status 1).
    """
    args = build_parser().parse_args(argv)
    from keras_structured.run_directory import RunLockedError, UnsafePathError

    try:
        if args.command == "train":
            _train(args, args.C, pathlib.Path(args.logdir))
        elif args.command == "evaluate":
            _evaluate(pathlib.Path(args.logdir), args.split)
        elif args.command == "frobenius":
            _frobenius(args)
        else:
            _sweep(args)
    except (RunLockedError, UnsafePathError) as error:
        raise SystemExit(f"{type(error).__name__}: {error}") from error
    return 0


if __name__ == "__main__":
    sys.exit(main())
