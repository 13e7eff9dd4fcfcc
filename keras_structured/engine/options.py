"""Solver settings: one frozen :class:`SolverOptions`, validated once.

Every entry point that runs SparseMAP (:func:`keras_structured.engine.solve`,
:func:`keras_structured.ops.sparsemap`, the SparseMAP layers and losses) takes an
``options=SolverOptions(...)`` argument, and keeps ``method``, ``tol``, ``max_iter`` and
``exact_jacobian`` as keyword shortcuts. :func:`resolve_options` turns either form into
one ``SolverOptions``: the checks run in its ``__post_init__`` and nowhere else, and an
options object handed down from a layer to the op and the engine is not checked again.

The rules (the same everywhere):

* ``method``: one of :data:`METHODS`;
* ``tol``: a finite number ``>= 0`` (0 asks for the exact optimum);
* ``max_iter``: an integer ``>= 1``: MAP calls after the warm start. At least one, so
  that every solve takes a step; with none, the active set would return its warm
  start, a single structure, whatever the scores;
* ``exact_jacobian``: True or False.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from keras_structured.engine.active_set import ActiveSetSolver
from keras_structured.engine.frank_wolfe import FrankWolfeSolver
from keras_structured.validation import check_bool, check_integer, check_number, check_one_of

__all__ = ["DEFAULT_MAX_ITER", "METHODS", "SolverOptions", "SolverSettings", "resolve_options"]

METHODS = {
    "active_set": ActiveSetSolver,
    "frank_wolfe": functools.partial(FrankWolfeSolver, variant="vanilla"),
    "away_frank_wolfe": functools.partial(FrankWolfeSolver, variant="away"),
    "pairwise_frank_wolfe": functools.partial(FrankWolfeSolver, variant="pairwise"),
}

# Default limit on MAP calls. Exact termination (with the face certificate) on trees of n
# words with N(0, 1) scores takes about 3n calls at n = 100 (283-334), 3.5n at n = 150
# (510-686), 4n at n = 200 (about 800) and 4.3n at n = 300 (1,267-1,316); scores of trained
# models need far fewer. The limit covers dense scores up to about 500 words.
DEFAULT_MAX_ITER = 2500


@dataclasses.dataclass(frozen=True)
class SolverOptions:
    """Settings of the SparseMAP solvers, checked once when created.

    Attributes:
        method: ``"active_set"`` (default), ``"frank_wolfe"``, ``"away_frank_wolfe"`` or
            ``"pairwise_frank_wolfe"``.
        tol: stop when the Wolfe gap is at most ``tol * max(1, |objective|)``; a finite
            number ``>= 0``.
        max_iter: maximum number of MAP calls after the warm start, an integer ``>= 1``.
        exact_jacobian: (active set) go on past ``tol`` to the active set's finite
            termination, so that the Jacobian is exact (see
            :func:`keras_structured.engine.solve`); False stops at ``tol``.

    Raises:
        ValueError: when created with a setting that breaks the rules above (the message
            names it: ``"... Received: max_iter=0"``).

    Example:
        >>> options = SolverOptions(tol=1e-8)
        >>> options.max_iter, options.exact_jacobian
        (2500, True)
        >>> SolverOptions(max_iter=0)
        Traceback (most recent call last):
        ...
        ValueError: max_iter must be an integer >= 1. Received: max_iter=0
    """

    method: str = "active_set"
    tol: float = 1e-6
    max_iter: int = DEFAULT_MAX_ITER
    exact_jacobian: bool = True

    def __post_init__(self) -> None:
        # Frozen: the normalised values (float tol, int max_iter) are set through object.
        object.__setattr__(self, "method", check_one_of("method", self.method, METHODS))
        object.__setattr__(self, "tol", check_number("tol", self.tol, minimum=0))
        object.__setattr__(self, "max_iter", check_integer("max_iter", self.max_iter, minimum=1))
        object.__setattr__(self, "exact_jacobian", check_bool("exact_jacobian", self.exact_jacobian))

    def get_config(self) -> dict:
        """The settings as a dict of plain values (``SolverOptions(**config)`` rebuilds them)."""
        return dataclasses.asdict(self)


class SolverSettings:
    """Read-only ``method``, ``tol``, ``max_iter`` and ``exact_jacobian`` attributes from a
    ``self.options`` :class:`SolverOptions` (for the layers and losses that hold one)."""

    options: SolverOptions

    @property
    def method(self) -> str:
        return self.options.method

    @property
    def tol(self) -> float:
        return self.options.tol

    @property
    def max_iter(self) -> int:
        return self.options.max_iter

    @property
    def exact_jacobian(self) -> bool:
        return self.options.exact_jacobian


_DEFAULT = SolverOptions()


def resolve_options(
    options: SolverOptions | None = None,
    *,
    method: str | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
    exact_jacobian: bool | None = None,
) -> SolverOptions:
    """The :class:`SolverOptions` of a call, from ``options`` or the keyword shortcuts.

    A keyword left at None is not given. Keywords alone build (and check) new options
    over the defaults; ``options`` alone is returned as it is, without a second check;
    a keyword given with ``options`` must agree with it.

    Args:
        options: a :class:`SolverOptions`, or None.
        method: shortcut for ``SolverOptions.method``.
        tol: shortcut for ``SolverOptions.tol``.
        max_iter: shortcut for ``SolverOptions.max_iter``.
        exact_jacobian: shortcut for ``SolverOptions.exact_jacobian``.

    Returns:
        The options to solve with.

    Raises:
        ValueError: if ``options`` is not a ``SolverOptions``, if a setting breaks the
            rules of :class:`SolverOptions`, or if a keyword disagrees with ``options``.

    Example:
        >>> resolve_options(tol=1e-8) == SolverOptions(tol=1e-8)
        True
        >>> try:
        ...     resolve_options(SolverOptions(tol=1e-8), tol=1e-4)
        ... except ValueError as error:
        ...     print(str(error).split("Received: ")[1])
        options.tol=1e-08, tol=0.0001
    """
    given = {
        key: value
        for key, value in (
            ("method", method),
            ("tol", tol),
            ("max_iter", max_iter),
            ("exact_jacobian", exact_jacobian),
        )
        if value is not None
    }
    if options is None:
        return SolverOptions(**given) if given else _DEFAULT
    if not isinstance(options, SolverOptions):
        raise ValueError(f"options must be a SolverOptions or None. Received: options={options!r}")
    conflicts = [
        f"options.{key}={getattr(options, key)!r}, {key}={value!r}"
        for key, value in given.items()
        if not _same(value, getattr(options, key))
    ]
    if conflicts:
        raise ValueError(
            "Pass each solver setting either in options or as a keyword, not both with "
            f"different values. Received: {'; '.join(conflicts)}"
        )
    return options


def _same(value, setting) -> bool:
    """Whether a keyword ``value`` agrees with a checked ``setting`` (``1`` is not ``True``)."""
    if isinstance(value, (bool, np.bool_)) != isinstance(setting, bool):
        return False
    try:
        return bool(value == setting)
    except (TypeError, ValueError):  # e.g. an array, which no setting equals
        return False
