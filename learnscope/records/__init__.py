"""Records: the small frozen dataclasses that are the only vocabulary between layers.

Callbacks (or a hand-written loop) build records; writers in ``learnscope.plugins`` show them.
"""

from learnscope.records.autocorrelation import AutocorrelationSummary, GroupAutocorrelation
from learnscope.records.embedding import AlignedView, EmbeddingSnapshot, ViewFrame
from learnscope.records.health import FINDING_CODES, Finding, Histogram, RenderedImage
from learnscope.records.run import CallbackSettings, RunEnd, RunError, RunStart

__all__ = [
    "FINDING_CODES",
    "AlignedView",
    "AutocorrelationSummary",
    "CallbackSettings",
    "EmbeddingSnapshot",
    "Finding",
    "GroupAutocorrelation",
    "Histogram",
    "RenderedImage",
    "RunEnd",
    "RunError",
    "RunStart",
    "ViewFrame",
]
