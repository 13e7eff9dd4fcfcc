"""Dependency parsing on Universal Dependencies treebanks (the SparseMAP paper, Table 1).

Submodules, imported on demand (reading CoNLL-U needs the optional ``conllu`` package):

* ``conllu_reader``: :class:`Sentence`, ``read_conllu`` and ``treebank_paths``;
* ``vocabulary``: word, tag and relation ids, and word dropout;
* ``batching``: ``make_dataset``, length-bucketed padded batches for ``tf.data``;
* ``evaluation``: attachment scores, unlabeled and labeled (UAS, LAS);
* ``model``: Kiperwasser & Goldberg's BiLSTM arc scorer, its arc-label classifier and the five
  tree losses;
* ``presets``: named configurations (``sparsemap-paper``: the SparseMAP authors' parser);
* ``training``: training with resume, evaluation and SparseMAP tree supports (the command
  line ``python -m keras_structured.applications.parsing``);
* ``figures``: the paper's Figure 3 (trees with weights) and Figure 4 (sparsity) plots;
* ``bilinear_features``, ``tracenorm``: the trace-norm bilinear parser trained by Hazan's
  algorithm (``examples/tracenorm_parser.py``).
"""
