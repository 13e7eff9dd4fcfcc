"""Helpers shared by the tests of the benchmark runners (``tests/test_bench_*.py``).

:class:`FakeCLI` is the common part of the stand-ins for ``subprocess.run`` that write what a
training command line would, so that the runners' plan, resume logic and reports run without
training anything.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


def arg_value(argv: list[str], flag: str) -> str:
    """The value that follows ``flag`` in ``argv``."""
    return argv[argv.index(flag) + 1]


class FakeCLI:
    """Stands in for ``subprocess.run`` of a training command line; subclasses write its files.

    Args:
        train_exit: the exit status of ``train``.
        write_eval: whether ``evaluate`` writes its ``eval_{split}.json``; otherwise it only
            prints its JSON line, and the runner writes the file.
        processes_to_finish: the training processes a run takes to finish (more than one: the
            earlier ones stop at their ``--time-limit``).
    """

    #: Where the subcommand (``train``, ``evaluate``) stands in an argv.
    COMMAND = 3

    def __init__(self, train_exit: int = 0, write_eval: bool = True, processes_to_finish: int = 1):
        self.calls: list[list[str]] = []
        self.train_exit = train_exit
        self.write_eval = write_eval
        self.processes_to_finish = processes_to_finish

    def trains(self, logdir: Path) -> int:
        """How many ``train`` processes ``logdir`` has had so far (the running one included)."""
        return sum(
            call[self.COMMAND] == "train" and arg_value(call, "--logdir") == str(logdir)
            for call in self.calls
        )

    @staticmethod
    def refuses(argv: list[str], logdir: Path) -> bool:
        """The CLI's refusals: a fresh ``train`` into a logdir that holds a run, a ``--resume``
        without a checkpoint (``checkpoint/state.json``)."""
        fresh = "--resume" not in argv
        holds_run = (logdir / "checkpoint").exists() or (logdir / "final.json").exists()
        return (fresh and holds_run) or not (fresh or (logdir / "checkpoint" / "state.json").is_file())

    def evaluation(self, argv: list[str], path: Path, result: dict[str, Any]) -> subprocess.CompletedProcess:
        """What ``evaluate`` does: ``result`` written to ``path`` (with ``write_eval``) and printed
        as the last line of its output."""
        if self.write_eval:
            path.write_text(json.dumps(result))
        return subprocess.CompletedProcess(argv, 0, stdout="loading\n" + json.dumps(result) + "\n", stderr="")
