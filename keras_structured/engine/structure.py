"""The structure protocol: everything the SparseMAP solvers know about a structure.

A structured output space is the set of vertices ``a_s = [m_s; n_s]`` of a
marginal polytope. ``m_s`` (the *unary* part, shape ``u_shape``) carries the
quadratic penalty of SparseMAP; ``n_s`` (the *higher-order* part, shape
``v_shape``, possibly empty) does not. A structure only has to provide

* a MAP oracle ``argmax_s <eta_u, m_s> + <eta_v, n_s>`` on a batch of scores, returning
  a compact integer code per example (for instance the label sequence), and
* the indicator vectors ``(m_s, n_s)`` of a batch of codes.

Codes that come from users (the gold structures of a loss) are checked by
:meth:`Structure.validate_codes` before they are turned into indicator vectors.

Both receive optional per-example ``lengths`` (integers, shape ``(batch,)`` or
``(batch, d)``) for variable-size inputs padded to a common shape: padded parts
of the indicator vectors must be zero, and padded parts of the codes must be a
fixed value (so that equal structures have equal codes).

The solvers never look inside a structure: they only call these two methods.

A few more facts, with defaults that suit most structures, let the TensorFlow ops
and losses treat every structure alike (no code outside a structure's own file
asks which structure it holds):

* :attr:`Structure.lengths_from_codes`: whether codes are ``-1`` exactly at the
  padding, so that a loss reads the lengths of a padded batch from its labels;
* :meth:`Structure.code_shape`: the per-example shape of a code for given score
  shapes (for static shapes and empty batches);
* :meth:`Structure.split_scores`: how a loss's single ``y_pred`` tensor holds
  ``(eta_u, eta_v)`` (default: ``eta_u`` alone).
"""

from __future__ import annotations

import warnings

import numpy as np

from keras_structured.engine.compiled_oracle import indicators_compiled, map_compiled

_REGISTRY: dict[str, type] = {}


class Structure:
    """Base class of the structures that SparseMAP can solve over.

    Subclasses implement either :meth:`compiled_oracle` (then :meth:`map` runs its oracle
    on every example, and :meth:`indicators` its ``parts`` on every code) or :meth:`map`
    and :meth:`indicators`, on batches, and may
    override :meth:`validate_shapes`, :meth:`validate_lengths`, :meth:`validate_codes`,
    :meth:`v_shape`, :meth:`code_shape`, :meth:`split_scores`, :attr:`lengths_from_codes`
    and :meth:`get_config` (constructor arguments, for serialization). Every subclass is
    registered by class name for :func:`structure_from_config`; the newest definition of a
    name wins, with a warning when it comes from another module.
    """

    #: dtype of the codes returned by :meth:`map`.
    code_dtype = np.int64

    #: Whether codes are ``(batch, n)`` vectors, ``n = u_shape[0]``, that hold ``-1``
    #: exactly at the padding (and at fixed positions of every structure, such as a
    #: tree's root), so that the lengths of a padded batch are the per-example counts of
    #: nonnegative codes. Losses then read the lengths from the labels ``y_true``
    #: (sequences and dependency trees); otherwise they pass no lengths.
    lengths_from_codes: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        earlier = _REGISTRY.get(cls.__name__)
        if earlier is not None and earlier.__module__ != cls.__module__:
            warnings.warn(
                f"Structure class name {cls.__name__!r} of module {cls.__module__!r} replaces the one of "
                f"module {earlier.__module__!r}: saved models with this name will rebuild the new class. "
                "Give structures distinct class names.",
                stacklevel=2,
            )
        _REGISTRY[cls.__name__] = cls

    def map(self, eta_u: np.ndarray, eta_v: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        """Return the highest-scoring structure of every example.

        Structures with a :meth:`compiled_oracle` inherit this method, which runs that
        oracle on every example (the solver's own oracle); the others implement it.

        Args:
            eta_u: unary scores, shape ``(batch, *u_shape)``.
            eta_v: higher-order scores, shape ``(batch, *v_shape)`` (None: zeros for the
                inherited method).
            lengths: optional per-example sizes (see the module docstring).

        Returns:
            Integer codes, shape ``(batch, ...)``: one code per example that
            :meth:`indicators` turns back into indicator vectors.
        """
        eta_u = np.asarray(eta_u, dtype=np.float64)
        if eta_v is None:
            eta_v = np.zeros(eta_u.shape[:1] + tuple(self.v_shape(eta_u.shape[1:])))
        compiled = self.compiled_oracle(eta_u.shape[1:], np.shape(eta_v)[1:])
        if compiled is None:
            raise NotImplementedError(f"{type(self).__name__} must implement map() or compiled_oracle().")
        return map_compiled(compiled, eta_u, eta_v, lengths)

    def indicators(
        self,
        codes: np.ndarray,
        u_shape: tuple[int, ...],
        v_shape: tuple[int, ...],
        lengths: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the indicator vectors ``(m_s, n_s)`` of a batch of codes.

        Structures whose :meth:`compiled_oracle` has ``parts`` inherit this method: the
        one routine that turns codes into parts, as their oracle does. The others
        implement it.

        Args:
            codes: the output of :meth:`map`.
            u_shape: per-example shape of the unary part.
            v_shape: per-example shape of the higher-order part.
            lengths: optional per-example sizes, as given to :meth:`map` (codes are
                already -1 past them).

        Returns:
            ``(m, n)`` with shapes ``(batch, *u_shape)`` and ``(batch, *v_shape)``.
        """
        compiled = self.compiled_oracle(tuple(u_shape), tuple(v_shape))
        if compiled is None or compiled.parts is None:
            raise NotImplementedError(
                f"{type(self).__name__} must implement indicators() or a compiled oracle with parts."
            )
        return indicators_compiled(compiled, np.asarray(codes), tuple(u_shape), tuple(v_shape))

    def compiled_oracle(self, u_shape: tuple[int, ...], v_shape: tuple[int, ...]):
        """A :class:`~keras_structured.engine.compiled_oracle.CompiledOracle`, or None.

        Structures whose MAP oracle is compiled with numba return it here, and the
        active-set solver then runs entirely in compiled code.
        """
        return None

    def v_shape(self, u_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Per-example shape of the higher-order part for unary shape ``u_shape``."""
        return (0,)

    def code_shape(self, u_shape: tuple, v_shape: tuple) -> tuple[int, ...] | None:
        """Per-example shape of the codes of :meth:`map` for scores of these shapes.

        The default reads it from :meth:`compiled_oracle` when there is one (no
        compilation), and otherwise from one :meth:`map` call on zero scores.

        Args:
            u_shape: per-example shape of the unary scores; dimensions may be None.
            v_shape: per-example shape of the higher-order scores; dimensions may be None.

        Returns:
            The code shape, or None when a dimension is unknown (None).

        Example:
            >>> from keras_structured.engine import SequenceStructure
            >>> structure = SequenceStructure()
            >>> structure.code_shape((5, 3), (4, 3, 3)), structure.code_shape((None, 3), (None, 3, 3))
            ((5,), None)
        """
        u_shape, v_shape = tuple(u_shape), tuple(v_shape)
        if None in u_shape or None in v_shape:
            return None
        u_shape, v_shape = tuple(int(d) for d in u_shape), tuple(int(d) for d in v_shape)
        compiled = self.compiled_oracle(u_shape, v_shape)
        if compiled is not None:
            return tuple(int(d) for d in compiled.code_shape)
        return tuple(self.map(np.zeros((1,) + u_shape), np.zeros((1,) + v_shape)).shape[1:])

    def split_scores(self, y_pred):
        """``(eta_u, eta_v)`` from the one score tensor ``y_pred`` that a loss receives.

        The default is ``(y_pred, None)``: ``y_pred`` holds the unary scores and the
        higher-order ones are zeros (or absent). Structures with higher-order scores
        override this with their packed layout. Overrides use plain indexing and
        slicing only, so that it works on numpy arrays and TensorFlow tensors alike.

        Args:
            y_pred: ``(batch, ...)`` scores, a numpy array or a tensor.

        Returns:
            ``(eta_u, eta_v)``, ``eta_v`` None for zero higher-order scores.

        Raises:
            ValueError: when ``y_pred`` has the wrong rank or shape for the layout.

        Example:
            >>> from keras_structured.engine import SimplexStructure
            >>> SimplexStructure().split_scores(np.zeros((2, 3)))[1] is None
            True
        """
        return y_pred, None

    def validate_shapes(self, u_shape: tuple, v_shape: tuple) -> None:
        """Raise ``ValueError`` when the score shapes do not fit the structure.

        Dimensions may be ``None`` (unknown until run time); they are not checked.
        """
        expected = self.v_shape(tuple(u_shape))
        if len(v_shape) != len(expected) or any(
            a is not None and b is not None and a != b for a, b in zip(v_shape, expected, strict=False)
        ):
            raise ValueError(
                f"{type(self).__name__} expects higher-order scores of per-example "
                f"shape {expected} for unary scores of shape {tuple(u_shape)}. "
                f"Received: eta_v per-example shape={tuple(v_shape)}"
            )

    def validate_lengths(self, lengths: np.ndarray, u_shape: tuple) -> None:
        """Raise ``ValueError`` when ``lengths`` do not fit the structure (default: no lengths)."""
        raise ValueError(f"{type(self).__name__} does not take lengths. Received: lengths={lengths!r}")

    def present_parts(self, lengths: np.ndarray, u_shape: tuple) -> np.ndarray | None:
        """``(len(lengths), *u_shape)`` booleans: the unary parts that the structures of each
        length can use (default: None, the structure takes no lengths)."""
        return None

    def lengths_from_mask(self, mask: np.ndarray) -> np.ndarray | None:
        """The lengths whose :meth:`present_parts` are the parts present in ``mask``.

        LP-SparseMAP's masks say which variables each example has; a structure factor over
        some absent ones runs at the length that leaves them out (the parts no structure
        uses, such as a tree's diagonal, are not compared).

        Args:
            mask: ``(batch, *u_shape)`` booleans, True for the parts present.

        Returns:
            ``(batch,)`` lengths, or None for a structure without lengths (its absent parts
            are then held at zero as constraints).

        Raises:
            ValueError: when an example's present parts are those of no length.
        """
        u_shape = mask.shape[1:]
        candidates = self.present_parts(np.arange(u_shape[0] + 1), u_shape)
        if candidates is None:
            return None
        used = mask & candidates[-1]
        matches = (used[:, None] == candidates[None]).reshape(mask.shape[0], candidates.shape[0], -1).all(-1)
        if not matches.any(axis=1).all():
            example = int(np.flatnonzero(~matches.any(axis=1))[0])
            raise ValueError(
                f"The variables present in example {example} are not those of a {type(self).__name__} "
                f"of any length (the parts of its first L positions, for some L). "
                f"Received: mask over the factor's parts={mask[example].astype(int).tolist()}"
            )
        return matches.argmax(axis=1)

    def validate_codes(
        self, codes: np.ndarray, u_shape: tuple, lengths: np.ndarray | None = None, name: str = "codes"
    ) -> None:
        """Raise ``ValueError`` unless ``codes`` are the codes of structures (default: finite codes).

        Structures whose :meth:`indicators` would misread invalid codes (an index out
        of range, a cycle) override this with a check linear in the size of ``codes``
        that names the first invalid example, by :func:`raise_for_invalid_codes`.

        Args:
            codes: ``(batch, ...)`` codes, in the format of :meth:`map`'s output.
            u_shape: per-example shape of the unary part (static).
            lengths: optional per-example sizes, as given to :meth:`indicators`.
            name: the codes' argument name, for error messages (``"y_true"`` in losses).
        """
        finite = np.isfinite(codes).all(axis=tuple(range(1, codes.ndim)))
        raise_for_invalid_codes(~finite, codes, name, "finite values")

    def get_config(self) -> dict:
        """Constructor arguments, for serialization."""
        return {}


def raise_for_invalid_codes(invalid, codes: np.ndarray, name: str, expected: str) -> None:
    """Raise ``ValueError`` naming the first example whose codes are invalid.

    Args:
        invalid: ``(batch,)`` booleans, True for the examples with invalid codes; or
            one boolean for them all (whether ``codes`` have a wrong per-example shape,
            to be checked before values are).
        codes: ``(batch, ...)`` codes.
        name: their argument name.
        expected: what valid codes are, completing "``name`` must hold ...".
    """
    invalid = np.broadcast_to(invalid, codes.shape[:1])
    if invalid.any():
        b = int(np.argmax(invalid))
        received = f"{name}[{b}]={codes[b].tolist()} ({name}.shape={codes.shape})"
        raise ValueError(f"{name} must hold {expected}. Received: {received}")


def structure_to_config(structure: Structure) -> dict:
    """Serializable description of a structure: its class name and constructor arguments."""
    return {"class_name": type(structure).__name__, "config": structure.get_config()}


def structure_from_config(config: dict) -> Structure:
    """Rebuild a structure from :func:`structure_to_config` output.

    Example:
        >>> from keras_structured.engine import SequenceStructure
        >>> type(structure_from_config(structure_to_config(SequenceStructure()))).__name__
        'SequenceStructure'
    """
    name = config.get("class_name")
    if name not in _REGISTRY:
        raise ValueError(
            f"Unknown structure class; define or import it before loading. Received: class_name={name!r}"
        )
    return _REGISTRY[name](**config.get("config", {}))
