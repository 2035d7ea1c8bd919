"""learnscope's callbacks for ``pytorch_lightning``'s Trainer.

The callbacks of ``learnscope.lightning_glue`` (``lightning.pytorch``'s), made from the same
definitions with ``pytorch_lightning.Callback``
(:func:`~learnscope.lightning_glue.base.lightning_callback`): same names, arguments and
checkpoint keys. Importing this module imports ``pytorch_lightning`` and no other Lightning
package; without ``pytorch_lightning`` installed it fails, naming the namespace to use instead.

Example:
    >>> import pytorch_lightning as pl
    >>> from learnscope.lightning_glue.pytorch_lightning import TrainingHelper
    >>> isinstance(TrainingHelper(), pl.Callback), TrainingHelper().state_key
    (True, 'TrainingHelper')
"""

from __future__ import annotations

from learnscope.lightning_glue import embedding_projector, model_autocorrelation, training_helper
from learnscope.lightning_glue.base import lightning_callback, missing_lightning

try:
    from pytorch_lightning import Callback
except ModuleNotFoundError as error:
    raise missing_lightning("pytorch_lightning", error) from error

EmbeddingProjector = lightning_callback(embedding_projector.EmbeddingProjector, Callback, __name__)
ModelAutocorrelation = lightning_callback(
    model_autocorrelation.ModelAutocorrelation, Callback, __name__
)
TrainingHelper = lightning_callback(training_helper.TrainingHelper, Callback, __name__)

__all__ = ["EmbeddingProjector", "ModelAutocorrelation", "TrainingHelper"]
