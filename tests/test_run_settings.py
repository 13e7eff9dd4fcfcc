"""Settings read back from a run's ``config.json`` after a hand edit: what is harmless (a
byte-order mark, a blank line, a setting added since) is read as written; anything else is
refused with a ``ValueError`` naming the file, the setting and the value, for every run that
keeps its settings there (the parser, NLI, RL) and the benchmark runners that read them."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from benchmarks.resumable_runs import read_json
from keras_structured.applications.nli.training import NLIConfig
from keras_structured.applications.parsing.training import ParserConfig
from keras_structured.applications.training_runs import _read_config
from rl.config import TrainConfig

CONFIGS = {
    "parser": ParserConfig(treebank="ud/en"),
    "nli": NLIConfig(data="sick.tsv"),
    "rl": TrainConfig(),
}


def _read(kind, logdir):
    """The settings of ``kind`` in ``logdir`` as its command reads them."""
    if kind == "rl":
        return TrainConfig.load(logdir / "config.json")
    return _read_config(logdir, type(CONFIGS[kind]))


def _write(logdir, config, edit=lambda text: text):
    """``config`` as its ``config.json``, edited by ``edit`` (text to text or bytes)."""
    edited = edit(json.dumps(dataclasses.asdict(config), indent=1) + "\n")
    (logdir / "config.json").write_bytes(edited.encode("utf-8") if isinstance(edited, str) else edited)


@pytest.mark.parametrize("kind", CONFIGS)
@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text: "\ufeff" + text, id="byte-order mark"),
        pytest.param(lambda text: text.replace("\n", "\n\n", 1), id="blank line"),
        pytest.param(lambda text: text.replace('"seed": 0,\n', ""), id="setting added since"),
    ],
)
def test_harmless_edits_are_read_as_written(kind, edit, tmp_path):
    _write(tmp_path, CONFIGS[kind], edit)
    assert _read(kind, tmp_path) == CONFIGS[kind]


def _seed(value):
    """An edit of ``config.json`` that gives the seed ``value`` (JSON text)."""
    return lambda text: text.replace('"seed": 0', f'"seed": {value}')


@pytest.mark.parametrize("kind", CONFIGS)
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(
            lambda text: text.replace('"seed"', '"sead"'),
            r"'sead' is not a setting.*Received: sead=0",
            id="renamed",
        ),
        pytest.param(
            lambda text: text.replace("{", '{"colour": "red",', 1),
            r"'colour' is not a setting.*Received: colour='red'",
            id="unknown key",
        ),
        *(
            pytest.param(_seed(value), message, id=name)
            for value, message, name in (
                ('"zero"', r"seed must be int, not str.*Received: seed='zero'", "string for a number"),
                ("true", r"seed must be int, not bool.*Received: seed=True", "bool for a number"),
                ("-3", r"seed.*Received: seed=-3", "value out of range"),
            )
        ),
        pytest.param(
            lambda text: text.encode("utf-8").replace(b'"seed"', b'"s\xffeed"'),
            r"is not UTF-8 text. Received: the byte 0xff on line \d+",
            id="non-UTF-8 byte",
        ),
        pytest.param(
            lambda text: text[: len(text) // 2],
            r"is not a JSON file \(cut short or edited\?\).*\(line \d+, column \d+\)",
            id="truncated",
        ),
        pytest.param(lambda text: "[1, 2]\n", r"must hold a JSON object. Received: list", id="not an object"),
    ],
)
def test_damaged_settings_are_refused_naming_the_file_the_setting_and_the_value(
    kind, edit, message, tmp_path
):
    _write(tmp_path, CONFIGS[kind], edit)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "config.json")) + ".*" + message):
        _read(kind, tmp_path)


def test_a_missing_setting_without_default_is_named(tmp_path):
    from keras_structured.run_settings import read_settings

    _write(tmp_path, CONFIGS["parser"], lambda text: text.replace('"treebank": "ud/en",', ""))
    with pytest.raises(ValueError, match=r"the setting 'treebank' is missing. Received: no treebank"):
        read_settings(tmp_path / "config.json", ParserConfig)


def test_the_benchmark_runners_refuse_a_damaged_json_file_instead_of_reading_no_run(tmp_path):
    from keras_structured.run_settings import read_json_object

    assert read_json(tmp_path / "final.json") is None  # missing: the run is not finished
    (tmp_path / "final.json").write_text('{"finished": true, "dev_uas": 8')
    with pytest.raises(ValueError, match=r"final.json' is not a JSON file \(cut short or edited\?\)"):
        read_json(tmp_path / "final.json")
    (tmp_path / "final.json").write_bytes(b'\xef\xbb\xbf{"finished": true}')
    assert (
        read_json(tmp_path / "final.json") == read_json_object(tmp_path / "final.json") == {"finished": True}
    )
