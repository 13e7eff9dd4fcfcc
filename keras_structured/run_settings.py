"""The settings a resumed run may change: one rule for every resumable run of the project.

A run resumed from its directory continues with the settings it was started with (its
``config.json`` or its checkpoint's copy of them): otherwise its log and its checkpoints would
mix two runs. Only settings that say how long it trains may change, in one of two ways:

- ``may_change``: any new value (RL's step budget, the trace-norm parser's step count and
  evaluation interval);
- ``may_grow``: a value at least the stored one (the parser's and NLI's ``epochs``,
  ``patience`` and ``min_epochs``: a larger budget extends the run, a smaller one is refused,
  since epochs past it may have run).

Keras's :class:`keras.callbacks.BackupAndRestore` resumes ``model.fit`` but compares no
settings: a resumed call with another learning rate or another dataset continues silently.

The settings are read back from their JSON file by :func:`read_settings`, which refuses a file
that was damaged or edited into settings that cannot work (not UTF-8, not JSON, cut short, a
key that is not a setting, a value of another type), naming the file, the setting and the
value; a byte-order mark and settings missing from the file (added since the run started,
which take their default) are harmless.

Example:
    >>> check_resumed_settings({"seed": 0, "epochs": 5}, {"seed": 0, "epochs": 8}, may_grow=["epochs"])
    {'epochs': (5, 8)}
    >>> check_resumed_settings({"seed": 0}, {"seed": 1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: A resumed run keeps its settings (none may change). These differ ...: seed=1
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from keras_structured.run_directory import read_text

SettingsT = TypeVar("SettingsT")


def _allowed(may_change: Collection[str], may_grow: Collection[str]) -> str:
    parts = [", ".join(may_change)] if may_change else []
    if may_grow:
        parts.append(f"a larger {', '.join(may_grow)}")
    return " or ".join(parts) + " may change" if parts else "none may change"


def check_resumed_settings(
    stored: Mapping[str, Any],
    given: Mapping[str, Any],
    may_change: Collection[str] = (),
    may_grow: Collection[str] = (),
    advice: str = "",
) -> dict[str, tuple[Any, Any]]:
    """The settings a resumed run changes, after refusing any change it may not make.

    Args:
        stored: the run's settings, by name.
        given: the settings of the resume, by name; names missing from ``stored`` (settings
            added since the run started) are not compared.
        may_change: settings that may take any new value.
        may_grow: settings that may take a value at least the stored one.
        advice: what to do instead, appended to the message.

    Returns:
        The changed settings, ``{name: (stored, given)}`` (all allowed).

    Raises:
        ValueError: a setting changed that may not (all of them named, stored and given).
    """
    changed = {
        name: (stored[name], value)
        for name, value in given.items()
        if name in stored and stored[name] != value
    }
    refused = {
        name: values
        for name, values in changed.items()
        if name not in may_change and not (name in may_grow and values[1] >= values[0])
    }
    if refused:
        received = ", ".join(f"{name}={given_value!r}" for name, (_, given_value) in refused.items())
        raise ValueError(
            f"A resumed run keeps its settings ({_allowed(may_change, may_grow)}). These differ "
            f"(stored, given): {refused}. {advice}{' ' if advice else ''}Received: {received}"
        )
    return changed


def read_json_object(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object that the file ``path`` holds (a byte-order mark before it is skipped).

    Args:
        path: the file.

    Returns:
        The object, a ``dict``.

    Raises:
        FileNotFoundError: there is no such file.
        ValueError: the file is not UTF-8 (:func:`~keras_structured.run_directory.read_text`),
            not JSON (cut short, say) or not an object: the message names the file and where
            it goes wrong.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "config.json"
        >>> _ = path.write_bytes(b'\\xef\\xbb\\xbf{"seed": 0}')  # a byte-order mark
        >>> read_json_object(path)
        {'seed': 0}
        >>> _ = path.write_text('{"seed": ')
        >>> read_json_object(path)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: '...' is not a JSON file (cut short or edited?): Expecting value (line 1, column 10)...
    """
    text = read_text(path)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{str(path)!r} is not a JSON file (cut short or edited?): {error.msg} (line {error.lineno}, "
            f"column {error.colno}). Received: {text[error.pos : error.pos + 20]!r}"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{str(path)!r} must hold a JSON object. Received: {type(value).__name__} {value!r:.40}"
        )
    return value


def _conforms(value: Any, hint: Any) -> bool:
    """Whether the JSON ``value`` is of the type ``hint`` (``int``, ``float``, ``str``, ``bool``,
    ``X | None``, ``tuple[X, ...]``; an int is a float, a bool is no number)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_conforms(value, arm) for arm in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return isinstance(value, (list, tuple)) and all(_conforms(v, typing.get_args(hint)[0]) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_name(hint: Any) -> str:
    """``int``, ``int | None``, ``tuple[int, ...]``."""
    return hint.__name__ if isinstance(hint, type) else str(hint)


def read_settings(
    path: str | os.PathLike,
    settings_class: type[SettingsT],
    check: Callable[[SettingsT], object] | None = None,
) -> SettingsT:
    """The settings of a run, read from their JSON file (``config.json``).

    Args:
        path: the file, an object of settings by name (:func:`read_json_object`).
        settings_class: their dataclass, built from the file's values (lists become tuples
            where the field is a tuple); settings missing from the file take their default.
        check: called with the settings, raises ``ValueError`` for values that cannot work
            (None: ``settings_class`` checks them when it is built, if at all).

    Returns:
        The settings, a ``settings_class``.

    Raises:
        FileNotFoundError: there is no such file.
        ValueError: the file cannot be read as settings (:func:`read_json_object`), or a key
            is not a setting, a setting without a default is missing, a value is of another
            type than its setting's, or ``settings_class`` or ``check`` refuses a value: the
            message names the file, the setting and the value.
    """
    values = read_json_object(path)
    fields = {field.name: field for field in dataclasses.fields(settings_class)}
    hints = typing.get_type_hints(settings_class)
    unknown = sorted(set(values) - set(fields))
    missing = [
        name
        for name, field in fields.items()
        if name not in values
        and field.default is dataclasses.MISSING
        and field.default_factory is dataclasses.MISSING
    ]
    wrong = [name for name, value in values.items() if name in fields and not _conforms(value, hints[name])]
    problems = [
        *(f"{name!r} is not a setting" for name in unknown),
        *(f"the setting {name!r} is missing" for name in missing),
        *(f"{name} must be {_type_name(hints[name])}, not {type(values[name]).__name__}" for name in wrong),
    ]
    if problems:
        received = ", ".join(f"{name}={values[name]!r}" for name in (*unknown, *wrong)) or "no " + missing[0]
        raise ValueError(
            f"{str(path)!r} does not hold the settings of a run: {'; '.join(problems)}. Received: {received}"
        )
    values = {name: tuple(v) if isinstance(v, list) else v for name, v in values.items()}
    try:
        settings = settings_class(**values)
        if check is not None:
            check(settings)
    except ValueError as error:
        raise ValueError(f"{str(path)!r} holds settings that cannot work: {error}") from None
    return settings


__all__ = ["check_resumed_settings", "read_json_object", "read_settings"]
