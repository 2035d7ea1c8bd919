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

from learnscope.records import (
    AutocorrelationSummary,
    EmbeddingSnapshot,
    Finding,
    GroupAutocorrelation,
    Histogram,
    RenderedImage,
)

__all__ = [
    "AutocorrelationSummary",
    "EmbeddingSnapshot",
    "Finding",
    "GroupAutocorrelation",
    "Histogram",
    "RenderedImage",
]
__version__ = "0.1.0"
