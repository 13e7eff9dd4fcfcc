"""The run-directory rules shared by the parser and NLI command lines
(``keras_structured.applications.training_runs``):
early stopping after ``min_epochs``, runs never mixed, a larger budget extending a finished run.
End-to-end runs (exact resume, the files written) are in ``test_parsing_cli.py`` and
``test_nli_training.py``."""

from __future__ import annotations

import dataclasses
import json

import pytest

from keras_structured.applications.training_runs import TrainingRun, check_logdir, finished


@dataclasses.dataclass(frozen=True)
class Settings:
    learning_rate: float = 0.1
    seed: int = 0
    epochs: int = 10
    patience: int = 5
    min_epochs: int = 1


def _finished_run(logdir, settings: Settings) -> None:
    """The files of a run that ran all its epochs."""
    (logdir / "checkpoint").mkdir()
    state = {
        "epoch": settings.epochs,
        "best_accuracy": 0.5,
        "best_epoch": 1,
        "bad_epochs": 0,
        "train_seconds": 1.0,
    }
    (logdir / "checkpoint" / "state.json").write_text(json.dumps(state))
    (logdir / "config.json").write_text(json.dumps(dataclasses.asdict(settings)))
    (logdir / "final.json").write_text("{}")


@pytest.mark.parametrize(
    "epoch, bad_epochs, expected",
    [(2, 5, False), (4, 5, True), (4, 4, False), (10, 0, True)],
)
def test_early_stopping_waits_for_min_epochs(epoch, bad_epochs, expected):
    settings = Settings(epochs=10, patience=5, min_epochs=4)
    assert finished(settings, {"epoch": epoch, "bad_epochs": bad_epochs}) is expected


def test_a_larger_budget_extends_a_finished_run_once_it_has_resumed(tmp_path):
    import keras

    settings = Settings(epochs=2)
    _finished_run(tmp_path, settings)
    longer = dataclasses.replace(settings, epochs=4, patience=6)
    assert check_logdir(tmp_path, longer, resume=True)["epoch"] == 2
    assert json.loads((tmp_path / "config.json").read_text())["epochs"] == 2  # nothing written yet
    assert (tmp_path / "final.json").exists() and not finished(longer, {"epoch": 2, "bad_epochs": 0})
    with pytest.raises(ValueError, match=r"'patience': \(5, 4\)"):
        check_logdir(tmp_path, dataclasses.replace(longer, patience=4), resume=True)
    (tmp_path / "vocabulary.json").write_text("{}")
    keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)]).save(tmp_path / "checkpoint" / "model.keras")
    (tmp_path / "progress.csv").write_text("epoch,loss\n1,0.5\n2,0.4\n")
    with TrainingRun(longer, tmp_path, ("epoch", "loss"), "accuracy", resume=True, quiet=True) as run:
        run.restore(_Vocabulary)
    assert json.loads((tmp_path / "config.json").read_text())["epochs"] == 4
    assert not (tmp_path / "final.json").exists()


def test_runs_are_never_mixed(tmp_path):
    settings = Settings(epochs=2)
    assert check_logdir(tmp_path / "new", settings, resume=False) is None
    _finished_run(tmp_path, settings)
    (tmp_path / "runner.log").write_text("")  # a runner's own files do not count
    with pytest.raises(FileExistsError, match=r"already holds a run \(config.json, checkpoint, final.json\)"):
        check_logdir(tmp_path, settings, resume=False)
    refused = r"\{'learning_rate': \(0.1, 0.2\)\}.*logdir=.*Received: learning_rate=0.2"
    with pytest.raises(ValueError, match=refused):
        check_logdir(tmp_path, dataclasses.replace(settings, learning_rate=0.2), resume=True)
    with pytest.raises(FileNotFoundError, match="--resume needs a run with a checkpoint"):
        check_logdir(tmp_path / "new", settings, resume=True)


class _Vocabulary:
    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls()


def test_a_run_resumed_after_a_crash_shows_each_epoch_once_in_tensorboard(tmp_path):
    """Epoch 3 was logged, then the process died before its checkpoint: the resumed run drops
    that row from progress.csv and from the TensorBoard events, and logs its own epoch 3."""
    import keras

    from tests.cli_runs import read_progress, scalar_events

    settings = Settings(epochs=3)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    columns, text = ("epoch", "loss", "note"), ("note",)
    run = TrainingRun(settings, tmp_path, columns, "accuracy", quiet=True, text_columns=text)
    run.write_settings(_Vocabulary())
    run.start()
    for epoch, loss in ((1, 0.9), (2, 0.8), (3, 0.75)):
        run.end_epoch(model, {"epoch": epoch, "loss": loss, "note": "text"}, score=-loss)
        if epoch < 3:
            run.save_checkpoint(model, seconds=1.0)  # the crash: no checkpoint of epoch 3
    run.close()  # the process dies, and its lock on the directory with it
    resumed = TrainingRun(settings, tmp_path, columns, "accuracy", resume=True, quiet=True, text_columns=text)
    resumed.restore(_Vocabulary)
    resumed.end_epoch(model, {"epoch": 3, "loss": 0.7, "note": "text"}, score=-0.7)
    resumed.save_checkpoint(model, seconds=1.0)
    resumed.finish({}, {})
    assert [row["loss"] for row in read_progress(tmp_path)] == ["0.9", "0.8", "0.7"]
    events = sorted((step, tag, round(value, 6)) for tag, step, value in scalar_events(tmp_path))
    assert events == [(1, "loss", 0.9), (2, "loss", 0.8), (3, "loss", 0.7)]  # text is left out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("checkpoint", "best"))) == [
        "best.keras",
        "checkpoint",
    ]


KILLED = ("while writing checkpoint.next", "between the renames", "before the cleanup")


@pytest.mark.parametrize("killed", KILLED)
def test_a_process_killed_while_checkpointing_leaves_a_whole_checkpoint(tmp_path, killed):
    """``save_checkpoint`` writes ``checkpoint.next/``, renames ``checkpoint/`` to
    ``checkpoint.previous/`` and ``checkpoint.next/`` to ``checkpoint/``, then deletes
    ``checkpoint.previous/``; a kill at any of these points leaves a checkpoint to resume."""
    settings = Settings(epochs=10)
    _finished_run(tmp_path, settings)
    (tmp_path / "final.json").unlink()
    old_state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    (tmp_path / "checkpoint" / "model.keras").write_text("the last epoch's model")
    written = tmp_path / "checkpoint.next"
    written.mkdir()
    (written / "model.keras").write_text("the next epoch's model" if killed != KILLED[0] else "half a mo")
    (written / "state.json").write_text(json.dumps({**old_state, "epoch": old_state["epoch"] + 1}))
    if killed != KILLED[0]:
        (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.previous")
    if killed == KILLED[2]:
        written.rename(tmp_path / "checkpoint")
    state = check_logdir(tmp_path, settings, resume=True)
    swapped = killed == KILLED[2]
    assert state["epoch"] == old_state["epoch"] + swapped
    expected = "the next epoch's model" if swapped else "the last epoch's model"
    assert (tmp_path / "checkpoint" / "model.keras").read_text() == expected
    assert not (tmp_path / "checkpoint.next").exists() and not (tmp_path / "checkpoint.previous").exists()


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("{}", r"epoch must be int. Received: epoch=None"),
        ('{"epoch": "2", "best_epoch": 1, "bad_epochs": 0, "train_seconds": 1}', r"Received: epoch='2'"),
        ('{"epoch": 2, "best_epoch": 1, "bad_epochs": 0, "train_seconds": "1 s"}', r"train_seconds must be"),
        ('{"epoch": 2, "best_epoch"', r"is not a JSON file \(cut short or edited\?\)"),
    ],
)
def test_a_resumed_checkpoint_whose_loop_state_was_edited_is_refused_naming_it(state, message, tmp_path):
    settings = Settings(epochs=2)
    _finished_run(tmp_path, settings)
    (tmp_path / "checkpoint" / "state.json").write_text(state)
    with pytest.raises(ValueError, match=r"checkpoint/state.json'.*" + message):
        check_logdir(tmp_path, settings, resume=True)


def test_a_vocabulary_of_another_kind_of_run_is_refused_naming_its_file(tmp_path):
    from keras_structured.applications.nli.vocabulary import Vocabulary as NLIVocabulary
    from keras_structured.applications.parsing.vocabulary import Vocabulary as ParserVocabulary
    from keras_structured.applications.training_runs import read_vocabulary

    (tmp_path / "vocabulary.json").write_text(json.dumps(NLIVocabulary(["dog"]).get_config()))
    with pytest.raises(
        ValueError, match=r"vocabulary.json' does not hold a vocabulary of this command's runs"
    ):
        read_vocabulary(tmp_path, ParserVocabulary)
