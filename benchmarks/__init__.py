"""The benchmark scripts, and the core that the resumable runners share.

Every script runs from the repository root, as a script (``python benchmarks/bench_parsing.py``)
or as a module (``python -m benchmarks.bench_parsing``); the tests import them as modules.

The resumable runners (``bench_parsing``, ``bench_nli``, ``bench_tracenorm``) each keep their
grid, their commands and their tables, and describe themselves with a
:class:`benchmarks.runner_core.Runner`; the core does the rest:

* :mod:`benchmarks.runner_core`: the command line (``run``, ``run --dry-run``, ``report``)
  and the rounds of a ``run``;
* :mod:`benchmarks.run_plans`: what the logdirs hold, the plan, the grid choice, the
  recorded options;
* :mod:`benchmarks.resumable_runs`: one run's files and processes (train, resume, evaluate),
  which ``bench_rl`` uses too;
* :mod:`benchmarks.report_tables`: the cells and tables of ``results.md``.

Every file they write and every lock they take goes through
:mod:`keras_structured.run_directory`.
"""
