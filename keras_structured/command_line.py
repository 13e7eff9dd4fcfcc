"""Option types for command lines: values that cannot work are refused when parsed.

``argparse`` then names the option in its message, e.g. ``argument --learning-rate: must be a
finite number > 0. Received: 'inf'``, instead of a run that diverges or fails deep inside
TensorFlow.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("--learning-rate", type=number(minimum=0, open_minimum=True))
    >>> _ = parser.add_argument("--seed", type=integer(minimum=0))
    >>> parser.parse_args(["--learning-rate", "1e-3", "--seed", "2"])
    Namespace(learning_rate=0.001, seed=2)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from keras_structured.validation import check_integer, check_number

__all__ = ["integer", "number"]


def _option_type(
    cast: Callable[[str], float | int], check: Callable[..., float | int], name: str, **bounds
) -> Callable[[str], float | int]:
    """The ``argparse`` type that casts the option's text and checks it with ``check``."""

    def parse(text: str) -> float | int:
        try:
            value = cast(text)
        except ValueError:
            value = text  # refused by the check, with its requirement
        try:
            return check("value", value, **bounds)
        except ValueError as error:
            message = str(error).split(". Received:")[0].removeprefix("value ")
            raise argparse.ArgumentTypeError(f"{message}. Received: {text!r}") from None

    parse.__name__ = name
    return parse


def number(
    minimum: float | None = None,
    maximum: float | None = None,
    open_minimum: bool = False,
    open_maximum: bool = False,
) -> Callable[[str], float]:
    """An ``argparse`` type: a finite real number in the given interval (NaN and inf refused).

    Args:
        minimum, maximum: the bounds, or None.
        open_minimum, open_maximum: exclude the bound itself.

    Returns:
        A function from the option's text to a ``float``.
    """
    return _option_type(
        float,
        check_number,
        "number",
        minimum=minimum,
        maximum=maximum,
        open_minimum=open_minimum,
        open_maximum=open_maximum,
    )


def integer(minimum: int | None = None) -> Callable[[str], int]:
    """An ``argparse`` type: an integer ``>= minimum``.

    Args:
        minimum: the smallest value allowed, or None.

    Returns:
        A function from the option's text to an ``int``.
    """
    return _option_type(int, check_integer, "integer", minimum=minimum)
