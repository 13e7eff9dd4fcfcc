"""Command line of the dependency parser:
``python -m keras_structured.applications.parsing {train,evaluate,parse,time}``.

Examples:
    python -m keras_structured.applications.parsing train --treebank ../shared/data/ud/vi_vtb-2.0 \\
        --loss sparsemap --logdir runs/parser/vi-sparsemap
    python -m keras_structured.applications.parsing train --logdir runs/parser/vi-sparsemap --resume ...
    python -m keras_structured.applications.parsing evaluate --logdir runs/parser/vi-sparsemap --split test
    python -m keras_structured.applications.parsing parse --logdir runs/vi-sparsemap --index 3 --png trees.png
    python -m keras_structured.applications.parsing parse --logdir runs/vi-sparsemap --input new.conllu \\
        --output parsed.conllu --trees parsed.trees.jsonl
    python -m keras_structured.applications.parsing evaluate --logdir runs/vi-sparsemap --input gold.conllu
    python -m keras_structured.applications.parsing time --logdir runs/vi-sparsemap --logdir runs/vi-crf
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from keras_structured.applications.parsing.conllu_files import INPUT_FORMATS
from keras_structured.applications.parsing.conllu_reader import SPLITS, TAG_COLUMNS
from keras_structured.applications.run_commands import (
    AT_LEAST_ONE,
    AT_LEAST_ZERO,
    add_run_options,
    add_time_command,
    command_parser,
    time_command,
    train_command,
)
from keras_structured.command_line import number, run_command

# The loss names, repeated here so that --help answers without building the losses.
_LOSSES = ("sparsemap", "margin_sparsemap", "crf", "hinge", "perceptron")
# The default of options whose value, when not given, depends on the others (read with getattr);
# --help then states that rule instead of "(default: None)".
_NOT_GIVEN = argparse.SUPPRESS


def _parser() -> argparse.ArgumentParser:
    parser, commands = command_parser(
        "python -m keras_structured.applications.parsing",
        "Kiperwasser & Goldberg's BiLSTM dependency parser trained with the SparseMAP, margin SparseMAP, "
        "tree CRF, structured hinge or perceptron loss (the SparseMAP paper's Table 1).",
    )
    from keras_structured.applications.parsing.presets import PRESETS

    train = commands.add_parser(
        "train",
        help="train a parser into a logdir (resumable)",
        description="Train a parser into a logdir with model.fit, one epoch at a time: early stopping on "
        "the dev UAS, never before --min-epochs (with --min-epochs equal to --epochs, exactly --epochs "
        "epochs, keeping the model of the best dev UAS), a checkpoint after every epoch, --resume with the "
        "same settings. --preset sparsemap-paper gives the defaults of the SparseMAP authors' released "
        "parser (vene/sparsemap-parser): 1 BiLSTM layer of 125 units, word embeddings of 100, UPOS "
        "embeddings of 25, an arc MLP of 100, batches of 16, Adam at 1e-3 without decay, no dropout but "
        "the word dropout (0.25), a fixed 20 epochs keeping the best dev UAS, lowercased words and "
        "collapsed numbers, the loss summed over a batch, a cost of one per wrong head (--cost-weight "
        "0.5), a learned root vector and a random arc bias; options given explicitly override it, and "
        "config.json records the preset with every resulting value.",
    )
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
    train.add_argument(
        "--lowercase", action=argparse.BooleanOptionalAction, default=False, help="lowercase the words"
    )
    train.add_argument(
        "--collapse-numbers",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="words starting with a digit are one word, <num>",
    )
    train.add_argument(
        "--tag-column",
        choices=TAG_COLUMNS,
        default="upos",
        help="gold tags to embed: universal (UPOS), the treebank's own (XPOS, Kiperwasser & Goldberg's) or "
        "none (a parser of the words alone, which parses plain tokenised text)",
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
    train.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=None,
        help="start from a named configuration (see above); options given explicitly override its values",
    )
    train.add_argument(
        "--cost-weight",
        type=number(minimum=0),
        default=1.0,
        help="weight of the Hamming cost of the hinge and margin_sparsemap losses (1: two per wrong head, "
        "0.5: one)",
    )
    train.add_argument(
        "--loss-reduction",
        choices=("mean", "sum"),
        default="mean",
        help="a batch's loss: the mean or the sum of its sentences' losses",
    )
    train.add_argument(
        "--root",
        choices=("token", "learned"),
        default="token",
        help="the root's head representation: the BiLSTM vector of a root token, or a learned vector "
        "(the BiLSTM then reads BOS w_1 ... w_n EOS)",
    )
    train.add_argument(
        "--arc-bias-initializer",
        choices=("zeros", "random"),
        default="zeros",
        help="start of the arc MLP's bias: zeros, or Glorot uniform as DyNet starts every parameter",
    )
    train.add_argument(
        "--labels",
        action="store_true",
        help="also predict dependency relations (Kiperwasser & Goldberg's arc-label MLP, trained jointly "
        "with the tree loss) and report the LAS",
    )
    train.add_argument(
        "--label-units", type=AT_LEAST_ONE, default=100, help="hidden units of the arc-label MLP"
    )
    _preset_defaults(train, PRESETS)

    evaluate = commands.add_parser(
        "evaluate",
        help="UAS (LAS for a labelled run) and SparseMAP sparsity of a run's best model",
        description="Score a run's best model on a split of its treebank (--split, written to the run's "
        "eval_{split}.json) or on any CoNLL-U file with gold trees (--input, nothing written into the run): "
        "UAS, and LAS for a run that predicts relations (not available against gold relations '_'), over "
        "all words and without punctuation (UPOS PUNCT), the mean number of trees SparseMAP puts weight on "
        "and the share of sentences with one.",
    )
    evaluate.add_argument("--logdir", required=True)
    gold = evaluate.add_mutually_exclusive_group()
    gold.add_argument(
        "--split",
        default=_NOT_GIVEN,
        choices=SPLITS,
        help="a split of the run's treebank (test when neither --split nor --input is given)",
    )
    gold.add_argument("--input", default=None, help="a CoNLL-U file with gold trees")
    evaluate.add_argument("--json", action="store_true", help="print one JSON line")
    evaluate.add_argument("--output-json", default=None, help="also write the result into this JSON file")
    evaluate.add_argument("--overwrite", action="store_true", help="--output-json may replace a file")

    parse = commands.add_parser(
        "parse",
        help="parse a CoNLL-U or text file into CoNLL-U, or show one treebank sentence's SparseMAP trees",
        description="With --input FILE and --output PRED.conllu: parse every sentence of FILE and write "
        "it as CoNLL-U with the predicted HEAD and DEPREL of every word (DEPREL '_' for a run that "
        "predicts no relations); every other line and column is copied as it is (comments, multiword "
        "tokens, empty nodes, LEMMA, UPOS, XPOS, FEATS, DEPS, MISC). FILE is CoNLL-U (*.conllu, *.conll; "
        "HEAD and DEPREL may be '_') or pre-tokenised text (*.txt: one sentence per line, tokens "
        "separated by whitespace, blank lines skipped), which only a run trained with --tag-column none "
        "can parse, text having no tags. Words and tags unseen in training are parsed as the unknown "
        "word and tag, and counted. --trees also writes, per sentence, the trees SparseMAP puts weight "
        "on (one JSON line: index, sent_id, location, converged, trees as [{heads, weight}]). A word "
        "attached to the root gets a relation seen at the root in training (UD's root), another word one "
        "seen below a word; --single-root decodes one root word per sentence. Existing "
        "files are replaced only with --overwrite; output paths may go through symlinked folders, and "
        "are checked before the parse starts. "
        "Without --input: one sentence of the run's treebank (--split, --index) is parsed and the trees "
        "SparseMAP puts weight on are printed, and drawn with --png.",
    )
    parse.add_argument("--logdir", required=True)
    parse.add_argument(
        "--single-root",
        action=argparse.BooleanOptionalAction,
        default=_NOT_GIVEN,
        help="decode trees with exactly one word attached to the root (--no-single-root: any number; "
        "if not given: as the run was trained, train --single-root)",
    )
    source = parse.add_mutually_exclusive_group()
    source.add_argument("--input", default=None, help="the file to parse (CoNLL-U or text)")
    source.add_argument(
        "--split",
        default=_NOT_GIVEN,
        choices=SPLITS,
        help="show one sentence of this split of the run's treebank (dev when neither --split nor --input "
        "is given)",
    )
    parse.add_argument(
        "--output", default=None, help="with --input: the CoNLL-U file to write (required; '-': stdout)"
    )
    parse.add_argument(
        "--input-format",
        default=_NOT_GIVEN,
        choices=INPUT_FORMATS,
        help="with --input: the format of the file (if not given: from its suffix)",
    )
    parse.add_argument(
        "--trees", default=None, help="with --input: also write the SparseMAP trees into this JSONL file"
    )
    parse.add_argument("--overwrite", action="store_true", help="with --input: outputs may replace files")
    parse.add_argument("--json", action="store_true", help="with --input: print the summary as one JSON line")
    parse.add_argument(
        "--index",
        type=AT_LEAST_ZERO,
        default=_NOT_GIVEN,
        help="without --input: sentence number in the split, from 0 (0 if not given)",
    )
    parse.add_argument("--png", default=None, help="without --input: draw the trees into this PNG file")
    parse.add_argument(
        "--max-trees",
        type=AT_LEAST_ONE,
        default=_NOT_GIVEN,
        help="without --input: print and draw at most the N heaviest trees (6 if not given)",
    )

    add_time_command(
        commands, "training throughput of several runs' checkpoints, interleaved on the same batches"
    )
    return parser


def _preset_defaults(train: argparse.ArgumentParser, presets: dict) -> None:
    """The ``train`` options that a preset sets are in the parsed arguments only when given
    (default SUPPRESS): ``_train`` fills the others from ``--preset``, or leaves them to
    ParserConfig's defaults (those shown), so that options given explicitly override the
    preset. Their help shows the default and each preset's value."""
    for action in train._actions:
        values = [
            f"{name}: {preset[action.dest]}" for name, preset in presets.items() if action.dest in preset
        ]
        if values:
            shown = (action.help or "").replace(" (default: %(default)s)", "")
            action.help = f"{shown} (default: {action.default}; --preset {', '.join(values)})"
            action.default = argparse.SUPPRESS


def _train(args) -> None:
    from keras_structured.applications.parsing.presets import PRESETS
    from keras_structured.applications.parsing.training import ParserConfig, train

    preset = PRESETS[args.preset] if args.preset else {}
    train_command(argparse.Namespace(**{**preset, **vars(args)}), ParserConfig, train)


def _evaluate(args) -> None:
    from keras_structured.applications.parsing import conllu_files

    if args.input is None:
        from keras_structured.applications.parsing.training import evaluate

        name = getattr(args, "split", "test")
        conllu_files.check_outputs(None, {"--output-json": args.output_json}, args.overwrite)
        result = evaluate(args.logdir, name)
    else:
        from keras_structured.applications.parsing.conllu_reader import read_conllu
        from keras_structured.applications.parsing.training import evaluate_sentences, load_run

        name = args.input
        conllu_files.check_outputs(args.input, {"--output-json": args.output_json}, args.overwrite)
        model, vocabulary, config = load_run(args.logdir)
        sentences = read_conllu(args.input, single_root=config.single_root)
        result = evaluate_sentences(model, vocabulary, config, sentences)
        result.update(input=str(args.input))
    if args.output_json is not None:
        conllu_files.write_output(args.output_json, json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result))
        return
    labelled = ""
    if result.get("las") is not None:
        labelled = f", LAS {result['las']:.2f} ({result['las_no_punct']:.2f} without punctuation)"
    elif "las_unavailable" in result:
        labelled = f", LAS not available ({result['las_unavailable']})"
    print(
        f"{name}: UAS {result['uas']:.2f} ({result['uas_no_punct']:.2f} without punctuation){labelled} over "
        f"{result['sentences']} sentences; {result['mean_trees']:.2f} trees per sentence, "
        f"{100 * result['one_tree_fraction']:.1f}% with one tree; "
        f"{result['long_sentences']} long sentences (parsed too)"
    )


# The parse options of each mode (the other mode refuses them), by attribute.
_SPLIT_OPTIONS = {"index": "--index", "png": "--png", "max_trees": "--max-trees"}
_INPUT_OPTIONS = {
    "output": "--output",
    "input_format": "--input-format",
    "trees": "--trees",
    "overwrite": "--overwrite",
    "json": "--json",
}


def _refuse_options(args, options: dict[str, str], mode: str, received: str) -> None:
    given = [option for name, option in options.items() if getattr(args, name, None) not in (None, False)]
    if given:
        raise ValueError(f"{', '.join(given)}: options of parse {mode} only. Received: {received}")


def _parse(args) -> None:
    if args.input is None:
        _refuse_options(args, _INPUT_OPTIONS, "--input (a file)", "no --input")
        _parse_split(args)
    else:
        received = f"--input {args.input!r}"
        _refuse_options(args, _SPLIT_OPTIONS, "--split (one sentence of the run's treebank)", received)
        _parse_file(args)


def _load_parser(args):
    """The run's model, vocabulary and configuration, its ``single_root`` replaced by
    ``parse --single-root`` or ``--no-single-root`` when given."""
    from keras_structured.applications.parsing.training import load_run

    model, vocabulary, config = load_run(args.logdir)
    if hasattr(args, "single_root"):
        config = dataclasses.replace(config, single_root=args.single_root)
    return model, vocabulary, config


def _parse_split(args) -> None:
    from keras_structured.applications.parsing.training import parse_sentence

    split, index = getattr(args, "split", "dev"), getattr(args, "index", 0)
    max_trees = getattr(args, "max_trees", 6)
    model, vocabulary, config = _load_parser(args)
    sentence, trees = parse_sentence(model, vocabulary, config, split, index)
    print(" ".join(sentence.words))
    shown, rest = trees[:max_trees], trees[max_trees:]
    for heads, weight in shown:
        arcs = " ".join(f"{head}->{word}" for word, head in enumerate(heads[1:].tolist(), start=1))
        print(f"p={weight:.3f}  {arcs}")
    if rest:
        print(f"... and {len(rest)} more trees of total weight {sum(weight for _, weight in rest):.3f}")
    if args.png:
        from keras_structured.applications.parsing.figures import draw_trees
        from keras_structured.run_directory import save_output_file

        title = f"{split} sentence {index}: {len(trees)} trees" + (
            f", the {len(shown)} heaviest shown" if rest else ""
        )
        save_output_file(args.png, lambda path: draw_trees(list(sentence.words), shown, path, title=title))
        print(f"wrote {args.png}")


def _unknown_counts(vocabulary, config, sentences) -> tuple[int, int | None]:
    """The words, and the tags (None for a run without tags), that the vocabulary does not know."""
    from keras_structured.applications.parsing.vocabulary import UNK_ID

    words = sum(vocabulary.word_id(word) == UNK_ID for s in sentences for word in s.words)
    if config.tag_column == "none":
        return words, None
    tags = sum(vocabulary.tag_id(tag) == UNK_ID for s in sentences for tag in vocabulary.sentence_tags(s))
    return words, tags


def _parse_file(args) -> None:
    from keras_structured.applications.parsing import conllu_files
    from keras_structured.applications.parsing.training import SPARSITY_MAX_ITER, parse_sentences

    if args.output is None:
        raise ValueError(
            "parse --input needs --output, the CoNLL-U file to write ('-': standard output). "
            f"Received: --input {args.input!r} without --output"
        )
    file_format = getattr(args, "input_format", None) or conllu_files.input_format(args.input)
    conllu_files.check_outputs(args.input, {"--output": args.output, "--trees": args.trees}, args.overwrite)
    document = conllu_files.read_input(args.input, file_format)
    model, vocabulary, config = _load_parser(args)
    if file_format == "text" and config.tag_column != "none":
        raise ValueError(
            f"Text has no part-of-speech tags, and the run embeds {config.tag_column.upper()} tags: parse "
            "text with a run trained with --tag-column none, or give CoNLL-U input with tags. "
            f"Received: --input {args.input!r} read as text, a run with tag_column={config.tag_column!r}"
        )
    parsed = parse_sentences(model, vocabulary, config, document.sentences, with_trees=args.trees is not None)
    conllu = document.conllu([p.heads for p in parsed], [p.relations for p in parsed])
    unknown_words, unknown_tags = _unknown_counts(vocabulary, config, document.sentences)
    words = sum(sentence.length for sentence in document.sentences)
    summary = {
        "input": str(args.input),
        "input_format": file_format,
        "output": str(args.output),
        "trees": args.trees,
        "sentences": len(document.sentences),
        "words": words,
        "unknown_words": unknown_words,
        "unknown_tags": unknown_tags,
        "relations": any(p.relations is not None for p in parsed),
        "long_sentences": sum(s.length > config.max_length for s in document.sentences),
        "sparsemap_unfinished": None if args.trees is None else sum(not p.trees_converged for p in parsed),
    }
    conllu_files.write_output(args.output, conllu)
    if args.trees is not None:
        trees = conllu_files.trees_jsonl(
            document, [p.trees for p in parsed], [p.trees_converged for p in parsed]
        )
        conllu_files.write_output(args.trees, trees)
    stream = sys.stderr if conllu_files.STANDARD_OUTPUT in (args.output, args.trees) else sys.stdout
    if args.json:
        print(json.dumps(summary), file=stream)
        return
    tags = "no tags (a word-only run)"
    if unknown_tags is not None:
        tags = f"{unknown_tags} unknown tags ({100 * unknown_tags / words:.1f}%)"
    line = (
        f"parsed {summary['sentences']} sentences ({words} words) of {args.input} into {args.output}: "
        f"{unknown_words} unknown words ({100 * unknown_words / words:.1f}%), {tags}"
    )
    if not summary["relations"]:
        line += "; DEPREL '_' (the run predicts no relations)"
    if args.trees is not None:
        line += (
            f"; SparseMAP trees in {args.trees} ({summary['sparsemap_unfinished']} sentences unfinished "
            f"after {SPARSITY_MAX_ITER} MAP calls)"
        )
    print(line, file=stream)


def _time(args) -> None:
    from keras_structured.applications.parsing.step_timing import time_training_steps

    time_command(args, time_training_steps)


def _run(args) -> None:
    {"train": _train, "evaluate": _evaluate, "parse": _parse, "time": _time}[args.command](args)


def main(argv: list[str] | None = None) -> None:
    """Run the command, raising its errors (``python -m`` prints a user error as one message)."""
    _run(_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(run_command(_parser(), _run, sys.argv[1:]))
