"""Keras layers for SparseMAP over structures.

Each layer solves, for every example,

    (u, v) = argmax_{(u, v) in M}  <eta_u, u> + <eta_v, v> - ||u||^2 / 2

over the marginal polytope ``M`` of its structure and returns the unary
marginals ``u`` (a sparse combination of a few structures), differentiable with
the closed-form SparseMAP Jacobian. The MAP oracles run in Python, reached by one host
call per batch (:mod:`keras_structured.ops.host_call`), on every Keras backend:

* TensorFlow: XLA cannot compile the call (``tf.numpy_function``), so the layers set
  ``supports_jit = False``: ``model.compile(jit_compile=True)`` falls back to
  ``jit_compile=False`` with one Keras warning, and a call inside a hand-written
  ``tf.function(jit_compile=True)`` raises a ``ValueError`` naming the layer
  (:mod:`keras_structured.ops.xla`).
* JAX: the call is a ``jax.pure_callback``, which ``jax.jit`` compiles: the layers keep
  ``supports_jit = True`` and train inside the jitted steps of Keras's JAX trainer.
* PyTorch: the call is a ``torch.library`` custom op, which ``torch.compile`` keeps as an
  opaque call: ``supports_jit = True``.

With ``return_structures=True`` a layer also returns its active set: ``weights``
``(batch, k)`` and ``structures`` ``(batch, k, *code_shape)``. The number ``k`` of structures
depends on the data: it is the batch's largest support on TensorFlow and in eager calls, and
the static bound :func:`keras_structured.ops.host_call.max_support` under ``jax.jit`` (the
steps of Keras's JAX trainer, ``predict`` included) and ``torch.compile``, which need the
shapes of the host call's results before the call. ``compute_output_shape`` (the shapes of a
symbolic call, as in a functional model) gives that bound on JAX and None elsewhere.
"""

from __future__ import annotations

import keras

from keras_structured.engine import (
    BudgetStructure,
    DependencyTreeStructure,
    MatchingStructure,
    SequenceStructure,
    SolverOptions,
    Structure,
    structure_from_config,
    structure_to_config,
)
from keras_structured.engine.options import SolverSettings, resolve_options
from keras_structured.layers._masks import check_position_mask, lengths_from_mask
from keras_structured.layers.sequence_scores import SequenceWeights
from keras_structured.ops.host_call import max_support
from keras_structured.ops.sparsemap_op import sparsemap, sparsemap_sequence
from keras_structured.ops.xla import LAYER_FIX, refuse_xla


def _code_shape(structure: Structure, u_shape: tuple, v_shape: tuple) -> tuple:
    """The structure's code shape for scores of these shapes, None where a dimension of the
    codes follows an unknown one of the scores (found with stand-in sizes 2 and 3)."""
    shape = structure.code_shape(u_shape, v_shape)
    if shape is not None:
        return tuple(shape)

    def with_stand_in(size: int) -> tuple:
        u_stand_in = tuple(size if d is None else d for d in u_shape)
        return tuple(structure.code_shape(u_stand_in, structure.v_shape(u_stand_in)))

    return tuple(a if a == b else None for a, b in zip(with_stand_in(2), with_stand_in(3), strict=True))


@keras.saving.register_keras_serializable(package="keras_structured")
class SparseMAP(SolverSettings, keras.layers.Layer):
    """SparseMAP over any structure: returns the unary marginals ``u``.

    Args:
        structure: a :class:`keras_structured.engine.Structure` (or its config dict).
        method: ``"active_set"`` (default) or a Frank-Wolfe variant.
        tol: relative Wolfe-gap tolerance of the solver, a finite number >= 0
            (default 1e-6).
        max_iter: maximum MAP calls per example, an integer >= 1 (default 2500).
        exact_jacobian: run the active set to its finite termination, so that the
            gradient is the exact Jacobian product (default); False stops at
            ``tol``, a few MAP calls cheaper, with an approximate gradient.
        return_structures: also return the active set: the layer then returns a
            dict with ``u``, ``v``, ``weights`` ``(batch, k)`` and ``structures``
            (codes, padded with -1; ``k`` as in the module docstring).
        options: the solver settings as one
            :class:`keras_structured.engine.SolverOptions`, instead of ``method``,
            ``tol``, ``max_iter`` and ``exact_jacobian`` (None leaves a setting to
            ``options``; a keyword that disagrees with it is an error). ``get_config``
            stores the four settings as plain keys.

    Call arguments:
        inputs: ``eta_u`` ``(batch, *u_shape)``, or a list ``[eta_u, eta_v]``.
        lengths: optional integer sizes of padded inputs (see the structure).
        mask: optional Keras mask; structures that know how turn it into lengths.
            It is passed on to the next layer.

    Returns:
        The unary marginals ``u``, shape and dtype of ``eta_u`` (float16 under
        ``mixed_float16``; the solver runs in float32 or float64); with
        ``return_structures=True``, a dict with ``u``, ``v``, ``weights`` and
        ``structures``.

    Raises:
        ValueError: at construction, for a structure that is not one or bad solver
            settings; at call time, for inputs or a mask of the wrong shape, or a call
            inside ``tf.function(jit_compile=True)`` (the MAP oracle runs in Python).
        tf.errors.InvalidArgumentError: at run time, for NaN or ``+inf`` scores, bad
            lengths, or ``-inf`` scores that rule out every structure.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> SparseMAP(SimplexStructure())(np.array([[1.0, 0.5, -1.0]])).numpy()
        array([[0.75, 0.25, 0.  ]], dtype=float32)
        >>> from keras_structured.engine import SolverOptions
        >>> SparseMAP(SimplexStructure(), options=SolverOptions(tol=1e-8)).tol
        1e-08
    """

    supports_masking = True

    def __init__(
        self,
        structure: Structure | dict,
        method: str | None = None,
        tol: float | None = None,
        max_iter: int | None = None,
        exact_jacobian: bool | None = None,
        return_structures: bool = False,
        options: SolverOptions | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # On the instance: keras.layers.Layer.__init__ sets supports_jit = True there, which
        # would hide a class attribute and let jit_compile fail inside fit. Only XLA through
        # TensorFlow cannot compile the host call (see the module docstring).
        self.supports_jit = keras.backend.backend() != "tensorflow"
        if isinstance(structure, dict):
            structure = structure_from_config(structure)
        if not isinstance(structure, Structure):
            raise ValueError(f"structure must be a Structure. Received: structure={structure!r}")
        self.options = resolve_options(
            options, method=method, tol=tol, max_iter=max_iter, exact_jacobian=exact_jacobian
        )
        self.structure = structure
        self.return_structures = bool(return_structures)

    def _solver_options(self) -> dict:
        return dict(options=self.options, return_info=self.return_structures)

    def _lengths(self, mask, inputs):
        """Lengths from a Keras mask, for structures that read them (None: the mask is not used)."""
        return None

    def _split(self, inputs):
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != 2:
                raise ValueError(f"Expected eta_u or [eta_u, eta_v]. Received: {len(inputs)} inputs")
            return inputs[0], inputs[1]
        return inputs, None

    def call(self, inputs, lengths=None, mask=None):
        refuse_xla(type(self).__name__, LAYER_FIX)
        eta_u, eta_v = self._split(inputs)
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        if lengths is None:
            lengths = self._lengths(mask, eta_u)
        return self._package(
            sparsemap(self.structure, eta_u, eta_v, lengths=lengths, **self._solver_options())
        )

    def _package(self, result):
        if not self.return_structures:
            return result[0]
        u, v, info = result
        return {"u": u, "v": v, "weights": info["weights"], "structures": info["structures"]}

    def compute_output_shape(self, input_shape):
        two_inputs = isinstance(input_shape, list) and isinstance(input_shape[0], (list, tuple))
        shape_u = tuple(input_shape[0] if two_inputs else input_shape)
        if not self.return_structures:
            return shape_u
        batch, u_shape = shape_u[0], shape_u[1:]
        v_shape = tuple(input_shape[1][1:]) if two_inputs else tuple(self.structure.v_shape(u_shape))
        static = keras.backend.backend() == "jax" and None not in u_shape  # see the module docstring
        k = max_support(self.options, u_shape) if static else None
        return {
            "u": shape_u,
            "v": (batch, *v_shape),
            "weights": (batch, k),
            "structures": (batch, k, *_code_shape(self.structure, u_shape, v_shape)),
        }

    def compute_mask(self, inputs, mask=None):
        return mask[0] if isinstance(mask, (list, tuple)) else mask

    def get_config(self):
        config = super().get_config()
        config.update(
            structure=structure_to_config(self.structure),
            method=self.method,
            tol=self.tol,
            max_iter=self.max_iter,
            exact_jacobian=self.exact_jacobian,
            return_structures=self.return_structures,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_structured")
class SparseMAPSequence(SequenceWeights, SparseMAP):
    """SparseMAP over label sequences with learned transition (and boundary) scores.

    Solves ``max_{(u, v) in M} <unary', u> + <T, v> - ||u||^2 / 2`` over the
    linear-chain marginal polytope, with a trainable ``(K, K)`` transition matrix
    ``T`` and, with ``use_boundary=True``, trainable start/end scores added to the
    first and last unary scores (``unary'``).

    Called on packed ``(batch, n, K, K + 1)`` scores instead, the output of
    :class:`keras_structured.SequenceScores`, the layer has no weights: it reads the
    transitions (and the boundary scores, already added) from them. A tagger trained
    with ``SparseMAPLoss(SequenceStructure())`` on ``SequenceScores`` outputs thus
    predicts with the weights it learned: ``SparseMAPSequence()(scores)``.

    Args:
        use_boundary: learn start and end label scores (unary inputs only: packed
            scores hold them already).
        transitions_initializer: initializer of ``T`` (unary inputs only).
        Other arguments: see :class:`SparseMAP`.

    Call arguments:
        inputs: ``(batch, n, K)`` unary scores, or packed ``(batch, n, K, K + 1)`` scores.
        mask: ``(batch, n)`` Keras mask of right-padded sequences; padded
            positions get exactly zero marginals and gradients. It is passed on.
        lengths: ``(batch,)`` lengths, instead of a mask.

    Returns:
        The label marginals ``u`` ``(batch, n, K)`` in the compute dtype (a sparse
        combination of a few label sequences; rows of padded positions are zero), or
        with ``return_structures=True`` a dict with ``u``, ``v``, ``weights`` and
        ``structures`` (label sequences padded with -1).

    Raises:
        ValueError: at build time, for inputs that are neither ``(batch, n, K)`` nor
            packed scores with a known ``K``, or ``use_boundary=True`` on packed
            scores; at call time, for a mask that is not ``(batch, n)``, and as for
            :class:`SparseMAP`.
        tf.errors.InvalidArgumentError: at run time, as for :class:`SparseMAP`.

    Example:
        >>> layer = SparseMAPSequence()
        >>> layer(np.zeros((2, 5, 3), "float32")).shape
        TensorShape([2, 5, 3])
        >>> from keras_structured import SequenceScores
        >>> packed = SequenceScores()(np.zeros((2, 5, 3), "float32"))
        >>> SparseMAPSequence()(packed).shape  # the transitions come with the scores
        TensorShape([2, 5, 3])
    """

    def __init__(self, use_boundary: bool = False, transitions_initializer="zeros", **kwargs):
        kwargs.pop("structure", None)
        super().__init__(SequenceStructure(), **kwargs)
        self.use_boundary = bool(use_boundary)
        self.transitions_initializer = keras.initializers.get(transitions_initializer)

    def build(self, input_shape):
        rank = len(input_shape)
        packed = rank == 4
        known = rank in (3, 4) and input_shape[2] is not None
        if not known or (packed and input_shape[3] not in (None, input_shape[2] + 1)):
            raise ValueError(
                "SparseMAPSequence expects unary scores (batch, n, K) or packed scores "
                f"(batch, n, K, K + 1), with known K. Received: input_shape={tuple(input_shape)}"
            )
        if packed and self.use_boundary:
            raise ValueError(
                "SparseMAPSequence(use_boundary=True) learns start and end scores for unary "
                "inputs; packed scores hold them already (SequenceScores(use_boundary=True)). "
                f"Use SparseMAPSequence() on them. Received: input_shape={tuple(input_shape)}"
            )
        if not packed:
            self._build_sequence_weights(input_shape[2])
        self.built = True

    def call(self, inputs, lengths=None, mask=None):
        refuse_xla(type(self).__name__, LAYER_FIX)
        check_position_mask(type(self).__name__, mask, inputs)
        if lengths is None:
            lengths = lengths_from_mask(mask)
        if len(inputs.shape) == 4:
            unary, pairwise = self.structure.split_scores(inputs)
            result = sparsemap(self.structure, unary, pairwise, lengths=lengths, **self._solver_options())
        else:
            result = sparsemap_sequence(
                inputs, self.transitions, lengths=lengths, **self._boundary(), **self._solver_options()
            )
        return self._package(result)

    def compute_output_shape(self, input_shape):
        return super().compute_output_shape(tuple(input_shape)[:3])

    def get_config(self):
        config = super().get_config()
        del config["structure"]
        config.update(
            use_boundary=self.use_boundary,
            transitions_initializer=keras.initializers.serialize(self.transitions_initializer),
        )
        return config


class _FixedStructureLayer(SparseMAP):
    """A SparseMAP layer whose structure is built from the layer's own arguments."""

    structure_arguments: tuple[str, ...] = ()

    def __init__(self, structure: Structure, **kwargs):
        kwargs.pop("structure", None)
        super().__init__(structure, **kwargs)

    def get_config(self):
        config = super().get_config()
        del config["structure"]
        config.update(self.structure.get_config())
        return config


@keras.saving.register_keras_serializable(package="keras_structured")
class SparseMAPDependencyTree(_FixedStructureLayer):
    """SparseMAP over dependency trees: a sparse combination of a few parse trees.

    Solves ``max_{u in M} <scores, u> - ||u||^2 / 2`` over the arborescence
    polytope (non-projective, Chu-Liu-Edmonds oracle) or the projective one
    (Eisner oracle); ``u[b, h, d]`` is the weight of arc ``h -> d``.

    Args:
        single_root: exactly one word attaches to the root (as in UD).
        projective: restrict to projective trees.
        Other arguments: see :class:`SparseMAP`.

    Call arguments:
        inputs: ``(batch, n + 1, n + 1)`` arc scores ``[head, modifier]``, index 0
            the root; ``-inf`` forbids an arc.
        mask: ``(batch, n + 1)`` token mask (root included) of right-padded
            sentences.
        lengths: ``(batch,)`` number of words, instead of a mask.

    Returns:
        Arc marginals ``u`` ``(batch, n + 1, n + 1)`` ``[head, modifier]`` in the
        compute dtype: a sparse combination of a few trees, zero on padding.

    Raises:
        ValueError: at call time, for a mask that is not ``(batch, n + 1)``, and as
            for :class:`SparseMAP`.
        tf.errors.InvalidArgumentError: at run time, as for :class:`SparseMAP`.

    Example:
        >>> u = SparseMAPDependencyTree()(np.zeros((1, 4, 4), "float32"))
        >>> u.numpy()[0, :, 1:].sum(axis=0)  # every word has one head in total
        array([1., 1., 1.], dtype=float32)
    """

    def __init__(self, single_root: bool = False, projective: bool = False, **kwargs):
        super().__init__(DependencyTreeStructure(single_root=single_root, projective=projective), **kwargs)

    def _lengths(self, mask, inputs):
        check_position_mask(type(self).__name__, mask, inputs)
        return lengths_from_mask(mask, offset=1)


@keras.saving.register_keras_serializable(package="keras_structured")
class SparseMAPMatching(_FixedStructureLayer):
    """SparseMAP over bipartite matchings (alignments), with a Jonker-Volgenant MAP oracle.

    Solves ``max_{u in M} <scores - t, u> - ||u||^2 / 2`` over the (partial)
    matching polytope: with ``unmatched_score=t`` items may stay unmatched and a
    pair is only worth its score above ``t``; without it, every item of the
    smaller side is matched.

    Args:
        unmatched_score: optional threshold ``t``.
        Other arguments: see :class:`SparseMAP`.

    Call arguments:
        inputs: ``(batch, m, n)`` pair scores; ``-inf`` forbids a pair.
        lengths: ``(batch, 2)`` numbers of rows and columns of padded inputs.

    Returns:
        Pair marginals ``u`` ``(batch, m, n)`` in the compute dtype: a sparse
        combination of a few matchings.

    Raises:
        ValueError: as for :class:`SparseMAP`.
        tf.errors.InvalidArgumentError: at run time, as for :class:`SparseMAP`.

    Example:
        >>> u = SparseMAPMatching()(np.eye(3, dtype="float32")[None] * 5)
        >>> u.numpy()[0].diagonal()
        array([1., 1., 1.], dtype=float32)
    """

    def __init__(self, unmatched_score: float | None = None, **kwargs):
        self.unmatched_score = None if unmatched_score is None else float(unmatched_score)
        threshold = None if unmatched_score is None else 0.0
        super().__init__(MatchingStructure(unmatched_score=threshold), **kwargs)

    def call(self, inputs, lengths=None, mask=None):
        if self.unmatched_score is not None:
            inputs = inputs - keras.ops.cast(self.unmatched_score, inputs.dtype)
        return super().call(inputs, lengths=lengths, mask=mask)

    def get_config(self):
        config = super().get_config()
        config["unmatched_score"] = self.unmatched_score
        return config


@keras.saving.register_keras_serializable(package="keras_structured")
class SparseMAPBudget(_FixedStructureLayer):
    """SparseMAP over binary vectors with exactly (or at most) ``k`` ones.

    Solves ``max_{u in M} <scores, u> - ||u||^2 / 2`` over the budget polytope
    ``{u in [0, 1]^d : sum(u) = k}`` (``<= k`` with ``exact=False``): a sparse,
    differentiable top-k selection.

    Args:
        k: the budget.
        exact: exactly ``k`` ones (True) or at most ``k``.
        Other arguments: see :class:`SparseMAP`.

    Call arguments:
        inputs: ``(batch, d)`` scores.
        mask: ``(batch, d)`` mask of right-padded items (never selected).
        lengths: ``(batch,)`` numbers of items, instead of a mask.

    Returns:
        Selection marginals ``u`` ``(batch, d)`` in ``[0, 1]``, summing to ``k`` (at
        most ``k`` with ``exact=False``), in the compute dtype.

    Raises:
        ValueError: at construction, for a bad ``k``; at call time, for a mask that is
            not ``(batch, d)``, and as for :class:`SparseMAP`.
        tf.errors.InvalidArgumentError: at run time, as for :class:`SparseMAP`.

    Example:
        >>> SparseMAPBudget(k=2)(np.array([[3.0, 2.0, -1.0, 0.0]], "float32")).numpy()
        array([[1., 1., 0., 0.]], dtype=float32)
    """

    def __init__(self, k: int, exact: bool = True, **kwargs):
        super().__init__(BudgetStructure(k=k, exact=exact), **kwargs)

    def _lengths(self, mask, inputs):
        check_position_mask(type(self).__name__, mask, inputs)
        return lengths_from_mask(mask)
