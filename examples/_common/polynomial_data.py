"""Data loaders of the polynomial network experiments and benchmark (examples and benchmarks).

Multi-class sets (``<data-dir>/multiclass/<name>.csv``, header row, features first, ``label``
last; see that folder's README). Splits:

* ``satellite``: rows 1-4,435 train, rows 4,436-6,435 test (the original Statlog split);
* ``letter``: first 16,000 rows train, last 4,000 test;
* ``vowel``: rows 1-528 train (speakers 0-7), rows 529-990 test (speakers 8-14);
* ``vehicle`` and ``segment``: no standard split; a stratified 70/30 split,
  ``sklearn.model_selection.train_test_split(test_size=0.3, stratify=y,
  random_state=split_seed)`` with ``split_seed=0`` by default.

Labels become the integers ``0..m-1`` (classes in sorted order); features are standardised
with the training mean and standard deviation (a constant column is only centred).

MovieLens 100K (``<data-dir>/movielens-100k``; GroupLens licence: read in place, never copy
or redistribute). Every rating becomes one sparse row, the concatenation of the one-hot
blocks ``user id (943) | item id (1682) | age bucket (7) | gender (2) | occupation (21)``
and the multi-hot ``genres (19)`` of the item, so a row holds ``5 + #genres(item)`` ones.
Age buckets are MovieLens 1M's: ``<18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+``. The
ratings are split at random, 80/20, by a permutation drawn with ``split_seed`` (default 0).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from _common.cli import DEFAULT_DATA_DIR

if TYPE_CHECKING:  # imported where used: the examples import this module before parsing arguments
    import numpy as np
    import scipy.sparse as sp

MULTICLASS_DATASETS = ("satellite", "letter", "vehicle", "vowel", "segment")
_FIXED_TRAIN_ROWS = {"satellite": 4435, "letter": 16000, "vowel": 528}
AGE_BUCKETS = (18, 25, 35, 45, 50, 56)
"""Lower edges of the age buckets after the first: ``<18, 18-24, ..., 50-55, 56+``."""


@dataclass(frozen=True)
class MulticlassSplit:
    """A standardised multi-class train/test split."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    """Class names; label ``c`` is ``classes[c]``."""


@dataclass(frozen=True)
class RatingSplit:
    """MovieLens ratings as sparse one-hot features, split 80/20."""

    x_train: sp.csr_matrix
    y_train: np.ndarray
    users_train: np.ndarray
    x_test: sp.csr_matrix
    y_test: np.ndarray
    users_test: np.ndarray
    blocks: dict[str, slice]
    """Column range of every feature block."""


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    if not path.is_file():
        raise FileNotFoundError(f"Data file not found: {path} (set --data-dir to the shared data folder)")
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


def _split_indices(name: str, y: np.ndarray, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    n = len(y)
    if name in _FIXED_TRAIN_ROWS:
        n_train = _FIXED_TRAIN_ROWS[name]
        return np.arange(n_train), np.arange(n_train, n)
    from sklearn.model_selection import train_test_split

    return train_test_split(np.arange(n), test_size=0.3, stratify=y, random_state=split_seed)


def standardize(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres and scales both arrays with the mean and standard deviation of ``x_train``."""
    import numpy as np

    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (x_train - mean) / std, (x_test - mean) / std


def load_multiclass(name: str, data_dir: Path | str | None = None, split_seed: int = 0) -> MulticlassSplit:
    """Loads a multi-class set with its split (see the module docstring); features standardised.

    Example:
        >>> split = load_multiclass("vowel")  # doctest: +SKIP
        >>> split.x_train.shape, split.x_test.shape, len(split.classes)  # doctest: +SKIP
        ((528, 10), (462, 10), 11)
    """
    import numpy as np

    if name not in MULTICLASS_DATASETS:
        raise ValueError(f"name must be one of {list(MULTICLASS_DATASETS)}. Received: name={name!r}")
    header, rows = _read_csv(Path(data_dir or DEFAULT_DATA_DIR) / "multiclass" / f"{name}.csv")
    if header[-1] != "label":
        raise ValueError(f"{name}.csv must end with a 'label' column. Received: header ending {header[-1]!r}")
    x = np.array([[float(value) for value in row[:-1]] for row in rows])
    classes, y = np.unique([row[-1] for row in rows], return_inverse=True)
    train, test = _split_indices(name, y, split_seed)
    x_train, x_test = standardize(x[train], x[test])
    return MulticlassSplit(name, x_train, y[train], x_test, y[test], tuple(str(c) for c in classes))


def _age_bucket(age: int) -> int:
    import numpy as np

    return int(np.searchsorted(AGE_BUCKETS, age, side="right"))


def load_movielens(
    data_dir: Path | str | None = None, split_seed: int = 0, test_fraction: float = 0.2
) -> RatingSplit:
    """Loads MovieLens 100K as sparse one-hot rows and splits the ratings at random.

    Returns:
        A :class:`RatingSplit`; ratings are the integers 1-5, ``users_*`` the user ids.

    Example:
        >>> split = load_movielens()  # doctest: +SKIP
        >>> split.x_train.shape, split.x_test.shape  # doctest: +SKIP
        ((80000, 2674), (20000, 2674))
    """
    import numpy as np
    import scipy.sparse as sp

    root = Path(data_dir or DEFAULT_DATA_DIR) / "movielens-100k"
    _, user_rows = _read_csv(root / "users.csv")
    _, item_rows = _read_csv(root / "items.csv")
    _, rating_rows = _read_csv(root / "ratings.csv")
    occupations = sorted({row[3] for row in user_rows})
    genres = sorted({genre for row in item_rows for genre in row[3].split("|") if genre})
    sizes = {
        "user": max(int(row[0]) for row in user_rows),
        "item": max(int(row[0]) for row in item_rows),
        "age": len(AGE_BUCKETS) + 1,
        "gender": 2,
        "occupation": len(occupations),
        "genre": len(genres),
    }
    offsets = np.cumsum([0, *sizes.values()])
    blocks = {
        name: slice(int(start), int(stop))
        for name, start, stop in zip(sizes, offsets, offsets[1:], strict=False)
    }
    user_columns = {
        int(row[0]): [
            blocks["user"].start + int(row[0]) - 1,
            blocks["age"].start + _age_bucket(int(row[1])),
            blocks["gender"].start + ("M", "F").index(row[2]),
            blocks["occupation"].start + occupations.index(row[3]),
        ]
        for row in user_rows
    }
    item_columns = {
        int(row[0]): [blocks["item"].start + int(row[0]) - 1]
        + [blocks["genre"].start + genres.index(genre) for genre in row[3].split("|") if genre]
        for row in item_rows
    }
    ratings = np.array([[int(row[0]), int(row[1]), int(row[2])] for row in rating_rows])
    columns = [user_columns[user] + item_columns[item] for user, item, _ in ratings]
    indptr = np.cumsum([0] + [len(cols) for cols in columns])
    indices = np.concatenate(columns)
    x = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(ratings), int(offsets[-1])))
    order = np.random.default_rng(split_seed).permutation(len(ratings))
    n_test = int(round(test_fraction * len(ratings)))
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    return RatingSplit(
        x[train], ratings[train, 2], ratings[train, 0], x[test], ratings[test, 2], ratings[test, 0], blocks
    )
