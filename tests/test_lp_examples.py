"""The LP-SparseMAP examples on tiny settings: the constraints hold, the scores are sane.

``examples/lp_budgeted_tagging.py`` (a budget over one tag of a tagger),
``examples/lp_constrained_tree.py`` (dependency trees with a valency cap) and
``examples/lp_multilabel.py`` (yeast, which lives in ``../shared/data``: skipped, naming the
path, where it is missing). Each ``main`` returns its result rows by name.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples")]

import lp_budgeted_tagging  # noqa: E402
import lp_constrained_tree  # noqa: E402
import lp_multilabel  # noqa: E402

from tests.shared_data import SHARED_DATA, requires_shared  # noqa: E402

YEAST = SHARED_DATA / lp_multilabel.DATA_FILE
requires_yeast = requires_shared(*lp_multilabel.DATA_FILE.parts)
# The solver stops at a residual of 1e-6 and polishes: constraints hold to rounding.
SLACK = 1e-9


def test_the_tagger_under_a_budget_never_exceeds_it(tmp_path):
    out = tmp_path / "tagging.csv"
    argv = ["--epochs", "3", "--sentences", "200", "--test-sentences", "40", "--seed", "0", "--out", str(out)]
    results = lp_budgeted_tagging.main(argv)
    lp, sparsemap, viterbi = results["lp_sparsemap"], results["sparsemap"], results["viterbi"]
    assert lp["max_budget_mass"] <= 1 + SLACK and lp["violations"] == 0, lp
    assert sparsemap["max_budget_mass"] > 2 and viterbi["violations"] > 0, (sparsemap, viterbi)
    assert lp["accuracy"] > 0.8 and viterbi["accuracy"] > 0.8, results
    assert out.read_text().startswith("decoder,accuracy,violations")


def test_the_budget_graph_leaves_short_sentences_to_the_sequence_factor():
    assert len(lp_budgeted_tagging.budget_graph(1, 3, tag=0, budget=1).factors) == 1
    graph = lp_budgeted_tagging.budget_graph(4, 3, tag=2, budget=1)
    assert graph.num_variables == 12 and graph.factors[1].variables.tolist() == [2, 5, 8, 11]


def test_capped_trees_hold_the_cap_and_cost_objective(tmp_path):
    argv = ["--max-sentences", "4", "--max-length", "20", "--cap", "3", "--out", str(tmp_path / "tree.csv")]
    results = lp_constrained_tree.main(argv)
    lp, sparsemap = results["lp_sparsemap"], results["sparsemap"]
    assert lp["max_valency"] <= 3 + SLACK < sparsemap["max_valency"], results
    assert lp["objective"] < sparsemap["objective"]  # the cap cuts the polytope: the optimum drops
    assert lp["uas"] > 0.5 and lp["map_calls"] > sparsemap["map_calls"], results


def test_the_tree_graph_caps_every_word_and_lets_the_tree_factor_hold_the_root():
    graph = lp_constrained_tree.capped_tree_graph(4, cap=2)
    assert graph.num_variables == 25 and len(graph.factors) == 1 + 4
    assert graph.factors[1].variables.tolist() == [7, 8, 9]  # word 1 heads words 2, 3, 4
    assert len(lp_constrained_tree.capped_tree_graph(3, cap=2).factors) == 1  # 2 dependents at most


def test_correlated_pairs_cover_every_label_first():
    rng = np.random.default_rng(0)
    y = (rng.random((200, 5)) < 0.4).astype("float32")
    y[:, 1] = y[:, 0]  # labels 0 and 1 always together
    pairs = lp_multilabel.correlated_pairs(y, 5)
    assert (0, 1) in pairs and len(pairs) == 5
    assert {label for pair in pairs for label in pair} == set(range(5))


def test_missing_yeast_data_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        lp_multilabel.parse_args(["--data", str(tmp_path / "yeast.csv.gz")])
    assert "the yeast data is not at" in capsys.readouterr().err


@requires_yeast
def test_yeast_split_keeps_mulan_sizes_and_standardises():
    x_train, y_train, x_test, y_test = lp_multilabel.load_yeast(YEAST, split_seed=0)
    assert x_train.shape == (1500, 103) and x_test.shape == (917, 103)
    assert y_train.shape == (1500, 14) and set(np.unique(y_test)) == {0.0, 1.0}
    np.testing.assert_allclose(x_train.mean(axis=0), 0.0, atol=1e-5)
    again = lp_multilabel.load_yeast(YEAST, split_seed=0)[3]
    np.testing.assert_array_equal(again, y_test)


@requires_yeast
def test_yeast_lp_sparsemap_learns_sparse_outputs(tmp_path):
    argv = ["--models", "frequent_labels,sigmoid,lp_sparsemap", "--pairs", "14", "--epochs", "3"]
    argv += ["--learning-rate", "0.01", "--train-rows", "192", "--test-rows", "96"]
    argv += ["--data", str(YEAST), "--out", str(tmp_path / "yeast.csv")]
    results = lp_multilabel.main([*argv, "--save", str(tmp_path / "lp.keras")])
    lp, sigmoid = results["lp_sparsemap"], results["sigmoid"]
    assert lp["example_f1"] > 0.45 and lp["micro_f1"] > 0.45, results
    assert results["frequent_labels"]["labels_per_example"] == 4.0, results
    assert lp["zero_share"] > 0.1 and sigmoid["zero_share"] == 0.0, results
    assert (tmp_path / "lp.keras").exists()
