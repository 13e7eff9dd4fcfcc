"""Factor graphs of LP-SparseMAP: binary variables, the factors over them, their scores.

A :class:`FactorGraph` has ``num_variables`` variables ``u`` (relaxed to ``[0, 1]``) and
factors, each over a subset of them:

* a :class:`StructureFactor`: any engine :class:`~keras_structured.engine.Structure`
  (sequence, dependency tree, matching, budget, simplex, :class:`CustomStructure`) whose
  unary parts ``m_s`` are the variables of an index array of the structure's ``u_shape``,
  and whose higher-order parts ``n_s`` (shape ``v_shape``) belong to the factor alone;
* a logic factor (:mod:`~keras_structured.engine.lp.logic`).

Scores are ``eta_u`` (one per variable) and, per factor, ``eta_v`` on its additional parts
(``factor.v_shape()``; empty for most logic factors). LP-SparseMAP solves

    max_{u, (x_f, z_f)}  <eta_u, u> + sum_f <eta_v[f], z_f> - ||u||^2 / 2
    s.t.  (x_f, z_f) in M_f  and  x_f = u[variables_f]  for every factor f,

the SparseMAP problem over the *local polytope* (Niculae and Martins, ICML 2020).
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from keras_structured.engine.structure import Structure, structure_from_config, structure_to_config
from keras_structured.validation import check_integer

__all__ = ["Factor", "FactorGraph", "StructureFactor", "check_variables", "factor_from_config"]

_REGISTRY: dict[str, type] = {}


def check_variables(variables, owner: str, ndim: int | None = None, minimum: int = 1) -> np.ndarray:
    """``variables`` as an int64 array of distinct nonnegative indices, or ``ValueError``.

    Args:
        variables: array-like of variable indices.
        owner: the factor's name, for the message.
        ndim: the required number of dimensions, or None for any.
        minimum: the fewest variables allowed.

    Example:
        >>> check_variables([[0, 1], [2, 3]], "StructureFactor").shape
        (2, 2)
    """
    array = np.asarray(variables)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{owner} variables must be integer indices. Received: variables={array.tolist()}")
    array = array.astype(np.int64)
    if (ndim is not None and array.ndim != ndim) or array.size < minimum:
        shape = "any shape" if ndim is None else f"{ndim} dimension(s)"
        raise ValueError(
            f"{owner} needs at least {minimum} variable(s), in an array of {shape}. "
            f"Received: variables={array.tolist()}"
        )
    if np.any(array < 0) or np.unique(array).size != array.size:
        raise ValueError(
            f"{owner} variables must be distinct nonnegative indices. Received: variables={array.tolist()}"
        )
    return array


class Factor:
    """Base class of the factors: variables (an index array) and the shape of extra parts.

    Subclasses are registered by class name for :func:`factor_from_config`.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        earlier = _REGISTRY.get(cls.__name__)
        if earlier is not None and earlier.__module__ != cls.__module__:
            warnings.warn(
                f"Factor class name {cls.__name__!r} of module {cls.__module__!r} replaces the one of "
                f"module {earlier.__module__!r}.",
                stacklevel=2,
            )
        _REGISTRY[cls.__name__] = cls

    def __init__(self, variables: np.ndarray):
        self.variables = variables

    def v_shape(self) -> tuple[int, ...]:
        """Shape of the factor's additional parts ``z`` (and of its ``eta_v``)."""
        raise NotImplementedError

    def get_config(self) -> dict:
        """Constructor arguments, for serialization."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(variables={self.variables.tolist()})"


class StructureFactor(Factor):
    """An engine structure over some variables of the graph.

    The structure's unary parts are the graph variables ``variables`` (an index array of
    the structure's ``u_shape``: ``variables[i, j]`` is the variable of part ``[i, j]``); its
    higher-order parts (shape ``structure.v_shape(u_shape)``, e.g. a sequence's
    transitions) are the factor's additional parts, scored by its ``eta_v``.

    Args:
        structure: a :class:`~keras_structured.engine.Structure`.
        variables: integer array of distinct variable indices, shaped like the structure's
            unary scores.

    Example:
        >>> from keras_structured.engine import SequenceStructure
        >>> factor = StructureFactor(SequenceStructure(), np.arange(6).reshape(3, 2))
        >>> factor.v_shape()
        (2, 2, 2)
    """

    def __init__(self, structure: Structure, variables):
        if not isinstance(structure, Structure):
            raise ValueError(f"structure must be a Structure. Received: structure={structure!r}")
        super().__init__(check_variables(variables, "StructureFactor"))
        self.structure = structure
        try:
            self._v_shape = tuple(int(d) for d in structure.v_shape(self.variables.shape))
        except (ValueError, TypeError, IndexError) as error:  # a shape the structure cannot read
            raise ValueError(
                "StructureFactor variables must be an index array shaped like one example's unary "
                f"scores of {type(structure).__name__}. Received: variables.shape={self.variables.shape}"
            ) from error
        structure.validate_shapes(self.variables.shape, self._v_shape)

    def v_shape(self) -> tuple[int, ...]:
        return self._v_shape

    def lengths(self, mask: np.ndarray) -> np.ndarray | None:
        """The structure's per-example lengths under ``mask`` ``(batch, num_variables)``, True
        for the variables present (:meth:`~keras_structured.engine.Structure.lengths_from_mask`),
        or None when all of the factor's variables are present or the structure takes no
        lengths."""
        present = mask[:, self.variables]
        return None if present.all() else self.structure.lengths_from_mask(present)

    @functools.cached_property
    def compiled_oracle(self):
        """The structure's :class:`~keras_structured.engine.compiled_oracle.CompiledOracle`
        at the factor's shapes, or None (its subproblems then run the Python active set)."""
        return self.structure.compiled_oracle(self.variables.shape, self._v_shape)

    def get_config(self) -> dict:
        return {"structure": structure_to_config(self.structure), "variables": self.variables.tolist()}

    @classmethod
    def from_config(cls, config: dict) -> StructureFactor:
        return cls(structure_from_config(config["structure"]), np.array(config["variables"], dtype=np.int64))

    def __repr__(self) -> str:
        return f"StructureFactor({type(self.structure).__name__}, variables.shape={self.variables.shape})"


def factor_to_config(factor: Factor) -> dict:
    """Serializable description of a factor: class name and constructor arguments."""
    return {"class_name": type(factor).__name__, "config": factor.get_config()}


def factor_from_config(config: dict) -> Factor:
    """Rebuild a factor from :func:`factor_to_config` output."""
    cls = _REGISTRY.get(config.get("class_name"))
    if cls is None:
        raise ValueError(f"Unknown factor class. Received: class_name={config.get('class_name')!r}")
    if hasattr(cls, "from_config"):
        return cls.from_config(config["config"])
    return cls(**config["config"])


class FactorGraph:
    """A factor graph over binary variables, checked once when created.

    Args:
        num_variables: number of variables, a positive integer.
        factors: the factors (:class:`StructureFactor` or logic factors); every variable must
            belong to at least one.

    Raises:
        ValueError: for a factor that is not a :class:`Factor`, a variable index out of
            range, a variable in no factor, or logic factors that no point of the local
            polytope satisfies (checked by a linear program over their inequalities; a
            contradiction that needs a structure factor to show is found only by the solver,
            which then stops unconverged).

    Example: tags of 3 words (2 labels) with at most one word tagged 1:

        >>> from keras_structured.engine import SequenceStructure
        >>> from keras_structured.engine.lp.logic import AtMostOne
        >>> tags = np.arange(6).reshape(3, 2)
        >>> graph = FactorGraph(6, [StructureFactor(SequenceStructure(), tags), AtMostOne(tags[:, 1])])
        >>> graph.degrees.tolist()
        [1, 2, 1, 2, 1, 2]
    """

    def __init__(self, num_variables: int, factors):
        from keras_structured.engine.lp.logic import LogicFactor

        self.num_variables = check_integer("num_variables", num_variables, minimum=1)
        if isinstance(factors, Factor) or not hasattr(factors, "__iter__"):
            raise ValueError(f"factors must be a list of factors. Received: factors={factors!r}")
        self.factors = list(factors)
        if not self.factors:
            raise ValueError(f"A factor graph needs at least one factor. Received: factors={factors!r}")
        for i, factor in enumerate(self.factors):
            # The solver has a subproblem for these two kinds only: a new factor subclasses one.
            if not isinstance(factor, (StructureFactor, LogicFactor)):
                raise ValueError(
                    f"factors[{i}] must be a Factor: a StructureFactor, a LogicFactor or an instance "
                    f"of a subclass of these. Received: factors[{i}]={factor!r}"
                )
            if factor.variables.max() >= self.num_variables:
                raise ValueError(
                    f"factors[{i}] ({factor!r}) uses a variable index >= num_variables={self.num_variables}. "
                    f"Received: max index={int(factor.variables.max())}"
                )
        #: Per factor, its flat variable indices (the order of ``x_f``).
        self.links = [factor.variables.ravel() for factor in self.factors]
        #: Per variable, the number of factors it belongs to.
        self.degrees = np.bincount(np.concatenate(self.links), minlength=self.num_variables)
        orphans = np.flatnonzero(self.degrees == 0)
        if orphans.size:
            raise ValueError(
                "Every variable must belong to a factor (LP-SparseMAP has no polytope for the others). "
                f"Received: variables in no factor={orphans.tolist()}"
            )
        #: Per factor, the shape of its additional parts.
        self.v_shapes = [factor.v_shape() for factor in self.factors]
        #: Where each factor's additional parts lie in the flat ``(v_size,)`` vector of all of
        #: them (in factor order): ``v_offsets[f]:v_offsets[f + 1]``.
        self.v_offsets = np.concatenate([[0], np.cumsum([math.prod(s) for s in self.v_shapes])]).astype(int)
        #: The number of additional parts of all factors together.
        self.v_size = int(self.v_offsets[-1])
        self._check_logic_feasible()

    def _check_logic_feasible(self) -> None:
        from keras_structured.engine.lp.logic import LogicFactor

        logic = [(i, f) for i, f in enumerate(self.factors) if isinstance(f, LogicFactor)]
        if not logic:
            return
        from scipy.optimize import linprog

        z_sizes = [int(np.prod(self.v_shapes[i])) for i, _ in logic]
        offsets = np.concatenate([[self.num_variables], self.num_variables + np.cumsum(z_sizes)])
        rows, bounds, equalities = [], [], []
        for (i, factor), start, size in zip(logic, offsets[:-1], z_sizes, strict=True):
            a_x, a_z, b, equality = factor.inequalities()
            block = np.zeros((b.size, offsets[-1]))
            block[:, self.links[i]] = a_x
            block[:, start : start + size] = a_z
            rows.append(block)
            bounds.append(b)
            equalities.append(equality)
        matrix, bounds, equality = np.vstack(rows), np.concatenate(bounds), np.concatenate(equalities)
        result = linprog(
            np.zeros(offsets[-1]),
            A_ub=matrix[~equality] if (~equality).any() else None,
            b_ub=bounds[~equality] if (~equality).any() else None,
            A_eq=matrix[equality] if equality.any() else None,
            b_eq=bounds[equality] if equality.any() else None,
            bounds=(None, None),
            method="highs",
        )
        if result.status == 2:
            raise ValueError(
                "The logic factors contradict each other: no point of [0, 1]^num_variables satisfies "
                f"them all. Received: factors={[f for _, f in logic]!r}"
            )

    def check_scores(self, eta_u, eta_v=None) -> tuple[np.ndarray, list[np.ndarray]]:
        """The scores as float64: ``eta_u`` ``(num_variables,)`` and one flat array per factor.

        Args:
            eta_u: ``(num_variables,)`` variable scores.
            eta_v: None (zeros), or a sequence with one entry per factor: an array of the
                factor's ``v_shape()``, or None for zeros.

        Raises:
            ValueError: for scores of the wrong size or non-finite scores.
        """
        eta_u = np.asarray(eta_u, dtype=np.float64)
        if eta_u.shape != (self.num_variables,):
            raise ValueError(
                f"eta_u must have shape ({self.num_variables},), one score per variable. "
                f"Received: eta_u.shape={eta_u.shape}"
            )
        if eta_v is None:
            eta_v = [None] * len(self.factors)
        if len(eta_v) != len(self.factors):
            raise ValueError(
                f"eta_v must hold one entry per factor ({len(self.factors)}). "
                f"Received: len(eta_v)={len(eta_v)}"
            )
        flat = []
        for i, (scores, shape) in enumerate(zip(eta_v, self.v_shapes, strict=True)):
            scores = np.zeros(shape) if scores is None else np.asarray(scores, dtype=np.float64)
            if scores.shape != shape:
                raise ValueError(
                    f"eta_v[{i}] must have the shape {shape} of the additional parts of factor {i} "
                    f"({self.factors[i]!r}). Received: eta_v[{i}].shape={scores.shape}"
                )
            flat.append(scores.ravel())
        for name, scores in [("eta_u", eta_u)] + [(f"eta_v[{i}]", s) for i, s in enumerate(flat)]:
            if not np.isfinite(scores).all():
                raise ValueError(f"{name} must be finite. Received: {name}={scores.tolist()}")
        return eta_u, flat

    def split_additional(self, flat) -> list[np.ndarray]:
        """Per factor, its additional parts (shape ``(*leading, *v_shape)``) from the flat
        ``(*leading, v_size)`` vector of all of them, in factor order.

        Example:
            >>> from keras_structured.engine.lp.logic import Pair, Xor
            >>> graph = FactorGraph(3, [Pair(0, 1), Xor([0, 1, 2]), Pair(1, 2)])
            >>> [part.tolist() for part in graph.split_additional(np.array([0.5, -1.0]))]
            [[0.5], [], [-1.0]]
        """
        flat = np.asarray(flat)
        if flat.shape[-1:] != (self.v_size,):
            raise ValueError(
                f"The additional parts of this graph form a vector of size {self.v_size}. "
                f"Received: shape={flat.shape}"
            )
        leading = flat.shape[:-1]
        return [
            flat[..., start:end].reshape(leading + shape)
            for start, end, shape in zip(self.v_offsets[:-1], self.v_offsets[1:], self.v_shapes, strict=True)
        ]

    def additional_parts(self, u, present=None) -> list[np.ndarray]:
        """The additional parts of the vertex of the local polytope whose variables are ``u``.

        A binary ``u`` is a vertex when every factor allows it: its variables are the unary
        parts of a structure of a :class:`StructureFactor` (whose higher-order parts ``n_s``
        are then the factor's parts), and satisfy each logic factor (a :class:`Pair`'s part
        is the product of its variables). This gives the gold ``v`` of a gold ``u``. Each
        factor finds its vertex by its MAP at scores ``2 u - 1`` (the best structure is the
        one whose unary parts are ``u``, if there is one).

        Args:
            u: ``(num_variables,)`` zeros and ones.
            present: None, or ``(num_variables,)`` booleans, False for variables the example
                lacks (zeros in ``u``; structure factors over them take the lengths that leave
                them out, as in :func:`~keras_structured.engine.lp.lp_sparsemap_batch`).

        Returns:
            Per factor, its additional parts (shape ``factor.v_shape()``), float64.

        Raises:
            ValueError: for ``u`` of the wrong shape, not binary, or that a factor does not allow.

        Example:
            >>> from keras_structured.engine.lp.logic import AtMostOne, Pair
            >>> graph = FactorGraph(3, [Pair(0, 1), AtMostOne([1, 2])])
            >>> [part.tolist() for part in graph.additional_parts([1, 1, 0])]
            [[1.0], []]
        """
        from keras_structured.engine.lp.logic import LogicFactor

        u = np.asarray(u, dtype=np.float64)
        if u.shape != (self.num_variables,) or not np.all((u == 0) | (u == 1)):
            raise ValueError(
                f"A vertex of the local polytope has {self.num_variables} variables, each 0 or 1. "
                f"Received: u={u.tolist()}"
            )
        if present is not None:
            present = np.asarray(present)
            if present.shape != u.shape or present.dtype != bool:
                raise ValueError(
                    f"present must hold {self.num_variables} booleans, one per variable. "
                    f"Received: present={present.tolist()}"
                )
        parts = []
        for i, (factor, link, shape) in enumerate(zip(self.factors, self.links, self.v_shapes, strict=True)):
            x = u[link]
            if isinstance(factor, LogicFactor):
                found, part = factor.map(2.0 * x - 1.0, np.zeros(math.prod(shape)))
            else:
                u_shape = factor.variables.shape
                structure = factor.structure
                lengths = None if present is None else factor.lengths(present[None])
                scores = (2.0 * x - 1.0).reshape((1,) + u_shape)
                codes = structure.map(scores, np.zeros((1,) + shape), lengths)
                found, part = (a[0] for a in structure.indicators(codes, u_shape, shape, lengths))
            if not np.array_equal(np.ravel(found), x):
                raise ValueError(
                    f"The variables {link.tolist()} of factors[{i}] ({factor!r}) take values that the "
                    f"factor does not allow. Received: u[variables]={x.tolist()}"
                )
            parts.append(np.asarray(part, dtype=np.float64).reshape(shape))
        return parts

    def get_config(self) -> dict:
        """``{"num_variables": ..., "factors": [...]}``, plain values (structures by config)."""
        return {"num_variables": self.num_variables, "factors": [factor_to_config(f) for f in self.factors]}

    @classmethod
    def from_config(cls, config: dict) -> FactorGraph:
        """Rebuild a graph from :meth:`get_config` output."""
        return cls(config["num_variables"], [factor_from_config(f) for f in config["factors"]])

    def __repr__(self) -> str:
        return f"FactorGraph(num_variables={self.num_variables}, factors={self.factors!r})"
