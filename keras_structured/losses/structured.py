"""Structured losses for ``model.compile``: SparseMAP, margin, perceptron, hinge and CRF.

All are structured Fenchel-Young losses (Niculae et al., 2018, section 4;
Blondel et al., 2018). For scores ``eta = (eta_u, eta_v)``, a gold structure with
indicator vectors ``a = (m, n)`` and a regulariser ``Omega`` on the marginal
polytope ``M``,

    L(eta; a) = max_{mu in M} [<eta, mu> - Omega(mu)] - [<eta, a> - Omega(a)],

which is nonnegative, zero exactly when the prediction ``argmax`` is the gold
structure, and has gradient ``mu* - a`` (prediction minus gold). The choices:

=========================  =======================================  ===========
loss                       ``Omega(mu)``, ``mu = (u, v)``           prediction
=========================  =======================================  ===========
SparseMAPLoss              ``||u||^2 / 2``                          SparseMAP
MarginSparseMAPLoss        ``||u||^2 / 2 - w * rho(u, m)``          SparseMAP
StructuredPerceptronLoss   ``0``                                    MAP
StructuredHingeLoss        ``-w * rho(u, m)``                       MAP
LinearChainCRFLoss         ``-H(mu)`` (entropy), linear chains      marginals
TreeCRFLoss                ``-H(mu)``, dependency trees             marginals
=========================  =======================================  ===========

with the Hamming cost ``rho(u, m) = <1 - 2 m, u> + sum(m)`` (for 0/1 vectors, the
number of unary parts where ``u`` and ``m`` differ) weighted by ``w = cost_weight``.
The SparseMAP and MAP losses run the solver under ``stop_gradient`` (by Danskin's
theorem the gradient is ``mu* - a`` without differentiating the solver) in one host
call per batch (:mod:`keras_structured.ops.host_call`), after another that reads the
gold structures from the labels (:mod:`keras_structured.losses._gold`). Their tensor
parts are ``keras.ops``: they run on TensorFlow (``tf.numpy_function``: compile models
using them with ``jit_compile=False``), JAX (``jax.pure_callback``, also in the jitted
training step of ``model.fit``) and PyTorch (``torch.library`` custom ops). The
CRF losses compile with XLA too: the linear chain is pure TensorFlow, and the tree CRF
runs a compiled kernel, or its pure TensorFlow elimination inside XLA.

Labels ``y_true`` are the gold structures' codes, in the structure's own format
(Keras casts them to float; they are cast back to the structure's ``code_dtype``):
label sequences ``(batch, n)``,
head vectors ``(batch, n + 1)`` (``-1`` at the root), column per row for
matchings, 0/1 vectors for budgets. For sequences and dependency trees, ``-1``
also marks padding at the end, and the lengths come from the labels (the
structure's ``lengths_from_codes``). Invalid
labels (an index out of range, ``-1`` inside a sequence, heads that do not form a
tree, a column matched twice, a budget exceeded) raise
``tf.errors.InvalidArgumentError`` at run time, naming the first invalid example:
the structure's ``validate_codes`` checks them where they are read, and the CRF
losses check them with assertions. On PyTorch and eagerly on JAX the SparseMAP and MAP
losses raise the same error (also a ``ValueError``); under ``jax.jit`` its message comes
inside the ``JaxRuntimeError`` of the host callback.

Scores ``y_pred`` are split into ``(eta_u, eta_v)`` by the structure's
``split_scores``: for sequences, the packed ``(batch, n, K, K + 1)`` tensor of
:func:`keras_structured.ops.pack_sequence_scores`, and ``eta_u`` for every other
built-in structure (no higher-order scores). The losses ask nothing else of a
structure, so a new structure works with them as it is.

Each loss is a function first (:func:`sparsemap_loss`, :func:`margin_sparsemap_loss`,
:func:`structured_perceptron_loss`, :func:`structured_hinge_loss`,
:func:`linear_chain_crf_loss`, :func:`tree_crf_loss`), returning the loss of every
example, and a thin ``keras.losses.Loss`` class over it that stores the arguments,
applies the reduction and serializes. The CRF losses live in :mod:`keras_structured.losses.crf`,
what the losses share in :mod:`keras_structured.losses.per_example`.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
from keras import ops

from keras_structured.engine import (
    SolverOptions,
    Structure,
    structure_from_config,
    structure_to_config,
)
from keras_structured.engine.options import SolverSettings, resolve_options
from keras_structured.losses._gold import gold_indicators
from keras_structured.losses.per_example import (
    PerExampleLoss,
    check_labels,
    inner,
    lengths_from_codes,
    per_example_sum,
)
from keras_structured.ops.decode import map_decode
from keras_structured.ops.dtypes import compute_dtype
from keras_structured.ops.portable_sparsemap import solver_dtype
from keras_structured.ops.sparsemap_op import sparsemap_solution
from keras_structured.ops.xla import LOSS_FIX, refuse_xla
from keras_structured.validation import check_number


def _as_structure(structure: Structure | dict | str | None, owner: str = "The loss") -> Structure:
    """``structure``, rebuilt first from a config dict or a class name; ``ValueError`` for anything else."""
    if isinstance(structure, str):
        try:
            return structure_from_config({"class_name": structure, "config": {}})
        except ValueError:
            pass  # an unknown name: the message below says what is expected
    elif isinstance(structure, dict):
        structure = structure_from_config(structure)
    if not isinstance(structure, Structure):
        raise ValueError(
            f"{owner}: structure must be a Structure (a keras_structured.engine.Structure such "
            "as SequenceStructure()), its config dict, or the name of a structure class whose "
            "arguments all have defaults (e.g. 'SequenceStructure'). By name alone Keras builds a "
            "loss without arguments: pass a config instead, e.g. keras.losses.get({'class_name': "
            "'SparseMAPLoss', 'config': {'structure': 'SequenceStructure'}}). "
            f"Received: structure={structure!r}"
        )
    return structure


def _loss_options(options, method, tol, max_iter) -> SolverOptions:
    """The solver options of a SparseMAP loss; ``exact_jacobian`` is off (see :func:`sparsemap_loss`)."""
    options = resolve_options(options, method=method, tol=tol, max_iter=max_iter)
    return dataclasses.replace(options, exact_jacobian=False) if options.exact_jacobian else options


def _scores(structure: Structure, y_pred) -> tuple:
    """``(eta_u, eta_v)`` from ``y_pred``, in the compute dtype, by the structure's own layout."""
    scores = ops.convert_to_tensor(y_pred)
    return structure.split_scores(ops.cast(scores, compute_dtype(scores)))


def _codes(structure: Structure, y_true):
    """The gold codes ``y_true`` as a tensor of the structure's code dtype.

    Integer codes are rounded and checked as int64 (on the host, by the structure's
    ``validate_codes``), before a narrower code dtype could wrap them around (int32 on JAX
    without 64-bit types).
    """
    codes = ops.convert_to_tensor(y_true)
    if not np.issubdtype(structure.code_dtype, np.integer):
        return ops.cast(codes, np.dtype(structure.code_dtype).name)
    if keras.backend.is_float_dtype(codes.dtype):
        codes = ops.round(codes)
    return ops.cast(codes, "int64" if solver_dtype() == "float64" else "int32")


def _gold(structure: Structure, y_true, y_pred, eta_u) -> tuple:
    """``(lengths, m, n)`` of the gold codes ``y_true`` for ``y_pred`` (unary scores ``eta_u``).

    Lengths come from the codes when the structure pads them with -1
    (:attr:`~keras_structured.engine.Structure.lengths_from_codes`), else they are None.
    The codes are checked by the structure's ``validate_codes`` in the host call that reads
    them anyway (:func:`keras_structured.losses._gold.gold_indicators`).
    """
    codes = _codes(structure, y_true)
    lengths = None
    if structure.lengths_from_codes:
        check_labels(codes, eta_u.shape[1], y_pred)
        lengths = lengths_from_codes(codes)
    return gold_indicators(structure, codes, eta_u, lengths)


def _maximiser(structure: Structure, scores_u, scores_v, lengths, options: SolverOptions | None) -> tuple:
    """``(u, v)`` of MAP (``options`` None) or SparseMAP for scores that carry no gradient
    (:func:`~keras_structured.ops.sparsemap_op.sparsemap_solution`, which skips the Jacobian)."""
    if options is None:
        return map_decode(structure, scores_u, scores_v, lengths=lengths)[1:]
    return sparsemap_solution(structure, scores_u, scores_v, lengths=lengths, options=options)


def _structured_loss(y_true, y_pred, structure: Structure, cost_weight: float, options: SolverOptions | None):
    """The shared formula of the SparseMAP and MAP losses, per example.

    ``max_mu [<eta', mu> - q * ||u||^2 / 2] + w * sum(m) - [<eta, a> - q * ||m||^2 / 2]``
    with cost-augmented unary scores ``eta'_u = eta_u + w * (1 - 2 m)``: SparseMAP
    (``q = 1``) when ``options`` are given, else MAP (``q = 0``).
    """
    refuse_xla("The SparseMAP, hinge and perceptron losses", LOSS_FIX)
    eta_u, eta_v = _scores(structure, y_pred)
    dtype = eta_u.dtype
    # In float64, cast once at the end: the loss is a difference of two large scores.
    wide = solver_dtype()
    eta_u = ops.cast(eta_u, wide)
    eta_v = None if eta_v is None else ops.cast(eta_v, wide)
    lengths, gold_m, gold_n = _gold(structure, y_true, y_pred, eta_u)
    cost_u = eta_u + cost_weight * (1.0 - 2.0 * gold_m) if cost_weight else eta_u
    # Danskin: the gradient of the max is its maximiser, so the solver is not differentiated.
    scores_v = None if eta_v is None else ops.stop_gradient(eta_v)
    u, v = _maximiser(structure, ops.stop_gradient(cost_u), scores_v, lengths, options)
    loss = inner(cost_u, u) - inner(eta_u, gold_m) + cost_weight * per_example_sum(gold_m)
    if eta_v is not None:
        loss = loss + (inner(eta_v, v) - inner(eta_v, gold_n))
    if options is not None:
        loss = loss + per_example_sum(ops.square(gold_m) - ops.square(u)) / 2
    # max(loss, 0), its gradient passed on at 0 as by tf.maximum (ops.maximum computes float64
    # in float32 on PyTorch).
    return ops.cast(ops.where(loss < 0, ops.zeros_like(loss), loss), dtype)


def sparsemap_loss(
    y_true,
    y_pred,
    structure: Structure | dict,
    options: SolverOptions | None = None,
    *,
    method: str | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
):
    """SparseMAP loss per example: the Fenchel-Young loss of the quadratic regulariser on ``u``.

    For scores ``eta`` and a gold structure ``a = (m, n)``,

        L = max_{(u, v) in M} [<eta, (u, v)> - ||u||^2 / 2] - [<eta, a> - ||m||^2 / 2],

    where the max is solved by SparseMAP (under ``stop_gradient``: by Danskin's
    theorem ``grad_eta L = (u*, v*) - a``, so ``options.exact_jacobian`` has no
    effect). ``L >= 0``, with equality exactly when SparseMAP returns the gold structure.

    Args:
        y_true: gold codes in the structure's format (see the module docstring; ``-1``
            pads sequences and trees), integers or floats holding integers.
        y_pred: scores, split by ``structure.split_scores``: packed
            ``(batch, n, K, K + 1)`` for sequences, else ``eta_u``.
        structure: a :class:`keras_structured.engine.Structure`, its config dict, or
            the name of a structure class whose arguments have defaults.
        options: the solver settings, a :class:`keras_structured.engine.SolverOptions`
            (default ``SolverOptions()``); ``method``, ``tol`` and ``max_iter`` are
            shortcuts for its fields (None leaves a field to ``options``).
        method: ``"active_set"`` (default) or a Frank-Wolfe variant.
        tol: relative Wolfe-gap tolerance of the solver, a finite number >= 0.
        max_iter: maximum MAP calls per example, an integer >= 1.

    Returns:
        The loss of every example, shape ``(batch,)``, in the compute dtype of ``y_pred``
        (float32 for half precision).

    Raises:
        ValueError: at trace time, for a structure that is not one, bad solver
            settings, or labels and scores of shapes that do not fit.
        tf.errors.InvalidArgumentError: at run time, for invalid labels or scores.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> sparsemap_loss([1, 0], [[0.0, 5.0, 0.0], [0.0, 1.0, 0.0]], SimplexStructure()).numpy()
        array([0., 1.], dtype=float32)
    """
    structure = _as_structure(structure)
    return _structured_loss(y_true, y_pred, structure, 0.0, _loss_options(options, method, tol, max_iter))


def margin_sparsemap_loss(
    y_true,
    y_pred,
    structure: Structure | dict,
    cost_weight: float = 1.0,
    options: SolverOptions | None = None,
    *,
    method: str | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
):
    """Margin SparseMAP loss per example: SparseMAP on Hamming-cost-augmented scores.

    For scores ``eta``, a gold structure ``a = (m, n)`` and ``w = cost_weight``,

        L = max_{(u, v) in M} [<eta, (u, v)> + w * rho(u, m) - ||u||^2 / 2] - [<eta, a> - ||m||^2 / 2],

    with ``rho(u, m) = <1 - 2 m, u> + sum(m)``. ``L >= 0`` and
    ``grad_eta L = (u*, v*) - a``.

    Args:
        y_true, y_pred, structure: as for :func:`sparsemap_loss`.
        cost_weight: ``w >= 0``, the weight of the Hamming cost.
        options, method, tol, max_iter: solver settings, as for :func:`sparsemap_loss`.

    Returns:
        The loss of every example, shape ``(batch,)``.

    Raises:
        ValueError: as for :func:`sparsemap_loss`, and for a negative or non-finite
            ``cost_weight``.
        tf.errors.InvalidArgumentError: at run time, for invalid labels or scores.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> loss = margin_sparsemap_loss([1], [[0.0, 2.0, 0.0]], SimplexStructure())
        >>> round(float(loss[0]), 4)
        0.3333
    """
    structure = _as_structure(structure)
    cost_weight = check_number("cost_weight", cost_weight, minimum=0)
    options = _loss_options(options, method, tol, max_iter)
    return _structured_loss(y_true, y_pred, structure, cost_weight, options)


def structured_perceptron_loss(y_true, y_pred, structure: Structure | dict):
    """Structured perceptron loss per example (Collins, 2002): ``max_s <eta, a_s> - <eta, a>``.

    The best structure's score minus the gold one's, by one MAP call
    (:func:`keras_structured.ops.decode.map_decode`). ``L >= 0``, zero when the gold
    structure is a MAP, and ``grad_eta L = a_MAP - a``.

    Args:
        y_true, y_pred, structure: as for :func:`sparsemap_loss`.

    Returns:
        The loss of every example, shape ``(batch,)``.

    Raises:
        ValueError: at trace time, for a structure that is not one, or labels and
            scores of shapes that do not fit.
        tf.errors.InvalidArgumentError: at run time, for invalid labels or scores.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> structured_perceptron_loss([1, 0], [[0.0, 0.5, 0.0]] * 2, SimplexStructure()).numpy()
        array([0. , 0.5], dtype=float32)
    """
    return _structured_loss(y_true, y_pred, _as_structure(structure), 0.0, None)


def structured_hinge_loss(y_true, y_pred, structure: Structure | dict, cost_weight: float = 1.0):
    """Structured hinge loss per example, with a Hamming cost (Taskar et al., 2003).

    For scores ``eta``, a gold structure ``a = (m, n)`` and ``w = cost_weight``,

        L = max_s [<eta, a_s> + w * rho(m_s, m)] - <eta, a>,

    with ``rho(u, m) = <1 - 2 m, u> + sum(m)``, by one cost-augmented MAP call.
    ``L >= 0`` and ``grad_eta L = a_s* - a`` for the cost-augmented MAP ``s*``.

    Args:
        y_true, y_pred, structure: as for :func:`sparsemap_loss`.
        cost_weight: ``w >= 0``, the weight of the Hamming cost.

    Returns:
        The loss of every example, shape ``(batch,)``.

    Raises:
        ValueError: as for :func:`structured_perceptron_loss`, and for a negative or
            non-finite ``cost_weight``.
        tf.errors.InvalidArgumentError: at run time, for invalid labels or scores.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> structured_hinge_loss([1, 1], [[0.0, 3.0, 0.0], [0.0, 0.5, 0.0]], SimplexStructure()).numpy()
        array([0. , 1.5], dtype=float32)
    """
    cost_weight = check_number("cost_weight", cost_weight, minimum=0)
    return _structured_loss(y_true, y_pred, _as_structure(structure), cost_weight, None)


class _StructuredLoss(PerExampleLoss):
    """A thin ``keras.losses.Loss`` over one of the functions above.

    It checks and stores the arguments, and ``call`` passes them to the function
    (as Keras' ``LossFunctionWrapper`` does); ``get_config`` adds the structure and
    the attributes named in ``_config_keys``.
    """

    _config_keys: tuple[str, ...] = ()  # attributes that get_config adds to the structure

    def __init__(self, structure: Structure | dict | str | None, cost_weight: float, reduction, name, dtype):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.structure = _as_structure(structure, owner=type(self).__name__)
        self.cost_weight = check_number("cost_weight", cost_weight, minimum=0)

    def __call__(self, y_true, y_pred, sample_weight=None):
        refuse_xla(type(self).__name__, LOSS_FIX)
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def get_config(self):
        config = super().get_config()
        config.update(structure=structure_to_config(self.structure))
        config.update({key: getattr(self, key) for key in self._config_keys})
        return config


class _SparseMAPLossBase(SolverSettings, _StructuredLoss):
    """Stores the solver options of a SparseMAP loss, checked once.

    ``options.exact_jacobian`` has no effect: by Danskin's theorem the solver is not
    differentiated, so it always stops at ``tol`` (and ``get_config`` does not store it).
    """

    _config_keys = ("method", "tol", "max_iter")

    def __init__(self, structure, cost_weight, method, tol, max_iter, reduction, name, dtype, options):
        super().__init__(structure, cost_weight, reduction, name, dtype)
        self.options = resolve_options(options, method=method, tol=tol, max_iter=max_iter)


@keras.saving.register_keras_serializable(package="keras_structured")
class SparseMAPLoss(_SparseMAPLossBase):
    """SparseMAP loss: the Fenchel-Young loss of the quadratic regulariser on ``u``.

    For scores ``eta`` and a gold structure ``a = (m, n)``,

        L = max_{(u, v) in M} [<eta, (u, v)> - ||u||^2 / 2] - [<eta, a> - ||m||^2 / 2],

    where the max is solved by SparseMAP. ``L >= 0``, with equality exactly when
    SparseMAP returns the gold structure (its scores win by a margin), and
    ``grad_eta L = (u*, v*) - a``: only a few structures get gradient. The loss of
    each example is :func:`sparsemap_loss`.

    Args:
        structure: a :class:`keras_structured.engine.Structure`, its config dict, or
            the name of a structure class whose arguments have defaults.
        method: ``"active_set"`` (default) or a Frank-Wolfe variant.
        tol: relative Wolfe-gap tolerance of the solver, a finite number >= 0
            (default 1e-6).
        max_iter: maximum MAP calls per example, an integer >= 1 (default 2500).
        reduction, name, dtype: as for ``keras.losses.Loss``.
        options: the solver settings as one
            :class:`keras_structured.engine.SolverOptions`, instead of ``method``,
            ``tol`` and ``max_iter`` (None leaves a setting to ``options``; a keyword
            that disagrees with it is an error). Its ``exact_jacobian`` has no effect:
            the loss does not differentiate the solver.

    Call arguments:
        y_true: gold codes (see the module docstring; ``-1`` pads sequences and trees).
        y_pred: scores: packed ``(batch, n, K, K + 1)`` for sequences (the output of
            :class:`keras_structured.SequenceScores`), else ``eta_u`` (the structure's
            ``split_scores`` layout). A Keras mask on ``y_pred`` is not applied: the
            labels mark the padding, and every example's loss counts.

    Returns:
        The reduced loss (a scalar for the default reduction), float32 for
        half-precision scores (the solver runs in float32 or float64).

    Raises:
        ValueError: at construction, for a missing structure or bad settings; at trace
            time, for labels and scores of shapes that do not fit, or inside an
            XLA-compiled step (``jit_compile=True``: the MAP oracle runs in Python).
        tf.errors.InvalidArgumentError: at run time, for invalid labels (not a
            structure) or scores (NaN, ``+inf``).

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> loss = SparseMAPLoss(SimplexStructure())
        >>> float(loss([1], [[0.0, 5.0, 0.0]])), round(float(loss([0], [[0.0, 1.0, 0.0]])), 4)
        (0.0, 1.0)
    """

    def __init__(
        self,
        structure: Structure | dict | str | None = None,
        method: str | None = None,
        tol: float | None = None,
        max_iter: int | None = None,
        reduction: str = "sum_over_batch_size",
        name: str = "sparsemap_loss",
        dtype=None,
        options: SolverOptions | None = None,
    ):
        super().__init__(structure, 0.0, method, tol, max_iter, reduction, name, dtype, options)

    def call(self, y_true, y_pred):
        return sparsemap_loss(y_true, y_pred, self.structure, self.options)


@keras.saving.register_keras_serializable(package="keras_structured")
class MarginSparseMAPLoss(_SparseMAPLossBase):
    """Margin SparseMAP loss: the SparseMAP loss with a Hamming cost inside the max.

    For scores ``eta``, a gold structure ``a = (m, n)`` and ``w = cost_weight``,

        L = max_{(u, v) in M} [<eta, (u, v)> + w * rho(u, m) - ||u||^2 / 2] - [<eta, a> - ||m||^2 / 2],

    with ``rho(u, m) = <1 - 2 m, u> + sum(m)`` (Hamming distance for 0/1 ``u``):
    SparseMAP on the cost-augmented scores ``eta_u + w * (1 - 2 m)``. ``L >= 0``,
    zero when the gold structure wins by a margin growing with the cost, and
    ``grad_eta L = (u*, v*) - a``. The loss of each example is
    :func:`margin_sparsemap_loss`.

    Args:
        structure: a :class:`keras_structured.engine.Structure`, its config dict, or
            the name of a structure class whose arguments have defaults.
        cost_weight: ``w >= 0``, the weight of the Hamming cost.
        method, tol, max_iter, options: solver settings, as for :class:`SparseMAPLoss`.
        reduction, name, dtype: as for ``keras.losses.Loss``.

    Call arguments, returns and errors: as for :class:`SparseMAPLoss`.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> loss = MarginSparseMAPLoss(SimplexStructure())
        >>> float(loss([1], [[0.0, 5.0, 0.0]])), round(float(loss([1], [[0.0, 2.0, 0.0]])), 4)
        (0.0, 0.3333)
    """

    _config_keys = _SparseMAPLossBase._config_keys + ("cost_weight",)

    def __init__(
        self,
        structure: Structure | dict | str | None = None,
        cost_weight: float = 1.0,
        method: str | None = None,
        tol: float | None = None,
        max_iter: int | None = None,
        reduction: str = "sum_over_batch_size",
        name: str = "margin_sparsemap_loss",
        dtype=None,
        options: SolverOptions | None = None,
    ):
        super().__init__(structure, cost_weight, method, tol, max_iter, reduction, name, dtype, options)

    def call(self, y_true, y_pred):
        return margin_sparsemap_loss(y_true, y_pred, self.structure, self.cost_weight, self.options)


@keras.saving.register_keras_serializable(package="keras_structured")
class StructuredPerceptronLoss(_StructuredLoss):
    """Structured perceptron loss (Collins, 2002): ``max_s <eta, a_s> - <eta, a>``.

    The best structure's score minus the gold one's, by one MAP call
    (:func:`keras_structured.ops.decode.map_decode`). ``L >= 0``, zero when the
    gold structure is a MAP, and ``grad_eta L = a_MAP - a``. The loss of each
    example is :func:`structured_perceptron_loss`.

    Args:
        structure: a :class:`keras_structured.engine.Structure`, its config dict, or
            the name of a structure class whose arguments have defaults.
        reduction, name, dtype: as for ``keras.losses.Loss``.

    Call arguments, returns and errors: as for :class:`SparseMAPLoss`.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> loss = StructuredPerceptronLoss(SimplexStructure())
        >>> float(loss([1], [[0.0, 0.5, 0.0]])), float(loss([0], [[0.0, 0.5, 0.0]]))
        (0.0, 0.5)
    """

    def __init__(
        self,
        structure: Structure | dict | str | None = None,
        reduction: str = "sum_over_batch_size",
        name: str = "structured_perceptron_loss",
        dtype=None,
    ):
        super().__init__(structure, 0.0, reduction, name, dtype)

    def call(self, y_true, y_pred):
        return structured_perceptron_loss(y_true, y_pred, self.structure)


@keras.saving.register_keras_serializable(package="keras_structured")
class StructuredHingeLoss(_StructuredLoss):
    """Structured hinge (SVM) loss with a Hamming cost (Taskar et al., 2003; Tsochantaridis et al., 2004).

    For scores ``eta``, a gold structure ``a = (m, n)`` and ``w = cost_weight``,

        L = max_s [<eta, a_s> + w * rho(m_s, m)] - <eta, a>,

    with the Hamming cost ``rho(u, m) = <1 - 2 m, u> + sum(m)``, by one
    cost-augmented MAP call. ``L >= 0``, zero when the gold structure beats every
    other by at least ``w`` times their Hamming distance, and
    ``grad_eta L = a_s* - a`` for the cost-augmented MAP ``s*``. The loss of each
    example is :func:`structured_hinge_loss`.

    Args:
        structure: a :class:`keras_structured.engine.Structure`, its config dict, or
            the name of a structure class whose arguments have defaults.
        cost_weight: ``w >= 0``, the weight of the Hamming cost.
        reduction, name, dtype: as for ``keras.losses.Loss``.

    Call arguments, returns and errors: as for :class:`SparseMAPLoss`.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> loss = StructuredHingeLoss(SimplexStructure())
        >>> float(loss([1], [[0.0, 3.0, 0.0]])), float(loss([1], [[0.0, 0.5, 0.0]]))
        (0.0, 1.5)
    """

    _config_keys = ("cost_weight",)

    def __init__(
        self,
        structure: Structure | dict | str | None = None,
        cost_weight: float = 1.0,
        reduction: str = "sum_over_batch_size",
        name: str = "structured_hinge_loss",
        dtype=None,
    ):
        super().__init__(structure, cost_weight, reduction, name, dtype)

    def call(self, y_true, y_pred):
        return structured_hinge_loss(y_true, y_pred, self.structure, self.cost_weight)
