r"""Hazan's algorithm (Frank-Wolfe) on the trace-norm ball, with logs and checkpoints.

A step from ``x = (A, b)`` takes the linear step ``s``
(:func:`~keras_structured.applications.parsing.tracenorm.linear_step.linear_minimizer`) and moves to
``x + gamma (s - x)``: the weights ``c`` and ``b`` shrink by ``1 - gamma`` and the atom
joins with weight ``gamma C``, so ``sum_k c_k + lam ||b|| <= C`` stays true by induction
(``sum_k c_k`` bounds ``||A||_*``), and ``A`` has at most ``k`` factors after ``k`` steps.
The Frank-Wolfe gap

    gap(x) = <x - s, grad F(x)> = <x, grad F(x)> + C N*(grad F(x))  >=  F(x) - min F

certifies the iterate (by convexity, for any subgradient).

Step rules (:data:`STEP_RULES`): ``"standard"`` takes ``gamma_k = 2 / (k + 2)``
(``k = 0, 1, ...``; the first step lands on the atom), for which
``F(x_k) - min F <= 2 C_f / (k + 2)`` (Jaggi 2013; ``C_f`` the curvature constant).
``"line_search"`` minimises ``phi(gamma) = F(x + gamma (s - x))`` on ``[0, 1]``
(:func:`_line_search`); for the SparseMAP loss ``phi`` is convex with a derivative
``phi'(gamma) = (1/m) sum_s <Delta_s, u*_s(gamma) - Y_s>`` (``Delta_s`` the change of the
scores along the direction) that is nondecreasing, piecewise linear and ``Q``-Lipschitz with
``Q = (1/m) sum_s ||Delta_s||^2``. The search starts at the short step
``min(1, gap / Q)``, where ``phi' <= 0`` (so ``phi`` decreased), doubles until ``phi' > 0``
or ``gamma = 1``, then finds the root of ``phi'`` by regula falsi (Illinois), keeping the
best point evaluated: the objective never increases (up to SparseMAP's tolerance).

Stochastic variant: with ``batch_size``, each step uses a seeded random minibatch (the
same for a given ``(seed, step)``, so resumed runs repeat it) and the standard step; its
objective and gap are the minibatch's. A constant batch size does not converge to the
minimiser (stochastic Frank-Wolfe needs growing batches, Hazan & Luo 2016).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import time
from collections.abc import Callable, Sequence

import numpy as np

from keras_structured.applications.parsing.bilinear_features import SentenceFeatures
from keras_structured.applications.parsing.tracenorm.arc_batches import ArcBatch, arc_scores
from keras_structured.applications.parsing.tracenorm.checkpoints import (
    CHECKPOINT_NAME,
    load_checkpoint,
    save_checkpoint,
)
from keras_structured.applications.parsing.tracenorm.decoding import evaluate
from keras_structured.applications.parsing.tracenorm.linear_step import SVD_METHODS, Atom, linear_minimizer
from keras_structured.applications.parsing.tracenorm.models import TraceNormModel, count_non_finite
from keras_structured.applications.parsing.tracenorm.objective import (
    LOSSES,
    example_losses,
    objective_gradient,
)
from keras_structured.divergence import DivergenceError
from keras_structured.progress_log import ProgressLog
from keras_structured.run_directory import make_directory
from keras_structured.run_settings import check_resumed_settings
from keras_structured.validation import check_integer, check_number, check_one_of

STEP_RULES = ("standard", "line_search")
#: The columns of ``progress.csv``, one row per step (see :class:`HazanTrainer`).
PROGRESS_COLUMNS = (
    "step",
    "objective",
    "gap",
    "rank",
    "step_size",
    "atom",
    "dual_norm",
    "norm_bound",
    "time",
    "dev_uas",
)
#: The :class:`HazanConfig` fields that may change when a run resumes: they do not change the
#: iterates (``steps`` only sets where the run ends).
RESUMABLE_FIELDS = ("steps", "eval_every", "checkpoint_every")


def _atom_scores(atom: Atom, C: float, batch: ArcBatch) -> list[np.ndarray]:
    """The padded scores of every chunk under the atom ``s`` as a model."""
    if atom.kind == "A":
        head, dependent = C * (batch.phi @ atom.left), batch.phi @ atom.right
    result = []
    for chunk in batch.chunks:
        scores = atom.distance_weights[chunk.index]
        if atom.kind == "A":
            for b in range(chunk.stop - chunk.start):
                lo, n1 = batch.offsets[chunk.start + b], chunk.lengths[b] + 1
                scores[b, :n1, :n1] += np.outer(head[lo : lo + n1], dependent[lo : lo + n1])
        scores[~chunk.valid] = 0.0
        result.append(scores)
    return result


def _line_search(
    batch: ArcBatch,
    scores: list[np.ndarray],
    target: list[np.ndarray],
    gap: float,
    loss: str,
    first: float,
    max_evals: int,
    rtol: float,
) -> tuple[float, int]:
    """``argmin_{gamma in [0, 1]} phi(gamma) = F(x + gamma (s - x))``, by the derivative.

    ``phi'(0) = -gap < 0``. From ``first`` (the short step for the SparseMAP loss, where
    ``phi' <= 0`` is guaranteed), steps double until ``phi' > 0`` or ``gamma = 1``; regula
    falsi with the Illinois rule then shrinks the bracket ``[a, b]`` (``phi'(a) <= 0 <
    phi'(b)``) until ``|phi'| <= rtol * gap`` or ``max_evals`` evaluations. Returns the
    evaluated ``gamma`` of smallest ``phi`` and the number of evaluations. For the SparseMAP
    loss that ``phi`` is at most ``phi(first) < phi(0)``; for the non-smooth hinge it may
    exceed ``phi(0)`` (no step decreases the objective when the direction is not a descent
    direction, and Frank-Wolfe must move).
    """
    scale = 1.0 / len(batch)
    delta = [t - s for s, t in zip(scores, target, strict=True)]

    def phi(gamma: float) -> tuple[float, float]:
        moved = [s + gamma * d for s, d in zip(scores, delta, strict=True)]
        losses, residuals = example_losses(batch, moved, loss)
        slope = scale * sum(
            float(np.einsum("bij,bij->", d, r)) for d, r in zip(delta, residuals, strict=True)
        )
        return float(losses.mean()), slope

    a, slope_a, b, slope_b = 0.0, -gap, None, 0.0
    gamma, evaluated, side = first, [], 0
    for _ in range(max_evals):
        value, slope = phi(gamma)
        evaluated.append((value, gamma))
        if abs(slope) <= rtol * gap or (slope <= 0 and gamma >= 1.0):
            break
        if slope <= 0:
            a, slope_a = gamma, slope
            if side == -1 and b is not None:
                slope_b /= 2  # Illinois: the same end moved twice
            side = -1
        else:
            b, slope_b = gamma, slope
            if side == 1:
                slope_a /= 2
            side = 1
        if b is None:
            gamma = min(1.0, 2.0 * gamma)
        else:
            gamma = a - slope_a * (b - a) / (slope_b - slope_a)
    return min(evaluated)[1], len(evaluated)


@dataclasses.dataclass(frozen=True)
class HazanConfig:
    """The settings of a Frank-Wolfe (Hazan) run.

    Attributes:
        C: the radius of the ball ``||A||_* + lam ||b||_2 <= C``, a number > 0.
        lam: the weight ``lam`` of ``||b||_2`` in the ball, a number > 0.
        steps: the number of Frank-Wolfe steps, an integer >= 0.
        loss: ``"sparsemap"`` or ``"hinge"``.
        step_rule: ``"standard"`` (``2 / (k + 2)``) or ``"line_search"`` (full batch only).
        batch_size: sentences per step, drawn at random (the stochastic variant); None
            uses every training sentence (deterministic Frank-Wolfe).
        seed: seeds the minibatches and ARPACK's start vector.
        svd: how the top singular pair is computed: ``"auto"``, ``"dense"``, ``"svds"``.
        svd_tol: ARPACK's relative tolerance on ``sigma_max``.
        compress_every: merge the factors by a thin SVD every this many steps (0: never;
            the rank is then the number of steps that chose an ``A`` atom).
        eval_every: parse the dev sentences every this many steps (0: never).
        checkpoint_every: write ``checkpoint.npz`` every this many steps (and at the end).
        line_search_evals: most objective evaluations per line search.
        line_search_rtol: the line search stops when ``|phi'| <= rtol * gap``.
        chunk_size: sentences per padded batch given to the SparseMAP solver.
    """

    C: float = 10.0
    lam: float = 1.0
    steps: int = 100
    loss: str = "sparsemap"
    step_rule: str = "standard"
    batch_size: int | None = None
    seed: int = 0
    svd: str = "auto"
    svd_tol: float = 1e-6
    compress_every: int = 0
    eval_every: int = 0
    checkpoint_every: int = 10
    line_search_evals: int = 10
    line_search_rtol: float = 1e-3
    chunk_size: int = 64

    def __post_init__(self) -> None:
        check_number("C", self.C, minimum=0.0, open_minimum=True)
        check_number("lam", self.lam, minimum=0.0, open_minimum=True)
        check_integer("steps", self.steps, minimum=0)
        check_one_of("loss", self.loss, LOSSES)
        check_one_of("step_rule", self.step_rule, STEP_RULES)
        check_integer("batch_size", self.batch_size, minimum=1, allow_none=True)
        if self.batch_size is not None and self.step_rule != "standard":
            raise ValueError(
                "The stochastic variant (batch_size) takes the standard step 2/(k+2): a line search on a "
                f"minibatch does not search the objective. Received: batch_size={self.batch_size}, "
                f"step_rule={self.step_rule!r}"
            )
        check_integer("seed", self.seed, minimum=0)
        check_one_of("svd", self.svd, SVD_METHODS)
        check_number("svd_tol", self.svd_tol, minimum=0.0)
        for name in ("compress_every", "eval_every"):
            check_integer(name, getattr(self, name), minimum=0)
        check_integer("checkpoint_every", self.checkpoint_every, minimum=1)
        check_integer("line_search_evals", self.line_search_evals, minimum=1)
        check_number("line_search_rtol", self.line_search_rtol, minimum=0.0)
        check_integer("chunk_size", self.chunk_size, minimum=1)


class HazanTrainer:
    """Frank-Wolfe (Hazan's algorithm) on the trace-norm ball, with logs and checkpoints.

    Each step (:meth:`step`) computes ``F`` and its gradient at the iterate ``x_k``, the
    linear step ``s``, the gap ``<x_k - s, grad F>``, a step size, and moves to
    ``x_{k+1}``. Its record, appended to :attr:`history`, holds ``step`` (``k + 1``),
    ``objective`` and ``gap`` (of ``x_k``, the point the gradient was taken at),
    ``rank`` (factors of ``x_{k+1}``), ``step_size``, ``atom`` (``"A"``/``"b"``),
    ``dual_norm``, ``norm_bound`` (``sum c + lam ||b||`` of ``x_{k+1}``, at most ``C``),
    ``time`` (seconds of steps so far, resumed runs included) and, every ``eval_every``
    steps, ``dev_uas``.

    With a ``logdir``: every record goes to ``progress.csv`` (:data:`PROGRESS_COLUMNS`) and
    TensorBoard (:class:`~keras_structured.progress_log.ProgressLog`) and every
    ``checkpoint_every`` steps the state to ``checkpoint.npz``, written whole
    (:mod:`keras_structured.run_directory`: a crash leaves the old file or the new one, and a
    symlink in the ``logdir`` is refused, never followed); a trainer created on a ``logdir``
    that holds a checkpoint resumes from it (same iterates as an uninterrupted run:
    minibatches and ARPACK's start vector depend only on ``(seed, step)``), keeping the log's
    rows of the checkpoint's steps (those after it, which a crash left, are dropped; a log
    that lost some is refused: :class:`~keras_structured.progress_log.ProgressLogError`),
    and its settings (:func:`~keras_structured.run_settings.check_resumed_settings`); one trainer
    at a time may write a ``logdir`` (hold a :class:`~keras_structured.run_directory.RunLock`
    on it). A non-finite objective, or weights that become non-finite, stop training with
    a :class:`~keras_structured.divergence.DivergenceError` naming the step; the last
    checkpoint, written before, is left as it was.

    Args:
        train: the training sentences' :class:`SentenceFeatures` (one dimension ``d``).
        config: a :class:`HazanConfig`.
        dev: sentences to parse every ``config.eval_every`` steps, or None.
        logdir: a folder for ``progress.csv`` and ``checkpoint.npz``, or None.
        callback: called after every step as ``callback(trainer, record)`` (by
            :meth:`_on_step`, which subclasses may override instead); returning ``False``
            stops training.

    Raises:
        ValueError: for no training sentence, mixed dimensions, or a checkpoint written
            with other settings (those of :data:`RESUMABLE_FIELDS` may change).
        keras_structured.run_directory.UnsafePathError: a file of the ``logdir`` is a symlink.

    Example:
        >>> from keras_structured.applications.parsing.bilinear_features import featurize
        >>> from keras_structured.applications.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> trainer = HazanTrainer(featurize([s], dim=8), HazanConfig(C=5.0, steps=3))
        >>> model = trainer.train()
        >>> [record["rank"] <= record["step"] for record in trainer.history]
        [True, True, True]
        >>> model.norm_bound(lam=1.0) <= 5.0
        True
    """

    def __init__(
        self,
        train: Sequence[SentenceFeatures],
        config: HazanConfig | None = None,
        *,
        dev: Sequence[SentenceFeatures] | None = None,
        logdir: str | os.PathLike | None = None,
        callback: Callable[[HazanTrainer, dict], bool | None] | None = None,
    ) -> None:
        self.config = HazanConfig() if config is None else config
        if len(train) == 0:
            raise ValueError(
                "The training treebank is empty: give at least one sentence. Received: 0 sentences"
            )
        self.train_sentences = list(train)
        self._full_batch = ArcBatch(self.train_sentences, self.config.chunk_size)
        self.dev = None if dev is None else list(dev)
        if self.dev is not None and len(self.dev) == 0:
            raise ValueError(
                "The dev treebank is empty: give at least one sentence or None. Received: 0 sentences"
            )
        self.callback = callback
        self.model = TraceNormModel(self._full_batch.dim)
        self.step_count = 0
        self.history: list[dict] = []
        self.checkpoint_step: int | None = None
        self.logdir = None if logdir is None else pathlib.Path(logdir)
        if self.logdir is not None:
            make_directory(self.logdir)
            if self.checkpoint_path.is_file():
                self._resume()

    @property
    def checkpoint_path(self) -> pathlib.Path:
        """``logdir / checkpoint.npz``."""
        if self.logdir is None:
            raise ValueError("This trainer has no logdir. Received: logdir=None")
        return self.logdir / CHECKPOINT_NAME

    def train(self, steps: int | None = None, progress: bool = False) -> TraceNormModel:
        """Run Frank-Wolfe up to ``steps`` steps in all (default ``config.steps``).

        Args:
            steps: the total number of steps to reach (those of a resumed checkpoint count).
            progress: show a tqdm progress bar (objective, gap, rank) if tqdm is installed.

        Returns:
            The model :attr:`model` (changed in place).

        Raises:
            DivergenceError: if the objective or the weights become NaN or infinite.
        """
        target = self.config.steps if steps is None else check_integer("steps", steps, minimum=0)
        log = None
        if self.logdir is not None:
            log = ProgressLog(self.logdir, PROGRESS_COLUMNS, self.step_count, text_columns=("atom",))
        try:
            self._train(target, log, _progress_bar(target, self.step_count) if progress else None)
        finally:
            if log is not None:
                log.close()
        if self.logdir is not None and self.checkpoint_step != self.step_count:
            self.save()
        return self.model

    def _train(self, target: int, log: ProgressLog | None, bar) -> None:
        """The steps of :meth:`train`, each logged to ``log`` (unless None) and ``bar``."""
        while self.step_count < target:
            record = self.step()
            if (
                self.dev is not None
                and self.config.eval_every
                and self.step_count % self.config.eval_every == 0
            ):
                record["dev_uas"] = evaluate(self.model, self.dev)["uas"]
            self.history.append(record)
            if log is not None:
                log.log({name: record[name] for name in PROGRESS_COLUMNS if name in record})
            if self.logdir is not None and self.step_count % self.config.checkpoint_every == 0:
                self.save()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(
                    objective=f"{record['objective']:.4g}", gap=f"{record['gap']:.3g}", rank=record["rank"]
                )
            if not self._on_step(record):
                break
        if bar is not None:
            bar.close()

    def step(self) -> dict:
        """One Frank-Wolfe step from the current iterate; returns its record (see the class)."""
        config, k = self.config, self.step_count
        started = time.perf_counter()
        batch = self._batch(k)
        scores = arc_scores(self.model, batch)
        if not all(np.isfinite(s).all() for s in scores):
            self._diverged(f"The objective is not finite at step {k + 1}", "objective=nan")
        losses, residuals = example_losses(batch, scores, config.loss)
        result = objective_gradient(batch, scores, residuals, losses)
        if not math.isfinite(result.objective):
            self._diverged(f"The objective is not finite at step {k + 1}", f"objective={result.objective}")
        atom = linear_minimizer(
            result.grad_A,
            result.grad_distance_weights,
            config.C,
            config.lam,
            config.svd,
            config.svd_tol,
            config.seed,
        )
        gap = result.inner + config.C * atom.dual_norm
        gamma, evals = self._step_size(k, batch, scores, atom, gap)
        self.model.scale(1.0 - gamma)
        if atom.kind == "A" and gamma > 0:
            self.model.add_factor(gamma * config.C, atom.left, atom.right)
        self.model.distance_weights += gamma * atom.distance_weights
        self.step_count = k + 1
        self._check_weights()
        if config.compress_every and self.step_count % config.compress_every == 0:
            self.model.compress()
        elapsed = time.perf_counter() - started
        return {
            "step": self.step_count,
            "objective": result.objective,
            "gap": gap,
            "rank": self.model.rank,
            "step_size": gamma,
            "atom": atom.kind,
            "dual_norm": atom.dual_norm,
            "norm_bound": self.model.norm_bound(config.lam),
            "time": (self.history[-1]["time"] if self.history else 0.0) + elapsed,
            "line_search_evals": evals,
        }

    def _on_step(self, record: dict) -> bool:
        """Called after every step (record logged, checkpoint written); False stops training.

        Calls ``callback``; subclasses may override it.
        """
        return self.callback is None or self.callback(self, record) is not False

    def save(self) -> None:
        """Write ``checkpoint.npz`` (refused with a :class:`DivergenceError` for non-finite weights)."""
        self._check_weights()
        save_checkpoint(
            self.checkpoint_path, self.model, self.step_count, self.history, _config_dict(self.config)
        )
        self.checkpoint_step = self.step_count

    # -- the pieces of a step -------------------------------------------------------------

    def _batch(self, k: int) -> ArcBatch:
        size = self.config.batch_size
        if size is None or size >= len(self.train_sentences):
            return self._full_batch
        rng = np.random.default_rng([self.config.seed, k])
        chosen = np.sort(rng.choice(len(self.train_sentences), size=size, replace=False))
        return ArcBatch([self.train_sentences[i] for i in chosen], self.config.chunk_size)

    def _step_size(self, k, batch, scores, atom, gap) -> tuple[float, int]:
        config = self.config
        standard = 2.0 / (k + 2.0)
        if config.step_rule == "standard" or gap <= 0:
            return (standard if gap > 0 else 0.0), 0
        target = _atom_scores(atom, config.C, batch)
        if config.loss == "sparsemap":
            squares = sum(float(np.sum((t - s) ** 2)) for s, t in zip(scores, target, strict=True))
            curvature = squares / len(batch)  # Q: phi' is Q-Lipschitz
            first = min(1.0, gap / curvature) if curvature > 0 else 1.0
        else:
            first = standard
        return _line_search(
            batch,
            scores,
            target,
            gap,
            config.loss,
            first,
            config.line_search_evals,
            config.line_search_rtol,
        )

    def _check_weights(self) -> None:
        """Raise a :class:`DivergenceError` when the iterate holds a NaN or infinite value."""
        model = self.model
        bad = count_non_finite(model.weights, model.left, model.right, model.distance_weights)
        if bad:
            self._diverged(
                f"The weights are not finite after step {self.step_count}", f"non_finite_values={bad}"
            )

    def _diverged(self, what: str, received: str) -> None:
        """Raise a :class:`DivergenceError`: ``what`` happened; the message says which checkpoint is kept."""
        if self.logdir is None:
            kept = "No checkpoint was written (no logdir)."
        elif self.checkpoint_step is None:
            kept = "No checkpoint had been written yet."
        else:
            kept = (
                f"The last good checkpoint, step {self.checkpoint_step}, is kept at '{self.checkpoint_path}'."
            )
        raise DivergenceError(
            f"{what}: training stops. {kept} Check the features and the model for NaN values, or lower C. "
            f"Received: {received}"
        )

    def _resume(self) -> None:
        model, step, history, saved = load_checkpoint(self.checkpoint_path)
        advice = (
            f"The checkpoint '{self.checkpoint_path}' was written with other settings: use another logdir "
            "or the same settings."
        )
        check_resumed_settings(saved or {}, _config_dict(self.config), RESUMABLE_FIELDS, advice=advice)
        if model.dim != self.model.dim:
            raise ValueError(f"{advice} Received: dim={self.model.dim} (the checkpoint's: {model.dim})")
        self.model, self.step_count, self.history, self.checkpoint_step = model, step, history, step


def _config_dict(config: HazanConfig) -> dict:
    return dataclasses.asdict(config)


def _progress_bar(total: int, initial: int):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # an optional dependency
        return None
    return tqdm(total=total, initial=initial, desc="Frank-Wolfe", unit="step")


def train_tracenorm(
    train: Sequence[SentenceFeatures],
    *,
    dev: Sequence[SentenceFeatures] | None = None,
    logdir: str | os.PathLike | None = None,
    progress: bool = False,
    **settings,
) -> tuple[TraceNormModel, list[dict]]:
    """Train the trace-norm parser: ``min F(A, b)`` s.t. ``||A||_* + lam ||b||_2 <= C``.

    A function over :class:`HazanTrainer`.

    Args:
        train: the training sentences' :class:`SentenceFeatures`.
        dev: sentences parsed every ``eval_every`` steps, or None.
        logdir: folder for the CSV log and the checkpoint (resumed if present), or None.
        progress: show a progress bar.
        **settings: fields of :class:`HazanConfig` (``C``, ``lam``, ``steps``, ...).

    Returns:
        ``(model, history)``.

    Raises:
        ValueError: for bad settings or data (see :class:`HazanConfig`).
        DivergenceError: if the objective or the weights become NaN or infinite.

    Example:
        >>> from keras_structured.applications.parsing.bilinear_features import featurize
        >>> from keras_structured.applications.parsing.conllu_reader import Sentence
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> model, history = train_tracenorm(featurize([s], dim=8), C=5.0, steps=20, step_rule="line_search")
        >>> history[-1]["objective"] < history[0]["objective"]
        True
    """
    trainer = HazanTrainer(train, HazanConfig(**settings), dev=dev, logdir=logdir)
    model = trainer.train(progress=progress)
    return model, trainer.history
