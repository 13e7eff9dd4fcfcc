"""The shared progress log, the resumed-settings rule and the folder swap of run directories."""

import math
import re
import shutil

import numpy as np
import pytest

from keras_structured import run_directory as rd
from keras_structured.progress_log import ProgressLog, ProgressLogError, read_rows, rows_up_to
from keras_structured.run_settings import check_resumed_settings
from tests.cli_runs import scalar_events

COLUMNS = ("epoch", "loss", "note")


def _write(logdir, epochs, resume_step=None, **options):
    with ProgressLog(logdir, COLUMNS, resume_step, text_columns=("note",), **options) as log:
        for epoch in epochs:
            log.log({"epoch": epoch, "loss": 1.0 / epoch, "note": f"e{epoch}"})


def test_rows_are_appended_and_mirrored_as_scalars_without_the_step_column(tmp_path):
    _write(tmp_path, [1, 2, 3])
    assert [row["epoch"] for row in read_rows(tmp_path)] == ["1", "2", "3"]
    assert [float(row["loss"]) for row in read_rows(tmp_path)] == [1.0, 0.5, 1.0 / 3]
    events = scalar_events(tmp_path)
    assert sorted(events) == [("loss", 1, 1.0), ("loss", 2, 0.5), ("loss", 3, pytest.approx(1 / 3))]


def test_a_resumed_log_keeps_the_checkpoints_rows_and_rewrites_the_events(tmp_path):
    _write(tmp_path, [1, 2, 3])  # the run crashed after epoch 3, its checkpoint is of epoch 2
    _write(tmp_path, [3, 4], resume_step=2)
    assert [row["epoch"] for row in read_rows(tmp_path)] == ["1", "2", "3", "4"]
    assert [step for _, step, _ in sorted(scalar_events(tmp_path))] == [1, 2, 3, 4]  # each step once


def test_a_torn_last_row_is_left_out_by_the_readers_and_dropped_on_resume(tmp_path):
    _write(tmp_path, [1, 2])
    with open(tmp_path / "progress.csv", "a") as handle:
        handle.write("3,0.33")  # killed while appending
    assert len(read_rows(tmp_path)) == 2
    _write(tmp_path, [3], resume_step=2)
    assert [row["epoch"] for row in read_rows(tmp_path)] == ["1", "2", "3"]


def test_a_log_that_lost_rows_is_refused_and_left_as_it_was(tmp_path):
    _write(tmp_path, [1, 3], tensorboard=False)  # row 2 missing
    before = (tmp_path / "progress.csv").read_bytes()
    with pytest.raises(ProgressLogError, match=r"epochs 1 to 2.*Received: epoch='3' in row 2"):
        ProgressLog(tmp_path, COLUMNS, resume_step=2, tensorboard=False, text_columns=("note",))
    shutil.copy(tmp_path / "progress.csv", tmp_path / "short.csv")
    (tmp_path / "progress.csv").write_text("epoch,loss,note\n1,1.0,e1\n")
    with pytest.raises(ProgressLogError, match="Received: 1 row"):
        rows_up_to(tmp_path, 2, "epoch")
    shutil.move(tmp_path / "short.csv", tmp_path / "progress.csv")
    assert (tmp_path / "progress.csv").read_bytes() == before


def test_another_step_column_numbers_the_rows_and_nan_cells_are_empty(tmp_path):
    columns = ("global_step", "iteration", "return")
    with ProgressLog(tmp_path, columns, step_column="iteration", tensorboard_step="global_step") as log:
        log.log({"global_step": 512, "iteration": 1, "return": math.nan})
        log.log({"global_step": 1024, "iteration": 2, "return": np.float64(0.25)})
        with pytest.raises(KeyError, match="Unknown columns"):
            log.log({"global_step": 1536, "iteration": 3, "reward": 1.0})
    assert read_rows(tmp_path) == [
        {"global_step": "512", "iteration": "1", "return": ""},
        {"global_step": "1024", "iteration": "2", "return": "0.25"},
    ]
    assert scalar_events(tmp_path) == [("return", 1024, 0.25)]
    ProgressLog(tmp_path, columns, resume_step=2, step_column="iteration", tensorboard=False).close()


def test_a_symlinked_log_is_refused(tmp_path):
    victim = tmp_path / "victim.csv"
    victim.write_text("keep\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "progress.csv").symlink_to(victim)
    with pytest.raises(rd.UnsafePathError, match="symlink"):
        ProgressLog(tmp_path / "run", COLUMNS, tensorboard=False)
    assert victim.read_text() == "keep\n"


def test_resumed_settings_may_only_change_or_grow_where_allowed():
    stored = {"seed": 0, "epochs": 5, "steps": 100, "lr": 0.1}
    assert check_resumed_settings(stored, dict(stored)) == {}
    changed = check_resumed_settings(
        stored, {**stored, "epochs": 8, "steps": 50, "added": 1}, may_change=["steps"], may_grow=["epochs"]
    )
    assert changed == {"epochs": (5, 8), "steps": (100, 50)}  # a setting added since is not compared
    with pytest.raises(ValueError, match=r"'epochs': \(5, 4\).*Received: epochs=4"):
        check_resumed_settings(stored, {**stored, "epochs": 4}, may_grow=["epochs"])
    with pytest.raises(ValueError, match=r"\{'seed': \(0, 1\), 'lr': \(0.1, 0.2\)\}\. Use the same\."):
        check_resumed_settings(stored, {**stored, "seed": 1, "lr": 0.2}, advice="Use the same.")


def _names(folder):
    return sorted(path.name for path in folder.iterdir())


def test_a_folder_is_swapped_whole_and_a_half_done_swap_is_recovered(tmp_path):
    folder = tmp_path / "checkpoint"
    rd.save_directory(folder, lambda new: rd.write_text(new / "state", "1"))
    with pytest.raises(RuntimeError, match="killed"):  # a writer that fails leaves the old folder

        def fail(new):
            rd.write_text(new / "state", "2")
            raise RuntimeError("killed")

        rd.save_directory(folder, fail)
    assert (folder / "state").read_text() == "1" and _names(tmp_path) == ["checkpoint"]
    # Killed between the two renames: the old folder is put back, the new one dropped.
    shutil.copytree(folder, tmp_path / "checkpoint.next")
    folder.rename(tmp_path / "checkpoint.previous")
    rd.recover_directory(folder)
    assert (folder / "state").read_text() == "1" and _names(tmp_path) == ["checkpoint"]
    # Killed after the swap, before the old folder was deleted: the new one stays.
    shutil.copytree(folder, tmp_path / "checkpoint.previous")
    rd.recover_directory(folder)
    assert _names(tmp_path) == ["checkpoint"]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "checkpoint.next").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(rd.UnsafePathError):
        rd.save_directory(folder, lambda new: None)


# ------------------------------------------------------------------------ logs edited by hand

NUMBERS = ("epoch", "loss", "accuracy")


def _numbers_log(logdir, edit):
    """A three-epoch log of numbers, edited by ``edit`` (bytes to bytes)."""
    with ProgressLog(logdir, NUMBERS, tensorboard=False) as log:
        for epoch in (1, 2, 3):
            log.log({"epoch": epoch, "loss": 1.0 / epoch, "accuracy": 10.0 * epoch})
    path = logdir / "progress.csv"
    path.write_bytes(edit(path.read_bytes()))
    return path


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda data: b"\xef\xbb\xbf" + data, id="byte-order mark"),
        pytest.param(lambda data: data.replace(b"\r\n", b"\r\n\r\n", 2), id="blank lines"),
        pytest.param(lambda data: data.replace(b"\r\n", b"\n"), id="Unix line ends"),
    ],
)
def test_harmless_edits_of_a_log_are_read_as_written(edit, tmp_path):
    _numbers_log(tmp_path, edit)
    expected = [{"epoch": str(e), "loss": str(1.0 / e), "accuracy": str(10.0 * e)} for e in (1, 2, 3)]
    assert read_rows(tmp_path) == expected
    with ProgressLog(tmp_path, NUMBERS, resume_step=2, tensorboard=False) as log:
        assert log.rows == expected[:2]
    assert read_rows(tmp_path) == expected[:2]


def _cells(row, column, value):
    """Bytes that replace cell ``column`` of data row ``row`` (from 1) with ``value``."""

    def edit(data):
        lines = data.split(b"\r\n")
        cells = lines[row].split(b",")
        cells[column] = value
        lines[row] = b",".join(cells)
        return b"\r\n".join(lines)

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(
            lambda data: data.replace(b"loss", b"los", 1),
            r"has columns this run's log does not.*Received: 'los'",
            id="renamed column",
        ),
        pytest.param(
            lambda data: data.replace(b"accuracy\r\n", b"accuracy,note\r\n").replace(b"0\r\n", b"0,x\r\n"),
            r"has columns this run's log does not.*Received: 'note'",
            id="unknown column",
        ),
        pytest.param(
            _cells(2, 1, b"abc"), r"row 2: loss must be a number or empty.*Received: loss='abc'", id="text"
        ),
        pytest.param(
            _cells(1, 0, b"one"), r"row 1: epoch must be a step number.*Received: epoch='one'", id="step"
        ),
        pytest.param(
            _cells(2, 2, b"20.0,5"),
            r"line 3 has 4 cells, and its header 3.*Received: '2,0.5,20.0,5'",
            id="cells",
        ),
        pytest.param(
            _cells(1, 1, b"\xff"), r"is not UTF-8 text. Received: the byte 0xff on line 2", id="non-UTF-8"
        ),
    ],
)
def test_a_log_edited_into_what_cannot_be_read_is_refused_naming_the_file_row_and_value(
    edit, message, tmp_path
):
    path = _numbers_log(tmp_path, edit)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=re.escape(repr(str(path))) + ".*" + message):
        ProgressLog(tmp_path, NUMBERS, resume_step=3, tensorboard=False)
    assert path.read_bytes() == before


def test_a_log_cut_short_keeps_its_whole_rows_and_a_resume_past_them_is_refused(tmp_path):
    path = _numbers_log(tmp_path, lambda data: data[: data.index(b"\r\n3,") + 5])
    assert [row["epoch"] for row in read_rows(tmp_path)] == ["1", "2"]  # the torn third row left out
    with pytest.raises(ProgressLogError, match=r"epochs 1 to 3.*truncated.*Received: 2 row"):
        ProgressLog(tmp_path, NUMBERS, resume_step=3, tensorboard=False)
    path.write_bytes(b"epoch,lo")  # cut inside the header: no rows
    assert read_rows(tmp_path) == []


def test_readers_of_numbers_refuse_text_in_a_number_column_naming_it(tmp_path):
    from benchmarks.resumable_runs import read_progress as benchmark_progress
    from rl.logger import read_progress as rl_progress

    path = _numbers_log(tmp_path, _cells(3, 2, b"n/a"))
    message = (
        re.escape(repr(str(path))) + r" row 3: accuracy must be a number or empty.*Received: accuracy='n/a'"
    )
    with pytest.raises(ValueError, match=message):
        benchmark_progress(path)
    path.write_bytes(
        path.read_bytes().replace(b"epoch,loss,accuracy", b"iteration,global_step,charts/episodic_return")
    )
    with pytest.raises(ValueError, match=message.replace("accuracy", "charts/episodic_return")):
        rl_progress(tmp_path)
