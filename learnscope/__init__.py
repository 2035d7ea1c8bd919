"""learnscope: see what your PyTorch Lightning model is learning.

The core package holds records (the vocabulary between layers) and analyses. It imports torch
and numpy only; writers live in ``learnscope.plugins`` and Lightning callbacks in
``learnscope.lightning_glue``.

Example:
    >>> import torch
    >>> from learnscope import EmbeddingSnapshot
    >>> EmbeddingSnapshot("encoder", 0, torch.zeros(4, 2)).num_points
    4
"""

from learnscope.records import EmbeddingSnapshot

__all__ = ["EmbeddingSnapshot"]
__version__ = "0.1.0"
