"""The interleaved timing of training steps shared by the NLI and parser command lines."""

from __future__ import annotations

import json

import pytest

from keras_structured.applications.timing import interleaved_step_seconds, report_timings, step_summary


def test_models_take_turns_on_each_batch_in_rotating_order_after_an_untimed_pass():
    calls = []
    steps = [[lambda r=r, k=k: calls.append((r, k)) for k in range(3)] for r in range(2)]
    seconds = interleaved_step_seconds(steps)
    expected_pass = [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2)]
    assert calls == expected_pass * 2  # traced once, then timed
    assert [len(row) for row in seconds] == [3, 3] and min(min(row) for row in seconds) >= 0


@pytest.mark.parametrize("steps", [[], [[lambda: None], []]])
def test_no_models_or_unequal_batches_raise(steps):
    with pytest.raises(ValueError, match="same number of batches"):
        interleaved_step_seconds(steps)


def test_summary_and_report(tmp_path, capsys):
    summary = step_summary([0.1, 0.3, 0.2])
    assert summary == {"steps": 3, "median_step_s": 0.2, "mean_step_s": pytest.approx(0.2)}
    report_timings({"run": summary}, str(tmp_path / "out" / "timing.json"))
    assert json.loads(capsys.readouterr().out) == {"run": summary}
    assert json.loads((tmp_path / "out" / "timing.json").read_text()) == {"run": summary}


def test_the_report_follows_a_symlinked_output_folder(tmp_path, capsys):
    (tmp_path / "disk").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "disk", target_is_directory=True)
    report_timings({"run": step_summary([0.5])}, str(tmp_path / "link" / "timing.json"))
    capsys.readouterr()
    assert json.loads((tmp_path / "disk" / "timing.json").read_text())["run"]["steps"] == 1
