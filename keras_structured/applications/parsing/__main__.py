"""Command line of the dependency parser:
``python -m keras_structured.applications.parsing {train,evaluate,parse,time}``.

Examples:
    python -m keras_structured.applications.parsing train --treebank ../shared/data/ud/vi_vtb-2.0 \\
        --loss sparsemap --logdir runs/parser/vi-sparsemap
    python -m keras_structured.applications.parsing train --logdir runs/parser/vi-sparsemap --resume ...
    python -m keras_structured.applications.parsing evaluate --logdir runs/parser/vi-sparsemap --split test
    python -m keras_structured.applications.parsing parse --logdir runs/vi-sparsemap --index 3 --png trees.png
    python -m keras_structured.applications.parsing time --logdir runs/vi-sparsemap --logdir runs/vi-crf
"""

from __future__ import annotations

import argparse
import functools
import json
import sys

from keras_structured.applications.parsing.conllu_reader import TAG_COLUMNS
from keras_structured.command_line import integer, number

# The loss names and defaults, repeated here so that --help answers without TensorFlow.
_LOSSES = ("sparsemap", "margin_sparsemap", "crf", "hinge", "perceptron")
# Option types: values that cannot work are refused when parsed, naming the option.
_AT_LEAST_ZERO, _AT_LEAST_ONE = integer(minimum=0), integer(minimum=1)
_POSITIVE = number(minimum=0, open_minimum=True)


def _parser() -> argparse.ArgumentParser:
    shows_defaults = argparse.ArgumentDefaultsHelpFormatter  # in every command's --help
    parser = argparse.ArgumentParser(
        prog="python -m keras_structured.applications.parsing",
        description="Kiperwasser & Goldberg's BiLSTM dependency parser trained with the SparseMAP, "
        "margin SparseMAP, tree CRF, structured hinge or perceptron loss (the SparseMAP paper's Table 1).",
        formatter_class=shows_defaults,
    )
    subcommand = functools.partial(argparse.ArgumentParser, formatter_class=shows_defaults)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=subcommand)

    train = commands.add_parser("train", help="train a parser into a logdir (resumable)")
    train.add_argument("--treebank", required=True, help="folder with *-ud-{train,dev,test}.conllu files")
    train.add_argument("--logdir", required=True, help="run directory (must be empty unless --resume)")
    train.add_argument("--loss", default="sparsemap", choices=_LOSSES)
    train.add_argument("--learning-rate", type=_POSITIVE, default=2e-3, help="Adam's learning rate")
    train.add_argument(
        "--learning-rate-decay",
        type=number(minimum=0, maximum=1, open_minimum=True),
        default=1.0,
        help="factor applied to the learning rate after an epoch without a better dev UAS (1: none)",
    )
    train.add_argument("--seed", type=_AT_LEAST_ZERO, default=0)
    train.add_argument("--epochs", type=_AT_LEAST_ONE, default=30, help="most epochs")
    train.add_argument(
        "--patience", type=_AT_LEAST_ONE, default=5, help="epochs without a better dev UAS before stopping"
    )
    train.add_argument(
        "--min-epochs",
        type=_AT_LEAST_ONE,
        default=1,
        help="epochs run before early stopping may stop training",
    )
    train.add_argument("--batch-size", type=_AT_LEAST_ONE, default=32)
    train.add_argument(
        "--max-length",
        type=_AT_LEAST_ONE,
        default=100,
        help="longer training sentences are left out (and counted)",
    )
    train.add_argument(
        "--max-train-sentences", type=_AT_LEAST_ONE, default=None, help="use the first N training sentences"
    )
    train.add_argument(
        "--word-dropout",
        type=number(minimum=0),
        default=0.25,
        help="alpha of the frequency-based word dropout",
    )
    train.add_argument("--lowercase", action="store_true", help="lowercase the words")
    train.add_argument(
        "--collapse-numbers", action="store_true", help="words starting with a digit are one word, <num>"
    )
    train.add_argument(
        "--tag-column",
        choices=TAG_COLUMNS,
        default="upos",
        help="gold tags to embed: universal (UPOS) or the treebank's own (XPOS, Kiperwasser & Goldberg's)",
    )
    train.add_argument("--single-root", action="store_true", help="exactly one word attached to the root")
    train.add_argument(
        "--sparsity-sentences",
        type=_AT_LEAST_ZERO,
        default=300,
        help="per-epoch SparseMAP sparsity on the first N dev sentences (0: none; evaluate uses all)",
    )
    train.add_argument("--word-dim", type=_AT_LEAST_ONE, default=100, help="word embedding size")
    train.add_argument("--tag-dim", type=_AT_LEAST_ONE, default=25, help="POS embedding size")
    train.add_argument(
        "--lstm-units", type=_AT_LEAST_ONE, default=125, help="units per direction of each BiLSTM layer"
    )
    train.add_argument("--lstm-layers", type=_AT_LEAST_ONE, default=2, help="BiLSTM layers")
    train.add_argument(
        "--mlp-units", type=_AT_LEAST_ONE, default=100, help="hidden units of the arc perceptron"
    )
    train.add_argument(
        "--dropout",
        type=number(minimum=0, maximum=1, open_maximum=True),
        default=0.0,
        help="dropout on the embeddings and BiLSTM outputs",
    )
    train.add_argument("--resume", action="store_true", help="continue the run in --logdir (same settings)")
    train.add_argument(
        "--time-limit",
        type=number(minimum=0),
        default=None,
        help="minutes after which no new epoch starts; the run stays resumable (no final.json yet)",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")

    evaluate = commands.add_parser("evaluate", help="UAS and SparseMAP sparsity of a run's best model")
    evaluate.add_argument("--logdir", required=True)
    evaluate.add_argument("--split", default="test", choices=("train", "dev", "test"))
    evaluate.add_argument("--json", action="store_true", help="print one JSON line")

    parse = commands.add_parser(
        "parse", help="print (and draw) the trees SparseMAP puts weight on for one sentence"
    )
    parse.add_argument("--logdir", required=True)
    parse.add_argument("--split", default="dev", choices=("train", "dev", "test"))
    parse.add_argument(
        "--index", type=_AT_LEAST_ZERO, default=0, help="sentence number in the split (from 0)"
    )
    parse.add_argument("--png", default=None, help="draw the trees into this PNG file")
    parse.add_argument(
        "--max-trees", type=_AT_LEAST_ONE, default=6, help="print and draw at most the N heaviest trees"
    )

    time_steps = commands.add_parser(
        "time", help="training throughput of several runs' checkpoints, interleaved on the same batches"
    )
    time_steps.add_argument("--logdir", action="append", required=True, help="a run (repeat for several)")
    time_steps.add_argument("--steps", type=_AT_LEAST_ONE, default=30, help="timed steps per run")
    time_steps.add_argument("--output", default=None, help="also write the JSON into this file")
    return parser


def _train(args) -> None:
    from keras_structured.applications.parsing.training import ParserConfig, train
    from keras_structured.applications.training_runs import train_from_arguments

    train_from_arguments(args, ParserConfig, train)


def _evaluate(args) -> None:
    from keras_structured.applications.parsing.training import evaluate

    result = evaluate(args.logdir, args.split)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.split}: UAS {result['uas']:.2f} ({result['uas_no_punct']:.2f} without punctuation) over "
            f"{result['sentences']} sentences; {result['mean_trees']:.2f} trees per sentence, "
            f"{100 * result['one_tree_fraction']:.1f}% with one tree; "
            f"{result['long_sentences']} long sentences (parsed too)"
        )


def _parse(args) -> None:
    from keras_structured.applications.parsing.training import load_run, parse_sentence

    model, vocabulary, config = load_run(args.logdir)
    sentence, trees = parse_sentence(model, vocabulary, config, args.split, args.index)
    print(" ".join(sentence.words))
    shown, rest = trees[: args.max_trees], trees[args.max_trees :]
    for heads, weight in shown:
        arcs = " ".join(f"{head}->{word}" for word, head in enumerate(heads[1:].tolist(), start=1))
        print(f"p={weight:.3f}  {arcs}")
    if rest:
        print(f"... and {len(rest)} more trees of total weight {sum(weight for _, weight in rest):.3f}")
    if args.png:
        from keras_structured.applications.parsing.figures import draw_trees
        from keras_structured.applications.training_runs import save_output

        title = f"{args.split} sentence {args.index}: {len(trees)} trees" + (
            f", the {len(shown)} heaviest shown" if rest else ""
        )
        save_output(args.png, lambda path: draw_trees(list(sentence.words), shown, path, title=title))
        print(f"wrote {args.png}")


def _time(args) -> None:
    from keras_structured.applications.parsing.step_timing import time_training_steps
    from keras_structured.applications.timing import report_timings

    report_timings(time_training_steps(args.logdir, args.steps), args.output)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    {"train": _train, "evaluate": _evaluate, "parse": _parse, "time": _time}[args.command](args)


if __name__ == "__main__":
    main(sys.argv[1:])
