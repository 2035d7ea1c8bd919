"""learnscope's callbacks for ``lightning.pytorch``'s Trainer, as ``learnscope.lightning_glue``.

Each is made once, here, from its definition and ``lightning.pytorch.Callback``
(:func:`~learnscope.lightning_glue.base.lightning_callback`); importing this module imports
``lightning.pytorch`` and no other Lightning package. The classes are found as
``learnscope.lightning_glue.EmbeddingProjector`` (and so on), where pickle and LightningCLI's
``class_path`` find them. For ``pytorch_lightning``'s Trainer, the same callbacks are in
:mod:`learnscope.lightning_glue.pytorch_lightning`.

Example:
    >>> import lightning.pytorch as pl
    >>> issubclass(EmbeddingProjector, pl.Callback), EmbeddingProjector.__module__
    (True, 'learnscope.lightning_glue')
"""

from __future__ import annotations

from learnscope.lightning_glue import embedding_projector, model_autocorrelation, training_helper
from learnscope.lightning_glue.base import lightning_callback, missing_lightning

try:
    from lightning.pytorch import Callback
except ModuleNotFoundError as error:
    raise missing_lightning("lightning.pytorch", error) from error

NAMESPACE = "learnscope.lightning_glue"  # where the classes are found

EmbeddingProjector = lightning_callback(embedding_projector.EmbeddingProjector, Callback, NAMESPACE)
ModelAutocorrelation = lightning_callback(
    model_autocorrelation.ModelAutocorrelation, Callback, NAMESPACE
)
TrainingHelper = lightning_callback(training_helper.TrainingHelper, Callback, NAMESPACE)

__all__ = ["EmbeddingProjector", "ModelAutocorrelation", "TrainingHelper"]
