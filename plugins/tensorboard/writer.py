"""TensorBoard writer: projector snapshots; scalars, histograms, images, text in an event file."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from learnscope import records
from learnscope.optional import import_optional
from learnscope.plugins.pipeline.base import (
    FINDING_COLUMNS,
    LastTable,
    Writer,
    finding_table,
    folder_failure,
)
from learnscope.plugins.pipeline.disk_reserve import snapshot_bytes, writer_reserve
from learnscope.plugins.pipeline.drawing import png_bytes
from learnscope.plugins.pipeline.run_record_writer import (
    RunRecordWriter,
    Sprite,
    TensorFile,
    record_writer,
)
from learnscope.plugins.tensorboard import layout as tensorboard_layout
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.event_file import EventFile
from learnscope.plugins.tensorboard.hparams import HParamsSession
from learnscope.plugins.tensorboard.projector_refresh import ProjectorRefresh
from learnscope.run_directory.file_names import EVENTS_SUFFIX, TENSOR_FILE
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.storage import RunFolder, open_run_folder
from learnscope.tags import FINDINGS

SUFFIX = EVENTS_SUFFIX


class TensorBoardWriter(Writer):
    """Write learnscope records into one TensorBoard run directory.

    Embeddings go to the Projector tab as raw float32 tensors with their shape, metadata TSV and
    a thumbnail sprite; the projector config is merged with what is on disk, so a second writer
    or a resumed run keeps earlier entries. Scalars, histograms, images, text and the Custom
    Scalars layout go into an event file.

    The writer also keeps the run record, ``learnscope_record.jsonl`` in the run directory
    (:class:`~learnscope.plugins.pipeline.run_record_writer.RunRecordWriter`): the snapshots with
    their aligned view, ids, typed columns and sprite, the autocorrelation analyses, the findings
    table, and the start and end of each run, which learnscope's views read.

    Given a run directory, the writer opens an event file of its own there at its first write,
    whose name ends in ``.learnscope``, beside the logger's (TensorBoard reads every event file
    of a run), and writes it directly
    (:class:`~learnscope.plugins.tensorboard.event_file.EventFile`): a failure
    (a full disk, a removed directory) is raised by the call that wrote the record, and never
    reaches the logger's ``SummaryWriter``, which would store it and re-raise it in Lightning's
    ``log_metrics`` and ``finalize``, taking the fit down. While the run directory's file system
    has less free space than learnscope's reserve (its ``limits``), the writer
    writes nothing there (its event file is opened once there is room), so the last free pages
    stay for the training's own logs and checkpoints: each record it is given then raises
    :class:`~learnscope.plugins.pipeline.base.RecordSkipped`, which the fan-out counts.

    Args:
        log_dir_or_summary_writer: A run directory, as a path or a
            :class:`~learnscope.storage.RunFolder` (an event file of its own is opened there,
            which also lets the projector list the run, and closed by :meth:`close`), or an
            existing ``torch.utils.tensorboard.SummaryWriter``, which is written through and
            not closed.
        record: The run record of that directory, shared with the other writers there (the
            TensorBoard dashboard's entry makes it: see
            :func:`~learnscope.plugins.pipeline.run_record_writer.record_writer`); its
            free-space reserve is this writer's too. By default the writer makes its own.
        limits: The free-space reserve to keep (``reserve_fraction``, ``reserve_min_bytes``);
            a ``record`` given has the same (see
            :func:`~learnscope.plugins.pipeline.disk_reserve.writer_reserve`).

    Example:
        >>> import tempfile, torch
        >>> writer = TensorBoardWriter(tempfile.mkdtemp())
        >>> writer.write_embedding(records.EmbeddingSnapshot("encoder", 0, torch.randn(8, 3)))
        >>> writer.write_scalars({"loss": 0.25}, step=0)
        >>> writer.close()
    """

    def __init__(
        self,
        log_dir_or_summary_writer: str | Path | RunFolder | Any,
        record: RunRecordWriter | None = None,
        limits: WriteLimits = WriteLimits(),
    ) -> None:
        import_optional("tensorboard", "tensorboard")
        self.summary: Any = None
        if isinstance(log_dir_or_summary_writer, RunFolder):
            self.folder = log_dir_or_summary_writer
        elif isinstance(log_dir_or_summary_writer, str | Path):
            self.folder = open_run_folder(log_dir_or_summary_writer)
        else:
            self.summary = log_dir_or_summary_writer
            self.folder = open_run_folder(self.summary.get_logdir())
        self.location = self.folder.location
        # Nothing is written or removed here: the run folder removes a crashed writer's
        # debris at its first change, and the event file is opened by the first record.
        self._started = False  # the run directory is made at the first write
        self._events: EventFile | None = None  # opened when there is room
        self._findings_written = LastTable()  # the Text tab's last table
        self._refresh = ProjectorRefresh(self.folder)  # running servers see new snapshots
        self.record = record_writer(self.folder, limits) if record is None else record
        if not self.record.folder.same_as(self.folder):
            raise ValueError(
                f"the run record given is {self.record.location}'s, not the writer's "
                f"{self.location}: a writer keeps the record of its own run directory"
            )
        # learnscope leaves the disk's last space
        self.reserve = writer_reserve(self.record.reserve, self.folder, limits)
        self.projector = projector_files.ProjectorConfig(self.folder)
        self.layout = tensorboard_layout.CustomScalarsLayout(self.folder)
        self.hparams = HParamsSession(self.add_summary)  # the run's row in the HParams tab

    def write_embedding(self, snapshot: records.EmbeddingSnapshot) -> None:
        """Add ``snapshot`` to the run's projector (see ``projector_files.write_snapshot``).

        Then add it to the run record, with the sprite the projector got.

        Raises:
            RecordSkipped: The snapshot would leave less than the free-space reserve (see
                :class:`~learnscope.run_directory.write_limits.WriteLimits`); the first one skipped
                is said in a warning.
            FileNotFoundError: The run directory is gone (removed, or replaced by a file);
                it is not made again, so no half run appears where the user removed one.
        """
        self._check_folder("; not re-making it")
        self.reserve.check(snapshot_bytes(snapshot), f"snapshot {snapshot.key}")
        if self.summary is None:  # the projector lists runs by their event files
            self._open_events().touch()
        files = projector_files.write_snapshot(self.folder, snapshot, self.projector)
        self._refresh.announce()
        sprite = None
        if files.sprite and files.cell and files.per_row and files.points == snapshot.num_points:
            sprite = Sprite(files.sprite, files.cell, files.per_row)
        self.record.write_embedding(snapshot, sprite, _tensor_file(snapshot, files))

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Add each scalar at ``step``."""
        from torch.utils.tensorboard.summary import scalar

        for name, value in scalars.items():
            self.add_summary(scalar(name, value), step)
        self._end_batch()

    def write_histogram(self, histogram: records.Histogram) -> None:
        """Add a histogram of the finite values (nothing when there are none)."""
        from torch.utils.tensorboard.summary import histogram as histogram_summary

        values = histogram.finite_values()
        if values.size:
            proto = histogram_summary(histogram.tag, values, bins=_tensorflow_bins())
            self.add_summary(proto, histogram.step)
            self._end_batch()

    def write_image(self, image: records.RenderedImage) -> None:
        """Add an image to the Images tab, PNG-encoded (Pillow)."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        height, width, channels = image.pixels.shape
        encoded = Summary.Image(
            height=height,
            width=width,
            colorspace=channels,
            encoded_image_string=png_bytes(image.pixels),
        )
        self.add_summary(Summary(value=[Summary.Value(tag=image.tag, image=encoded)]), image.step)
        self._end_batch()

    def write_autocorrelation(self, summary: records.AutocorrelationSummary) -> None:
        """Scalars and Custom Scalars charts (``tensorboard_autocorrelation``).

        The analysis also goes into the run record.
        """
        from learnscope.plugins.tensorboard import autocorrelation as tensorboard_autocorrelation

        tensorboard_autocorrelation.write_autocorrelation(self, summary)
        self._end_batch()
        self.record.write_autocorrelation(summary)

    def write_findings(self, findings: Sequence[records.Finding], step: int) -> None:
        """Write the findings as one Markdown table in the Text tab, and into the run record.

        A table identical to the one this writer wrote last, at the same or an earlier step, is
        not written again; a later step's copy is (the Text tab then shows it was still so).

        Example:
            >>> import tempfile
            >>> writer = TensorBoardWriter(tempfile.mkdtemp())
            >>> writer.write_findings([], step=3)
            >>> writer.write_findings([], step=3)  # the same table at the same step: skipped
            >>> writer.close()
        """
        from torch.utils.tensorboard.summary import text as text_summary

        text = findings_markdown(findings)
        if self._findings_written.is_new(text, step):
            self.add_summary(text_summary(FINDINGS, text), step)
            self._end_batch()
            self._findings_written.written(text, step)
        self.record.write_findings(findings, step)

    def write_run_start(self, run: records.RunStart) -> None:
        """Start a run in the run record: the callbacks, their settings, the hyper-parameters."""
        self.record.write_run_start(run)
        self.hparams.start(run.time)

    def write_run_end(self, end: records.RunEnd) -> None:
        """End the run in the run record, and write its session in the HParams dashboard.

        The session (:mod:`~learnscope.plugins.tensorboard.hparams`) holds the run's
        hyper-parameters and the run record's summary as it ended; it is written once.
        """
        self.record.write_run_end(end)
        self._write_session()

    def add_charts(self, charts: dict[str, dict[str, tensorboard_layout.Chart]]) -> None:
        """Make sure the Custom Scalars layout has ``charts`` (category -> title -> chart).

        The complete layout, with every chart added before by any writer of this run, is
        written again at a higher step whenever it changes.

        Example:
            >>> import tempfile
            >>> from learnscope.plugins.tensorboard.layout import multiline
            >>> writer = TensorBoardWriter(tempfile.mkdtemp())
            >>> writer.add_charts({"loss": {"all losses": multiline(["train/loss"])}})
            >>> writer.close()
        """
        from torch.utils.tensorboard.summary import custom_scalars

        self.reserve.check(0, "the Custom Scalars layout")
        state = self.layout.merge(charts)
        if state is not None:
            self.add_summary(custom_scalars(state["layout"]), state["version"])

    def add_summary(self, summary: Any, step: int) -> None:
        """Add one ``Summary`` proto at ``step`` to the event file.

        On an object store it is written with the rest of its record, as one new event file.

        Raises:
            FileNotFoundError: The run directory is gone; nothing is written into the void.
            RecordSkipped: The disk has less free space than learnscope's reserve.
        """
        if self.summary is not None:
            self.summary._get_file_writer().add_summary(summary, step)
            return
        self._check_folder("")
        self.reserve.check(0, f"{summary.value[0].tag if summary.value else 'a summary'}")
        self._open_events().add_summary(summary, step)

    def flush(self) -> None:
        """Flush a given ``SummaryWriter`` (an own event file holds every record already)."""
        if self.summary is not None:
            self.summary.flush()
        self._end_batch()

    def close(self) -> None:
        """End the run record and its HParams session; close the own event file.

        A given ``SummaryWriter`` is flushed, not closed.
        """
        try:
            self.record.close()
            self._write_session()
        finally:
            self._refresh.close()
            if self._events is not None:
                self._events.close()
            elif self.summary is not None:
                self.summary.flush()

    def _write_session(self) -> None:
        """Write the run's HParams session once its record has ended (:class:`HParamsSession`)."""
        self.hparams.end(self.record.summary())
        self._end_batch()

    def _check_folder(self, then: str) -> None:
        """Make the run directory at the first write; a directory gone later is not made again.

        Raises:
            FileNotFoundError: The run directory is gone (``then`` ends the message).
        """
        if not self._started:
            self._started = True
            self.folder.make()
        elif not self.folder.exists():
            raise FileNotFoundError(f"the run directory {self.location} is gone{then}")

    def _open_events(self) -> EventFile:
        """The own event file, opened when first used."""
        if self._events is None:
            self._events = EventFile(self.folder, SUFFIX)
        return self._events

    def _end_batch(self) -> None:
        """Write the summaries of the record just written (on an object store, one object)."""
        if self._events is not None:
            self._events.flush()

    def describe(self) -> str:
        """``TensorBoardWriter(<run dir>)``."""
        return f"TensorBoardWriter({self.location})"

    def permanent_failure(self, error: Exception) -> str | None:
        """Its run directory is gone, the store refuses it, the file system is read-only."""
        return folder_failure(self.folder, error)


def findings_markdown(findings: Sequence[records.Finding]) -> str:
    r"""A Markdown table of findings, for TensorBoard's Text tab: those still holding first.

    Example:
        >>> finding = records.Finding("zero-gradient", "head.bias", "is | zero", 3)
        >>> print(findings_markdown([finding]))  # doctest: +ELLIPSIS
        | step | severity | code | subject | still holds | seen | message | what to try |
        |---:|---|---|---|---|---|---|---|
        | 3 | warning | zero-gradient | `head.bias` | yes | found at step 3; still holds | ... |
    """
    if not findings:
        return "No findings: nothing looks wrong so far."
    lines = [
        "| " + " | ".join(FINDING_COLUMNS) + " |",
        "|---:|" + "---|" * (len(FINDING_COLUMNS) - 1),
    ]
    for step, severity, code, subject, holds, life, message, advice in finding_table(findings):
        cells = [str(step), severity, code, f"`{_md(subject)}`", "yes" if holds else "no"]
        lines.append("| " + " | ".join([*cells, life, _md(message), _md(advice)]) + " |")
    return "\n".join(lines)


@functools.cache
def _tensorflow_bins() -> list[float]:
    """The bucket edges ``SummaryWriter.add_histogram`` uses by default (``bins="tensorflow"``).

    Edges grow by 10% from 1e-12 to 1e20 on both sides of zero, so values of any magnitude
    are told apart.

    Example:
        >>> len(_tensorflow_bins()), _tensorflow_bins()[774]
        (1549, 0)
    """
    edges, v = [], 1e-12
    while v < 1e20:
        edges.append(v)
        v *= 1.1
    return [-e for e in reversed(edges)] + [0] + edges


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _tensor_file(
    snapshot: records.EmbeddingSnapshot, files: projector_files.SnapshotFiles
) -> TensorFile | None:
    """The raw float32 tensor the projector got, when it holds every row of ``snapshot``.

    ``None`` when the projector got a subsample or a TSV tensor (see
    :func:`projector_files.tensor_bytes`).
    """
    shape = (snapshot.num_points, snapshot.dim)
    if files.tensor is None or files.points != shape[0]:
        return None
    path, size = files.tensor
    if not path.endswith(f"/{TENSOR_FILE}") or size != shape[0] * shape[1] * 4:
        return None
    return TensorFile(path, shape)
