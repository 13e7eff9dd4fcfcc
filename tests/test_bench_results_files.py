"""Which files of the long runs are committed (``benchmarks/results/.gitignore``).

A fresh clone must hold everything the runners read to skip a finished run and to write
the report, and nothing large, private to a machine, or holding the datasets' words.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks import resumable_runs

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
RUN = "bench_parsing/en/crf/lr0.008/seed0"

KEPT = [
    "bench_parsing/bench_plan.json",
    "bench_parsing/results.md",
    "bench_parsing/figures/sparsity_dev.png",
    "bench_parsing/en/step_timing.json",
    f"{RUN}/config.json",
    f"{RUN}/progress.csv",
    f"{RUN}/final.json",
    f"{RUN}/eval_dev.json",
    f"{RUN}/eval_test.json",
    f"{RUN}/bench_state.json",
    f"{RUN}/sparsity_dev.jsonl",
    "bench_nli/step_timing.json",
]
LEFT_OUT = [
    f"{RUN}/checkpoint/state.json",
    f"{RUN}/checkpoint.next/state.json",
    f"{RUN}/best.keras",
    f"{RUN}/vocabulary.json",
    f"{RUN}/bench_train.log",
    f"{RUN}/bench_eval_test.log",
    f"{RUN}/events.out.tfevents.1796237951.host.1.0.v2",
    "bench_nli/sequence/lr0.0625/seed0/alignments_test.json",
    "bench_nli/sequence/lr0.0625/seed0/checkpoint/model.keras",
]


def ignored(relative: str) -> bool:
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", str(RESULTS / relative)],
        cwd=RESULTS.parent,
        capture_output=True,
    )
    assert result.returncode in (0, 1), result.stderr.decode()
    return result.returncode == 0


@pytest.mark.parametrize("relative", KEPT)
def test_the_files_a_runner_reads_are_committed(relative):
    assert not ignored(relative)


@pytest.mark.parametrize("relative", LEFT_OUT)
def test_models_logs_and_dataset_words_stay_local(relative):
    assert ignored(relative)


def test_shared_data_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    expected = (RESULTS.parents[1] / ".." / "shared" / "data" / "ud").resolve()
    monkeypatch.chdir(RESULTS.parents[1])
    path = resumable_runs.shared_data("ud")
    assert not path.is_absolute() and path.resolve() == expected
    monkeypatch.chdir(tmp_path)
    assert resumable_runs.shared_data("ud").resolve() == expected
