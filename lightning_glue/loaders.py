"""Which loaders a Lightning stage reads, by name, and in which order a loader reads its data set.

Lightning numbers the loaders of a stage (its ``dataloader_idx``) in the order of
``torch.utils._pytree``: list order, and a dict's insertion order, nested ones too. A loader of
a list is named by its index, one of a dict by its key, nested ones by their path
(``"clean/0"``): the names of the ``dataloader`` column of a snapshot that holds the rows of
several loaders.

**Several evaluation loaders.** A stage with several loaders (a list or a dict of them) gives one
snapshot per stage and epoch that holds every loader's rows, with a ``dataloader`` column (the
loader's name) to colour or filter them by in the Projector: all loaders are seen in one space,
under one PCA, and ``max_points`` is shared between them (deterministically: by id, or spread
over the epoch). Snapshots per loader would give each loader its own Projector entry and its own
PCA, so two loaders could never be seen in one view. ``ids_fn="dataset_index"`` counts each
loader's samples on their own, and a row's loader is mixed into its key, so that sample 3 of one
loader and sample 3 of another are two points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DATASET_INDEX = "dataset_index"

STAGE_LOADERS = {
    "train": "train_dataloader",
    "validate": "val_dataloaders",
    "test": "test_dataloaders",
    "predict": "predict_dataloaders",
}


def named_loaders(loaders: Any) -> list[tuple[int | str, Any]]:
    """``(name, loader)`` of each loader, in the order of Lightning's ``dataloader_idx``.

    Args:
        loaders: A loader, or a list, tuple or dict of them (nested ones too).

    Returns:
        Each loader with its name: its index in a list, its key in a dict, or the path of a
        nested one.

    Example:
        >>> [name for name, _ in named_loaders({"clean": ["a", "b"], "noisy": "c"})]
        ['clean/0', 'clean/1', 'noisy']
        >>> named_loaders("only")
        [(0, 'only')]
    """
    if isinstance(loaders, Mapping):
        items: list[tuple[int | str, Any]] = [(str(k), v) for k, v in loaders.items()]
    elif isinstance(loaders, list | tuple):
        items = list(enumerate(loaders))
    else:
        return [(0, loaders)]
    named: list[tuple[int | str, Any]] = []
    for key, value in items:
        if isinstance(value, Mapping | list | tuple):
            named += [(f"{key}/{sub}", loader) for sub, loader in named_loaders(value)]
        else:
            named.append((key, value))
    return named


def loader_names(trainer: Any, stage: str) -> list[int | str] | None:
    """The names of the stage's loaders, or ``None`` when it has one (or it is training).

    Several training loaders give one combined batch, so training is always one loader.

    Args:
        trainer: The Lightning trainer.
        stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.

    Returns:
        The names (see :func:`named_loaders`), or ``None``.

    Example:
        >>> from types import SimpleNamespace
        >>> loader_names(SimpleNamespace(val_dataloaders=["a", "b"]), "validate")
        [0, 1]
        >>> loader_names(SimpleNamespace(val_dataloaders="a"), "validate") is None
        True
    """
    if stage == "train":
        return None
    named = named_loaders(getattr(trainer, STAGE_LOADERS[stage], None))
    return [name for name, _ in named] if len(named) > 1 else None


def dataset_order(trainer: Any, stage: str, dataloader_idx: int) -> Sequence[int]:
    """The dataset index of each sample of the stage's loader, in the order it reads them.

    Args:
        trainer: The Lightning trainer.
        stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.
        dataloader_idx: Which of the stage's loaders.

    Returns:
        The indices: the loader's data set in order, or a ``DistributedSampler``'s share.

    Raises:
        ValueError: The loader does not read its data set in order (a shuffled loader), naming
            its sampler and what to pass instead.

    Example:
        >>> from types import SimpleNamespace
        >>> from torch.utils.data import DataLoader
        >>> trainer = SimpleNamespace(test_dataloaders=DataLoader(range(5), batch_size=2))
        >>> list(dataset_order(trainer, "test", 0))
        [0, 1, 2, 3, 4]
    """
    from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler

    named = named_loaders(getattr(trainer, STAGE_LOADERS[stage], None))
    loader = named[dataloader_idx][1] if dataloader_idx < len(named) else None
    batch_sampler = getattr(loader, "batch_sampler", None)
    # Lightning wraps a predict loader's batch sampler to record the indices it yields.
    inner = getattr(batch_sampler, "_batch_sampler", None)
    batch_sampler = inner if isinstance(inner, BatchSampler) else batch_sampler
    sampler = batch_sampler.sampler if isinstance(batch_sampler, BatchSampler) else None
    if isinstance(sampler, SequentialSampler):
        return range(len(sampler))
    if isinstance(sampler, DistributedSampler) and not sampler.shuffle:
        return list(sampler)
    raise ValueError(
        f"EmbeddingProjector: ids_fn={DATASET_INDEX!r} needs a {stage} loader that reads the "
        f"data set in order, but it uses {type(sampler or batch_sampler).__name__}; pass "
        "ids_fn=lambda batch: ... that returns a stable id per sample instead"
    )
