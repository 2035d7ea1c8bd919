"""Thin Lightning callbacks that gather data and hand records to every logger's writer.

Example:
    >>> from learnscope.lightning_glue import EmbeddingProjector
    >>> EmbeddingProjector("encoder").module
    'encoder'
"""

from learnscope.lightning_glue.embedding_projector import EmbeddingProjector
from learnscope.lightning_glue.model_autocorrelation import ModelAutocorrelation
from learnscope.lightning_glue.training_helper import TrainingHelper

__all__ = ["EmbeddingProjector", "ModelAutocorrelation", "TrainingHelper"]
