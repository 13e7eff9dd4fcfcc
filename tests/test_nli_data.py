"""The SICK reader (tokeniser, checks with line numbers), the vocabulary and the padded batches."""

from __future__ import annotations

import numpy as np
import pytest

from keras_structured.applications.nli.batching import encode_pairs, make_dataset
from keras_structured.applications.nli.sick_reader import DEFAULT_SICK, LABELS, Pair, read_sick, tokenize
from keras_structured.applications.nli.vocabulary import PAD_ID, UNK_ID, Vocabulary

HEADER = "pair_id\tsentence_a\tsentence_b\tlabel\tsplit\n"


def _write(tmp_path, *rows: str, header: str = HEADER):
    path = tmp_path / "pairs.tsv"
    path.write_text(header + "".join(row + "\n" for row in rows))
    return path


def test_tokenize_splits_clitics_keeps_compounds_and_drops_punctuation():
    assert tokenize("A man isn't cutting a T-shirt, slowly.") == (
        "a",
        "man",
        "is",
        "n't",
        "cutting",
        "a",
        "t-shirt",
        "slowly",
    )
    assert tokenize("The dog's ball / the cat's") == ("the", "dog", "'s", "ball", "the", "cat", "'s")
    assert tokenize(" ,. - ") == ()
    with pytest.raises(ValueError, match="Received: sentence=3"):
        tokenize(3)


def test_read_sick_splits_and_tokens(tmp_path):
    path = _write(
        tmp_path,
        "1\tA dog runs\tA dog isn't running\tcontradiction\ttrain",
        "2\tTwo men play\tMen play\tentailment\ttest",
        "",
        "5\tA cat\tA cat sleeps\tneutral\ttrial",
    )
    data = read_sick(path)
    assert [len(data[split]) for split in ("train", "trial", "test")] == [1, 1, 1]
    first = data["train"][0]
    assert first == Pair(
        1, ("a", "dog", "runs"), ("a", "dog", "is", "n't", "running"), "contradiction", "train", 2
    )
    assert first.label_id == LABELS.index("contradiction") and data["trial"][0].line == 5
    assert list(read_sick(path, ["test"])) == ["test"]


@pytest.mark.parametrize(
    "row, message",
    [
        (
            "1\tA dog runs\t, .\tneutral\ttrain",
            r"line 3: sentence_b has no token after tokenisation\. Received",
        ),
        ("1\t...\tA dog\tneutral\ttrain", r"line 3: sentence_a has no token"),
        ("1\tA dog\tA cat\tmaybe\ttrain", r"line 3: label must be one of .* Received: label='maybe'"),
        ("1\tA dog\tA cat\tneutral\tdev", r"line 3: split must be one of .* Received: split='dev'"),
        ("x\tA dog\tA cat\tneutral\ttrain", r"line 3: pair_id must be an integer\. Received: pair_id='x'"),
        ("1\tA dog\tneutral\ttrain", r"line 3: expected 5 tab-separated fields"),
    ],
)
def test_read_sick_names_the_line_of_bad_input(tmp_path, row, message):
    path = _write(tmp_path, "7\tA man\tA person\tentailment\ttrain", row)
    with pytest.raises(ValueError, match=message) as info:
        read_sick(path)
    assert str(path) in str(info.value)


def test_read_sick_refuses_a_wrong_header_a_missing_file_and_an_unknown_split(tmp_path):
    with pytest.raises(ValueError, match="line 1: expected the header"):
        read_sick(_write(tmp_path, header="id\ta\tb\tlabel\tsplit\n"))
    with pytest.raises(FileNotFoundError, match="not distributed with this package"):
        read_sick(tmp_path / "missing.tsv")
    with pytest.raises(ValueError, match="Received: split='dev'"):
        read_sick(_write(tmp_path), ["dev"])


def test_the_sick_file_reads_whole():
    if not DEFAULT_SICK.is_file():
        pytest.skip(f"SICK is not distributed with the repository; expected at {DEFAULT_SICK}")
    data = read_sick()
    assert {split: len(pairs) for split, pairs in data.items()} == {"train": 4439, "trial": 495, "test": 4906}
    counts = {label: sum(p.label == label for p in data["train"]) for label in LABELS}
    assert counts == {"entailment": 1274, "neutral": 2524, "contradiction": 641}


def _pairs():
    return [
        Pair(1, ("a", "dog", "runs"), ("a", "dog", "sleeps"), "contradiction", "train"),
        Pair(2, ("a", "dog"), ("the", "cat", "runs", "fast"), "neutral", "train"),
        Pair(3, ("a",), ("a", "dog"), "entailment", "train"),
    ]


def test_vocabulary_counts_min_count_and_round_trip():
    vocabulary = Vocabulary.from_pairs(_pairs())
    assert vocabulary.words == ("a", "dog", "runs")  # seen twice or more, most frequent first
    assert vocabulary.num_words == 5
    assert vocabulary.encode(("a", "cat", "runs")).tolist() == [2, UNK_ID, 4]
    assert Vocabulary.from_pairs(_pairs(), min_count=1).num_words == 9
    assert Vocabulary.from_config(vocabulary.get_config()).words == vocabulary.words
    with pytest.raises(ValueError, match="must not repeat"):
        Vocabulary(["a", "a"])
    with pytest.raises(ValueError, match="Received: min_count=0"):
        Vocabulary.from_pairs(_pairs(), min_count=0)


def test_batches_are_padded_with_zeros_and_shuffled_by_seed():
    vocabulary = Vocabulary.from_pairs(_pairs(), min_count=1)
    batch = encode_pairs(_pairs(), vocabulary)
    assert batch["premise"].shape == (3, 3) and batch["hypothesis"].shape == (3, 4)
    assert (batch["premise"] != PAD_ID).sum(axis=1).tolist() == [3, 2, 1]
    assert (batch["hypothesis"] != PAD_ID).sum(axis=1).tolist() == [3, 4, 2]
    assert batch["label"].tolist() == [2, 1, 0]

    dataset = make_dataset(_pairs(), vocabulary, batch_size=2)
    assert dataset.cardinality().numpy() == 2
    (features, labels), (last, _) = list(dataset)
    assert features["premise"].shape == (2, 3) and last["hypothesis"].shape == (1, 2)
    assert labels.numpy().tolist() == [2, 1]

    def order(seed):
        return [
            y for _, labels in make_dataset(_pairs(), vocabulary, 1, shuffle=True, seed=seed) for y in labels
        ]

    assert order(3) == order(3)
    assert sorted(np.array(order(3)).tolist()) == [0, 1, 2]
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        make_dataset(_pairs(), vocabulary, 0)
    with pytest.raises(ValueError, match="pairs must not be empty"):
        make_dataset([], vocabulary, 2)
