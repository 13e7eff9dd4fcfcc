"""Compiled MAP oracles handed to the compiled solver as function addresses.

The compiled solver, :func:`~keras_structured.engine.compiled_active_set._solve_one`,
takes the oracle as the integer address of its machine code rather than as a
function, so one copy of the solver, cached on disk, serves every structure: numba
would otherwise compile, and could not cache, a copy per oracle. An oracle is
compiled (or loaded from numba's disk cache) on its own, for the fixed signature
:data:`ORACLE` (or :data:`PARTS` for a structure's ``parts`` function), and
:func:`function_at` turns the address back into a callable inside compiled code.
"""

from __future__ import annotations

import functools
import logging
import os

import numba as nb
from numba.core import cgutils, errors
from numba.extending import intrinsic

#: The numba versions the compiled solver is tested on (``setup.cfg`` pins the same range).
#: This module is the one place that uses numba's private API (``_get_jit_address``).
SUPPORTED_NUMBA = ">=0.64,<0.69"

try:
    from numba.experimental.function_type import _get_jit_address
except ImportError as error:  # a numba whose private API moved
    raise ImportError(
        f"keras-structured's compiled solver needs numba{SUPPORTED_NUMBA}: it calls numba's private "
        "numba.experimental.function_type._get_jit_address, which this numba lacks. "
        f"Received: numba=={nb.__version__}. Install a supported one: pip install 'numba{SUPPORTED_NUMBA}'."
    ) from error

_LOGGER = logging.getLogger(__name__)

_FLOATS = nb.types.float64[::1]
_INTEGERS = nb.types.int64[::1]
_COUNTS = nb.types.UniTuple(nb.types.int64, 2)

# oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code)
ORACLE = _COUNTS(_FLOATS, _FLOATS, _INTEGERS, _INTEGERS, _INTEGERS, _FLOATS, _INTEGERS, _FLOATS, _INTEGERS)
# parts(code, params, m_indices, m_values, n_indices, n_values)
PARTS = _COUNTS(_INTEGERS, _INTEGERS, _INTEGERS, _FLOATS, _INTEGERS, _FLOATS)


@functools.cache
def address(function, signature: nb.core.typing.Signature) -> int:
    """The address of ``function`` compiled for ``signature`` (:data:`ORACLE` or :data:`PARTS`).

    Compiles ``function`` (a ``numba.njit`` function) for the signature, or loads it from
    numba's disk cache, once per process; the cache of this function keeps it alive.

    Raises:
        TypeError: if ``function`` is not a numba function, does not compile for the
            signature's arguments or returns another type.
    """
    if not isinstance(function, nb.core.registry.CPUDispatcher):
        raise TypeError(f"A compiled oracle must be a numba.njit function. Received: function={function!r}")
    if tuple(signature.args) not in function.overloads:
        announce_compilation(function, f"the MAP oracle {_name(function)}")
    try:  # with the argument types only: the function's own return type, whoever compiled it
        function.compile(signature.args)
    except (errors.NumbaError, TypeError) as error:
        raise TypeError(
            f"The compiled oracle {_name(function)} does not compile for the arguments {signature.args} "
            f"(C-contiguous float64/int64 arrays): {error}"
        ) from error
    returns = function.overloads[tuple(signature.args)].signature.return_type
    if returns != signature.return_type:
        raise TypeError(
            f"A compiled oracle must return two int64 counts, e.g. `return np.int64(1), np.int64(0)` "
            f"(constants alone are typed as literals). Received: {_name(function)} returning {returns}"
        )
    return _get_jit_address(function, signature)


def _function_at(signature: nb.core.typing.Signature):
    """A numba intrinsic that makes an ``address`` (from :func:`address`) callable."""
    function_type = nb.types.FunctionType(signature)

    @intrinsic
    def function_at(typingctx, function_address):
        def codegen(context, builder, sig, args):
            function = cgutils.create_struct_proxy(function_type)(context, builder)
            # Called through jit_addr: numba's own calling convention, which passes
            # exceptions on (the other fields stay null).
            function.jit_addr = builder.inttoptr(args[0], cgutils.voidptr_t)
            return function._getvalue()

        return function_type(nb.types.int64), codegen

    return function_at


oracle_at = _function_at(ORACLE)
parts_at = _function_at(PARTS)


def announce_compilation(dispatcher, what: str) -> None:
    """Say through ``logging`` that ``what`` is compiled (seconds to tens of seconds, once
    per machine) or loaded from numba's disk cache (a fraction of a second)."""
    try:  # numba keeps the index of its disk cache here (not a public API)
        cached = os.path.exists(dispatcher._cache._cache_file._index_path)
    except AttributeError:
        cached = False
    if cached:
        _LOGGER.debug("Loading %s from numba's disk cache.", what)
    else:
        _LOGGER.info(
            "Compiling %s: seconds to tens of seconds, once per machine (numba caches it on disk; "
            "keras_structured.engine.warmup() pays it up front).",
            what,
        )


def _name(function) -> str:
    return f"{function.py_func.__module__}.{function.py_func.__qualname__}"
