"""TensorBoard scalars of training logs (the parser, NLI and RL command lines).

Events are written with ``tf.summary`` and the scalar plugin's metadata, built here, so that
writing needs only TensorFlow; viewing them needs the ``tensorboard`` package. A resumed run
rewrites its events from the log rows it keeps (:class:`ScalarWriter` with ``rewrite``): a run
resumed after a crash then shows every step once, as its CSV does, instead of the crashed
steps next to the resumed ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

#: The names of the event files ``tf.summary.create_file_writer`` writes.
EVENTS_PATTERN = "events.out.tfevents.*"


def _number(value: object) -> float | None:
    """``value`` as a finite float, or None (empty CSV cells, NaN, text)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class ScalarWriter:
    """Writes rows of named scalars, one row per step, to an event file in ``logdir``.

    Args:
        logdir: the directory of the event files (created if missing).
        rewrite: when resuming, the ``(step, scalars)`` rows to keep: the directory's event
            files are deleted and these rows written again (their wall time is the resume's).
            None (a new run) leaves existing event files alone.

    Example:
        >>> import tempfile
        >>> writer = ScalarWriter(tempfile.mkdtemp())
        >>> writer.write(1, {"loss": 0.5, "note": ""})  # non-numbers and NaN are left out
        >>> writer.close()
    """

    def __init__(self, logdir: str | Path, rewrite: Iterable[tuple[int, Mapping[str, object]]] | None = None):
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2

        logdir = Path(logdir)
        logdir.mkdir(parents=True, exist_ok=True)
        if rewrite is not None:
            for events in logdir.glob(EVENTS_PATTERN):
                events.unlink()
        self._tf = tf
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        ).SerializeToString()
        self._writer = tf.summary.create_file_writer(str(logdir))
        for step, scalars in rewrite or ():
            self.write(step, scalars)

    def write(self, step: int, scalars: Mapping[str, object]) -> None:
        """Writes the finite numbers of ``scalars`` at ``step`` (others are skipped) and flushes."""
        tf = self._tf
        with self._writer.as_default():
            for name, value in scalars.items():
                number = _number(value)
                if number is not None:
                    value = tf.constant(number, tf.float32)
                    tf.summary.write(name, value, step=step, metadata=self._metadata)
        self._writer.flush()

    def close(self) -> None:
        """Closes the event file."""
        self._writer.close()
