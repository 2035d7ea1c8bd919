"""The runs table: every run under a log directory at a glance, one row each, kept up to date.

A row is what :func:`learnscope.read_summaries` says of the run (its
:class:`~learnscope.run_directory.summary.RunSummary`): ``status``, ``error``, ``last_step``,
``hyperparameters`` and ``summary`` (:meth:`~learnscope.run_directory.summary.RunSummary.flat`,
the columns as the record has them: no fixed list), with ``name`` and ``time`` (when its newest
run started). :class:`RunsTable` keeps each run's summary fold and its place in the record
(a :class:`~learnscope.run_directory.record.RecordReader`): each :meth:`RunsTable.rows` reads
only what each record added since (on a disk the new end of the file; on an object store only
new segments, and none at all where the tab's search saw no change), and counts the bytes it
read (:attr:`RunsTable.bytes_read`). On an object store a run's first row starts from its
summary file (:mod:`learnscope.run_directory.summary_file`: one request, then the record's
segments after those it covers: a listing), not from every segment of its record; a run
without one (an older run), or whose file is damaged or not what the record begins with, is
read whole. The learnscope tab serves the rows at ``/table``; the
exported page holds them inline. Nothing here imports torch.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from learnscope.run_directory.file_names import RECORD_FILE
    >>> from learnscope.run_directory.record import append_entries
    >>> from learnscope.storage import open_run_folder
    >>> run = Path(tempfile.mkdtemp())
    >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 5.0}])
    >>> table = RunsTable()
    >>> [(row["name"], row["status"]) for row in table.rows([("a", open_run_folder(run))])]
    [('a', 'running')]
    >>> append_entries(run / RECORD_FILE, [{"kind": "end", "step": 3, "status": "finished"}])
    >>> row = table.rows([("a", open_run_folder(run))])[0]
    >>> row["status"], row["last_step"], row["summary"]["learnscope/last_step"]
    ('finished', 3, 3)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from learnscope.plugins.views.record_checks import is_number
from learnscope.plugins.views.run_view import FORMAT
from learnscope.run_directory.record import RecordReader
from learnscope.run_directory.summary import SummaryFold
from learnscope.run_directory.summary_file import RecordGlance, read_glance
from learnscope.storage import RecordSource, RunFolder

READERS = 16  # records read at once: on an object store each read is a request that waits
MAX_READ_BYTES = 64 * 1024 * 1024  # read of one record at a time (the rest comes in the loop)

# a run's record source, by its name, folder and the segments to start after (None: its own)
SourceOf = Callable[[str, RunFolder, tuple[int, str, str] | None], RecordSource | None]
# a run's summary file, by its name and folder (None: the record is read whole)
GlanceOf = Callable[[str, RunFolder], RecordGlance | None]


class CountedSource(RecordSource):
    r"""A record source that counts the bytes it gave (:attr:`bytes_read`), and may keep them.

    Args:
        source: The record's source.
        keep: Asked with the size of each read: whether to keep its bytes (:attr:`kept`, for
            :meth:`RunsTable.replay`); once it says no, nothing more is kept.

    Example:
        >>> import uuid
        >>> from learnscope.storage import open_run_folder
        >>> folder = open_run_folder(f"memory://doc/{uuid.uuid4().hex}")
        >>> _ = folder.append_record(b'{"kind":"run"}\n')
        >>> source = CountedSource(folder.record_source())
        >>> source.read(1 << 20), source.bytes_read
        (b'{"kind":"run"}\n', 15)
    """

    def __init__(self, source: RecordSource, keep: Callable[[int], bool] | None = None) -> None:
        self.source = source
        self.bytes_read = 0
        self.keep = keep
        self.kept: list[bytes] | None = [] if keep is not None else None

    def read(self, max_bytes: int) -> bytes:
        """The source's new lines (see :class:`~learnscope.storage.RecordSource`), counted."""
        data = self.source.read(max_bytes)
        self.restarted = self.source.restarted
        self.bytes_read += len(data)
        if self.kept is not None and self.keep is not None:
            if self.restarted:
                self.kept.clear()
            if data and not self.keep(len(data)):
                self.kept = None  # too much: the bytes are read again when asked
            elif data:
                self.kept.append(data)
        return data


class _Replay(RecordSource):
    """A record's bytes read before, given once, then what its source reads after them."""

    def __init__(self, kept: list[bytes], source: RecordSource) -> None:
        self.chunks = kept
        self.source = source

    def read(self, max_bytes: int) -> bytes:
        if self.chunks:
            data, self.chunks = b"".join(self.chunks), []
            self.restarted = False
            return data
        data = self.source.read(max_bytes)
        self.restarted = self.source.restarted
        return data


class _KeptRun:
    """One run's row as the table keeps it: its fold, where its record was read to, its row."""

    def __init__(
        self,
        name: str,
        folder: RunFolder,
        source: RecordSource,
        keep: Callable[[int], bool] | None = None,
        glance: RecordGlance | None = None,
    ) -> None:
        self.name = name
        self.folder = folder
        self.source = CountedSource(source, keep)
        self.reader = RecordReader(self.source, MAX_READ_BYTES)
        self.fold = SummaryFold()
        self.started = 0.0
        if glance is not None:  # the record up to the segments its summary file covers
            self.fold = SummaryFold.from_state(glance.fold.state())
            self.started = glance.newest_time
        self.problem: str | None = None
        self.row: dict[str, Any] | None = None

    def refresh(self) -> bool:
        """Read what the record added and fold it in; whether the row changed."""
        changed = self.row is None
        try:
            more = True
            while more:  # again only when a read stopped at its most (no second listing)
                before = self.source.bytes_read
                entries = self.reader.read()
                more = self.source.bytes_read - before >= MAX_READ_BYTES // 2
                if self.reader.restarted:  # the record began again: so does its summary
                    self.fold, self.started = SummaryFold(), 0.0
                for entry in entries:
                    self.fold.add(entry)
                    if entry.get("kind") == "run" and is_number(entry.get("time")):
                        self.started = float(entry["time"])
                changed = changed or bool(entries) or self.reader.restarted
            problem = None
        except OSError as error:
            problem = str(error)  # as the run's view says it
        if problem != self.problem:
            self.problem, changed = problem, True
        if changed:
            self.row = self._row()
        return changed

    def _row(self) -> dict[str, Any]:
        summary = self.fold.summary()
        try:
            flat: dict[str, Any] = summary.flat()
            problem = self.problem
        except ValueError as error:  # two groups or keys of one name
            flat, problem = {}, f"{self.name}: {error}"
        return {
            "name": self.name,
            "time": self.started,
            "status": summary.status,
            "error": summary.error,
            "last_step": summary.last_step,
            "hyperparameters": dict(summary.hyperparameters),
            "summary": flat,
            "problem": problem,
        }


class RunsTable:
    """The runs table of a log directory, each run's summary kept between calls (see module).

    Args:
        source_of: A run's record source (by its name and folder); by default the folder's
            own :meth:`~learnscope.storage.RunFolder.record_source`. The tab gives its
            searched source, which on an object store reads only when its search saw the
            record change.
        readers: How many records are read at once.
        keep_bytes: How many bytes of the records read to keep, in all, so that a view made
            next reads them again from memory (:meth:`replay`; ``learnscope export``); none
            by default.
        glance_of: A run's summary file (by its name and folder), to start from instead of
            the record's first segment: by default the folder's own
            (:func:`~learnscope.run_directory.summary_file.read_glance`: one request on an
            object store, none on a disk); none when ``keep_bytes`` is given (a view made
            next reads the whole record). The tab gives the one its search read.
    """

    def __init__(
        self,
        source_of: SourceOf | None = None,
        readers: int = READERS,
        keep_bytes: int = 0,
        glance_of: GlanceOf | None = None,
    ) -> None:
        self.source_of: SourceOf = source_of or (
            lambda _, folder, after: folder.record_source(after)
        )
        if glance_of is None and keep_bytes <= 0:
            glance_of = lambda _, folder: read_glance(folder)  # noqa: E731
        self.glance_of: GlanceOf = glance_of or (lambda _, folder: None)
        self.readers = readers
        self.keep_bytes = keep_bytes
        self._kept: dict[str, _KeptRun] = {}
        self._lock = threading.Lock()
        self._keeping = threading.Lock()
        self._kept_bytes = 0  # bytes kept for replay, in all
        self._gone_bytes = 0  # read for runs no longer kept

    @property
    def bytes_read(self) -> int:
        """The bytes of run records this table has read, in all."""
        return self._gone_bytes + sum(run.source.bytes_read for run in self._kept.values())

    def rows(self, runs: Sequence[tuple[str, RunFolder]]) -> list[dict[str, Any]]:
        """One row per run ``(name, folder)``, in that order, each brought up to date.

        Each record is read from where the last call left it; a run no longer given is let
        go. A record that cannot be read gives a row with its ``problem`` said and the
        summary of what was read before.
        """
        with self._lock:
            kept = {}
            new = []
            for name, folder in runs:
                run = self._kept.get(name)
                if run is None or not run.folder.same_as(folder):
                    new.append((name, folder))
                else:
                    kept[name] = run
            for (name, _), run in zip(new, self._map(self._new_run, new), strict=True):
                kept[name] = run
            kept = {name: kept[name] for name, _ in runs if name in kept}
            gone = [run for name, run in self._kept.items() if kept.get(name) is not run]
            self._gone_bytes += sum(run.source.bytes_read for run in gone)
            self._kept = kept
            self._map(_KeptRun.refresh, list(kept.values()))
            return [run.row for run in kept.values() if run.row is not None]

    def _map(self, do: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``do`` of each item, several at once (on an object store each waits on requests)."""
        if len(items) > 1 and self.readers > 1:
            with ThreadPoolExecutor(min(self.readers, len(items))) as pool:
                return list(pool.map(do, items))
        return [do(item) for item in items]

    def _new_run(self, named: tuple[str, RunFolder]) -> _KeptRun:
        """A run not kept yet, from its summary file where it has one that says what it covers."""
        name, folder = named
        glance = self.glance_of(name, folder)
        if glance is not None and glance.covers is None:
            glance = None  # a record its writer did not start: read whole
        after = glance.covers if glance is not None else None
        source = self.source_of(name, folder, after) or folder.record_source(after)
        keep = self._keep if self.keep_bytes > 0 else None
        return _KeptRun(name, folder, source, keep, glance)

    def replay(self, name: str) -> RecordSource | None:
        r"""Run ``name``'s record as read by :meth:`rows`, from memory, once (then let go).

        ``None`` when its bytes were not kept (``keep_bytes`` spent): read it afresh.
        Afterwards the source reads what the record adds, from where the table's read
        stopped.

        Example:
            >>> import uuid
            >>> from learnscope.storage import open_run_folder
            >>> folder = open_run_folder(f"memory://doc/{uuid.uuid4().hex}")
            >>> _ = folder.append_record(b'{"kind":"run"}\n')
            >>> table = RunsTable(keep_bytes=1000)
            >>> _ = table.rows([("a", folder)])
            >>> table.replay("a").read(1 << 20), table.replay("a")
            (b'{"kind":"run"}\n', None)
        """
        run = self._kept.get(name)
        if run is None or run.source.kept is None:
            return None
        kept, run.source.kept = run.source.kept, None
        with self._keeping:
            self._kept_bytes -= sum(len(chunk) for chunk in kept)
        return _Replay(kept, run.source)

    def _keep(self, size: int) -> bool:
        with self._keeping:
            if self._kept_bytes + size > self.keep_bytes:
                return False
            self._kept_bytes += size
            return True


def not_held_view(row: dict[str, Any], why: str) -> dict[str, Any]:
    """The view model a page gives a run whose view it does not hold: its row's words and ``why``.

    Example:
        >>> view = not_held_view({"name": "a", "time": 2.0, "status": "failed", "error": "E: x",
        ...     "last_step": 4}, "not held")
        >>> view["messages"], view["failed"], view["ended"]
        (['not held'], 'E: x', {'step': 4, 'status': 'failed'})
    """
    status = row["status"]
    ended = None if status == "running" else {"step": row["last_step"], "status": status}
    return {
        "format": FORMAT,
        "run": row["name"],
        "time": row["time"],
        "attached": None,
        "ended": ended,
        "failed": row["error"] if status == "failed" else None,
        "has_data": False,
        "held": False,
        "embeddings": [],
        "autocorrelation": [],
        "findings": [],
        "status": {"embeddings": why, "autocorrelation": why, "findings": why},
        "messages": [why],
    }
