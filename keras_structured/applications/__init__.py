"""Applications built on the library (as ``keras.applications``): the UD dependency parser
(:mod:`~keras_structured.applications.parsing`, with the trace-norm parser in its
``tracenorm`` package) and NLI with structured alignments
(:mod:`~keras_structured.applications.nli`).

The library never imports them, and they use only its public API. Their shared run
machinery lives here: :mod:`~keras_structured.applications.training_runs` (log directory,
checkpoints, resume, progress CSV and TensorBoard for ``model.fit`` runs) and
:mod:`~keras_structured.applications.timing` (interleaved training-step timing).

``import keras_structured.applications`` registers the applications' layers (the NLI
model's ``Alignment`` and ``MaskedPooling``, the parser's ``ArcScorer``, ``EndOfSentence``,
``RelationScorer`` and ``RelationCrossEntropy``) with Keras, so that
``keras.saving.load_model`` reads their saved models (neither module imports an optional
dependency).
"""

from keras_structured.applications.nli import layers as _nli_layers  # noqa: F401
from keras_structured.applications.parsing import model as _parsing_model  # noqa: F401
