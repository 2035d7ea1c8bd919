"""Callbacks the tests fit with: learnscope's three with small settings, and a Ctrl-C."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.run_directory.write_limits import WriteLimits


def labels(batch: Any) -> dict[str, Any]:
    """The metadata of a ``(x, label)`` batch: its labels."""
    return {"label": batch[1]}


def learnscope_callbacks(
    write_limits: WriteLimits | None = None, aligned_pca: bool = False
) -> list[Any]:
    """learnscope's three callbacks, each writing within a few steps of a tiny fit.

    ``write_limits`` is given to the projector alone (the fit's callbacks share it);
    ``aligned_pca`` gives each snapshot its 2-D view (and so a label silhouette).
    """
    projector = EmbeddingProjector(
        "encoder", metadata_fn=labels, write_limits=write_limits, aligned_pca=aligned_pca
    )
    return [
        projector,
        TrainingHelper(check_every_n_steps=2),
        ModelAutocorrelation(buffer_size=8, analyze_every_n_steps=4, lags=(1,)),
    ]


class CtrlC(pl.Callback):
    """Raises ``KeyboardInterrupt`` (a Ctrl-C) when a training batch of ``step`` starts."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise KeyboardInterrupt
