"""Thin Lightning callbacks that gather data and hand records to every logger's writer.

Example:
    >>> from learnscope.lightning_glue import EmbeddingProjector
    >>> EmbeddingProjector("encoder").module
    'encoder'
"""

from typing import TYPE_CHECKING

from learnscope.optional import lazy_names

if TYPE_CHECKING:
    from learnscope.lightning_glue.embedding_projector import EmbeddingProjector
    from learnscope.lightning_glue.model_autocorrelation import ModelAutocorrelation
    from learnscope.lightning_glue.training_helper import TrainingHelper

__all__ = ["EmbeddingProjector", "ModelAutocorrelation", "TrainingHelper"]
_MODULES = {
    "EmbeddingProjector": "embedding_projector",
    "ModelAutocorrelation": "model_autocorrelation",
    "TrainingHelper": "training_helper",
}


__getattr__ = lazy_names(__name__, _MODULES)  # the callbacks, imported when first used
