"""Embedding collapse and oversmoothing.

* ``metrics``: the metrics, pure functions of the embeddings (and graph).
* ``verdicts``: which heuristics fire, as objects and in words.
* ``row_buffer``: the bounded rows (and graphs) a check step judges.
"""
