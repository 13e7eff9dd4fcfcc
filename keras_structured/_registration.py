"""String identifiers: ``keras.losses.get("SparseMAPLoss")``, ``compile(loss="SparsemaxLoss")``.

Every layer and loss is registered for serialization under ``keras_structured>Name``
(``keras.saving.register_keras_serializable``), which is what saved models store.
Keras looks plain names up elsewhere:

* ``keras.saving.deserialize_keras_object``, ``keras.layers.deserialize`` and
  ``keras.losses.deserialize`` (configs such as ``{"class_name": "Sparsemax", "config":
  {}}``) search the custom objects, so the plain class names are added to
  ``keras.saving.get_custom_objects()``, the public table meant for this;
* ``keras.losses.get(name)`` (and so ``model.compile(loss=name)``) searches only Keras's
  own table of losses, ``keras.src.losses.ALL_OBJECTS_DICT``, so the loss classes are
  added there too. That table is not public API: if a Keras release renames it, string
  losses stop working and everything else stays as it is.

No name that Keras or the user registered first is replaced.
"""

from __future__ import annotations

import keras


def register_string_identifiers(layers, losses) -> None:
    """Make the plain class names of ``layers`` and ``losses`` known to Keras (see the module docstring).

    Example:
        >>> import keras
        >>> type(keras.losses.get("SparsemaxLoss")).__name__
        'SparsemaxLoss'
    """
    custom_objects = keras.saving.get_custom_objects()
    for obj in (*layers, *losses):
        custom_objects.setdefault(obj.__name__, obj)
    try:
        from keras.src.losses import ALL_OBJECTS_DICT
    except ImportError:  # pragma: no cover - a Keras without the table: configs still work
        return
    for loss in losses:
        ALL_OBJECTS_DICT.setdefault(loss.__name__, loss)
