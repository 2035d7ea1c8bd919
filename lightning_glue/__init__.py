"""Thin Lightning callbacks that gather data and hand records to every logger's writer.

Example:
    >>> from learnscope.lightning_glue import EmbeddingProjector
    >>> EmbeddingProjector("encoder").module
    'encoder'
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    """The callbacks, imported when first used (the ``learnscope`` command needs none)."""
    if name in _MODULES:
        return getattr(import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
