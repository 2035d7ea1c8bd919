"""Records: the small frozen dataclasses that are the only vocabulary between layers.

Callbacks (or a hand-written loop) build records; writers in ``learnscope.plugins`` show them.
"""

from learnscope.records.embedding import EmbeddingSnapshot

__all__ = ["EmbeddingSnapshot"]
