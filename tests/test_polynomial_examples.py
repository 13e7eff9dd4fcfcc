"""Smoke tests of the polynomial network data loaders, experiments and benchmark on tiny subsets.

The data live outside the repository, in ``../shared/data`` (MovieLens may not be
redistributed); the tests that read them are skipped, naming the path, where it is missing.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "benchmarks")]

import bench_polynomial  # noqa: E402
import polynomial_movielens  # noqa: E402
import polynomial_multiclass  # noqa: E402
from _common.polynomial_data import MULTICLASS_DATASETS, load_movielens, load_multiclass  # noqa: E402

from tests.shared_data import requires_shared  # noqa: E402

requires_multiclass = requires_shared("multiclass")
requires_movielens = requires_shared("movielens-100k")

SPLIT_SIZES = {
    "satellite": (4435, 2000, 36, 6),
    "letter": (16000, 4000, 16, 26),
    "vehicle": (592, 254, 18, 4),
    "vowel": (528, 462, 10, 11),
    "segment": (1617, 693, 18, 7),
}


@requires_multiclass
@pytest.mark.parametrize("name", MULTICLASS_DATASETS)
def test_multiclass_split_sizes_and_standardisation(name):
    split = load_multiclass(name)
    n_train, n_test, n_features, n_classes = SPLIT_SIZES[name]
    assert split.x_train.shape == (n_train, n_features)
    assert split.x_test.shape == (n_test, n_features)
    assert len(split.classes) == n_classes
    assert set(np.unique(split.y_train)) == set(range(n_classes))
    np.testing.assert_allclose(split.x_train.mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(split.x_train.std(axis=0), 1.0, atol=1e-9)


@requires_multiclass
def test_stratified_split_is_seeded_and_stratified():
    first, second = load_multiclass("vehicle", split_seed=0), load_multiclass("vehicle", split_seed=0)
    np.testing.assert_array_equal(first.y_test, second.y_test)
    assert not np.array_equal(first.y_test, load_multiclass("vehicle", split_seed=1).y_test)
    train_share = np.bincount(first.y_train) / len(first.y_train)
    test_share = np.bincount(first.y_test) / len(first.y_test)
    np.testing.assert_allclose(train_share, test_share, atol=0.01)


@requires_movielens
def test_movielens_one_hot_rows():
    split = load_movielens()
    assert split.x_train.shape == (80000, 2674) and split.x_test.shape == (20000, 2674)
    assert len(split.y_train) == 80000 and set(np.unique(split.y_test)) == {1, 2, 3, 4, 5}
    for x in (split.x_train, split.x_test):
        for block in ("user", "item", "age", "gender", "occupation"):
            np.testing.assert_array_equal(np.asarray(x[:, split.blocks[block]].sum(axis=1)).ravel(), 1.0)
        genres = np.asarray(x[:, split.blocks["genre"]].sum(axis=1)).ravel()
        assert genres.min() >= 1
        np.testing.assert_array_equal(np.asarray(x.sum(axis=1)).ravel(), 5 + genres)
    users = split.x_train[:, split.blocks["user"]].nonzero()[1] + 1
    np.testing.assert_array_equal(users, split.users_train)


def test_ndcg_by_hand():
    users, ratings = np.array([1, 1, 2]), np.array([5, 1, 3])
    # User 1: the rating-1 item is ranked first: (1 + 5 / log2 3) / (5 + 1 / log2 3); user 2 scores 1.
    expected = 0.5 * ((1 + 5 / np.log2(3)) / (5 + 1 / np.log2(3)) + 1.0)
    assert polynomial_movielens.ndcg_at(users, ratings, np.array([0.0, 1.0, 0.0])) == pytest.approx(expected)
    assert polynomial_movielens.ndcg_at(users, ratings, ratings.astype(float)) == pytest.approx(1.0)


def _read(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@requires_multiclass
def test_multiclass_main_tiny(tmp_path, capsys):
    out = tmp_path / "multiclass.csv"
    args = [
        "--datasets",
        "vowel",
        "--budgets",
        "3,11",
        "--taus",
        "100",
        "--svm-cs",
        "1",
        "--select-budget",
        "3",
    ]
    rows = polynomial_multiclass.main([*args, "--epochs", "1", "--max-train", "200", "--out", str(out)])
    methods = {row["method"] for row in rows}
    assert methods == {*polynomial_multiclass.BUDGET_METHODS, polynomial_multiclass.SVM}
    assert not any(row["method"] == "ovr l1" and row["budget"] < 11 for row in rows)  # budget < classes
    assert all(
        0.0 <= row["test_accuracy"] <= 1.0 and row["n_basis"] <= max(row["budget"], 200) for row in rows
    )
    assert len(_read(out)) == len(rows)
    assert "| vowel | cg l1/l2 |" in capsys.readouterr().out
    assert repr(polynomial_multiclass.main(["--summarize", str(out)])) == repr(rows)  # NaN-safe
    assert "| vowel | cg l1/l2 |" in capsys.readouterr().out


@requires_movielens
def test_movielens_main_tiny(tmp_path):
    out = tmp_path / "movielens.csv"
    rows = polynomial_movielens.main(
        ["--max-train", "2000", "--max-test", "1000", "--budgets", "2", "--select-budget", "2"]
        + ["--taus", "10", "--fm-epochs", "1", "--out", str(out)]
    )
    assert [row["method"] for row in rows] == list(polynomial_movielens.METHODS)
    assert all(0.0 < row["rmse"] < 4.0 and 0.0 < row["ndcg10"] <= 1.0 for row in rows)
    assert len(_read(out)) == len(rows)


@requires_movielens
@pytest.mark.parametrize("select_budget, validated_at", [(None, {1, 3}), ("3", {3})])
def test_movielens_tau_is_chosen_at_every_budget_by_default(tmp_path, capsys, select_budget, validated_at):
    option = [] if select_budget is None else ["--select-budget", select_budget]
    rows = polynomial_movielens.main(
        ["--max-train", "1000", "--max-test", "300", "--budgets", "1,3", "--methods", "pn regressor"]
        + ["--taus", "0.1,100", *option, "--out", str(tmp_path / "m.csv")]
    )
    logged = capsys.readouterr().err
    assert {int(k) for k in re.findall(r"validation RMSE \S+ \(k=(\d+)\)", logged)} == validated_at
    assert [row["budget"] for row in rows] == [1, 3]


def test_movielens_select_budget_is_checked():
    with pytest.raises(SystemExit):
        polynomial_movielens.parse_args(["--select-budget", "0"])


@requires_movielens
def test_benchmark_tiny(tmp_path, capsys):
    rows = bench_polynomial.main(
        ["--sizes", "500,1000", "--iterations", "2", "--out", str(tmp_path / "b.csv")]
    )
    assert [row["n"] for row in rows] == [500, 1000]
    assert all(row["seconds_per_iteration"] > 0 and row["peak_mib"] > 0 for row in rows)
    assert "scaling exponent" in capsys.readouterr().out


@requires_multiclass
def test_benchmark_logistic_tiny(tmp_path, capsys):
    rows = bench_polynomial.main(
        ["--task", "logistic", "--dataset", "vowel", "--budget", "3", "--out", str(tmp_path / "l.csv")]
    )
    assert [row["model"] for row in rows] == ["cg l1/l2 k=3", "logistic regression, PolynomialFeatures(2)"]
    assert all(row["seconds"] > 0 and 0.0 <= row["test_accuracy"] <= 1.0 for row in rows)
    assert "time ratio CG / LR" in capsys.readouterr().out
