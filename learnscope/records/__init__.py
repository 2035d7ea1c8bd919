"""Records: the small frozen dataclasses that are the only vocabulary between layers.

Callbacks (or a hand-written loop) build records; writers in ``learnscope.plugins`` show them.
"""

from learnscope.finding_codes import FINDING_ADVICE, FINDING_CODES, STATE_CODES, finding_life
from learnscope.records.autocorrelation import AutocorrelationSummary, GroupAutocorrelation
from learnscope.records.embedding import AlignedView, EmbeddingSnapshot, ViewFrame
from learnscope.records.embedding_measures import EmbeddingRanks, LabelSilhouette
from learnscope.records.health import Finding, Histogram, RenderedImage
from learnscope.records.run import CallbackSettings, RunEnd, RunError, RunStart

__all__ = [
    "FINDING_ADVICE",
    "FINDING_CODES",
    "STATE_CODES",
    "AlignedView",
    "AutocorrelationSummary",
    "CallbackSettings",
    "EmbeddingRanks",
    "EmbeddingSnapshot",
    "Finding",
    "GroupAutocorrelation",
    "Histogram",
    "LabelSilhouette",
    "RenderedImage",
    "RunEnd",
    "RunError",
    "RunStart",
    "ViewFrame",
    "finding_life",
]
