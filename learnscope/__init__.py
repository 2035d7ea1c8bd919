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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from learnscope.records import (
        AutocorrelationSummary,
        EmbeddingSnapshot,
        Finding,
        GroupAutocorrelation,
        Histogram,
        RenderedImage,
    )
    from learnscope.run_directory.summaries import read_summaries

__all__ = [
    "AutocorrelationSummary",
    "EmbeddingSnapshot",
    "Finding",
    "GroupAutocorrelation",
    "Histogram",
    "RenderedImage",
    "read_summaries",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The records and :func:`read_summaries`, imported when first used.

    (So that ``learnscope --help`` does not load torch.)
    """
    if name == "read_summaries":
        from learnscope.run_directory.summaries import read_summaries

        return read_summaries
    if name in __all__:
        from learnscope import records

        return getattr(records, name)
    raise AttributeError(f"module 'learnscope' has no attribute {name!r}")
