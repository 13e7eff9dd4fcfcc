"""The parser as a tool on any file: ``parse --input`` (CoNLL-U or text in, CoNLL-U and the
SparseMAP trees out) and ``evaluate --input`` (any gold CoNLL-U file).

One tiny labelled run (four training sentences of the 30-sentence sample, one epoch, UPOS tags,
the arc-label classifier) is trained for the module; the text test trains a word-only run of its
own, without labels. Their trees are poor, which is no matter here: what is checked is what the
files hold, against counts made in the tests."""

import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

from keras_structured.applications.parsing.__main__ import main
from keras_structured.applications.parsing.conllu_files import read_document, read_text
from keras_structured.applications.parsing.conllu_reader import read_conllu, tree_problems
from tests.cli_runs import SAMPLE_CONLLU, sample_treebank
from tests.shared_data import SHARED_DATA, requires_shared

TRICKY = pathlib.Path(__file__).parent / "data" / "tricky.conllu"
EN_EWT_TEST = ("ud", "en_ewt-2.16", "en_ewt-ud-test.conllu")
# A sentence without heads or relations, with a tag and words that no training sentence has,
# then a block of comments alone: appended to the tricky file (comments, a multiword token, an
# empty node), it makes a file whose every kind of line must come back.
UNSEEN = (
    "# sent_id = unseen-4\n"
    "# text = Zyzzyvas flumph quietly\n"
    "1\tZyzzyvas\t_\tNOVELTAG\t_\t_\t_\t_\t_\t_\n"
    "2\tflumph\tflumph\tVERB\tVBP\t_\t_\t_\t_\t_\n"
    "3\tquietly\t_\tADV\t_\t_\t_\t_\t_\tSpaceAfter=No\n"
    "\n"
    "# a closing comment, in a block of its own\n"
)


def _train(treebank, logdir, *extra):
    sizes = "--word-dim 16 --tag-dim 8 --lstm-units 16 --lstm-layers 1 --mlp-units 16".split()
    quick = "--epochs 1 --max-train-sentences 4 --batch-size 8 --sparsity-sentences 0 --quiet".split()
    main(["train", "--treebank", str(treebank), "--logdir", str(logdir), *quick, *sizes, *extra])


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    """The sample as a treebank (read only), with a dev split of 6 sentences."""
    return sample_treebank(tmp_path_factory.mktemp("parsing_files") / "en_sample", dev_sentences=6)


@pytest.fixture(scope="module")
def run(treebank, tmp_path_factory):
    """A finished labelled run of one epoch on four sentences, embedding UPOS tags (read only)."""
    logdir = tmp_path_factory.mktemp("run") / "run"
    _train(treebank, logdir, "--labels")
    return logdir


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def _read_conllu_text(text: str, folder: pathlib.Path):
    """The sentences of a CoNLL-U text (through a file)."""
    path = folder / "printed.conllu"
    path.write_text(text)
    return read_conllu(path)


def _is_word_line(columns: list[str]) -> bool:
    return len(columns) == 10 and re.fullmatch(r"[1-9][0-9]*", columns[0]) is not None


def _assert_only_head_and_deprel_written(source: pathlib.Path, output: pathlib.Path) -> None:
    """``output`` is ``source`` line for line but for the HEAD and DEPREL of every word line,
    which hold a head index and a relation (a labelled run's); comments, multiword ranges,
    empty nodes and blank lines are copied."""
    before, after = source.read_text().split("\n"), output.read_text().split("\n")
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        old_columns, new_columns = old.split("\t"), new.split("\t")
        if _is_word_line(old_columns):
            assert new_columns[:6] + new_columns[8:] == old_columns[:6] + old_columns[8:]
            assert new_columns[6].isdigit() and new_columns[7] != "_"
        else:
            assert new == old


def _independent_scores(gold: pathlib.Path, predicted: pathlib.Path) -> tuple[int, float, float]:
    """Words, UAS and LAS (%) of a predicted file against its gold file, counted here from their
    HEAD and DEPREL columns line by line, independently of the parser's reader: every word line
    (not multiword ranges or empty nodes), relations without their subtypes, as the CoNLL 2018
    evaluation script compares them."""
    heads = relations = words = 0
    for gold_line, predicted_line in zip(
        gold.read_text().split("\n"), predicted.read_text().split("\n"), strict=True
    ):
        gold_columns, predicted_columns = gold_line.split("\t"), predicted_line.split("\t")
        if _is_word_line(gold_columns):
            words += 1
            heads += gold_columns[6] == predicted_columns[6]
            same_relation = gold_columns[7].split(":")[0] == predicted_columns[7].split(":")[0]
            relations += gold_columns[6] == predicted_columns[6] and same_relation
    return words, 100 * heads / words, 100 * relations / words


def test_parse_input_rewrites_only_head_and_deprel(run, tmp_path, capsys):
    source = tmp_path / "mixed.conllu"
    source.write_text(TRICKY.read_text() + "\n" + UNSEEN)
    output, trees = tmp_path / "new" / "pred.conllu", tmp_path / "pred.trees.jsonl"
    capsys.readouterr()
    argv = ["parse", "--logdir", str(run), "--input", str(source), "--output", str(output)]
    main([*argv, "--trees", str(trees), "--json"])
    summary = _last_json(capsys.readouterr().out)
    _assert_only_head_and_deprel_written(source, output)
    before = source.read_text().split("\n")
    # The output is a treebank: a tree in every sentence, the words of the input.
    parsed = read_conllu(output)
    assert [s.words for s in parsed] == [s.words for s in read_document(source).sentences]
    assert [len(s.words) for s in parsed] == [10, 9, 2, 3]
    vocabulary = json.loads((run / "vocabulary.json").read_text())
    words = [word for sentence in parsed for word in sentence.words]
    tags = [tag for sentence in parsed for tag in sentence.tags]
    assert summary["sentences"] == 4 and summary["words"] == len(words) == 24
    assert summary["unknown_words"] == sum(word not in vocabulary["words"] for word in words) >= 3
    assert summary["unknown_tags"] == sum(tag not in vocabulary["tags"] for tag in tags) >= 1
    assert summary["input_format"] == "conllu" and summary["trees"] == str(trees) and summary["relations"]
    records = [json.loads(line) for line in trees.read_text().splitlines()]
    assert [record["index"] for record in records] == [0, 1, 2, 3]
    assert [record["sent_id"] for record in records] == ["tricky-1", "tricky-2", "tricky-3", "unseen-4"]
    assert records[3]["location"] == f"{source}:{before.index(UNSEEN.splitlines()[2]) + 1}"
    assert summary["sparsemap_unfinished"] == sum(not record["converged"] for record in records)
    for record, sentence in zip(records, parsed, strict=True):
        assert sum(tree["weight"] for tree in record["trees"]) == pytest.approx(1, abs=1e-6)
        for tree in record["trees"]:
            assert len(tree["heads"]) == sentence.length and tree["weight"] > 0
            assert tree_problems(np.array([-1, *tree["heads"]])) == []


def test_parse_writes_to_standard_output_and_replaces_files_only_when_asked(run, tmp_path, capsys):
    source = tmp_path / "tricky.data"  # a suffix that does not tell the format
    shutil.copy(TRICKY, source)
    argv = ["parse", "--logdir", str(run), "--input", str(source), "--input-format", "conllu"]
    capsys.readouterr()
    main([*argv, "--output", "-"])
    printed = capsys.readouterr()
    assert printed.out.split("\n")[:4] == TRICKY.read_text().split("\n")[:4]  # the comments
    assert [s.words for s in _read_conllu_text(printed.out, tmp_path)] == [
        s.words for s in read_conllu(TRICKY)
    ]
    assert re.search(
        r"parsed 3 sentences \(21 words\) .*: \d+ unknown words .*, \d+ unknown tags", printed.err
    )
    output = tmp_path / "pred.conllu"
    output.write_text("keep me")
    with pytest.raises(FileExistsError, match="--output names a file that exists: pass --overwrite"):
        main([*argv, "--output", str(output)])
    assert output.read_text() == "keep me"
    main([*argv, "--output", str(output), "--overwrite"])
    assert output.read_text() == printed.out


def test_evaluate_input_is_an_independent_count_and_evaluate_split(run, treebank, tmp_path, capsys):
    gold = treebank / "en_sample-ud-dev.conllu"
    predicted = tmp_path / "dev.pred.conllu"
    main(["parse", "--logdir", str(run), "--input", str(gold), "--output", str(predicted)])
    run_files = sorted(path.name for path in run.iterdir())
    capsys.readouterr()
    written = tmp_path / "scores" / "dev.json"
    main(["evaluate", "--logdir", str(run), "--input", str(gold), "--json", "--output-json", str(written)])
    from_input = _last_json(capsys.readouterr().out)
    assert sorted(path.name for path in run.iterdir()) == run_files  # nothing written into the run
    assert json.loads(written.read_text()) == from_input and from_input["input"] == str(gold)
    words, uas, las = _independent_scores(gold, predicted)
    assert from_input["tokens"] == words and from_input["sentences"] == 6
    assert from_input["uas"] == pytest.approx(uas, abs=0.01)
    assert from_input["las"] == pytest.approx(las, abs=0.01)
    # The same file as the run's dev split: the same scores.
    main(["evaluate", "--logdir", str(run), "--split", "dev"])
    assert re.match(r"dev: UAS [\d.]+ \([\d.]+ without punctuation\), LAS [\d.]+ \(", capsys.readouterr().out)
    from_split = json.loads((run / "eval_dev.json").read_text())
    assert from_split.pop("split") == "dev" and from_input.pop("input") == str(gold)
    assert from_split == from_input


def _without_relations(source: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """``source`` with the DEPREL of every word line ``_`` (unspecified), written to ``target``."""
    lines = [line.split("\t") for line in source.read_text().split("\n")]
    target.write_text("\n".join("\t".join([*c[:7], "_", *c[8:]] if _is_word_line(c) else c) for c in lines))
    return target


def test_the_las_against_gold_without_relations_is_not_available(run, treebank, tmp_path, capsys):
    """A gold file whose DEPREL is ``_`` gives no LAS (not 0): ``evaluate --input`` says so, and a
    labelled run refuses to train on such a treebank."""
    gold = _without_relations(treebank / "en_sample-ud-dev.conllu", tmp_path / "no_relations.conllu")
    capsys.readouterr()
    main(["evaluate", "--logdir", str(run), "--input", str(gold), "--json"])
    result = _last_json(capsys.readouterr().out)
    assert result["las"] is None and result["las_no_punct"] is None and 0 <= result["uas"] <= 100
    assert result["las_unavailable"] == f"{result['tokens']} of {result['tokens']} gold words have no " + (
        "relation (DEPREL '_')"
    )
    main(["evaluate", "--logdir", str(run), "--input", str(gold)])
    assert f"LAS not available ({result['las_unavailable']})" in capsys.readouterr().out
    unlabelled = sample_treebank(tmp_path / "unlabelled")
    _without_relations(SAMPLE_CONLLU, unlabelled / "en_sample-ud-train.conllu")
    with pytest.raises(ValueError, match=r"--labels needs the relation \(DEPREL\).*the train split"):
        _train(unlabelled, tmp_path / "refused", "--labels")
    assert not (tmp_path / "refused" / "config.json").exists()


@pytest.mark.slow
@requires_shared(*EN_EWT_TEST)
def test_the_en_ewt_test_file_round_trips_and_scores_as_an_independent_count(run, tmp_path, capsys):
    """The issue's acceptance on a real file: the en_ewt 2.16 test set (2,077 sentences with
    comments, multiword tokens and empty nodes; a release newer than the run's data) comes back
    line for line, labelled, and ``evaluate --input`` equals the independent count to 0.01."""
    gold = SHARED_DATA.joinpath(*EN_EWT_TEST)
    predicted = tmp_path / "test.pred.conllu"
    capsys.readouterr()
    main(["parse", "--logdir", str(run), "--input", str(gold), "--output", str(predicted), "--json"])
    summary = _last_json(capsys.readouterr().out)
    _assert_only_head_and_deprel_written(gold, predicted)
    sentences = read_document(gold).sentences
    assert [s.words for s in read_conllu(predicted)] == [s.words for s in sentences]
    assert summary["sentences"] == len(sentences) == 2077
    main(["evaluate", "--logdir", str(run), "--input", str(gold), "--json"])
    scores = _last_json(capsys.readouterr().out)
    words, uas, las = _independent_scores(gold, predicted)
    assert scores["tokens"] == summary["words"] == words
    assert scores["uas"] == pytest.approx(uas, abs=0.01) and scores["las"] == pytest.approx(las, abs=0.01)


def test_documents_keep_every_line_and_text_becomes_conllu(tmp_path):
    tricky = TRICKY.read_text()
    windows = tmp_path / "windows.conllu"  # a byte-order mark and \r\n line ends
    windows.write_bytes(b"\xef\xbb\xbf" + tricky.replace("\n", "\r\n").encode())
    document = read_document(windows)
    assert "\n".join(document.lines) == tricky
    gold = read_conllu(TRICKY)
    assert document.conllu([s.heads for s in gold], [s.relations for s in gold]) == tricky
    assert document.sent_ids == ("tricky-1", "tricky-2", "tricky-3")
    with pytest.raises(ValueError, match="one entry per sentence of the document"):
        document.conllu([s.heads for s in gold[:2]])
    with pytest.raises(ValueError, match=r"windows.conllu:21 must have shape \(10,\) and values in 0..9"):
        document.conllu([gold[0].heads, np.array([-1, 0, 12, 0, 0, 0, 0, 0, 0, 0]), gold[2].heads])
    with pytest.raises(ValueError, match="non-empty strings without whitespace"):
        document.conllu([s.heads for s in gold], [s.relations for s in gold[:2]] + [("root", "a b")])
    text = tmp_path / "news.txt"
    text.write_text("\n  Dogs   bark .\n\t\n# not a comment\n")
    document = read_text(text)
    assert [s.words for s in document.sentences] == [("Dogs", "bark", "."), ("#", "not", "a", "comment")]
    assert [s.location for s in document.sentences] == [f"{text}:2", f"{text}:4"]
    written = document.conllu([np.array([-1, 2, 0, 2]), np.array([-1, 0, 1, 1, 1])])
    assert written.split("\n")[:3] == [
        "# sent_id = 1",
        "# text = Dogs bark .",
        "1\tDogs" + "\t_" * 4 + "\t2\t_\t_\t_",
    ]
    assert written.endswith("4\tcomment\t_\t_\t_\t_\t1\t_\t_\t_\n\n")


def test_a_word_only_run_parses_plain_text(treebank, tmp_path, capsys):
    logdir = tmp_path / "words"
    _train(treebank, logdir, "--tag-column", "none")
    text, output = tmp_path / "news.txt", tmp_path / "news.conllu"
    text.write_text("The dog barks .\n\n  A   zyzzyva sleeps\ttoday .\n")
    capsys.readouterr()
    main(["parse", "--logdir", str(logdir), "--input", str(text), "--output", str(output), "--json"])
    summary = _last_json(capsys.readouterr().out)
    assert summary["input_format"] == "text" and summary["unknown_tags"] is None and not summary["relations"]
    assert summary["sentences"] == 2 and summary["words"] == 9
    parsed = read_conllu(output)  # a tree in every sentence
    assert [s.words for s in parsed] == [
        ("The", "dog", "barks", "."),
        ("A", "zyzzyva", "sleeps", "today", "."),
    ]
    assert "# text = A zyzzyva sleeps today .\n" in output.read_text()
    assert all(relation == "_" for sentence in parsed for relation in sentence.relations)  # no labels


def _roots(path: pathlib.Path) -> list[tuple[int, bool]]:
    """Per sentence of a CoNLL-U file: how many words are attached to the root, and whether
    exactly those words have the DEPREL ``root`` (as UD requires)."""
    found = []
    for block in path.read_text().strip().split("\n\n"):
        words = [line.split("\t") for line in block.split("\n") if _is_word_line(line.split("\t"))]
        at_root = [columns[6] == "0" for columns in words]
        found.append((sum(at_root), at_root == [columns[7] == "root" for columns in words]))
    return found


def test_a_labelled_parse_is_valid_ud_and_single_root_on_request(run, treebank, tmp_path):
    """Every word attached to the root is labelled ``root`` and no other word is; ``--single-root``
    gives each sentence one such word; the default follows the run (trained without it), as
    ``--no-single-root`` does."""
    source = treebank / "en_sample-ud-dev.conllu"
    outputs = {}
    for option in ("", "--single-root", "--no-single-root"):
        outputs[option] = tmp_path / f"out{option}.conllu"
        argv = ["parse", "--logdir", str(run), "--input", str(source), "--output", str(outputs[option])]
        main([*argv, *([option] if option else [])])
        assert all(valid for _, valid in _roots(outputs[option]))
    assert [count for count, _ in _roots(outputs["--single-root"])] == [1] * 6
    assert max(count for count, _ in _roots(outputs[""])) > 1  # the run's own decoding
    assert outputs[""].read_text() == outputs["--no-single-root"].read_text()
    assert not json.loads((run / "config.json").read_text())["single_root"]


def test_outputs_follow_symlinked_folders_and_are_checked_before_the_parse(run, tmp_path, monkeypatch):
    """``--output LINK/out.conllu`` (LINK a symlink to a folder) is written into the folder; an
    output that cannot be written is refused before the run is even loaded."""
    source, real = tmp_path / "in.conllu", tmp_path / "disk"
    shutil.copy(TRICKY, source)
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    parse = ["parse", "--logdir", str(run), "--input", str(source)]
    main(
        [
            *parse,
            "--output",
            str(tmp_path / "link" / "out.conllu"),
            "--trees",
            str(tmp_path / "link" / "t.jsonl"),
        ]
    )
    assert sorted(path.name for path in real.iterdir()) == ["out.conllu", "t.jsonl"]
    _assert_only_head_and_deprel_written(source, real / "out.conllu")
    import keras_structured.applications.parsing.training as training

    monkeypatch.setattr(training, "load_run", lambda logdir: pytest.fail("the run was loaded"))
    for output, error, match in [
        (source.parent / "in.conllu" / "out.conllu", ValueError, "is a file, not a folder"),
        (tmp_path / "link" / "out.conllu", FileExistsError, "--output names a file that exists"),
        (tmp_path / "link" / ".." / "in.conllu", ValueError, "--output must not be the input"),
    ]:
        with pytest.raises(error, match=match):
            main([*parse, "--output", str(output)])
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a read-only folder, even for root
    with pytest.raises(PermissionError, match=f"no permission to write into the folder '{tmp_path}'"):
        main([*parse, "--output", str(tmp_path / "new" / "out.conllu")])


def test_parse_leaves_no_temporary_file_and_a_run_no_lock_file(run, treebank, tmp_path):
    """The temporary file a parse killed while writing left beside its output is deleted by the next
    parse into that output; a finished run keeps no lock file, and a run that failed before writing
    anything leaves no folder."""
    source, output = tmp_path / "in.conllu", tmp_path / "out.conllu"
    shutil.copy(TRICKY, source)
    left = tmp_path / ".out.k1lled_x.tmp.conllu"  # the name a killed writer's file has
    left.write_text("half a file")
    main(["parse", "--logdir", str(run), "--input", str(source), "--output", str(output)])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.conllu", "out.conllu"]
    assert not (run / ".lock").exists()
    with pytest.raises(FileNotFoundError):
        _train(tmp_path / "no_treebank", tmp_path / "new" / "run")
    assert not (tmp_path / "new").exists()


def test_parse_and_evaluate_refuse_bad_input_and_options(run, tmp_path, capsys):
    good, output = tmp_path / "good.conllu", tmp_path / "out.conllu"
    shutil.copy(TRICKY, good)
    parse = ["parse", "--logdir", str(run)]

    def refused(error, match, *argv):
        with pytest.raises(error, match=match):
            main(list(map(str, argv)))
        assert not output.exists()

    missing = tmp_path / "missing.conllu"
    refused(FileNotFoundError, "CoNLL-U file not found", *parse, "--input", missing, "--output", output)
    comments = tmp_path / "comments.conllu"
    comments.write_text("# only a comment\n\n\n")
    refused(ValueError, "holds no sentence", *parse, "--input", comments, "--output", output)
    lines = TRICKY.read_text().split("\n")
    for line_number, bad_line, message in [
        (7, "3-4\tcannot\t_\t_\t_\t_\t_\t_\t_", "expected 10 tab-separated columns"),
        (
            8,
            "3\tcan\tcan\tAUX\tMD\tVerbForm=Fin\tfive\taux\t_\t_",
            "HEAD must be '_' or a non-negative integer",
        ),
        (9, "5\tnot\tnot\tPART\tRB\t_\t5\tadvmod\t_\t_", "word IDs must be 1..n in order; expected ID 4"),
    ]:
        malformed = tmp_path / f"bad{line_number}.conllu"
        malformed.write_text("\n".join([*lines[: line_number - 1], bad_line, *lines[line_number:]]))
        where = re.escape(f"{malformed}:{line_number}")
        refused(ValueError, f"{where}: {message}", *parse, "--input", malformed, "--output", output)
    refused(ValueError, "--output must not be the input file", *parse, "--input", good, "--output", good)
    trees = ["--trees", output]
    refused(
        ValueError,
        "--output and --trees must be different",
        *parse,
        "--input",
        good,
        "--output",
        output,
        *trees,
    )
    refused(
        ValueError,
        "--index: options of parse --split",
        *parse,
        "--input",
        good,
        "--output",
        output,
        "--index",
        1,
    )
    refused(ValueError, "--output: options of parse --input", *parse, "--split", "dev", "--output", output)
    refused(ValueError, "parse --input needs --output", *parse, "--input", good)
    refused(
        ValueError,
        "Cannot tell the input format",
        *parse,
        "--input",
        tmp_path / "good.data",
        "--output",
        output,
    )
    text = tmp_path / "words.txt"
    text.write_text("Dogs bark .\n")
    message = r"Text has no part-of-speech tags, and the run embeds UPOS tags.*Received: --input"
    refused(ValueError, message, *parse, "--input", text, "--output", output)
    with pytest.raises(SystemExit):
        main([*parse, "--input", str(good), "--split", "dev", "--output", str(output)])
    assert "not allowed with argument" in capsys.readouterr().err
    # evaluate needs gold trees, and leaves existing files alone.
    untagged = tmp_path / "no_heads.conllu"
    untagged.write_text(UNSEEN)
    where = re.escape(f"{untagged}:3")
    refused(
        ValueError,
        f"{where}: HEAD must be a non-negative integer",
        "evaluate",
        "--logdir",
        run,
        "--input",
        untagged,
    )
    refused(FileNotFoundError, "CoNLL-U file not found", "evaluate", "--logdir", run, "--input", missing)
    existing = tmp_path / "eval.json"
    existing.write_text("{}")
    with pytest.raises(FileExistsError, match="--output-json names a file that exists"):
        main(["evaluate", "--logdir", str(run), "--input", str(good), "--output-json", str(existing)])
    assert existing.read_text() == "{}"


def test_parse_without_input_shows_one_sentence_of_the_treebank(run, treebank, capsys):
    capsys.readouterr()
    main(["parse", "--logdir", str(run), "--index", "1", "--max-trees", "2"])
    lines = capsys.readouterr().out.splitlines()
    dev = read_conllu(treebank / "en_sample-ud-dev.conllu")
    assert lines[0] == " ".join(dev[1].words)
    assert lines[1].startswith("p=") and len([line for line in lines if line.startswith("p=")]) <= 2
