"""Argument checks shared by the library, with Keras-style messages.

Two kinds of checks, as in Keras and TFP:

* **Static checks** of plain Python arguments (counts, tolerances, margins, choices)
  run at once, in the constructor or at trace time, and cost no graph op. They raise
  ``ValueError("{name} must be {requirement}. Received: {name}={value!r}")`` and return
  the value normalised (``int`` or ``float``), so that callers store what they checked.
* **Value checks** on tensors (NaN, infinities) are graph ops that run at every call;
  they are added only when the caller asks with ``validate_args=True``
  (:func:`assert_finite`), the convention of ``tfp.distributions``.

Data files are read by :func:`read_utf8`, which names the line of a byte that is not UTF-8.

This module imports no TensorFlow at import time: the numpy engine uses it too.

Example:
    >>> check_integer("max_iter", 10, minimum=1)
    10
    >>> check_number("margin", 1.0, minimum=0.0, maximum=1.0, open_maximum=True)
    Traceback (most recent call last):
    ...
    ValueError: margin must be a number in [0, 1). Received: margin=1.0
"""

from __future__ import annotations

import math
import numbers
import os
import pathlib
from collections.abc import Collection
from typing import Any

import numpy as np

__all__ = ["assert_finite", "check_bool", "check_integer", "check_number", "check_one_of", "read_utf8"]


def _raise(name: str, requirement: str, value: Any) -> None:
    raise ValueError(f"{name} must be {requirement}. Received: {name}={value!r}")


def check_integer(
    name: str, value: Any, minimum: int | None = None, *, allow_none: bool = False
) -> int | None:
    """``value`` as an ``int``, checked to be an integer (not a bool) ``>= minimum``.

    Args:
        name: the argument's name, for the message.
        value: the value received: a Python or numpy integer.
        minimum: the smallest value allowed, or None for any integer.
        allow_none: also accept None (returned as is).

    Returns:
        ``int(value)``, or None when ``value`` is None and ``allow_none``.

    Raises:
        ValueError: if ``value`` is not an integer (floats such as ``2.0`` and bools are
            refused) or is below ``minimum``.

    Example:
        >>> check_integer("units", 3, minimum=1)
        3
    """
    if value is None and allow_none:
        return None
    requirement = "an integer" if minimum is None else f"an integer >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        _raise(name, requirement, value)
    if minimum is not None and value < minimum:
        _raise(name, requirement, value)
    return int(value)


def _interval(minimum, maximum, open_minimum: bool, open_maximum: bool) -> str:
    if minimum is not None and maximum is not None:
        left, right = "(" if open_minimum else "[", ")" if open_maximum else "]"
        return f"a number in {left}{minimum:g}, {maximum:g}{right}"
    if minimum is not None:
        return f"a finite number {'>' if open_minimum else '>='} {minimum:g}"
    if maximum is not None:
        return f"a finite number {'<' if open_maximum else '<='} {maximum:g}"
    return "a finite number"


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    open_minimum: bool = False,
    open_maximum: bool = False,
    allow_none: bool = False,
) -> float | None:
    """``value`` as a ``float``, checked to be a finite real number in the given interval.

    Args:
        name: the argument's name, for the message.
        value: the value received: a Python or numpy real number (not a bool, not a tensor).
        minimum: the lower bound, or None.
        maximum: the upper bound, or None.
        open_minimum: exclude ``minimum`` itself (``> minimum``).
        open_maximum: exclude ``maximum`` itself (``< maximum``).
        allow_none: also accept None (returned as is).

    Returns:
        ``float(value)``, or None when ``value`` is None and ``allow_none``.

    Raises:
        ValueError: if ``value`` is not a real number, is NaN or infinite, or lies
            outside the interval.

    Example:
        >>> check_number("tol", 0, minimum=0.0)
        0.0
    """
    if value is None and allow_none:
        return None
    requirement = _interval(minimum, maximum, open_minimum, open_maximum)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _raise(name, requirement, value)
    number = float(value)
    if not math.isfinite(number):
        _raise(name, requirement, value)
    if minimum is not None and (number <= minimum if open_minimum else number < minimum):
        _raise(name, requirement, value)
    if maximum is not None and (number >= maximum if open_maximum else number > maximum):
        _raise(name, requirement, value)
    return number


def check_one_of(name: str, value: Any, choices: Collection) -> Any:
    """``value``, checked to be one of ``choices``.

    Args:
        name: the argument's name, for the message.
        value: the value received.
        choices: the allowed values (listed sorted in the message).

    Returns:
        ``value``.

    Raises:
        ValueError: if ``value`` is not in ``choices`` (unhashable values included).

    Example:
        >>> check_one_of("method", "active_set", ("active_set", "frank_wolfe"))
        'active_set'
    """
    try:
        known = value in choices
    except TypeError:  # an unhashable value cannot be a key of a dict of choices
        known = False
    if not known:
        _raise(name, f"one of {sorted(choices)}", value)
    return value


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a ``bool``, checked to be a Python or numpy boolean.

    Args:
        name: the argument's name, for the message.
        value: the value received.

    Returns:
        ``bool(value)``.

    Raises:
        ValueError: for anything but ``True``, ``False`` or a numpy boolean (``1`` and
            ``"yes"`` are refused: they usually mean an argument in the wrong place).

    Example:
        >>> check_bool("exact_jacobian", False)
        False
    """
    if not isinstance(value, (bool, np.bool_)):
        _raise(name, "True or False", value)
    return bool(value)


def assert_finite(x, message: str, validate_args: bool):
    """``x``, with a run-time check that it has no NaN or infinite entry when ``validate_args``.

    Without ``validate_args`` the tensor is returned as is and no graph op is added (the
    TFP convention: value checks cost work at every call, so the caller opts in).

    Args:
        x: a floating-point tensor.
        message: the error message, naming the offending input.
        validate_args: whether to add the check.

    Returns:
        ``x``, or ``tf.debugging.assert_all_finite(x, message)``.

    Raises:
        tf.errors.InvalidArgumentError: at run time, with ``validate_args``, if ``x`` has
            a NaN or infinite entry.

    Example:
        >>> import tensorflow as tf
        >>> assert_finite(tf.constant([1.0, float("nan")]), "x has NaN", validate_args=False).shape
        TensorShape([2])
    """
    if not validate_args:
        return x
    import tensorflow as tf  # only here: the numpy engine imports this module too

    return tf.debugging.assert_all_finite(x, message)


def read_utf8(path: str | os.PathLike, where: str = "{path}:{line}") -> str:
    """The text of a UTF-8 file, a leading byte-order mark dropped, or an error naming the bad line.

    Args:
        path: the file.
        where: how the message names the place of an undecodable byte, a format string with
            the fields ``path`` and ``line`` (the reader's own convention, e.g.
            ``"{path}, line {line}"``).

    Returns:
        The decoded text, line ends as in the file.

    Raises:
        ValueError: for bytes that are not UTF-8, naming the line (counted from 1) and the
            byte offset in the file.

    Example:
        >>> import tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"
        >>> _ = path.write_bytes(b"\\xef\\xbb\\xbfcaf\\xc3\\xa9 au lait")  # a byte-order mark, then UTF-8
        >>> read_utf8(path)
        'café au lait'
        >>> _ = path.write_bytes(b"ok\\ncaf\\xe9")  # Latin-1
        >>> read_utf8(path, where="line {line}")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: line 2: the file is not valid UTF-8: byte 0xe9 at byte offset 6 ...
    """
    data = pathlib.Path(path).read_bytes()
    try:
        return data.decode("utf-8").removeprefix("\ufeff")  # not utf-8-sig: its offsets skip the mark
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        location = where.format(path=path, line=line)
        raise ValueError(
            f"{location}: the file is not valid UTF-8: byte 0x{data[error.start]:02x} at byte offset "
            f"{error.start} ({error.reason}). Expected: a UTF-8 encoded text file (re-encode it as UTF-8). "
            f"Received: path='{path}'"
        ) from None
