"""Named parser configurations: the settings a preset gives a :class:`ParserConfig`.

A preset replaces the defaults of the settings it names; settings given explicitly (as
arguments of :meth:`ParserConfig.from_preset`, or options on the command line) override it,
and the run's ``config.json`` records the preset's name with every resulting value, so a run
reads the same whatever the preset becomes later. This module imports nothing heavy: the
command line's ``--help`` lists the presets without loading TensorFlow.

``sparsemap-paper``: the parser configuration of the SparseMAP paper's authors, read from
their released DyNet parser (``vene/sparsemap-parser``: ``parser/args.h``, ``parser.h``,
``scorers.h``, ``mst_losses.cc``, ``preprocess.py``):

- one BiLSTM layer of 125 units per direction, word embeddings of 100, UPOS embeddings of 25,
  an arc perceptron of 100 hidden units (``args.h``: ``rnn_layers=1``, ``rnn_dim=125``,
  ``hidden_dim=100`` for the word embeddings and the perceptron, ``pos_dim=25``; UPOS in
  ``preprocess.py``);
- batches of 16 sentences, Adam at a learning rate of 1e-3 and no decay (``parser.cc``
  comments the decay out), no dropout other than the word dropout of alpha 0.25;
- 20 epochs, keeping the model of the best dev UAS: a fixed 20 epochs (``min_epochs`` =
  ``epochs`` = 20, so early stopping never ends a run sooner);
- words lowercased and numbers collapsed (Kiperwasser & Goldberg's normalisation in
  ``preprocess.py``);
- the losses of a batch summed, not averaged (``parser.h``: ``dy::sum(objs)``);
- the hinge and margin-SparseMAP cost one per wrong head (``mst_losses.cc`` adds 1 to every
  arc score and subtracts 1 from the gold arcs): the library's Hamming cost over arc
  indicators counts a wrong head twice, so ``cost_weight=0.5``;
- a learned root vector (``scorers.h``): the BiLSTM reads ``BOS w_1 ... w_n EOS`` and
  ``score(0, m) = v . tanh(root + b + U_mod r_m)`` (``root="learned"``);
- the arc perceptron's bias ``b`` Glorot-uniform at first, as DyNet initialises every
  parameter (``arc_bias_initializer="random"``).

The loss stays the caller's choice (the paper compares them). Not reproduced: the
authors' parser trains on every training sentence (``max_length`` keeps its default
here), and DyNet starts the embeddings Glorot-uniform where Keras draws them from
``U(-0.05, 0.05)``.
"""

from __future__ import annotations

__all__ = ["PRESETS"]

#: The settings of each preset, by name.
PRESETS: dict[str, dict[str, object]] = {
    "sparsemap-paper": {
        "lstm_layers": 1,
        "lstm_units": 125,
        "word_dim": 100,
        "tag_dim": 25,
        "mlp_units": 100,
        "tag_column": "upos",
        "batch_size": 16,
        "learning_rate": 1e-3,
        "learning_rate_decay": 1.0,
        "dropout": 0.0,
        "word_dropout": 0.25,
        "epochs": 20,
        "min_epochs": 20,
        "lowercase": True,
        "collapse_numbers": True,
        "loss_reduction": "sum",
        "cost_weight": 0.5,
        "root": "learned",
        "arc_bias_initializer": "random",
    },
}
