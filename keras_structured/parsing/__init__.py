"""Dependency parsing on Universal Dependencies treebanks (the SparseMAP paper, Table 1).

Submodules, imported on demand (reading CoNLL-U needs the optional ``conllu`` package):

* ``conllu_reader``: :class:`Sentence`, ``read_conllu`` and ``treebank_paths``;
* ``vocabulary``: word and tag ids, and word dropout;
* ``batching``: ``make_dataset``, length-bucketed padded batches for ``tf.data``;
* ``evaluation``: unlabeled attachment scores.
"""
