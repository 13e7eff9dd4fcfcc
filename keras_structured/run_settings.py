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

Example:
    >>> check_resumed_settings({"seed": 0, "epochs": 5}, {"seed": 0, "epochs": 8}, may_grow=["epochs"])
    {'epochs': (5, 8)}
    >>> check_resumed_settings({"seed": 0}, {"seed": 1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: A resumed run keeps its settings (none may change). These differ ...: seed=1
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


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


__all__ = ["check_resumed_settings"]
