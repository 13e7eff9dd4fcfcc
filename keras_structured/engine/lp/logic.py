"""Logic factors of LP-SparseMAP: XOR, OR, AtMostOne, Imply, XOR-out, OR-out, AND-out, Budget, Pair.

A logic factor constrains binary variables ``x`` (relaxed to ``[0, 1]``); its marginal
polytope is the convex hull of the assignments it allows, described exactly by a few linear
inequalities. Each factor provides

* :meth:`LogicFactor.project`: ``argmax_{(x, z) in M} <a, x> + <s, z> - ||x||^2 / 2`` in closed
  form (:mod:`~keras_structured.engine.lp.projections`), the factor's ADMM subproblem;
* :meth:`LogicFactor.map`: ``argmax_{(x, z) in M} <a, x> + <s, z>``, a vertex (its MAP oracle);
* :meth:`LogicFactor.inequalities`: ``A_x x + A_z z <= b`` (rows flagged as equalities hold
  with ``=``), which describe ``M`` and, through the rows tight at a point, its face.

Variables may be *negated*: the factor then sees ``w = 1 - x``. In w-space the scores of a
projection become ``1 - a`` (``a x - x^2 / 2 = const + (1 - a) w - w^2 / 2``) and those of
a MAP ``-a``. The factors are as in AD3 (Martins et al., JMLR 2015): Imply is an OR whose
first ``d - 1`` variables are negated, XOR-out an XOR whose last variable is negated, AND-out
an OR-out with every variable negated.

Only :class:`Pair` has additional parts (``z``, the product of its two variables, with a
coupling score).
"""

from __future__ import annotations

import numpy as np

from keras_structured.engine.lp.graph import Factor, check_variables
from keras_structured.engine.lp.projections import project_budget, project_cover, project_or_out, project_pair
from keras_structured.validation import check_bool, check_integer

__all__ = ["AndOut", "AtMostOne", "Budget", "Imply", "LogicFactor", "Or", "OrOut", "Pair", "Xor", "XorOut"]


class LogicFactor(Factor):
    """Base class of the logic factors: subclasses work in w-space (negations applied).

    They implement ``_project_w(c, s)``, ``_map_w(c, s)`` (returning ``(w, z)``) and
    ``_inequalities_w()`` (returning ``(A_w, A_z, b, equality)``); this class turns them into
    x-space methods.

    Args:
        variables: the factor's variable indices, a 1-D integer array.
        negated: optional booleans, one per variable: the factor sees ``1 - x_i``.
    """

    #: Fewest variables the factor takes.
    minimum_size = 1

    def __init__(self, variables, negated=None):
        super().__init__(check_variables(variables, type(self).__name__, ndim=1, minimum=self.minimum_size))
        size = self.variables.size
        negated = np.zeros(size, bool) if negated is None else np.asarray(negated)
        if negated.shape != (size,) or negated.dtype != bool:
            raise ValueError(
                f"negated must hold one boolean per variable ({size}). Received: negated={negated.tolist()}"
            )
        self.negated = negated
        # The negations the factor works with: the user's, flipped where the factor's
        # definition negates (Imply, XOR-out, AND-out).
        self._flipped = negated ^ self._implied_negation(size)
        self._rows = None  # the inequalities, once asked for

    def _implied_negation(self, size: int) -> np.ndarray:
        """Variables that the factor's definition negates (none for the plain factors)."""
        return np.zeros(size, bool)

    def v_shape(self) -> tuple[int, ...]:
        return (0,)

    @property
    def flipped(self) -> np.ndarray:
        """``(d,)`` booleans: the variables the factor sees negated (``w = 1 - x``), by the
        user's ``negated`` and by the factor's definition (Imply, XOR-out, AND-out)."""
        return self._flipped

    def group_key(self) -> tuple:
        """Factors with equal keys (class, size and parameters; the variables and negations
        may differ) project together in one call of :meth:`project_many`."""
        return (type(self), self.variables.size)

    def _flip(self, w: np.ndarray) -> np.ndarray:
        return np.where(self._flipped, 1.0 - w, w)

    def project(self, a: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``argmax_{(x, z) in M} <a, x> + <s, z> - ||x||^2 / 2``, in closed form.

        Args:
            a: ``(..., d)`` scores of the variables (leading axes: independent problems).
            s: ``(..., e)`` scores of the additional parts (empty except for :class:`Pair`).

        Returns:
            ``(x, z)``.
        """
        return self.project_many(a, s, self._flipped)

    def project_many(
        self, a: np.ndarray, s: np.ndarray, flipped: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`project` of several factors of this factor's :meth:`group_key` at once.

        Args:
            a: ``(..., count, d)`` scores of their variables.
            s: ``(..., count, e)`` scores of their additional parts.
            flipped: ``(count, d)``: each factor's :attr:`flipped`.

        Returns:
            ``(x, z)``, shaped like ``(a, s)``.

        Example: ``x_0 xor x_1``, and ``x_0 xor (not x_1)`` (that is, ``x_0 = x_1``):

            >>> flipped = np.array([[False, False], [False, True]])
            >>> Xor([0, 1]).project_many(np.array([[0.9, 0.1], [0.9, 0.1]]), np.zeros((2, 0)), flipped)[0]
            array([[0.9, 0.1],
                   [0.5, 0.5]])
        """
        w, z = self._project_w(np.where(flipped, 1.0 - a, a), s)
        return np.where(flipped, 1.0 - w, w), z

    def map(self, a: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``argmax_{(x, z) in M} <a, x> + <s, z>``: the best allowed assignment.

        Returns:
            ``(x, z)``, binary.
        """
        w, z = self._map_w(np.where(self._flipped, -a, a), s)
        return self._flip(w), z

    def inequalities(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The polytope as ``A_x x + A_z z <= b`` (``=`` where ``equality``).

        With ``w = S x + t`` (``S = diag(+-1)``, ``t`` the negation indicator), rows ``A_w w +
        A_z z <= b`` become ``A_w S x + A_z z <= b - A_w t``.

        Returns:
            ``(A_x (r, d), A_z (r, e), b (r,), equality (r,))``.
        """
        if self._rows is None:  # built once (read-only: callers share them)
            a_w, a_z, b, equality = self._inequalities_w()
            sign = np.where(self._flipped, -1.0, 1.0)
            self._rows = (a_w * sign, a_z, b - a_w @ self._flipped.astype(float), equality)
            for array in self._rows:
                array.setflags(write=False)
        return self._rows

    def get_config(self) -> dict:
        return {"variables": self.variables.tolist(), "negated": self.negated.tolist()}

    def _project_w(self, c, s):
        raise NotImplementedError

    def _map_w(self, c, s):
        raise NotImplementedError

    def _inequalities_w(self):
        raise NotImplementedError


def _no_parts(c: np.ndarray) -> np.ndarray:
    """The empty additional parts of projections of ``c`` ``(..., d)``: ``(..., 0)``."""
    return np.zeros(c.shape[:-1] + (0,))


def _box_rows(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``-w <= 0`` and ``w <= 1``."""
    identity = np.eye(size)
    return np.vstack([-identity, identity]), np.concatenate([np.zeros(size), np.ones(size)])


def _top(c: np.ndarray, k: int, positive: bool) -> np.ndarray:
    """Indicator of the ``k`` largest scores (ties to the lower index), only positive ones if asked."""
    order = np.argsort(-c, kind="stable")[:k]
    chosen = np.zeros(c.size)
    chosen[order] = 1.0
    return chosen * (c > 0) if positive else chosen


class Budget(LogicFactor):
    """At most ``k`` of the variables are on (exactly ``k`` with ``exact=True``).

    Polytope: ``{x in [0, 1]^d : sum(x) <= k}`` (or ``= k``).

    Args:
        variables: 1-D variable indices.
        k: the budget, an integer in ``[1, d]``.
        exact: exactly ``k`` instead of at most ``k``.
        negated: optional booleans, one per variable.

    Example:
        >>> factor = Budget([0, 1, 2], k=2)
        >>> factor.project(np.array([1.0, 0.9, 0.8]), np.zeros(0))[0]
        array([0.76666667, 0.66666667, 0.56666667])
    """

    def __init__(self, variables, k: int, exact: bool = False, negated=None):
        super().__init__(variables, negated)
        self.k = check_integer("k", k, minimum=1)
        if self.k > self.variables.size:
            raise ValueError(
                f"k must be at most the number of variables ({self.variables.size}). Received: k={k}"
            )
        self.exact = check_bool("exact", exact)

    def group_key(self) -> tuple:
        return (*super().group_key(), self.k, self.exact)

    def _project_w(self, c, s):
        return project_budget(c, self.k, self.exact), _no_parts(c)

    def _map_w(self, c, s):
        return _top(c, self.k, positive=not self.exact), np.zeros(0)

    def _inequalities_w(self):
        size = self.variables.size
        box, bounds = _box_rows(size)
        a_w = np.vstack([np.ones((1, size)), box])
        b = np.concatenate([[float(self.k)], bounds])
        equality = np.zeros(b.size, bool)
        equality[0] = self.exact
        return a_w, np.zeros((b.size, 0)), b, equality

    def get_config(self) -> dict:
        return {**super().get_config(), "k": self.k, "exact": self.exact}


class Xor(Budget):
    """Exactly one variable is on. Polytope: the simplex ``{x >= 0, sum(x) = 1}``.

    Example:
        >>> Xor([0, 1, 2]).project(np.array([1.0, 0.5, -1.0]), np.zeros(0))[0]
        array([0.75, 0.25, 0.  ])
    """

    def __init__(self, variables, negated=None):
        super().__init__(variables, k=1, exact=True, negated=negated)

    def get_config(self) -> dict:
        return LogicFactor.get_config(self)


class AtMostOne(Budget):
    """At most one variable is on. Polytope: ``{x >= 0, sum(x) <= 1}``.

    Example:
        >>> AtMostOne([0, 1]).project(np.array([0.3, -0.2]), np.zeros(0))[0]
        array([0.3, 0. ])
    """

    def __init__(self, variables, negated=None):
        super().__init__(variables, k=1, exact=False, negated=negated)

    def get_config(self) -> dict:
        return LogicFactor.get_config(self)


class XorOut(Xor):
    """The last variable is the XOR of the others (at most one of which is on).

    Polytope: ``{x >= 0, sum_{i < d} x_i = x_d <= 1}``, an XOR with the last variable negated.

    Example:
        >>> XorOut([0, 1, 2]).map(np.array([1.0, 2.0, -0.5]), np.zeros(0))[0]
        array([0., 1., 1.])
    """

    minimum_size = 2

    def _implied_negation(self, size: int) -> np.ndarray:
        return np.arange(size) == size - 1


class Or(LogicFactor):
    """At least one variable is on. Polytope: ``{x in [0, 1]^d : sum(x) >= 1}``.

    Example:
        >>> Or([0, 1]).project(np.array([0.2, -0.4]), np.zeros(0))[0]
        array([0.8, 0.2])
    """

    def _project_w(self, c, s):
        return project_cover(c), _no_parts(c)

    def _map_w(self, c, s):
        chosen = (c > 0).astype(float)
        if not chosen.any():
            chosen[np.argmax(c)] = 1.0
        return chosen, np.zeros(0)

    def _inequalities_w(self):
        size = self.variables.size
        box, bounds = _box_rows(size)
        a_w = np.vstack([-np.ones((1, size)), box])
        b = np.concatenate([[-1.0], bounds])
        return a_w, np.zeros((b.size, 0)), b, np.zeros(b.size, bool)


class Imply(Or):
    """``x_1 and ... and x_{d-1}`` implies ``x_d``: an OR whose first ``d - 1`` variables are negated.

    Example:
        >>> Imply([0, 1]).map(np.array([1.0, -0.4]), np.zeros(0))[0]
        array([1., 1.])
    """

    minimum_size = 2

    def _implied_negation(self, size: int) -> np.ndarray:
        return np.arange(size) < size - 1


class OrOut(LogicFactor):
    """The last variable is the OR of the others.

    Polytope: ``{0 <= x_i <= x_d <= 1 (i < d), x_d <= sum_{i < d} x_i}``.

    Example:
        >>> OrOut([0, 1, 2]).project(np.array([0.9, 0.2, 0.1]), np.zeros(0))[0]
        array([0.5, 0.2, 0.5])
    """

    minimum_size = 2

    def _project_w(self, c, s):
        w, y = project_or_out(c[..., :-1], c[..., -1])
        return np.concatenate([w, y[..., None]], axis=-1), _no_parts(c)

    def _map_w(self, c, s):
        inputs = (c[:-1] > 0).astype(float)
        if not inputs.any():
            inputs[np.argmax(c[:-1])] = 1.0
        on = c[-1] + inputs @ c[:-1] > 0
        return (np.append(inputs, 1.0) if on else np.zeros(c.size)), np.zeros(0)

    def _inequalities_w(self):
        inputs = self.variables.size - 1
        below = np.hstack([np.eye(inputs), -np.ones((inputs, 1))])  # w_i - y <= 0
        cover = np.append(-np.ones(inputs), 1.0)[None]  # y - sum(w) <= 0
        nonnegative = np.hstack([-np.eye(inputs), np.zeros((inputs, 1))])
        at_most_one = np.append(np.zeros(inputs), 1.0)[None]  # y <= 1
        a_w = np.vstack([below, cover, nonnegative, at_most_one])
        b = np.concatenate([np.zeros(2 * inputs + 1), [1.0]])
        return a_w, np.zeros((b.size, 0)), b, np.zeros(b.size, bool)


class AndOut(OrOut):
    """The last variable is the AND of the others: an OR-out with every variable negated.

    Example:
        >>> AndOut([0, 1, 2]).map(np.array([1.0, 1.0, -0.5]), np.zeros(0))[0]
        array([1., 1., 1.])
    """

    def _implied_negation(self, size: int) -> np.ndarray:
        return np.ones(size, bool)


class Pair(LogicFactor):
    """Two variables and their product ``z = x_1 x_2``, an additional part with its own score.

    Polytope: ``{z >= 0, z <= x_1, z <= x_2, z >= x_1 + x_2 - 1}``. The score of ``z``
    (``eta_v``, shape ``(1,)``) couples the two variables: positive, it rewards turning
    both on; negative, it penalises it.

    Args:
        first: index of the first variable.
        second: index of the second variable.

    Example:
        >>> x, z = Pair(0, 1).project(np.array([0.2, 0.9]), np.array([1.0]))
        >>> x, z
        (array([1., 1.]), array([1.]))
    """

    def __init__(self, first: int, second: int):
        super().__init__(np.array([first, second]))

    def v_shape(self) -> tuple[int, ...]:
        return (1,)

    def _project_w(self, c, s):
        w1, w2, z = project_pair(c[..., 0], c[..., 1], s[..., 0])
        return np.stack([w1, w2], axis=-1), z[..., None]

    def _map_w(self, c, s):
        vertices = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
        best = vertices[np.argmax(vertices @ np.append(c, s))]
        return best[:2], best[2:]

    def _inequalities_w(self):
        a_w = np.array([[0.0, 0.0], [-1.0, 0.0], [0.0, -1.0], [1.0, 1.0]])
        a_z = np.array([[-1.0], [1.0], [1.0], [-1.0]])
        return a_w, a_z, np.array([0.0, 0.0, 0.0, 1.0]), np.zeros(4, bool)

    def get_config(self) -> dict:
        return {"first": int(self.variables[0]), "second": int(self.variables[1])}
