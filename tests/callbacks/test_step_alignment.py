"""Analyses and snapshots taken every 20 steps carry the same step numbers.

An analysis is named by the global step after the optimizer step it ends (``trainer.global_step``
once that step is done), the convention of the projector's snapshots. (Lightning logs a metric of
``self.log`` at the step before: a validation at the end of 20 steps at 19.)
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation
from tests.kit.models import TinyClassifier, loaders, trainer


def test_analyses_and_snapshots_every_20_steps_are_at_the_same_steps(tmp_path: Path) -> None:
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    train, val = loaders(n_train=320, n_val=32)  # 20 optimizer steps an epoch
    callbacks = [
        ModelAutocorrelation(buffer_size=16, analyze_every_n_steps=20, lags=(1, 2)),
        EmbeddingProjector("encoder", aligned_pca=True),
    ]
    fit = trainer(tmp_path, [logger], callbacks, max_epochs=3, num_sanity_val_steps=0)
    fit.fit(TinyClassifier(), train, val)
    assert fit.global_step == 60

    events = EventAccumulator(str(logger.log_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    scalar = next(
        t for t in events.Tags()["scalars"] if t.startswith("~learnscope/autocorrelation/grads/")
    )
    analyses = [e.step for e in events.Scalars(scalar)]
    acf_images = [e.step for e in events.Images("~learnscope/autocorrelation/params/acf")]
    snapshots = [e.step for e in events.Images("~learnscope/embeddings/encoder/validate/pca")]
    assert analyses == acf_images == snapshots == [20, 40, 60]
