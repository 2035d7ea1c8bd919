"""What a LightningCLI config names by import path in ``tests/project/test_lightning_cli.py``."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from tests.kit.models import loaders


class BlobData(pl.LightningDataModule):
    """The tiny models' blobs as a data module."""

    def train_dataloader(self) -> Any:
        return loaders()[0]

    def val_dataloader(self) -> Any:
        return loaders()[1]


def labels(batch: Any) -> dict[str, Any]:
    return {"label": batch[1]}


def features(output: Any) -> Any:
    return output


def sample_ids(batch: Any) -> list[str]:
    """A stable id per sample: its first feature, as text."""
    return [f"{value:.6f}" for value in batch[0][:, 0].tolist()]


def every_row(batch: Any) -> Any:
    return batch[1] >= 0
