"""Data side of the dependency parser: CoNLL-U reading, vocabulary, word dropout, batches, UAS."""

import importlib.util
import json
import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_structured.applications.parsing.batching import make_dataset
from keras_structured.applications.parsing.conllu_reader import Sentence, read_conllu, treebank_paths
from keras_structured.applications.parsing.evaluation import attachment_scores
from keras_structured.applications.parsing.vocabulary import PAD_ID, ROOT_ID, UNK_ID, Vocabulary, word_dropout

DATA = pathlib.Path(__file__).parent / "data"
# The shared treebanks sit next to the repository (see shared/data/ud/README.md).
UD = pathlib.Path(__file__).parents[1] / ".." / "shared" / "data" / "ud"

requires_conllu = pytest.mark.skipif(
    importlib.util.find_spec("conllu") is None,
    reason="the optional conllu package is not installed (pip install conllu)",
)


def _line(token_id, form, head, deprel="dep", upos="X"):
    return "\t".join([str(token_id), form, form.lower(), upos, "_", "_", str(head), deprel, "_", "_"])


def _sentence(words, heads, tags=None):
    tags = tags or ["X"] * len(words)
    return Sentence(tuple(words), tuple(tags), np.array([-1, *heads]), ("dep",) * len(words))


# ---------------------------------------------------------------------------------------------
# Reading CoNLL-U


@requires_conllu
def test_tricky_file_skips_multiword_tokens_and_empty_nodes():
    path = DATA / "tricky.conllu"
    first, second, third = read_conllu(path)

    assert first.words == ("So", "I", "can", "not", "eat", "fish", "and", "you", "meat", ".")
    assert first.heads.tolist() == [-1, 5, 5, 5, 5, 0, 5, 8, 5, 8, 5]
    assert first.heads.dtype == np.int64
    assert first.tags[2:4] == ("AUX", "PART") and first.xpos[:5] == ("RB", "PRP", "MD", "RB", "VB")
    assert first.relations[8] == "orphan"
    assert first.location == f"{path}:5"
    assert first.is_projective()

    assert second.words[:4] == ("A", "hearing", "is", "scheduled")
    assert second.heads.tolist() == [-1, 2, 4, 4, 0, 7, 7, 2, 4, 4]
    assert not second.is_projective()  # hearing -> issue crosses scheduled -> today
    assert second.location == f"{path}:21"

    assert third.words == ("Hi", "!") and third.tags == ("INTJ", "PUNCT")
    assert third.location == f"{path}:34"


@requires_conllu
def test_sample_matches_an_independent_count():
    path = DATA / "en_ewt_sample.conllu"
    sentences = read_conllu(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    word_lines = [line.split("\t") for line in lines if line and line.split("\t")[0].isdigit()]
    assert len(sentences) == 30
    assert sum(sentence.length for sentence in sentences) == len(word_lines)
    heads = np.concatenate([sentence.heads[1:] for sentence in sentences])
    assert heads.tolist() == [int(columns[6]) for columns in word_lines]
    assert sentences[0].words[:3] == ("Al", "-", "Zaman")
    assert all(int((sentence.heads == 0).sum()) == 1 for sentence in sentences)


# Each case: two lines of a sentence, the second one wrong, and the expected message.
MALFORMED = {
    "too_few_columns": ([_line(1, "a", 0), "2\tb\tb\tX\t_\t_\t1\tdep\t_"], "10 tab-separated columns"),
    "empty_column": ([_line(1, "a", 0), "2\tb\t\tX\t_\t_\t1\tdep\t_\t_"], "column LEMMA is empty"),
    "non_integer_head": ([_line(1, "a", 0), _line(2, "b", "x")], "HEAD must be a non-negative integer"),
    "head_out_of_range": ([_line(1, "a", 0), _line(2, "b", 9)], r"HEAD must be in 0\.\.3.*head=9"),
    "id_gap": ([_line(1, "a", 0), _line(3, "b", 1)], "expected ID 2"),
    "bad_id": ([_line(1, "a", 0), _line("2a", "b", 1)], "ID must be an integer"),
}


@requires_conllu
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_lines_name_the_file_and_line(tmp_path, name):
    bad_lines, message = MALFORMED[name]
    # Line 1: a good sentence; 2: blank; 3: a comment; 4: a good word; 5: the bad line.
    text = "\n".join([_line(1, "ok", 0), "", "# sent_id = 2", *bad_lines, _line(3, "c", 1), ""]) + "\n"
    path = tmp_path / "bad.conllu"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}:5: .*{message}"):
        read_conllu(path)


@requires_conllu
def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no-such.conllu"):
        read_conllu(DATA / "no-such.conllu")


def test_treebank_paths(tmp_path):
    for split in ("train", "dev", "test"):
        (tmp_path / f"xx_tb-ud-{split}.conllu").write_text("")
    paths = treebank_paths(tmp_path)
    assert list(paths) == ["train", "dev", "test"]
    assert paths["dev"] == tmp_path / "xx_tb-ud-dev.conllu"

    (tmp_path / "xx_tb-ud-train.conllu").unlink()
    assert list(treebank_paths(tmp_path, splits=("dev", "test"))) == ["dev", "test"]
    with pytest.raises(FileNotFoundError, match=r"has no train split.*xx_tb-ud-dev\.conllu"):
        treebank_paths(tmp_path)
    with pytest.raises(FileNotFoundError, match="Treebank folder not found: expected a folder holding"):
        treebank_paths(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="Received: split='valid'"):
        treebank_paths(tmp_path, splits=("valid",))


def test_sentence_checks_and_equality():
    sentence = _sentence(["a", "b"], [2, 0])
    assert sentence == _sentence(["a", "b"], [2, 0]) and hash(sentence) == hash(_sentence(["a", "b"], [2, 0]))
    assert sentence != _sentence(["a", "b"], [0, 1])
    with pytest.raises(ValueError, match=r"heads must have shape \(n \+ 1,\) = \(3,\)"):
        Sentence(("a", "b"), ("X", "X"), np.array([-1, 0]), ("r", "r"))
    with pytest.raises(ValueError, match="every other head in 0..2"):
        _sentence(["a", "b"], [3, 0])
    with pytest.raises(ValueError):
        sentence.heads[1] = 0  # read-only


@requires_conllu
def test_vi_vtb_dev_counts():
    if not UD.is_dir():
        pytest.skip(f"the shared UD treebanks are not next to the repository: {UD.resolve()}")
    paths = treebank_paths(UD / "vi_vtb-2.0", splits=("dev",))
    sentences = read_conllu(paths["dev"])
    assert len(sentences) == 800
    assert sum(sentence.length for sentence in sentences) == 11_514


# ---------------------------------------------------------------------------------------------
# Vocabulary and word dropout


def test_vocabulary_ids_counts_and_config():
    train = [
        _sentence(["The", "dog", "barks"], [2, 3, 0], ["DET", "NOUN", "VERB"]),
        _sentence(["the", "dog"], [2, 0], ["DET", "NOUN"]),
    ]
    vocabulary = Vocabulary.from_sentences(train)
    assert vocabulary.words[:3] == ("<pad>", "<unk>", "<root>")
    assert vocabulary.words[3] == "dog"  # most frequent first
    assert set(vocabulary.words[3:]) == {"The", "the", "dog", "barks"}  # case preserved
    assert vocabulary.num_words == 7 and vocabulary.num_tags == 6
    assert vocabulary.counts.tolist()[:4] == [0, 0, 0, 2]
    assert vocabulary.counts.sum() == 5

    words, tags = vocabulary.encode(_sentence(["the", "cat", "barks"], [2, 3, 0], ["DET", "NOUN", "INTJ"]))
    assert words.shape == tags.shape == (4,) and words.dtype == tags.dtype == np.int32
    assert words[0] == tags[0] == ROOT_ID
    assert words[2] == UNK_ID and tags[3] == UNK_ID
    assert words[1] == vocabulary.word_id("the") != vocabulary.word_id("The")

    config = json.loads(json.dumps(vocabulary.get_config()))
    restored = Vocabulary.from_config(config)
    assert restored == vocabulary
    assert restored.words == vocabulary.words and restored.tags == vocabulary.tags
    np.testing.assert_array_equal(restored.counts, vocabulary.counts)

    rare = Vocabulary.from_sentences(train, min_count=2, lowercase=True)
    assert rare.words[3:] == ("the", "dog") and rare.word_id("THE") == 3
    assert rare.counts.tolist() == [0, 0, 0, 2, 2]
    with pytest.raises(ValueError, match="Received: min_count=0"):
        Vocabulary.from_sentences(train, min_count=0)
    with pytest.raises(ValueError, match="must not repeat"):
        Vocabulary(words=["a", "a"], tags=[])


def test_vocabulary_of_xpos_tags():
    """Kiperwasser & Goldberg's parser embeds the treebank's own tags (XPOS); UPOS stays for evaluation."""
    train = [
        Sentence(
            ("I", "run"), ("PRON", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"), xpos=("PRP", "VBP")
        ),
        Sentence(("runs",), ("VERB",), np.array([-1, 0]), ("root",), xpos=("VBZ",)),
    ]
    vocabulary = Vocabulary.from_sentences(train, tag_column="xpos")
    assert vocabulary.tags[3:] == ("PRP", "VBP", "VBZ") and vocabulary.tag_column == "xpos"
    assert vocabulary.encode(train[1])[1].tolist() == [ROOT_ID, vocabulary.tag_id("VBZ")]
    assert Vocabulary.from_config(json.loads(json.dumps(vocabulary.get_config()))) == vocabulary
    assert Vocabulary.from_sentences(train).tags[3:] == ("VERB", "PRON")  # UPOS by default
    written_before = {k: v for k, v in vocabulary.get_config().items() if k != "tag_column"}
    assert Vocabulary.from_config(written_before).tag_column == "upos"  # a vocabulary.json written before
    with pytest.raises(ValueError, match="has none. Received: sentence at '.*' with xpos=()"):
        vocabulary.encode(_sentence(["run"], [0]))
    with pytest.raises(ValueError, match="Received: tag_column='cpos'"):
        Vocabulary([], [], tag_column="cpos")
    with pytest.raises(ValueError, match=r"len\(xpos\)=1"):
        Sentence(("a", "b"), ("X", "X"), np.array([-1, 0, 1]), ("r", "r"), xpos=("x",))


def test_kiperwasser_goldberg_normalisation():
    """Lowercased words, and every word that starts with an ASCII digit counted as one word."""
    train = [
        _sentence(["The", "3", "dogs"], [3, 3, 0]),
        _sentence(["1,000", "the", "2nd", "x1", "٣"], [2, 0, 2, 2, 2]),
    ]
    vocabulary = Vocabulary.from_sentences(train, lowercase=True, collapse_numbers=True)
    assert vocabulary.words[3:5] == ("<num>", "the") and vocabulary.counts[3:5].tolist() == [3, 2]
    assert set(vocabulary.words[5:]) == {"dogs", "x1", "٣"}  # only ASCII digits start a number
    assert vocabulary.word_id("42") == vocabulary.word_id("9.5") == vocabulary.word_id("<num>") == 3
    assert vocabulary.word_id("THE") == 4 and vocabulary.word_id("X1") != UNK_ID
    restored = Vocabulary.from_config(json.loads(json.dumps(vocabulary.get_config())))
    assert restored == vocabulary and restored.collapse_numbers and restored.lowercase
    as_written = Vocabulary.from_sentences(train)
    assert as_written.word_id("3") != as_written.word_id("1,000") and as_written.word_id("THE") == UNK_ID
    numbers_only = Vocabulary.from_sentences(train, collapse_numbers=True)
    assert numbers_only.word_id("7") == numbers_only.word_id("<num>")
    assert numbers_only.word_id("the") != numbers_only.word_id("The")
    with pytest.raises(ValueError, match="collapse_numbers"):
        Vocabulary([], [], collapse_numbers="yes")


def test_a_word_spelled_like_a_reserved_name_gets_its_own_id():
    vocabulary = Vocabulary.from_sentences([_sentence(["<unk>"], [0])])
    assert vocabulary.word_id("<unk>") == 3


def test_word_dropout_rate_depends_on_frequency():
    counts = tf.constant([0, 0, 0, 1, 10_000])
    rare = tf.fill([200_000], 3)
    frequent = tf.fill([200_000], 4)
    dropped_rare = np.mean(word_dropout(rare, counts, alpha=0.25, seed=1).numpy() == UNK_ID)
    dropped_frequent = np.mean(word_dropout(frequent, counts, alpha=0.25, seed=1).numpy() == UNK_ID)
    assert abs(dropped_rare - 0.2) < 0.01  # 0.25 / (0.25 + 1); the standard error is 0.0009
    assert dropped_frequent < 1e-3  # 0.25 / 10000.25 = 2.5e-5
    assert set(np.unique(word_dropout(rare, counts, 0.25).numpy())) == {UNK_ID, 3}


def test_word_dropout_never_touches_reserved_ids():
    counts = tf.constant([0, 0, 0, 1])
    ids = tf.constant([[PAD_ID, UNK_ID, ROOT_ID, 3]] * 1000)
    dropped = word_dropout(ids, counts, alpha=1e6, seed=3).numpy()
    np.testing.assert_array_equal(dropped[:, :3], ids.numpy()[:, :3])
    assert np.all(dropped[:, 3] == UNK_ID)


def test_word_dropout_identity_and_determinism():
    counts = tf.constant([0, 0, 0, 1, 2, 3])
    ids = tf.constant(np.random.default_rng(0).integers(0, 6, size=(50, 40)), tf.int32)
    np.testing.assert_array_equal(word_dropout(ids, counts, alpha=0.0), ids)
    first = word_dropout(ids, counts, alpha=2.0, seed=7).numpy()
    np.testing.assert_array_equal(first, word_dropout(ids, counts, alpha=2.0, seed=7).numpy())
    assert not np.array_equal(first, word_dropout(ids, counts, alpha=2.0, seed=8).numpy())
    assert first.dtype == np.int32
    graph = tf.function(lambda x, s: word_dropout(x, counts, alpha=2.0, seed=s))
    np.testing.assert_array_equal(first, graph(ids, tf.constant([7, 0], tf.int64)).numpy())
    with pytest.raises(ValueError, match="Received: alpha=-1"):
        word_dropout(ids, counts, alpha=-1)


# ---------------------------------------------------------------------------------------------
# Batches


@pytest.fixture(scope="module")
def corpus():
    lengths = np.random.default_rng(0).integers(1, 45, size=53)
    sentences = [
        _sentence([f"s{i}"] + [f"w{j % 7}" for j in range(1, n)], [0] + list(range(1, n)))
        for i, n in enumerate(lengths)
    ]
    return sentences, Vocabulary.from_sentences(sentences)


def _epoch(dataset):
    return [
        (features["words"].numpy(), features["tags"].numpy(), heads.numpy()) for features, heads in dataset
    ]


def _check_batch(words, tags, heads, max_batch):
    assert words.dtype == tags.dtype == heads.dtype == np.int32
    assert words.shape == tags.shape == heads.shape and 1 <= len(words) <= max_batch
    sizes = (words != PAD_ID).sum(axis=1)  # n + 1 per row
    assert sizes.max() == words.shape[1]  # padded to its own longest sentence
    for row, size in enumerate(sizes):
        assert words[row, 0] == tags[row, 0] == ROOT_ID and heads[row, 0] == -1
        assert np.all(words[row, size:] == PAD_ID) and np.all(tags[row, size:] == PAD_ID)
        assert np.all(heads[row, size:] == -1) and np.all(heads[row, 1:size] >= 0)
    return sizes


def test_dataset_in_order_without_shuffle(corpus):
    sentences, vocabulary = corpus
    batches = _epoch(make_dataset(sentences, vocabulary, batch_size=8))
    assert [len(words) for words, _, _ in batches] == [8] * 6 + [5]
    rows = [(w, t, h) for words, tags, heads in batches for w, t, h in zip(words, tags, heads, strict=True)]
    for sentence, (words, tags, heads) in zip(sentences, rows, strict=True):
        size = sentence.length + 1
        expected_words, expected_tags = vocabulary.encode(sentence)
        np.testing.assert_array_equal(words[:size], expected_words)
        np.testing.assert_array_equal(tags[:size], expected_tags)
        np.testing.assert_array_equal(heads[:size], sentence.heads)
    for batch in batches:
        _check_batch(*batch, max_batch=8)


def test_shuffled_dataset_buckets_and_covers_every_sentence(corpus):
    sentences, vocabulary = corpus
    dataset = make_dataset(sentences, vocabulary, batch_size=4, shuffle=True, seed=5, bucket_width=10)
    first_words = {vocabulary.word_id(f"s{i}"): sentence.length for i, sentence in enumerate(sentences)}
    epochs = [_epoch(dataset) for _ in range(2)]
    for batches in epochs:
        seen = []
        for words, tags, heads in batches:
            sizes = _check_batch(words, tags, heads, max_batch=4)
            assert len(set((sizes - 1) // 10)) == 1  # one length bucket a batch
            seen += words[:, 1].tolist()
            assert [first_words[w] for w in words[:, 1]] == (sizes - 1).tolist()
        assert sorted(seen) == sorted(first_words)  # every sentence exactly once
    order = [[words[:, 1].tolist() for words, _, _ in batches] for batches in epochs]
    assert order[0] != order[1]  # reshuffled at each epoch
    again = make_dataset(sentences, vocabulary, batch_size=4, shuffle=True, seed=5, bucket_width=10)
    assert [words[:, 1].tolist() for words, _, _ in _epoch(again)] == order[0]  # seeded


def test_dataset_word_dropout_changes_each_epoch(corpus):
    sentences, vocabulary = corpus
    clean = np.concatenate([w.ravel() for w, _, _ in _epoch(make_dataset(sentences, vocabulary, 64))])
    dataset = make_dataset(sentences, vocabulary, 64, seed=2, word_dropout_alpha=0.25)
    masks = [np.concatenate([w.ravel() for w, _, _ in _epoch(dataset)]) for _ in range(2)]
    for noisy in masks:
        changed = noisy != clean
        assert np.all(noisy[changed] == UNK_ID) and np.all(clean[changed] >= 3)
        assert changed.any()
    singletons = np.isin(clean, [vocabulary.word_id(f"s{i}") for i in range(len(sentences))])
    assert (masks[0] != clean)[singletons].mean() > 0.05  # words seen once: p = 0.2
    assert not np.array_equal(masks[0], masks[1])
    again = make_dataset(sentences, vocabulary, 64, seed=2, word_dropout_alpha=0.25)
    np.testing.assert_array_equal(np.concatenate([w.ravel() for w, _, _ in _epoch(again)]), masks[0])


def test_dataset_argument_errors(corpus):
    sentences, vocabulary = corpus
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        make_dataset(sentences, vocabulary, batch_size=0)
    with pytest.raises(ValueError, match="Received: sentences=\\[\\]"):
        make_dataset([], vocabulary, batch_size=2)


# ---------------------------------------------------------------------------------------------
# Attachment scores


def test_attachment_scores_with_and_without_punctuation():
    gold = [np.array([-1, 2, 0, 2]), np.array([-1, 0, 1])]
    predicted = [np.array([-1, 2, 0, 1]), np.array([-1, 2, 0])]
    tags = [("NOUN", "VERB", "PUNCT"), ("INTJ", "PUNCT")]
    scores = attachment_scores(predicted, gold, tags)
    assert scores["tokens"] == 5 and scores["tokens_no_punct"] == 3
    assert scores["uas"] == pytest.approx(100 * 2 / 5)  # position 0 (the root) is not scored
    assert scores["uas_no_punct"] == pytest.approx(100 * 2 / 3)
    without_tags = attachment_scores(predicted, gold)
    assert without_tags["uas"] == scores["uas"] and np.isnan(without_tags["uas_no_punct"])
    assert attachment_scores(gold, gold, tags)["uas"] == 100.0


def test_attachment_scores_errors():
    gold = [np.array([-1, 2, 0])]
    with pytest.raises(ValueError, match="same number of sentences"):
        attachment_scores([], gold)
    with pytest.raises(ValueError, match=r"sentence 0 with predicted shape \(4,\) and gold shape \(3,\)"):
        attachment_scores([np.array([-1, 2, 0, 0])], gold)
    with pytest.raises(ValueError, match="sentence 0 with 1 tags and 2 words"):
        attachment_scores(gold, gold, [("X",)])
