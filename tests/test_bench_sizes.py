"""``benchmarks/bench_sizes.py`` runs and prints its per-instance table."""

from __future__ import annotations

from benchmarks import bench_sizes


def test_distribution_table_on_small_problems(capsys):
    bench_sizes.main(["--structures", "tree", "sequence", "--sizes", "6", "--instances", "3", "--load", "0"])
    rows = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| tree 6") or line.startswith("| sequence 6")
    ]
    assert len(rows) == 4  # two structures, two kinds of scores, quiet only
    assert all(row.split("|")[10].strip() == "3" for row in rows)  # every problem terminated


def test_busy_processes_start_and_stop():
    with bench_sizes.busy_processes(1) as processes:
        assert [process.poll() for process in processes] == [None]  # running
    assert processes[0].poll() is not None
