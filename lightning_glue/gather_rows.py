"""Every rank's rows of an epoch on rank zero, under DDP, through one ``gather_object``."""

from __future__ import annotations

from typing import Any

from learnscope.embeddings.rows import EmbeddingRows
from learnscope.lightning_glue.parts import Parts
from learnscope.plugins.pipeline.snapshot_job import SNAPSHOTS


def gather_rows(
    trainer: Any,
    rows: EmbeddingRows | None,
    parts: Parts,
    tag: str,
    max_points: int,
    by_id: bool,
) -> EmbeddingRows | None:
    """All ranks' rows on rank zero (``None`` elsewhere); every rank must call it.

    Every rank sends at most ``max_points`` rows; only rank zero receives them (an all-gather
    would hold every rank's rows on every rank). Rank zero merges them after the gather, so a
    merge that fails (ranks whose metadata columns differ) is reported there and switches the
    :data:`~learnscope.plugins.pipeline.snapshot_job.SNAPSHOTS` part off without leaving any
    rank waiting.

    Args:
        trainer: The Lightning trainer (``world_size``, ``is_global_zero``).
        rows: This rank's rows, or ``None`` when it holds none.
        parts: The callback's parts; its :data:`SNAPSHOTS` part runs here.
        tag: The snapshot's tag, for messages.
        max_points: Rows in the merged snapshot at most.
        by_id: Whether rows are chosen by id (the same id on two ranks is kept once).

    Returns:
        The merged rows on rank zero; ``None`` on other ranks, or when no rank held rows.

    Example:
        >>> import tempfile, torch, torch.distributed as dist
        >>> from types import SimpleNamespace
        >>> from learnscope.lightning_glue import EmbeddingProjector
        >>> store = dist.FileStore(tempfile.mktemp(), 1)
        >>> dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        >>> rows = EmbeddingRows(step=3, stage="validate", max_points=10)
        >>> rows.add(torch.ones(4, 2), {}, None)
        >>> zero = SimpleNamespace(world_size=1, is_global_zero=True)
        >>> gather_rows(zero, rows, EmbeddingProjector(), "enc", 10, by_id=False).count
        4
        >>> dist.destroy_process_group()
    """
    import torch.distributed as dist

    payload = None
    if rows is not None and parts.is_on(SNAPSHOTS):
        with parts.guard(SNAPSHOTS):
            payload = rows.payload()
    payloads: list[Any] | None = [None] * trainer.world_size if trainer.is_global_zero else None
    dist.gather_object(payload, payloads, dst=0)
    if payloads is None:
        return None
    step, stage = next(((p["step"], p["stage"]) for p in payloads if p), (None, None))
    if step is None:
        return None
    merged = EmbeddingRows(step, stage, max_points, by_id=by_id)
    with parts.guard(SNAPSHOTS, f"{tag}/{stage} step {step}"):
        merged.merge(payloads)
        return merged
    return None
