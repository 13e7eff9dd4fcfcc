"""The shared progress log, the resumed-settings rule and the folder swap of run directories."""

import math
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
