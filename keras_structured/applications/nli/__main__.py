"""Command line of the NLI models:
``python -m keras_structured.applications.nli {train,evaluate,align,time}``.

Examples:
    python -m keras_structured.applications.nli train --attention sequence --logdir runs/nli/sequence
    python -m keras_structured.applications.nli train --logdir runs/nli/sequence --attention sequence --resume
    python -m keras_structured.applications.nli evaluate --logdir runs/nli/sequence --split test
    python -m keras_structured.applications.nli align --logdir runs/nli/sequence --png pairs.png
    python -m keras_structured.applications.nli time --logdir runs/nli/softmax --logdir runs/nli/sequence
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys

from keras_structured.applications.run_commands import (
    AT_LEAST_ONE,
    POSITIVE,
    add_run_options,
    add_time_command,
    command_parser,
    time_command,
    train_command,
)
from keras_structured.command_line import number, run_command

# The names, repeated here so that --help answers without building the models.
_ATTENTIONS = ("softmax", "sequence", "matching")
_SPLITS = ("train", "trial", "test")
_DEFAULT_SICK = (
    pathlib.Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "nli" / "sick.tsv"
).resolve()


def _parser() -> argparse.ArgumentParser:
    parser, commands = command_parser(
        "python -m keras_structured.applications.nli",
        "ESIM on SICK with softmax, sequential-SparseMAP or matching-SparseMAP attention "
        "(the SparseMAP paper's section 5.2, Table 2 and Figure 5).",
    )
    train = commands.add_parser("train", help="train a model into a logdir (resumable)")
    train.add_argument("--data", default=str(_DEFAULT_SICK), help="the SICK .tsv file (not distributed here)")
    train.add_argument("--attention", default="softmax", choices=_ATTENTIONS)
    add_run_options(train, "trial accuracy", 2.0**-4, "SGD's initial learning rate", learning_rate_decay=0.9)
    train.add_argument("--clipnorm", type=POSITIVE, default=5.0, help="global gradient norm clipping")
    train.add_argument(
        "--max-train-pairs", type=AT_LEAST_ONE, default=None, help="use the first N training pairs"
    )
    train.add_argument(
        "--max-trial-pairs",
        type=AT_LEAST_ONE,
        default=None,
        help="measure trial accuracy on the first N trial pairs",
    )
    train.add_argument(
        "--min-count", type=AT_LEAST_ONE, default=2, help="least training count of a known word"
    )
    train.add_argument(
        "--embedding-dim", type=AT_LEAST_ONE, default=100, help="word embedding size (learned)"
    )
    train.add_argument(
        "--units", type=AT_LEAST_ONE, default=100, help="units of the BiLSTMs (per direction) and MLPs"
    )
    train.add_argument(
        "--dropout", type=number(minimum=0, maximum=1, open_maximum=True), default=0.5
    )
    train.add_argument(
        "--max-iter",
        type=AT_LEAST_ONE,
        default=None,
        help="most MAP calls per SparseMAP problem (None: the library's default, 2500)",
    )

    evaluate = commands.add_parser("evaluate", help="accuracy and alignment sparsity of a run's best model")
    evaluate.add_argument("--logdir", required=True)
    evaluate.add_argument("--split", default="test", choices=_SPLITS)
    evaluate.add_argument(
        "--max-pairs", type=AT_LEAST_ONE, default=None, help="evaluate the first N pairs of the split"
    )
    evaluate.add_argument("--json", action="store_true", help="print one JSON line")

    align = commands.add_parser("align", help="print (and draw, write) a run's attention on some pairs")
    align.add_argument("--logdir", required=True)
    align.add_argument("--split", default="test", choices=_SPLITS)
    align.add_argument(
        "--pair-ids",
        type=int,
        nargs="+",
        default=None,
        help="SICK pair_id values (default: the first short entailment and contradiction pairs)",
    )
    align.add_argument(
        "--png", default=None, help="draw the heatmaps into this PNG file (one pair: as given)"
    )
    align.add_argument("--output", default=None, help="write the matrices as JSON into this file")

    add_time_command(
        commands, "seconds per training step of several runs' checkpoints, interleaved on the same batches"
    )
    return parser


def _train(args) -> None:
    from keras_structured.applications.nli.training import NLIConfig, train

    train_command(args, NLIConfig, train)


def _evaluate(args) -> None:
    from keras_structured.applications.nli.training import evaluate

    result = evaluate(args.logdir, args.split, args.max_pairs)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.split}: accuracy {result['accuracy']:.2f} over {result['pairs']} pairs; "
            f"{result['alignment_nonzero_percent']:.1f}% nonzero attention weights; "
            f"{result['mean_structures']:.2f} structures per pair ({result['attention']})"
        )


def _align(args) -> None:
    from keras_structured.applications.nli.training import alignments

    result = alignments(args.logdir, args.split, args.pair_ids)
    for pair in result["pairs"]:
        print(
            f"pair {pair['pair_id']} ({pair['label']}, predicted {pair['predicted']}), "
            f"structures {pair['structures']}"
        )
        print("  premise:    " + " ".join(pair["premise"]))
        print("  hypothesis: " + " ".join(pair["hypothesis"]))
        for i, word in enumerate(pair["premise"]):
            weights = ", ".join(
                f"{pair['hypothesis'][j]}={w:.2f}" for j, w in enumerate(pair["p2h"][i]) if w > 0.005
            )
            print(f"  {word} -> {weights}")
    from keras_structured.run_directory import save_output_file

    if args.output:
        save_output_file(args.output, lambda path: path.write_text(json.dumps(result) + "\n"))
        print(f"wrote {args.output}")
    if args.png:
        from keras_structured.applications.nli.figures import plot_alignments

        png = pathlib.Path(args.png)
        for k, pair in enumerate(result["pairs"]):
            path = png if len(result["pairs"]) == 1 else png.with_name(f"{png.stem}_{k}{png.suffix}")
            title = f"pair {pair['pair_id']}: {pair['label']} (predicted {pair['predicted']})"
            matrices = {result["attention"]: (pair["p2h"], pair["h2p"])}
            draw = functools.partial(
                plot_alignments, pair["premise"], pair["hypothesis"], matrices, title=title
            )
            save_output_file(path, draw)  # draw(path) with a temporary path
            print(f"wrote {path}")


def _time(args) -> None:
    from keras_structured.applications.nli.step_timing import time_training_steps

    time_command(args, time_training_steps)


def _run(args) -> None:
    {"train": _train, "evaluate": _evaluate, "align": _align, "time": _time}[args.command](args)


def main(argv: list[str] | None = None) -> None:
    """Run the command, raising its errors (``python -m`` prints a user error as one message)."""
    _run(_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(run_command(_parser(), _run, sys.argv[1:]))
