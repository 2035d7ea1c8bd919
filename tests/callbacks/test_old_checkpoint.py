"""A checkpoint saved before the callbacks had two Lightning namespaces still loads their state.

``tests/data/checkpoint_by_b27cb39.ckpt`` is what commit b27cb39 (whose callback classes
re-parented themselves onto the imported Lightning packages) saved after a one-epoch fit of
``TinyClassifier`` with ``EmbeddingProjector("encoder", aligned_pca=True, tag="enc")``,
``ModelAutocorrelation(buffer_size=4, elements_per_tensor=4, analyze_every_n_steps=3, lags=(1,),
seed=7)`` and ``TrainingHelper(check_every_n_steps=2)`` (``trainer.save_checkpoint``). Lightning
restores a callback's state by its ``state_key``; the callbacks of either namespace must find
theirs.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.kit.models import loaders

OLD_CHECKPOINT = Path(__file__).resolve().parent.parent / "data" / "checkpoint_by_b27cb39.ckpt"
pytestmark = pytest.mark.slow  # two fits
PROJECTOR_KEY = "EmbeddingProjector{'module': 'encoder', 'tag': 'enc'}"


def tiny_classifier(base: type) -> Any:
    """``TinyClassifier``'s layers (the checkpoint's weights) on either package's module."""

    class Tiny(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
            self.head = nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.cross_entropy(self(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self(batch[0])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Tiny()


@pytest.mark.parametrize(
    ("package", "namespace"),
    [
        ("lightning.pytorch", "learnscope.lightning_glue"),
        ("pytorch_lightning", "learnscope.lightning_glue.pytorch_lightning"),
    ],
)
def test_the_callbacks_of_either_namespace_resume_from_a_checkpoint_of_before(
    tmp_path: Path, package: str, namespace: str
) -> None:
    pl = importlib.import_module(package)
    callbacks_of = importlib.import_module(namespace)
    saved = torch.load(OLD_CHECKPOINT, weights_only=True)["callbacks"]
    projector = callbacks_of.EmbeddingProjector("encoder", aligned_pca=True, tag="enc")
    autocorrelation = callbacks_of.ModelAutocorrelation(
        buffer_size=4, elements_per_tensor=4, analyze_every_n_steps=3, lags=(1,), seed=0
    )
    helper = callbacks_of.TrainingHelper(check_every_n_steps=2)
    callbacks = [projector, autocorrelation, helper]
    assert sorted(c.state_key for c in callbacks) == sorted(saved)  # the keys of before

    fit = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,  # no writer: the projector's views are only those it loaded
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    fit.fit(tiny_classifier(pl.LightningModule), *loaders(), ckpt_path=str(OLD_CHECKPOINT))
    assert fit.global_step == 12  # resumed at step 6
    # seed 0 given, seed 7 and its slices loaded: the resumed run follows the same elements
    assert autocorrelation.state_dict()["history"] == saved["ModelAutocorrelation"]["history"]
    assert projector.state_dict()["pca"].keys() == saved[PROJECTOR_KEY]["pca"].keys() != set()
    assert helper.state_dict()["unused_checked"] is True
