"""Natural language inference with latent structured alignments (the SparseMAP paper, section 5.2).

ESIM (Chen et al. 2017) on SICK, with its attention step computed by a softmax, by
SparseMAP over sequential alignments (18 learned transition scalars) or by SparseMAP over
bipartite matchings. The paper used SNLI and MultiNLI with GloVe vectors; neither is
available offline here, so SICK is used and the word embeddings are learned.

Submodules, imported on demand (TensorFlow is not imported by this package itself):

* ``sick_reader``: :class:`Pair`, the documented tokeniser and ``read_sick``;
* ``vocabulary``: word ids (learned embeddings, ``<unk>`` for rare words);
* ``batching``: ``make_dataset``, padded batches for ``tf.data`` (0 = padding);
* ``transition_bins``: the binned jump-distance transition scores of the sequential alignment;
* ``alignments``: the three alignments as functions (softmax, sequence, matching);
* ``layers``: the ``Alignment`` and ``MaskedPooling`` Keras layers;
* ``model``: ``build_esim``, the three variants one ``attention`` argument apart;
* ``training``: training with resume, evaluation and attention read-out (the command line
  ``python -m keras_structured.applications.nli``);
* ``step_timing``: training-step cost of several runs measured side by side;
* ``figures``: the alignment heatmaps of the paper's Figure 5.
"""
