"""The demo: a small MLP on scikit-learn's digits, with every learnscope callback attached.

The digits data set (1,797 8x8 images) ships inside scikit-learn, so the demo needs no network.

The model is chosen so that the views show learning: its encoder squeezes each digit into
:data:`EMBEDDING_DIMS` numbers and a linear head reads the class off them, so the classes must
pull apart in the embedding itself, and its 2-D aligned views show them doing so. Measured
on the default seed (the labels' silhouette score of the 2-D view): with the aligned PCA, 0.12
at the first snapshot (step 20) and 0.32 at the last (step 160); with the aligned UMAP, 0.20
and 0.59. The 32-wide embedding before it went from 0.09 to 0.17 in PCA, and looked as mixed
at the end as at the start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("learnscope")

SEED = 0  # the demo's default seed
EMBEDDING_DIMS = 3  # the encoder's output: what the Projector and the learnscope tab show
# Lightning's loggers of its info lines ("GPU available", its tips, "`Trainer.fit` stopped")
LIGHTNING_INFO = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


def digits_loaders(batch_size: int = 64, seed: int = 0) -> tuple[DataLoader, DataLoader]:
    """Train and validation loaders of ``(image [1, 8, 8] in [0, 1], label)`` pairs.

    Example:
        >>> train, val = digits_loaders()
        >>> len(val.dataset)
        540
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    val, train = order[:540], order[540:]
    return (
        DataLoader(TensorDataset(images[train], labels[train]), batch_size, shuffle=True),
        DataLoader(TensorDataset(images[val], labels[val]), 256),
    )


def make_model(
    lr: float = 2e-2,
    dims: int = EMBEDDING_DIMS,
    weight_decay: float = 1e-2,
    save_hyperparameters: bool = False,
) -> Any:
    """A LightningModule: an ``encoder`` (64 -> 128 -> ``dims``) and a linear ``head`` (-> 10).

    The head is one linear layer on the embedding, so that the classes separate in the
    embedding the views show, not in a layer after it. It trains with AdamW at ``lr`` and
    ``weight_decay`` (AdamW's default, 1e-2, by default). With ``save_hyperparameters``, the
    model's ``__init__`` calls ``self.save_hyperparameters()``, as a sweep's models do, so that
    ``lr`` and ``weight_decay`` are its hyper-parameters (``model.hparams``).

    Example:
        >>> model = make_model()
        >>> model(torch.zeros(2, 1, 8, 8)).shape, model.encoder(torch.zeros(2, 1, 8, 8)).shape
        (torch.Size([2, 10]), torch.Size([2, 3]))
        >>> dict(make_model(lr=1e-3, weight_decay=0.5, save_hyperparameters=True).hparams)
        {'lr': 0.001, 'weight_decay': 0.5}
    """
    import lightning.pytorch as pl

    class DigitsClassifier(pl.LightningModule):
        def __init__(self, lr: float, weight_decay: float) -> None:
            super().__init__()
            if save_hyperparameters:
                self.save_hyperparameters()  # lr and weight_decay
            self.lr, self.weight_decay = lr, weight_decay
            self.encoder = nn.Sequential(
                nn.Flatten(), nn.Linear(64, 128), nn.GELU(), nn.Linear(128, dims)
            )
            self.head = nn.Linear(dims, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.cross_entropy(self(x), y)
            self.log("train/loss", loss, prog_bar=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            logits = self(x)
            self.log("val/loss", nn.functional.cross_entropy(logits, y), prog_bar=True)
            self.log("val/accuracy", (logits.argmax(-1) == y).float().mean(), prog_bar=True)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    return DigitsClassifier(lr, weight_decay)


def callbacks(
    all_scalars: bool = False, aligned_umap: bool = True, check_every_n_steps: int = 20
) -> list[Any]:
    """The learnscope callbacks the demo attaches.

    Args:
        all_scalars: Write every autocorrelation lag as a scalar.
        aligned_umap: Give each snapshot its aligned UMAP view too (the sweep leaves it out:
            it is the slowest part of a snapshot).
        check_every_n_steps: How often ``TrainingHelper`` checks the gradients and the
            embedding.
    """
    from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper

    return [
        TrainingHelper(check_every_n_steps=check_every_n_steps),
        # 20 steps an epoch: analyse every 20 steps once 50+ steps are recorded (lags up to 20).
        ModelAutocorrelation(
            analyze_every_n_steps=20,
            lags=(1, 2, 5, 10, 20),
            buffer_size=128,
            all_scalars=all_scalars,
        ),
        EmbeddingProjector(
            "encoder",
            metadata_fn=lambda batch: {"label": batch[1]},
            images_fn=lambda batch: batch[0],
            ids_fn="dataset_index",  # the same 540 digits in every snapshot, with an id column
            aligned_pca=True,  # pca_x/y/z columns and a scatter image per epoch (Images tab)
            aligned_umap=aligned_umap,  # umap_x/y columns and a picture: the clusters separating
        ),
    ]


class DemoRuns(NamedTuple):
    """Where :func:`run_demo` wrote: the TensorBoard run, and the offline wandb run if any."""

    tensorboard: Path
    wandb: Path | None


@contextlib.contextmanager
def lightning_quiet() -> Iterator[None]:
    """Lightning's info lines and the warnings the demo's set-up triggers, hidden while it runs.

    Hidden: Lightning's info lines ("GPU available", "TPU available", its tips such as the
    litlogger one, "`Trainer.fit` stopped"), its ``PossibleUserWarning`` ("does not have many
    workers": the demo's loaders hold 1,257 small images) and the deprecation warnings that
    Lightning and torch raise inside each other. Only while the demo trains: the levels and the
    warning filters are as they were afterwards, so a fit of the user's own is untouched.
    learnscope's lines and warnings are kept.

    Example:
        >>> before = warnings.filters[:]
        >>> with lightning_quiet():
        ...     logging.getLogger(LIGHTNING_INFO[0]).isEnabledFor(logging.INFO)
        False
        >>> warnings.filters == before
        True
    """
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    loggers = [logging.getLogger(name) for name in LIGHTNING_INFO]
    levels = [logger.level for logger in loggers]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=PossibleUserWarning)
            for category in (DeprecationWarning, FutureWarning):
                warnings.filterwarnings("ignore", category=category, module=r"(lightning|torch)\.")
            for logger in loggers:
                logger.setLevel(logging.WARNING)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def run_demo(
    logdir: str | Path = "runs",
    epochs: int = 8,
    use_wandb: bool = False,
    all_scalars: bool = False,
    seed: int = SEED,
) -> DemoRuns:
    """Train the demo model and fill ``logdir`` with learnscope's TensorBoard data.

    Args:
        logdir: Where the TensorBoard run (and the offline wandb run) go.
        epochs: Training epochs; the default finishes in well under a minute on 2 CPU cores.
        use_wandb: Also log to an offline wandb run under ``logdir``.
        all_scalars: Write every autocorrelation lag and quartile as a scalar, not only the
            lag-1 median and tau (``ModelAutocorrelation(all_scalars=True)``).
        seed: The seed of the model's initial weights and of the order of the training
            batches. The 540 validation digits are the same for every seed (their split has
            a seed of its own), so the runs of two seeds compare point by point; the same
            seed gives the same numbers.

    Returns:
        The TensorBoard run directory (``<logdir>/demo/version_<n>``) and the offline wandb run
        directory (``<logdir>/wandb/offline-run-<time>-<id>``, what ``wandb sync`` takes).
    """
    from lightning.pytorch.loggers import TensorBoardLogger

    from learnscope.storage import open_run_folder

    torch.manual_seed(seed)
    logdir = Path(logdir)
    loggers: list[Any] = [TensorBoardLogger(str(logdir), name="demo")]
    if use_wandb:
        import wandb
        from lightning.pytorch.loggers import WandbLogger

        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        # wandb reads WANDB_SILENT when set up; set up later, inside the logger's wandb.init, it
        # first says "The anonymous setting has no effect" of the settings Lightning passes
        wandb.setup()
        open_run_folder(logdir).make()  # wandb needs its save_dir made
        loggers.append(WandbLogger(project="learnscope-demo", save_dir=str(logdir), offline=True))
    train, val = digits_loaders()
    with lightning_quiet():
        demo_trainer(epochs, loggers, callbacks(all_scalars)).fit(make_model(), train, val)
    return DemoRuns(Path(loggers[0].log_dir), finish_wandb(loggers) if use_wandb else None)


def demo_trainer(epochs: int, loggers: list[Any], attached: list[Any], **options: Any) -> Any:
    """The demo's trainer: on the CPU, logging every 5 steps, no checkpoint, no model summary."""
    import lightning.pytorch as pl

    return pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=loggers,
        callbacks=attached,
        log_every_n_steps=5,
        enable_checkpointing=False,
        enable_model_summary=False,
        **options,
    )


def finish_wandb(loggers: list[Any]) -> Path:
    """Finish the offline W&B run of ``loggers`` (the second); its run directory."""
    import wandb

    run_dir = Path(loggers[1].experiment.dir).parent  # .../offline-run-*/files
    wandb.finish()
    return run_dir
