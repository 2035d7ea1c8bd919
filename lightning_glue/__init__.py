"""Thin Lightning callbacks that gather data and hand records to every logger's writer.

The callbacks here are ``lightning.pytorch``'s; those of ``pytorch_lightning`` are in
:mod:`learnscope.lightning_glue.pytorch_lightning` (one definition serves both: see
:mod:`learnscope.lightning_glue.base`). Importing this package imports no Lightning package: a
callback's name imports ``lightning.pytorch`` when first used.

Example:
    >>> from learnscope.lightning_glue import EmbeddingProjector
    >>> EmbeddingProjector("encoder").module
    'encoder'
"""

from typing import TYPE_CHECKING

from learnscope.optional import lazy_names

if TYPE_CHECKING:
    from learnscope.lightning_glue.lightning_pytorch import (
        EmbeddingProjector,
        ModelAutocorrelation,
        TrainingHelper,
    )

__all__ = ["EmbeddingProjector", "ModelAutocorrelation", "TrainingHelper"]
_MODULES = {
    "EmbeddingProjector": "lightning_pytorch",
    "ModelAutocorrelation": "lightning_pytorch",
    "TrainingHelper": "lightning_pytorch",
}


__getattr__ = lazy_names(__name__, _MODULES)  # the callbacks, imported when first used
