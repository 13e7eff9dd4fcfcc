"""Helpers shared by the examples and benchmarks; none of these files is an example itself.

* :mod:`_common.cli`: the help formatter every example uses (defaults shown) and the
  default data folder; standard library only, so that ``--help`` answers before
  TensorFlow is imported.
* :mod:`_common.experiments`: arguments, progress lines, splits, CSV and markdown tables
  of the polynomial network experiments and benchmark.
* :mod:`_common.polynomial_data`: their data loaders (multi-class sets, MovieLens 100K).

The examples import them as ``_common.<module>``: Python puts a script's own folder on
``sys.path``, so this works from any working directory.
"""
