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
import json
import sys

from keras_structured.applications.parsing.conllu_reader import TAG_COLUMNS
from keras_structured.applications.run_commands import (
    AT_LEAST_ONE,
    AT_LEAST_ZERO,
    add_run_options,
    add_time_command,
    command_parser,
    time_command,
    train_command,
)
from keras_structured.command_line import number

# The loss names, repeated here so that --help answers without building the losses.
_LOSSES = ("sparsemap", "margin_sparsemap", "crf", "hinge", "perceptron")


def _parser() -> argparse.ArgumentParser:
    parser, commands = command_parser(
        "python -m keras_structured.applications.parsing",
        "Kiperwasser & Goldberg's BiLSTM dependency parser trained with the SparseMAP, margin SparseMAP, "
        "tree CRF, structured hinge or perceptron loss (the SparseMAP paper's Table 1).",
    )
    train = commands.add_parser("train", help="train a parser into a logdir (resumable)")
    train.add_argument("--treebank", required=True, help="folder with *-ud-{train,dev,test}.conllu files")
    train.add_argument("--loss", default="sparsemap", choices=_LOSSES)
    add_run_options(train, "dev UAS", 2e-3, "Adam's learning rate", learning_rate_decay=1.0)
    train.add_argument(
        "--max-length",
        type=AT_LEAST_ONE,
        default=100,
        help="longer training sentences are left out (and counted)",
    )
    train.add_argument(
        "--max-train-sentences", type=AT_LEAST_ONE, default=None, help="use the first N training sentences"
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
        type=AT_LEAST_ZERO,
        default=300,
        help="per-epoch SparseMAP sparsity on the first N dev sentences (0: none; evaluate uses all)",
    )
    train.add_argument("--word-dim", type=AT_LEAST_ONE, default=100, help="word embedding size")
    train.add_argument("--tag-dim", type=AT_LEAST_ONE, default=25, help="POS embedding size")
    train.add_argument(
        "--lstm-units", type=AT_LEAST_ONE, default=125, help="units per direction of each BiLSTM layer"
    )
    train.add_argument("--lstm-layers", type=AT_LEAST_ONE, default=2, help="BiLSTM layers")
    train.add_argument(
        "--mlp-units", type=AT_LEAST_ONE, default=100, help="hidden units of the arc perceptron"
    )
    train.add_argument(
        "--dropout",
        type=number(minimum=0, maximum=1, open_maximum=True),
        default=0.0,
        help="dropout on the embeddings and BiLSTM outputs",
    )

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
        "--index", type=AT_LEAST_ZERO, default=0, help="sentence number in the split (from 0)"
    )
    parse.add_argument("--png", default=None, help="draw the trees into this PNG file")
    parse.add_argument(
        "--max-trees", type=AT_LEAST_ONE, default=6, help="print and draw at most the N heaviest trees"
    )

    add_time_command(
        commands, "training throughput of several runs' checkpoints, interleaved on the same batches"
    )
    return parser


def _train(args) -> None:
    from keras_structured.applications.parsing.training import ParserConfig, train

    train_command(args, ParserConfig, train)


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

    time_command(args, time_training_steps)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    {"train": _train, "evaluate": _evaluate, "parse": _parse, "time": _time}[args.command](args)


if __name__ == "__main__":
    main(sys.argv[1:])
