"""``benchmarks/parser_loss_plateau.py`` runs and prints its statistics (a few steps on the sample)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import parser_loss_plateau as plateau

SAMPLE = Path(__file__).parent / "data" / "en_ewt_sample.conllu"


def test_prints_one_row_per_report_step(tmp_path, capsys):
    (tmp_path / "en_sample-ud-train.conllu").write_text(SAMPLE.read_text())
    argv = [
        "--treebank",
        str(tmp_path),
        "--losses",
        "hinge",
        "--steps",
        "3",
        "--every",
        "2",
        "--batch-size",
        "8",
    ]
    assert plateau.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "hinge, lr 0.001" and lines[1].split()[:2] == ["step", "loss"]
    rows = [line.split() for line in lines[2:]]
    assert [row[0] for row in rows] == ["1", "2"]
    # At initialisation the scores are nearly constant: the hinge loss is close to 2n.
    assert abs(float(rows[0][2])) < 1.0 and all(len(row) == 6 for row in rows)
