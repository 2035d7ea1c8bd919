"""The run record writer: what learnscope did in a run, as data, for the views to read.

:class:`RunRecordWriter` appends the entries of ``docs/run_record.md`` to
``<directory>/learnscope_record.jsonl`` (:mod:`learnscope.run_directory.record`): a ``run`` entry
when a run starts, a ``snapshot`` per embedding snapshot (ids, the aligned PCA view with its spread
and frame, typed metadata columns, the sprite, the full embedding's file), an
``autocorrelation`` entry per kind of each analysis, the whole ``findings`` table, and an
``end`` entry. Each record is one append of its lines, under the directory's lock (on an
object store, one new segment). A run folder has one: a dashboard's entry makes it
(:func:`record_writer`) and hands it to its writers that write there (the TensorBoard writer,
the W&B writer); failures are raised to the caller (the writer fan-out isolates them). On an
object store it also keeps the summary file beside the record
(:mod:`learnscope.run_directory.summary_file`), one ``PUT`` after each segment.

Example:
    >>> import tempfile, torch
    >>> from learnscope.run_directory.record import RecordReader
    >>> from learnscope.records import RunEnd, RunStart
    >>> writer = RunRecordWriter(tempfile.mkdtemp())
    >>> writer.write_run_start(RunStart())
    >>> writer.write_embedding(EmbeddingSnapshot("enc", 4, torch.randn(6, 3), {"c": [1] * 6}))
    >>> writer.write_run_end(RunEnd(4))
    >>> [(e["kind"], e.get("step")) for e in RecordReader(writer.folder.record_source()).read()]
    [('run', None), ('snapshot', 4), ('end', 4)]
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.embeddings.aligned_pca import PCA_COLUMNS, UMAP_COLUMNS
from learnscope.embeddings.batch_rows import NODE_COLUMN, POSITION_COLUMN
from learnscope.embeddings.rows import LOADER_COLUMN
from learnscope.embeddings.scatter_frame import column_kind, label_categories
from learnscope.plugins.pipeline.base import LastTable, Writer, folder_failure
from learnscope.plugins.pipeline.disk_reserve import DiskReserve
from learnscope.records import (
    AlignedView,
    AutocorrelationSummary,
    EmbeddingSnapshot,
    Finding,
    RunEnd,
    RunStart,
)
from learnscope.run_directory.file_names import SUMMARY_FILE
from learnscope.run_directory.record import FORMAT, RecordReader, encode_array, encode_entries
from learnscope.run_directory.summary import RunSummary
from learnscope.run_directory.summary_file import RecordGlance
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.storage import RunFolder, open_run_folder

log = logging.getLogger("learnscope")

ID_COLUMN = "id"
# in the entry's own fields, not in its columns
NOT_COLUMNS = (ID_COLUMN, *PCA_COLUMNS, *UMAP_COLUMNS)


@dataclass(frozen=True)
class Sprite:
    """The thumbnails of a snapshot as one PNG in the run directory.

    Args:
        path: The PNG's path relative to the run directory (``/`` separated).
        cell: ``(width, height)`` of one thumbnail, in pixels.
        per_row: Thumbnails per row; point ``i`` is at column ``i % per_row``, row
            ``i // per_row``.

    Example:
        >>> Sprite("projector/enc/step_000000003/sprite.png", (8, 8), 3).per_row
        3
    """

    path: str
    cell: tuple[int, int]
    per_row: int


@dataclass(frozen=True)
class TensorFile:
    """A snapshot's full embedding as one raw little-endian float32 file in the run directory.

    Args:
        path: The file's path relative to the run directory (``/`` separated).
        shape: ``(points, dim)``: row ``i`` is point ``i`` of the snapshot (the order of its
            ``ids``), ``points * dim * 4`` bytes in all.

    Example:
        >>> TensorFile("projector/enc/step_000000003/tensor.bin", (6, 3)).shape
        (6, 3)
    """

    path: str
    shape: tuple[int, int]


class RunRecordWriter(Writer):
    """Append learnscope's records to the run record of one directory.

    Args:
        directory: The run directory (TensorBoard's, or a wandb run's files folder), as a path
            or a :class:`~learnscope.storage.RunFolder` (on an object store, each record is one
            new segment). A local one must exist when a record is written: a removed
            directory is not made again. Nothing is written or removed before the first
            record (the folder then removes a crashed writer's debris, a stale lock).
        reserve: The free-space reserve of the writer this record belongs to (see
            :mod:`learnscope.plugins.pipeline.disk_reserve`): no entry is written while the free
            space is below it, each one raising
            :class:`~learnscope.plugins.pipeline.base.RecordSkipped`. ``None``: no reserve.

    Example:
        >>> import tempfile
        >>> writer = RunRecordWriter(tempfile.mkdtemp())
        >>> writer.folder.record_stamp() is None  # nothing written yet
        True
    """

    def __init__(
        self, directory: str | Path | RunFolder, reserve: DiskReserve | None = None
    ) -> None:
        self.folder = directory if isinstance(directory, RunFolder) else open_run_folder(directory)
        self.reserve = reserve
        self.location = self.folder.location
        self._step: int | None = None  # the latest step written, for an end entry at close
        self._ended = True  # nothing to end until something is written
        self._findings = LastTable()  # the findings table last appended
        self._glance: RecordGlance | None = None  # the record so far; read at the first write

    def write_run_start(self, run: RunStart) -> None:
        """Append the ``run`` entry: the callbacks, their settings, the hyper-parameters."""
        callbacks = [{"name": c.name, "settings": dict(c.settings)} for c in run.callbacks]
        entry = {
            "kind": "run",
            "format": FORMAT,
            "time": run.time,
            "callbacks": callbacks,
            "hyperparameters": dict(run.hyperparameters),
        }
        self._findings.forget()
        self._append([entry])

    def write_embedding(
        self,
        snapshot: EmbeddingSnapshot,
        sprite: Sprite | None = None,
        tensor: TensorFile | None = None,
    ) -> None:
        """Append a ``snapshot`` entry (see :func:`snapshot_entry`)."""
        self._append([snapshot_entry(snapshot, sprite, tensor)], snapshot.step)

    def write_autocorrelation(self, summary: AutocorrelationSummary) -> None:
        """Append one ``autocorrelation`` entry per kind (``params``, ``grads``) of ``summary``."""
        self._append(autocorrelation_entries(summary), summary.step)

    def write_findings(self, findings: Sequence[Finding], step: int) -> None:
        """Append the ``findings`` entry: ``findings`` is the whole table so far.

        The same table again at the same or an earlier step is not appended.
        """
        rows = [finding_row(f) for f in findings]
        if self._findings.is_new(rows, step):
            self._append([{"kind": "findings", "step": step, "rows": rows}], step)
            self._findings.written(rows, step)

    def write_run_end(self, end: RunEnd) -> None:
        """Append the ``end`` entry (with the ``error`` of a failed run)."""
        entry: dict[str, Any] = {"kind": "end", "step": end.step, "status": end.status}
        if end.error is not None:
            entry["error"] = {"type": end.error.type, "message": end.error.message}
        self._append([entry], end.step)
        self._ended = True

    def close(self) -> None:
        """End the record (``finished``, at the latest step written) unless it has ended."""
        if not self._ended:
            self.write_run_end(RunEnd(self._step or 0))

    def summary(self) -> RunSummary:
        """What the record holds so far, as a :class:`~learnscope.run_directory.summary.RunSummary`.

        Kept as entries are appended; a record already in the folder (a resumed run's) is read
        once, at this writer's first write. Before any write: the record as it is now.

        Example:
            >>> import tempfile
            >>> from learnscope.records import RunEnd, RunStart
            >>> writer = RunRecordWriter(tempfile.mkdtemp())
            >>> writer.write_run_start(RunStart())
            >>> writer.summary().status
            'running'
            >>> writer.write_run_end(RunEnd(3, status="finished"))
            >>> writer.summary().status, writer.summary().last_step
            ('finished', 3)
        """
        return self._read_glance().fold.summary()

    def describe(self) -> str:
        """``RunRecordWriter(<directory>)``."""
        return f"RunRecordWriter({self.location})"

    def permanent_failure(self, error: Exception) -> str | None:
        """Its directory is gone, the store refuses it, the file system is read-only."""
        return folder_failure(self.folder, error)

    def _append(self, entries: list[dict[str, Any]], step: int | None = None) -> None:
        """Append ``entries`` in one write; the directory must still be there."""
        if not entries:
            return
        if not self.folder.exists():
            raise FileNotFoundError(f"the run directory {self.location} is gone; not re-making it")
        if self.reserve is not None:
            self.reserve.check(0, "the run record")
        glance = self._read_glance()
        data = encode_entries(entries)  # one JSON line per entry
        segment = self.folder.append_record(data)
        for entry, line in zip(entries, data.splitlines(), strict=True):
            glance.add(_as_written(entry, line), len(line) + 1)
        glance.covered(segment)
        self._ended = entries[-1]["kind"] == "end"
        if step is not None:
            self._step = step if self._step is None else max(self._step, step)
        if self.folder.keeps_summary:
            self._write_glance(glance)

    def _write_glance(self, glance: RecordGlance) -> None:
        """Replace the summary file (the record is written: a failure here is only said)."""
        try:
            self.folder.write(SUMMARY_FILE, glance.encode())
        except (OSError, ValueError) as error:  # readers then read the segments it lacks
            log.warning(
                "learnscope: the summary file of %s was not replaced (%s: %s); the runs "
                "table reads the record's newer segments instead",
                self.location,
                type(error).__name__,
                error,
            )

    def _read_glance(self) -> RecordGlance:
        """The record at a glance, made at first use from the record already in the folder.

        A record this writer did not start is read whole; where a summary file is kept, its
        stamp (asked before and after the read: the same when nothing was added meanwhile)
        says what the glance covers, else that is not known (readers then read the record).
        """
        if self._glance is None:
            glance = RecordGlance()
            try:
                stamp = self.folder.record_stamp()
                if stamp is not None:
                    reader = RecordReader(self.folder.record_source())
                    while entries := reader.read():
                        for entry in entries:
                            glance.add(entry, len(json.dumps(entry, separators=(",", ":"))) + 1)
                    glance.covered(None)
                    if self.folder.keeps_summary and self.folder.record_stamp() == stamp:
                        glance.covers = _covers(stamp.written)
                    if reader.skipped:
                        glance.first_time = None  # its first line may be one not read
            except OSError as error:  # not a file it can read: the write says what it meets
                log.debug("learnscope: the run summary starts afresh: %s", error)
                glance = RecordGlance()
                glance.covered(None)
            self._glance = glance
        return self._glance


def _covers(written: object) -> tuple[int, str, str] | None:
    """An object store's record stamp as the segments a summary file covers, else ``None``."""
    if isinstance(written, tuple) and len(written) == 3:
        count, first, last = written
        if isinstance(count, int) and isinstance(first, str) and isinstance(last, str):
            return (count, first, last)
    return None


def _as_written(entry: Mapping[str, Any], line: bytes) -> dict[str, Any]:
    """What the summary reads of ``entry``, as its record ``line`` gives it back.

    A snapshot's line (its arrays) is not parsed: the summary reads only its key, step, ranks
    and silhouette (numbers and text, as JSON gives them back).
    """
    if entry.get("kind") == "snapshot":
        read = ("kind", "key", "step", "ranks", "silhouette")
        return {name: entry[name] for name in read if name in entry}
    return json.loads(line)


def record_writer(
    directory: str | Path | RunFolder, limits: WriteLimits = WriteLimits()
) -> RunRecordWriter:
    """The run record of ``directory``, with the free-space reserve of its disk.

    The one record writer of a run folder: a dashboard's entry makes it and hands it to its
    writers that write there, which check their large records against its reserve too. On an
    object store the reserve allows every write.

    Args:
        directory: The run directory, as a path or a :class:`~learnscope.storage.RunFolder`.
        limits: The free-space reserve to keep (``reserve_fraction``, ``reserve_min_bytes``).

    Example:
        >>> import tempfile
        >>> record = record_writer(tempfile.mkdtemp())
        >>> record.reserve is not None
        True
    """
    folder = directory if isinstance(directory, RunFolder) else open_run_folder(directory)
    return RunRecordWriter(folder, DiskReserve(folder, limits))


def snapshot_entry(
    snapshot: EmbeddingSnapshot, sprite: Sprite | None = None, tensor: TensorFile | None = None
) -> dict[str, Any]:
    """The ``snapshot`` entry of the run record for ``snapshot``.

    ``xy`` comes from the snapshot's :attr:`~EmbeddingSnapshot.aligned` view (float32, as
    computed; its other views go to ``projections``, see :func:`view_entry`), or from
    ``pca_x``/``pca_y`` columns a snapshot made by hand carries; ``spread``
    and ``frame`` from :attr:`EmbeddingSnapshot.view_frame`, ``ids`` from the ``id`` column (see
    :func:`point_ids`), and every other column is typed by :func:`typed_column`. ``sprite``
    and ``tensor`` name the snapshot's thumbnails and full embedding when a writer wrote them;
    ``ranks`` and ``silhouette`` are the snapshot's measures, when it has them.

    Example:
        >>> import torch
        >>> snapshot = EmbeddingSnapshot(
        ...     "enc", 3, torch.zeros(2, 4), {"id": [7, 9], "pca_x": [0.5, -0.5],
        ...     "pca_y": [1.0, 0.0], "label": ["a", "b"]}, stage="validate")
        >>> entry = snapshot_entry(snapshot)
        >>> entry["key"], entry["ids"], entry["xy"]["shape"], [c["name"] for c in entry["columns"]]
        ('enc/validate', ['7', '9'], [2, 2], ['label'])
    """
    columns = snapshot.metadata_columns()
    entry: dict[str, Any] = {
        "kind": "snapshot",
        "key": snapshot.key,
        "step": snapshot.step,
        "points": snapshot.num_points,
        "ids": point_ids(columns),
    }
    if snapshot.aligned is not None:
        entry["xy"] = encode_array(snapshot.aligned.coords[:, :2], "<f4")
    elif PCA_COLUMNS[0] in columns and PCA_COLUMNS[1] in columns:  # columns given by hand
        xy = np.column_stack([columns[PCA_COLUMNS[0]], columns[PCA_COLUMNS[1]]])
        entry["xy"] = encode_array(xy.astype(np.float64), "<f4")
    if snapshot.view_frame is not None:
        entry["spread"] = snapshot.view_frame.spread
        entry["frame"] = list(snapshot.view_frame.limits)
    if snapshot.projections:
        entry["projections"] = {view.projection: view_entry(view) for view in snapshot.projections}
    entry["columns"] = [
        typed_column(name, values) for name, values in columns.items() if name not in NOT_COLUMNS
    ]
    if sprite is not None:
        entry["sprite"] = {
            "path": sprite.path,
            "cell": [int(sprite.cell[0]), int(sprite.cell[1])],
            "per_row": int(sprite.per_row),
        }
    if tensor is not None:
        shape = [int(tensor.shape[0]), int(tensor.shape[1])]
        entry["tensor"] = {"path": tensor.path, "shape": shape, "dtype": "<f4"}
    entry["dropped"] = int(snapshot.dropped)
    if snapshot.ranks is not None:
        ranks = snapshot.ranks
        entry["ranks"] = {
            "rankme": ranks.rankme,
            "effective_rank": ranks.effective_rank,
            "rows": ranks.rows,
            "dim": ranks.dim,
        }
    if snapshot.silhouette is not None:
        silhouette = snapshot.silhouette
        entry["silhouette"] = {
            "column": silhouette.column,
            "points": silhouette.points,
            "views": dict(silhouette.views),
        }
    return entry


def view_entry(view: AlignedView) -> dict[str, Any]:
    """A further aligned view of a snapshot entry: ``xy``, ``spread``, ``frame`` and ``fitted``.

    The same fields as the entry's own (the PCA view's), and ``fitted``: how many points the
    projection was fitted on (``None``: all of them; the others were placed by the fitted view).

    Example:
        >>> from learnscope.records import ViewFrame
        >>> view = AlignedView(np.zeros((3, 2)), ViewFrame(2.0, (-1, 1, -1, 1)), "umap", 2)
        >>> entry = view_entry(view)
        >>> entry["xy"]["shape"], entry["spread"], entry["frame"], entry["fitted"]
        ([3, 2], 2.0, [-1.0, 1.0, -1.0, 1.0], 2)
    """
    return {
        "xy": encode_array(view.coords[:, :2], "<f4"),
        "spread": view.frame.spread,
        "frame": list(view.frame.limits),
        "fitted": view.fitted,
    }


def point_ids(columns: Mapping[str, Sequence[Any]]) -> list[str] | None:
    """Each point's id as text, unique within a snapshot and the same in every snapshot.

    The text of the ``id`` column; rows within a sample (graph nodes, tokens, pixels) add
    ``#`` and their ``node`` or ``position``, and rows of a stage with several loaders start
    with their ``dataloader`` and ``:``. ``None`` without an ``id`` column.

    Example:
        >>> point_ids({"id": [3, 3], "node": [0, 1], "dataloader": ["a", "a"]})
        ['a:3#0', 'a:3#1']
        >>> point_ids({"label": [1]}) is None
        True
    """
    if ID_COLUMN not in columns:
        return None
    ids = [str(v) for v in columns[ID_COLUMN]]
    within = next((columns[c] for c in (NODE_COLUMN, POSITION_COLUMN) if c in columns), None)
    if within is not None:
        ids = [f"{i}#{w}" for i, w in zip(ids, within, strict=True)]
    if LOADER_COLUMN in columns:
        ids = [f"{loader}:{i}" for loader, i in zip(columns[LOADER_COLUMN], ids, strict=True)]
    return ids


def typed_column(name: str, values: Sequence[Any]) -> dict[str, Any]:
    """A metadata column as the record holds it: categories and codes, or numbers.

    The kind comes from :func:`learnscope.embeddings.scatter_frame.column_kind`, the rule of the
    Images-tab picture. Categories are every distinct value as text, numbers first by value, then
    text (:func:`learnscope.embeddings.scatter_frame.label_categories`); numbers are float64.

    Example:
        >>> from learnscope.run_directory.record import decode_array
        >>> column = typed_column("digit", [3, 1, 3])
        >>> column["kind"], column["categories"], decode_array(column["codes"]).tolist()
        ('categorical', ['1', '3'], [1, 0, 1])
        >>> typed_column("loss", [0.5, 0.25])["kind"]
        'numeric'
    """
    if column_kind(values) == "numeric":
        numbers = np.asarray(values, np.float64)
        return {"name": name, "kind": "numeric", "values": encode_array(numbers, "<f8")}
    categories, codes = label_categories(values, most=max(len(values), 1))
    return {
        "name": name,
        "kind": "categorical",
        "categories": categories,
        "codes": encode_array(codes, "<i4"),
    }


def autocorrelation_entries(summary: AutocorrelationSummary) -> list[dict[str, Any]]:
    """One ``autocorrelation`` entry per kind of ``summary`` (``params`` first, as given).

    Example:
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("enc", "params", np.array([1.0, 0.5]), 0.5, 0.4, 0.6, None)
        >>> (entry,) = autocorrelation_entries(AutocorrelationSummary(8, (1,), (g,)))
        >>> entry["what"], entry["groups"], entry["lags"], entry["acf"], entry["tau"]
        ('params', ['enc'], [0, 1], [[1.0, 0.5]], [None])
    """
    kinds: dict[str, list[Any]] = {}
    for group in summary.groups:
        kinds.setdefault(group.kind, []).append(group)
    entries = []
    for kind, groups in kinds.items():
        lags = max(g.max_lag for g in groups) + 1
        entries.append(
            {
                "kind": "autocorrelation",
                "step": summary.step,
                "what": kind,
                "groups": [g.group for g in groups],
                "lags": list(range(lags)),
                "acf": [_padded(g.mean_acf, lags) for g in groups],
                "rho1_median": [g.rho1_median for g in groups],
                "rho1_q25": [g.rho1_q25 for g in groups],
                "rho1_q75": [g.rho1_q75 for g in groups],
                "tau": [g.tau for g in groups],
                "num_steps": [g.num_steps for g in groups],
                "non_finite_elements": [g.non_finite_elements for g in groups],
            }
        )
    return entries


def finding_row(finding: Finding) -> dict[str, Any]:
    """A finding as a row of the ``findings`` entry, with its life and what to try.

    Example:
        >>> row = finding_row(Finding("zero-gradient", "head.bias", "is zero", 3))
        >>> row["severity"], row["first_step"], row["resolved_step"], row["advice"][:5]
        ('warning', 3, None, 'Check')
    """
    return {
        "code": finding.code,
        "subject": finding.subject,
        "message": finding.message,
        "step": finding.step,
        "severity": finding.severity,
        "first_step": finding.first_step,
        "resolved_step": finding.resolved_step,
        "advice": finding.advice,
    }


def _padded(values: Iterable[float], length: int) -> list[float | None]:
    """``values`` as floats (NaN as ``None``), padded with ``None`` to ``length``."""
    out: list[float | None] = [float(v) if np.isfinite(v) else None for v in values]
    return out + [None] * (length - len(out))
