"""Search: embeddings and vector search, full-text search and their hybrid.

* :mod:`.ops`: ``embed`` and ``search`` as store methods;
* :mod:`.vectors`: the embedding worker's and vector search's operations;
* :mod:`.embedding`: embedding models and the cutting of chunks into model-sized windows;
* :mod:`.text`: full-text and hybrid search (and the fusion rule);
* :mod:`.text_index`: the text windows of buffered turns, written ahead of their fold.

SQL: ``sql/vectors.sql``, ``sql/text.sql``, ``sql/embed_buffered.sql`` and the ``vec_*`` /
``text_*`` functions in ``sql/functions/``.
"""
