"""The error of bad scores found at run time, inside the numpy side of an op."""

from __future__ import annotations

import functools

import tensorflow as tf


class InvalidScoresError(tf.errors.InvalidArgumentError, ValueError):
    """Bad input found at run time: NaN or +inf scores, every structure forbidden, bad
    lengths (or a custom oracle's invalid answer).

    Raised inside the ops' numpy functions: being a ``ValueError``, TensorFlow turns it
    into ``tf.errors.InvalidArgumentError`` in graph mode, and eager mode re-raises it as
    it is, an ``InvalidArgumentError`` too. Checking in numpy, where the scores are read
    anyway, saves a chain of graph ops per call. On the PyTorch backend it reaches the
    caller as it is; on JAX, inside the ``XlaRuntimeError`` of the host callback, its
    message included.
    """

    def __init__(self, *args):
        # ``InvalidScoresError(message)``, or TensorFlow's ``(node_def, op, message, ...)``
        # with which Keras re-raises op errors, its layer's name added to the message.
        node_def, op, message = (None, None, *args) if len(args) == 1 else args[:3]
        super().__init__(node_def, op, message)


def raising_invalid_scores(function):
    """``function`` with its ``ValueError`` raised as :class:`InvalidScoresError`."""

    @functools.wraps(function)
    def checked(*arrays):
        try:
            return function(*arrays)
        except ValueError as error:
            raise InvalidScoresError(str(error)) from error

    return checked
