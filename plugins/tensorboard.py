"""TensorBoard writer: projector snapshots, scalars, through a run's ``SummaryWriter``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from learnscope.plugins import projector_files
from learnscope.plugins.base import Writer

from learnscope.optional import import_optional
from learnscope.records import EmbeddingSnapshot


class TensorBoardWriter(Writer):
    """Write learnscope records into one TensorBoard run directory.

    Embeddings go to the Projector tab as raw float32 tensors with their shape, metadata TSV and
    a thumbnail sprite; the projector config is merged with what is on disk, so a second writer
    or a resumed run keeps earlier entries. Scalars go through the ``SummaryWriter``.

    Args:
        log_dir_or_summary_writer: A run directory (a ``SummaryWriter`` is opened there, which
            creates the event file the projector needs to list the run), or an existing
            ``torch.utils.tensorboard.SummaryWriter`` such as ``TensorBoardLogger.experiment``,
            which is reused and not closed by :meth:`close`.

    Example:
        >>> import tempfile, torch
        >>> writer = TensorBoardWriter(tempfile.mkdtemp())
        >>> writer.write_embedding(EmbeddingSnapshot("encoder", 0, torch.randn(8, 3)))
        >>> writer.write_scalars({"loss": 0.25}, step=0)
        >>> writer.close()
    """

    def __init__(self, log_dir_or_summary_writer: str | Path | Any) -> None:
        import_optional("tensorboard", "tensorboard")
        if isinstance(log_dir_or_summary_writer, str | Path):
            from torch.utils.tensorboard import SummaryWriter

            self.summary = SummaryWriter(str(log_dir_or_summary_writer))
            self._owns_summary = True
        else:
            self.summary = log_dir_or_summary_writer
            self._owns_summary = False
        self.run_dir = Path(self.summary.get_logdir())

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        """Add ``snapshot`` to the run's projector (see ``projector_files.write_snapshot``)."""
        projector_files.write_snapshot(self.run_dir, snapshot)

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Add each scalar at ``step``."""
        for name, value in scalars.items():
            self.summary.add_scalar(name, value, global_step=step)

    def flush(self) -> None:
        """Flush the event file."""
        self.summary.flush()

    def close(self) -> None:
        """Flush, and close the ``SummaryWriter`` when this writer opened it."""
        if self._owns_summary:
            self.summary.close()
        else:
            self.summary.flush()

    def describe(self) -> str:
        """``TensorBoardWriter(<run dir>)``."""
        return f"TensorBoardWriter({self.run_dir})"
