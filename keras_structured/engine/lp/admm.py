"""LP-SparseMAP by ADMM (AD3 for the QP, Martins et al. 2015; Niculae and Martins, ICML 2020).

The problem of :mod:`~keras_structured.engine.lp.graph` is split exactly into a consensus
variable ``u``, which carries the quadratic term, and one copy ``(x_f, z_f)`` per factor,
which carries the factor's polytope. With multipliers ``lambda_f`` of ``x_f = u[links_f]``
and penalty ``rho``, the augmented Lagrangian is minimised in turn over

* each factor (in parallel): ``argmax_{(x, z) in M_f} <u_f - lambda_f / rho, x> + <eta_v[f] /
  rho, z> - ||x||^2 / 2``, a SparseMAP problem with scores scaled by ``1 / rho`` (warm-started
  active set, or a closed form for logic factors; :mod:`~keras_structured.engine.lp.blocks`);
* the consensus variable, in closed form: setting the gradient of ``-<eta_u, u> + ||u||^2 / 2
  - sum_f <lambda_f, u_f> + rho / 2 sum_f ||x_f - u_f||^2`` to zero gives
  ``u_i = (eta_u[i] + sum_{f : i in f} (lambda_fi + rho x_fi)) / (1 + rho deg_i)``;
* the multipliers: ``lambda_f += rho (x_f - u_f)``.

The iterations stop when the primal residual ``sqrt(sum_f ||x_f - u_f||^2 / L)`` and the
dual residual ``rho sqrt(sum_i deg_i (u_i - u_i^prev)^2 / L)`` (``L`` links) are both at most
``tol``; ``rho`` is adapted by residual balancing (doubled when the primal residual is ten
times the dual one, halved in the opposite case).

A converged iterate is then *polished*: each factor's face is read (after one exact solve of each
structure factor, so that its active set spans its face), and the QP on those faces is
solved exactly (:mod:`~keras_structured.engine.lp.kkt`). The polished point is kept when
it is feasible and close to the ADMM iterate; it is then the exact solution, to rounding,
and the Jacobian of :meth:`LPSparseMAPSolution.vjp` is exactly its derivative. An iterate
whose faces give no acceptable point iterates on at a smaller tolerance and is polished
again (:mod:`~keras_structured.engine.lp.batch`).

Unlike lp-sparsemap (which splits the quadratic term among the factors and rescales each
variable by the square root of its degree), the quadratic term stays whole in ``u``, so
every factor's subproblem is a plain SparseMAP (or closed-form) problem.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from keras_structured.engine.blas_threads import single_threaded_blas
from keras_structured.engine.lp.blocks import VertexFace
from keras_structured.engine.lp.graph import FactorGraph
from keras_structured.engine.lp.kkt import FaceSystem
from keras_structured.engine.lp.logic import LogicFactor
from keras_structured.engine.solve import SparseMAPConvergenceWarning, _warning_stacklevel
from keras_structured.validation import check_bool, check_integer, check_number

__all__ = [
    "LPSparseMAPConvergenceWarning",
    "LPSparseMAPOptions",
    "LPSparseMAPSolution",
    "lp_sparsemap",
    "lp_sparsemap_batch",
]

# Residual balancing: rho changes by this factor when one residual exceeds the other
# RHO_BALANCE times, within [RHO_MIN, RHO_MAX].
RHO_FACTOR, RHO_BALANCE, RHO_MIN, RHO_MAX = 2.0, 10.0, 1e-4, 1e4
# Relative Wolfe gap of the structure factors' subproblems inside the iterations.
INNER_TOL = 1e-12
# The polished point must be feasible within FEASIBILITY_TOL, and within POLISH_RADIUS of
# the ADMM iterate (max-norm on u).
FEASIBILITY_TOL = 1e-9
POLISH_RADIUS = 1e-3
# Marginals within this of 0 or 1 are set to it: the polished solution on a face puts the
# variables held at a bound there up to rounding (1e-16), and a sparse solution's zeros
# should be zeros.
SNAP_TOL = 1e-12


class LPSparseMAPConvergenceWarning(SparseMAPConvergenceWarning):
    """LP-SparseMAP stopped at ``max_iter`` ADMM iterations before reaching its tolerance."""


@dataclasses.dataclass(frozen=True)
class LPSparseMAPOptions:
    """Settings of the LP-SparseMAP solver, checked once when created.

    Attributes:
        tol: stop when the primal and dual residuals (root mean square over the links) are
            at most ``tol``; a finite number ``> 0``.
        max_iter: most ADMM iterations, an integer ``>= 1``.
        rho: initial penalty, a number ``> 0``.
        adapt_rho: adapt ``rho`` by residual balancing.
        max_inner_iter: most MAP calls per structure factor and iteration, an integer ``>= 1``.
        polish: solve the QP on the final faces exactly (see the module docstring).

    Example:
        >>> LPSparseMAPOptions(tol=1e-8).max_iter
        1000
        >>> LPSparseMAPOptions(rho=0)
        Traceback (most recent call last):
        ...
        ValueError: rho must be a finite number > 0. Received: rho=0
    """

    tol: float = 1e-6
    max_iter: int = 1000
    rho: float = 1.0
    adapt_rho: bool = True
    max_inner_iter: int = 20
    polish: bool = True

    def __post_init__(self) -> None:
        set_field = object.__setattr__
        set_field(self, "tol", check_number("tol", self.tol, minimum=0, open_minimum=True))
        set_field(self, "max_iter", check_integer("max_iter", self.max_iter, minimum=1))
        set_field(self, "rho", check_number("rho", self.rho, minimum=0, open_minimum=True))
        set_field(self, "adapt_rho", check_bool("adapt_rho", self.adapt_rho))
        set_field(self, "max_inner_iter", check_integer("max_inner_iter", self.max_inner_iter, minimum=1))
        set_field(self, "polish", check_bool("polish", self.polish))


@dataclasses.dataclass
class LPSparseMAPSolution:
    """The solution of one LP-SparseMAP problem.

    Attributes:
        u: ``(num_variables,)`` variable marginals.
        v: per factor, its additional marginals (shape ``factor.v_shape()``).
        converged: whether the residuals reached ``tol``.
        polished: whether ``(u, v)`` is the exact solution on the final faces (tried only
            once converged).
        iterations: ADMM iterations run.
        primal_residual, dual_residual: the last residuals.
        rho: the final penalty.
        map_calls: MAP-oracle calls of the structure factors, the final exact solves included.
        objective: ``<eta_u, u> + sum_f <eta_v[f], v[f]> - ||u||^2 / 2``.
        faces: per factor, its face (:mod:`~keras_structured.engine.lp.blocks`).
        system: the KKT system on the faces (:class:`~keras_structured.engine.lp.kkt.FaceSystem`).
    """

    u: np.ndarray
    v: list
    converged: bool
    polished: bool
    iterations: int
    primal_residual: float
    dual_residual: float
    rho: float
    map_calls: int
    objective: float
    faces: list
    system: FaceSystem

    def vjp(self, g_u, g_v=None) -> tuple[np.ndarray, list[np.ndarray]]:
        """Gradients of ``<g_u, u> + sum_f <g_v[f], v[f]>`` with respect to ``eta_u`` and ``eta_v``.

        See :func:`keras_structured.engine.lp.backward.vjp`.
        """
        from keras_structured.engine.lp.backward import vjp

        return vjp(self, g_u, g_v)


def lp_sparsemap(
    graph: FactorGraph, eta_u, eta_v=None, *, mask=None, options: LPSparseMAPOptions | None = None
) -> LPSparseMAPSolution:
    """Solve LP-SparseMAP on a factor graph by ADMM (see the module docstring).

    Solves ``max <eta_u, u> + sum_f <eta_v[f], z_f> - ||u||^2 / 2`` over the local polytope
    of ``graph``: every factor's ``(u[variables_f], z_f)`` in its marginal polytope.

    Args:
        graph: the :class:`~keras_structured.engine.lp.graph.FactorGraph`.
        eta_u: ``(num_variables,)`` variable scores (any float dtype; computed in float64).
        eta_v: None, or one entry per factor: scores of its additional parts, of shape
            ``factor.v_shape()``, or None for zeros.
        mask: None, or ``(num_variables,)`` booleans, False for the variables the problem
            lacks (see :func:`lp_sparsemap_batch`).
        options: :class:`LPSparseMAPOptions` (default: the defaults).

    Returns:
        An :class:`LPSparseMAPSolution`. A problem stopped at ``max_iter`` keeps its last
        iterate, gets ``converged=False`` and triggers one :class:`LPSparseMAPConvergenceWarning`.

    Raises:
        ValueError: for scores of the wrong shapes or non-finite scores.

    Example: two variables, exactly one on (XOR), the second also in a budget:

        >>> from keras_structured.engine.lp.logic import AtMostOne, Xor
        >>> graph = FactorGraph(2, [Xor([0, 1]), AtMostOne([1])])
        >>> lp_sparsemap(graph, np.array([1.0, 0.5])).u.round(6)
        array([0.75, 0.25])
    """
    options = LPSparseMAPOptions() if options is None else options
    eta_u, eta_v = graph.check_scores(eta_u, eta_v)
    mask = None if mask is None else _check_mask(graph, np.asarray(mask)[None], 1)
    from keras_structured.engine.lp.batch import solve_batch

    with single_threaded_blas():
        (solution,) = solve_batch(graph, eta_u[None], np.concatenate([[], *eta_v])[None], options, mask)
    if not solution.converged:
        warnings.warn(
            _convergence_message(options, [solution]),
            LPSparseMAPConvergenceWarning,
            stacklevel=_warning_stacklevel(),
        )
    return solution


def lp_sparsemap_batch(
    graph: FactorGraph, eta_u, eta_v=None, *, mask=None, options: LPSparseMAPOptions | None = None
) -> list[LPSparseMAPSolution]:
    """:func:`lp_sparsemap` of every example of a batch on one graph, with one warning.

    The ADMM runs for all the examples at once (:mod:`~keras_structured.engine.lp.batch`:
    the logic factors' closed forms vectorised over the examples, the structure factors'
    warm-started active sets side by side in the compiled kernel, one ``rho`` and one
    stopping test per example); each example's solution equals :func:`lp_sparsemap`'s up
    to rounding.

    Args:
        graph: the :class:`~keras_structured.engine.lp.graph.FactorGraph`.
        eta_u: ``(batch, num_variables)`` variable scores.
        eta_v: None, or ``(batch, graph.v_size)``: every factor's additional scores, flat and
            in factor order (:meth:`~keras_structured.engine.lp.graph.FactorGraph.split_additional`).
        mask: None, or ``(batch, num_variables)`` booleans, False for the variables an example
            lacks (padding: a shorter sentence in a graph built for the longest). They are held
            at zero, with zero gradients; a structure factor over some of them runs at the
            length that leaves them out (its absent variables must be those of a shorter
            structure, e.g. the tags of a sequence's last positions,
            :meth:`~keras_structured.engine.Structure.lengths_from_mask`); logic factors see
            them as off. The solution equals that of the graph without them.
        options: :class:`LPSparseMAPOptions` (default: the defaults).

    Returns:
        One :class:`LPSparseMAPSolution` per example. When some stop at ``max_iter``, one
        :class:`LPSparseMAPConvergenceWarning` says how many.

    Raises:
        ValueError: for scores of the wrong shapes or non-finite scores, naming the example.

    Example:
        >>> from keras_structured.engine.lp.logic import Pair
        >>> graph = FactorGraph(2, [Pair(0, 1)])
        >>> eta_u, eta_v = np.array([[0.2, 0.9], [-1.0, 0.5]]), np.array([[1.0], [0.0]])
        >>> [(s.u.round(6) + 0.0).tolist() for s in lp_sparsemap_batch(graph, eta_u, eta_v)]
        [[1.0, 1.0], [0.0, 0.5]]
    """
    options = LPSparseMAPOptions() if options is None else options
    eta_u = np.asarray(eta_u, dtype=np.float64)
    if eta_u.ndim != 2:
        raise ValueError(
            f"eta_u must have shape (batch, {graph.num_variables}). Received: eta_u.shape={eta_u.shape}"
        )
    batch = eta_u.shape[0]
    eta_v = np.zeros((batch, graph.v_size)) if eta_v is None else np.asarray(eta_v, dtype=np.float64)
    if eta_v.shape != (batch, graph.v_size):
        raise ValueError(
            f"eta_v must have shape (batch, {graph.v_size}) = (batch, graph.v_size), like eta_u's "
            f"batch {batch}. Received: eta_v.shape={eta_v.shape}"
        )
    for example, (scores_u, scores_v) in enumerate(zip(eta_u, eta_v, strict=True)):
        try:
            graph.check_scores(scores_u, graph.split_additional(scores_v))
        except ValueError as error:
            raise ValueError(f"Example {example} of the batch: {error}") from None
    mask = None if mask is None else _check_mask(graph, np.asarray(mask), batch)
    from keras_structured.engine.lp.batch import solve_batch

    with single_threaded_blas():
        solutions = solve_batch(graph, eta_u, eta_v, options, mask)
    if not all(solution.converged for solution in solutions):
        warnings.warn(
            _convergence_message(options, solutions),
            LPSparseMAPConvergenceWarning,
            stacklevel=_warning_stacklevel(),
        )
    return solutions


def _check_mask(graph: FactorGraph, mask: np.ndarray, batch: int) -> np.ndarray:
    """``mask`` as booleans of shape ``(batch, num_variables)``, or ValueError."""
    if mask.shape != (batch, graph.num_variables) or not (
        mask.dtype == bool or np.issubdtype(mask.dtype, np.number)
    ):
        raise ValueError(
            f"mask must hold booleans (or 0/1), one per variable and example, of shape "
            f"({batch}, {graph.num_variables}). Received: mask.shape={mask.shape}, dtype={mask.dtype}"
        )
    if mask.dtype != bool and not np.isin(mask, (0, 1)).all():
        raise ValueError(
            "mask must hold booleans (or 0/1), one per variable and example. "
            f"Received: mask values={np.unique(mask[~np.isin(mask, (0, 1))]).tolist()}"
        )
    return mask.astype(bool)


def _convergence_message(options: LPSparseMAPOptions, solutions: list[LPSparseMAPSolution]) -> str:
    """The warning of problems stopped at ``max_iter``, with their largest residuals."""
    stopped = [s for s in solutions if not s.converged]
    primal = max(s.primal_residual for s in stopped)
    dual = max(s.dual_residual for s in stopped)
    which = "" if len(solutions) == 1 else f" on {len(stopped)} of {len(solutions)} problems"
    return (
        f"LP-SparseMAP did not converge{which} within max_iter={options.max_iter} ADMM iterations "
        f"(primal residual up to {primal:.3g}, dual residual up to {dual:.3g}, tol={options.tol}). The last "
        "iterates are returned with converged=False. Raise max_iter or tol; residuals that stall "
        "far above tol can also mean that the factors admit no common point."
    )


def finish(
    graph: FactorGraph,
    blocks: list,
    eta_u: np.ndarray,
    eta_v: list[np.ndarray],
    u: np.ndarray,
    options: LPSparseMAPOptions,
    *,
    absent: np.ndarray | None = None,
    converged: bool,
    iterations: int,
    primal: float,
    dual: float,
    rho: float,
) -> LPSparseMAPSolution:
    """The solution of one problem from the ADMM's last iterate ``u``, once every block has
    been solved exactly at the final scores: the faces, the polish (see the module
    docstring) and the snapped marginals.

    Args:
        graph: the graph.
        blocks: per factor, its block after the final exact solve.
        eta_u: ``(num_variables,)`` checked scores.
        eta_v: per factor, its flat additional scores.
        u: the last iterate.
        options: the solver's options.
        absent: indices of the variables held at zero, or None.
        converged, iterations, primal, dual, rho: the ADMM's flag, iteration count, last
            residuals and penalty.
    """
    faces = [block.face() for block in blocks]
    system = FaceSystem(graph.links, faces, graph.num_variables, absent)
    v = [block.additional() for block in blocks]
    polished = False
    if options.polish and converged:
        candidate = system.solve(system.lift(eta_u, eta_v), system.dual_rhs)
        if _acceptable(graph, system, candidate, u):
            u, v = system.outputs(candidate)
            polished = True
    u = _snap(u)
    v = [_snap(values).reshape(shape) for values, shape in zip(v, graph.v_shapes, strict=True)]
    objective = float(eta_u @ u - 0.5 * u @ u + sum(s @ z.ravel() for s, z in zip(eta_v, v, strict=True)))
    return LPSparseMAPSolution(
        u=u,
        v=v,
        converged=converged,
        polished=polished,
        iterations=iterations,
        primal_residual=primal,
        dual_residual=dual,
        rho=rho,
        map_calls=sum(block.map_calls for block in blocks),
        objective=objective,
        faces=faces,
        system=system,
    )


def _snap(values: np.ndarray) -> np.ndarray:
    """``values`` with the entries within ``SNAP_TOL`` of 0 or 1 set to it."""
    values = np.where(np.abs(values) <= SNAP_TOL, 0.0, values)
    return np.where(np.abs(values - 1.0) <= SNAP_TOL, 1.0, values)


def _acceptable(graph: FactorGraph, system: FaceSystem, candidate: np.ndarray, iterate: np.ndarray) -> bool:
    """Whether the polished point is feasible and near the ADMM iterate."""
    u, local = system.split(candidate)
    if not np.all(np.abs(u - iterate) <= POLISH_RADIUS):
        return False
    for factor, link, face, q in zip(graph.factors, graph.links, system.faces, local, strict=True):
        if isinstance(face, VertexFace):
            if q.min(initial=0.0) < -FEASIBILITY_TOL:
                return False
        elif isinstance(factor, LogicFactor):
            a_x, a_z, b, equality = factor.inequalities()
            slack = b - a_x @ u[link] - a_z @ q
            if slack.min() < -FEASIBILITY_TOL or np.abs(slack[equality]).max(initial=0.0) > FEASIBILITY_TOL:
                return False
    return True
