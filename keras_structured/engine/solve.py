"""Batched SparseMAP solver driver (framework-free, numpy).

Solves, for every example ``b`` of a batch,

    max_{(u, v) in M}  <eta_u[b], u> + <eta_v[b], v> - ||u||^2 / 2,

where ``M`` is the marginal polytope of a :class:`Structure`. All examples advance
in lockstep so that each round makes one batched MAP-oracle call.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import warnings

import numpy as np

from keras_structured.engine.compiled_active_set import CONVERGED, solve_compiled
from keras_structured.engine.forbidden import check_allowed, finite_mass, replace_forbidden
from keras_structured.engine.jacobian import Support, jacobian_product, pad_supports
from keras_structured.engine.options import DEFAULT_MAX_ITER, METHODS, SolverOptions, resolve_options
from keras_structured.engine.structure import Structure
from keras_structured.engine.support import ExampleSolution

__all__ = [
    "DEFAULT_MAX_ITER",
    "METHODS",
    "SolverOptions",
    "SparseMAPConvergenceWarning",
    "SparseMAPSolution",
    "solve",
]

# Packages whose frames a convergence warning skips to point at the user's code.
_INTERNAL_PACKAGES = frozenset({"keras_structured", "tensorflow", "keras", "numpy"})


class SparseMAPConvergenceWarning(RuntimeWarning):
    """A SparseMAP solver stopped at ``max_iter`` before reaching its tolerance."""


@dataclasses.dataclass
class SparseMAPSolution:
    """Solutions of a batch of SparseMAP problems.

    Attributes:
        u: ``(batch, *u_shape)`` unary marginals.
        v: ``(batch, *v_shape)`` higher-order marginals.
        structures: per example, the codes of the active structures ``(k_b, ...)``.
        weights: per example, their weights ``(k_b,)`` (nonnegative, summing to 1).
        objective: ``(batch,)`` objective values.
        gap: ``(batch,)`` final Wolfe (duality) gaps, an upper bound on suboptimality.
        map_calls: ``(batch,)`` MAP-oracle calls, the warm start included.
        converged: ``(batch,)`` whether the gap reached the tolerance: for the active set,
            the weights are feasible and the gap of the returned point itself, from the MAP
            structure at its own scores, is at most ``tol * max(1, |objective|)``.
        support: the batched active sets, factors of the Jacobian (see :mod:`.jacobian`).
        history: per example ``(map_calls, 2)`` arrays of (objective, gap), if recorded.
    """

    u: np.ndarray
    v: np.ndarray
    structures: list
    weights: list
    objective: np.ndarray
    gap: np.ndarray
    map_calls: np.ndarray
    converged: np.ndarray
    support: Support
    history: list | None = None

    def jacobian_product(self, x_u: np.ndarray, x_v: np.ndarray | None = None):
        """Jacobian of ``(u, v)`` w.r.t. ``(eta_u, eta_v)`` times ``(x_u, x_v)``.

        The Jacobian is symmetric, so this is also the vector-Jacobian product.
        Returns arrays shaped like ``u`` and ``v``.
        """
        batch = self.u.shape[0]
        x_v = np.zeros_like(self.v) if x_v is None else x_v
        j_u, j_v = jacobian_product(
            self.support,
            x_u.reshape(batch, math.prod(self.u.shape[1:])),
            x_v.reshape(batch, math.prod(self.v.shape[1:])),
        )
        return j_u.reshape(self.u.shape), j_v.reshape(self.v.shape)


def solve(
    structure: Structure,
    eta_u,
    eta_v=None,
    *,
    lengths=None,
    options: SolverOptions | None = None,
    method: str | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
    exact_jacobian: bool | None = None,
    record_history: bool = False,
    compiled: bool = True,
) -> SparseMAPSolution:
    """Solve a batch of SparseMAP problems over ``structure``.

    Args:
        structure: the :class:`Structure` (MAP oracle + indicator vectors).
        eta_u: ``(batch, *u_shape)`` unary scores. ``-inf`` forbids a part: no
            structure in the solution contains it (an error if none avoids it).
        eta_v: ``(batch, *v_shape)`` higher-order scores (``-inf`` allowed as for
            ``eta_u``); None when the structure has no higher-order part.
        lengths: optional per-example sizes of padded inputs (integers, shape
            ``(batch,)`` or ``(batch, d)`` depending on the structure); padded parts
            of ``u`` and ``v`` are exactly zero and get zero gradient.
        options: the solver settings, a :class:`SolverOptions` (default:
            ``SolverOptions()``). The four arguments below are shortcuts for its fields;
            None leaves a field to ``options`` (a keyword that disagrees with
            ``options`` is an error).
        method: ``"active_set"`` (default), ``"frank_wolfe"``, ``"away_frank_wolfe"``
            or ``"pairwise_frank_wolfe"``.
        tol: stop when the Wolfe gap is at most ``tol * max(1, |objective|)``; a finite
            number >= 0 (default 1e-6).
        max_iter: maximum number of MAP calls after the warm start, an integer >= 1
            (default 2500).
        exact_jacobian: (active set) once the gap is within ``tol``, go on to the
            active set's finite termination: the MAP structure adds nothing to the
            support (it is active or in the affine hull of the active structures),
            or its gap is rounding error. The support then spans the solution's face
            and the Jacobian is exact. False stops at ``tol``: a few MAP calls fewer
            (about 15% on trees), but the Jacobian is built from a support that may
            miss structures of small weight, and its products can be off by tens of
            percent. The Frank-Wolfe methods ignore it: their supports are
            approximate, and so are their Jacobians.
        record_history: keep (objective, gap) at every MAP call (Python solvers only).
        compiled: use the compiled active-set kernel when the structure has a
            compiled oracle (``method="active_set"``, no history); False forces the
            Python reference implementation.

    Returns:
        A :class:`SparseMAPSolution`. Problems that hit ``max_iter``, or (active set) stall
        at a point they cannot improve to ``tol`` in float64, keep their last feasible
        point, get ``converged=False`` and trigger one :class:`SparseMAPConvergenceWarning`.

    Raises:
        ValueError: for settings that break the rules of :class:`SolverOptions`, a
            keyword that disagrees with ``options``, or scores, lengths or shapes that
            do not fit the structure.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> solve(SimplexStructure(), np.array([[1.0, 0.5, -1.0]])).u
        array([[0.75, 0.25, 0.  ]])
        >>> solve(SimplexStructure(), np.array([[1.0, 0.5, -1.0]]), options=SolverOptions(tol=1e-8)).u
        array([[0.75, 0.25, 0.  ]])
    """
    options = resolve_options(
        options, method=method, tol=tol, max_iter=max_iter, exact_jacobian=exact_jacobian
    )
    method, tol, max_iter = options.method, options.tol, options.max_iter
    exact_jacobian = options.exact_jacobian
    eta_u = np.asarray(eta_u, dtype=np.float64)
    if eta_u.ndim < 1:
        raise ValueError(f"eta_u needs a leading batch dimension. Received: eta_u.shape={eta_u.shape}")
    batch, u_shape = eta_u.shape[0], eta_u.shape[1:]
    if eta_v is None:
        eta_v = np.zeros((batch,) + tuple(0 if d is None else d for d in structure.v_shape(u_shape)))
    eta_v = np.asarray(eta_v, dtype=np.float64)
    if eta_v.shape[0] != batch:
        raise ValueError(
            f"eta_u and eta_v must have the same batch size. "
            f"Received: eta_u.shape={eta_u.shape}, eta_v.shape={eta_v.shape}"
        )
    v_shape = eta_v.shape[1:]
    structure.validate_shapes(u_shape, v_shape)
    if lengths is not None:
        lengths = np.asarray(lengths)
        if lengths.shape[:1] != (batch,) or not np.issubdtype(lengths.dtype, np.integer):
            raise ValueError(
                f"lengths must be integers with a leading batch dimension of {batch}. "
                f"Received: lengths.shape={lengths.shape}, dtype={lengths.dtype}"
            )
        structure.validate_lengths(lengths, u_shape)
    if batch == 0:
        return _empty_solution(u_shape, v_shape)
    flat_u, flat_v = eta_u.reshape(batch, -1), eta_v.reshape(batch, -1)
    mass = finite_mass(flat_u, flat_v)
    flat_u, forbidden_u = replace_forbidden("eta_u", flat_u, mass)
    flat_v, forbidden_v = replace_forbidden("eta_v", flat_v, mass)
    eta_u, eta_v = flat_u.reshape(eta_u.shape), flat_v.reshape(eta_v.shape)

    oracle = None
    if compiled and method == "active_set" and not record_history:
        oracle = structure.compiled_oracle(u_shape, v_shape)
    if oracle is not None:
        examples = [
            ExampleSolution(*result[:-1], result.status == CONVERGED)
            for result in solve_compiled(oracle, flat_u, flat_v, lengths, tol, max_iter, exact_jacobian)
        ]
        history = None
    else:
        shapes = (u_shape, v_shape)
        solver_class = METHODS[method]
        if method == "active_set":
            solver_class = functools.partial(solver_class, exact=exact_jacobian)
        solvers = _solve_in_python(
            structure, solver_class, flat_u, flat_v, lengths, shapes, tol, max_iter, record_history
        )
        examples = [s.result() for s in solvers]
        history = [np.array(s.history).reshape(-1, 2) for s in solvers] if record_history else None
    if forbidden_u.any() or forbidden_v.any():
        check_allowed(examples, forbidden_u, forbidden_v)
    return _collect(examples, flat_u, flat_v, u_shape, v_shape, method, tol, max_iter, history)


def _solve_in_python(structure, solver_class, flat_u, flat_v, lengths, shapes, tol, max_iter, record_history):
    """Run per-example Python solvers in lockstep: one batched MAP call per round."""
    u_shape, v_shape = shapes
    batch = flat_u.shape[0]
    eta_v = flat_v.reshape((batch,) + tuple(v_shape))
    codes = structure.map(flat_u.reshape((batch,) + tuple(u_shape)), eta_v, lengths)
    m, n = structure.indicators(codes, u_shape, v_shape, lengths)
    m, n = m.reshape(batch, -1), n.reshape(batch, -1)
    solvers = [
        solver_class(flat_u[b], flat_v[b], m[b], n[b], codes[b], tol, record_history) for b in range(batch)
    ]
    for _ in range(max_iter):
        pending = [b for b in range(batch) if not solvers[b].done]
        if not pending:
            break
        scores_u = np.stack([solvers[b].map_scores() for b in pending]).reshape((len(pending),) + u_shape)
        pending_lengths = None if lengths is None else lengths[pending]
        codes = structure.map(scores_u, eta_v[pending], pending_lengths)
        m, n = structure.indicators(codes, u_shape, v_shape, pending_lengths)
        m, n = m.reshape(len(pending), -1), n.reshape(len(pending), -1)
        for j, b in enumerate(pending):
            solvers[b].step(m[j], n[j], codes[j])
    return solvers


def _empty_solution(u_shape, v_shape) -> SparseMAPSolution:
    """The solution of a batch of no problems (an empty shard of a distributed batch)."""
    empty = np.zeros(0)
    return SparseMAPSolution(
        u=np.zeros((0,) + tuple(u_shape)),
        v=np.zeros((0,) + tuple(v_shape)),
        structures=[],
        weights=[],
        objective=empty,
        gap=empty,
        map_calls=np.zeros(0, np.int64),
        converged=np.zeros(0, bool),
        support=Support(*(np.zeros((0, 0, 0), dtype) for dtype in (np.int64, float, np.int64, float, float))),
    )


def _warning_stacklevel() -> int:
    """Stack level of the first frame outside keras_structured, TensorFlow and Keras:
    the user's call, for warnings raised deep inside an op."""
    frame, level = sys._getframe(1), 1
    while (
        frame.f_back is not None and frame.f_globals.get("__name__", "").split(".")[0] in _INTERNAL_PACKAGES
    ):
        frame, level = frame.f_back, level + 1
    return level


def _collect(examples, flat_u, flat_v, u_shape, v_shape, method, tol, max_iter, history) -> SparseMAPSolution:
    batch = len(examples)
    converged = np.array([e.converged for e in examples], dtype=bool)
    if not converged.all():
        warnings.warn(
            f"SparseMAP ({method}) did not finish {np.count_nonzero(~converged)} of {batch} "
            f"problems within max_iter={max_iter} MAP calls: it stopped before reaching "
            f"tol={tol}, or (active set) before the final support that the exact Jacobian "
            "needs. Their last feasible points are returned and flagged converged=False. "
            "Raise max_iter (or tol) in the call or layer that solves them.",
            SparseMAPConvergenceWarning,
            stacklevel=_warning_stacklevel(),
        )
    u = np.stack([e.u for e in examples])
    v = np.stack([e.v for e in examples])
    return SparseMAPSolution(
        u=u.reshape((batch,) + tuple(u_shape)),
        v=v.reshape((batch,) + tuple(v_shape)),
        structures=[e.codes for e in examples],
        weights=[e.weights for e in examples],
        objective=np.array([e.objective for e in examples]),
        gap=np.array([e.gap for e in examples]),
        map_calls=np.array([e.map_calls for e in examples]),
        converged=converged,
        support=pad_supports(examples),
        history=history,
    )
