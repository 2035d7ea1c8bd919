"""Finding the runs under a log directory, when each started and how it ended, without links.

A log directory is a local path or any fsspec URL (``s3://bucket/runs``, ``gs://...``,
``memory://...``): every read goes through a :class:`~learnscope.storage.RunFolder`
(:func:`~learnscope.run_directory.run_search.run_folder`; a missing file-system package is a
:class:`~learnscope.storage.MissingFileSystem` naming it). The learnscope tab searches on a
background thread with :func:`~learnscope.run_directory.run_search.find_runs` (in the core, so
that :func:`learnscope.read_summaries` finds runs as the views do); ``learnscope export``
writes each run it finds. Only run records are looked at: one listing per folder to find them
(none per file), the first line of each to know when its run started (:func:`run_started`), its
last 64 KiB to know whether its newest run failed and whether it holds any data
(:func:`run_outcome`), so that a view opens on the newest run with data rather than on one that
failed before writing any, and :func:`record_stamp` (a ``stat`` of the record file; one listing
of an object store's record segments) to know whether a record changed since the last search.
Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from learnscope.plugins.views.record_checks import DamagedEntry, is_number
from learnscope.plugins.views.run_status import RunEntries
from learnscope.run_directory.endings import error_text
from learnscope.run_directory.run_search import (
    SKIPPED_FOLDERS,
    find_runs,
    folder_name,
    run_folder,
    run_of,
)
from learnscope.run_directory.summary_file import RecordGlance
from learnscope.storage import RecordStamp, RunFolder

__all__ = [
    "SKIPPED_FOLDERS",
    "find_runs",
    "folder_name",
    "record_stamp",
    "run_folder",
    "run_of",
    "run_outcome",
    "run_started",
    "glance_outcome",
]
_FIRST_LINE_BYTES = 65_536  # the ``run`` entry a run starts with is shorter than this
_TAIL_BYTES = 65_536  # a record longer than this holds data: run and end entries are short
_DATA_KINDS = ("snapshot", "autocorrelation")  # and a findings table with rows


def record_stamp(run_dir: str | Path | RunFolder) -> RecordStamp | None:
    """The stamp of a run's record, or ``None`` when it has none.

    A local record: its device and inode, its size and times (one ``stat``, no link followed).
    An object store's segments: the first and last segment's names and their count (one
    listing; segments are never rewritten); a record file copied up whole: its size and entity
    tag (one ``HEAD``).

    Example:
        >>> import tempfile
        >>> from learnscope.run_directory.file_names import RECORD_FILE
        >>> from learnscope.run_directory.record import append_entries
        >>> run = Path(tempfile.mkdtemp())
        >>> record_stamp(run) is None
        True
        >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 1.0}])
        >>> before = record_stamp(run)
        >>> append_entries(run / RECORD_FILE, [{"kind": "end", "step": 3, "status": "finished"}])
        >>> after = record_stamp(run)
        >>> after.identity == before.identity, after.written == before.written
        (True, False)
    """
    return run_folder(run_dir).record_stamp()


def run_started(run_dir: str | Path | RunFolder) -> float:
    """When the run started: the ``time`` of its record's first line, a ``run`` entry.

    The time of the record (a local file's modification time; an object store's first
    segment's) when its first line is no ``run`` entry; ``0.0`` when there is no readable
    record. Reads at most the first 64 KiB, never through a link, never from a FIFO.

    Example:
        >>> import tempfile
        >>> from learnscope.run_directory.file_names import RECORD_FILE
        >>> from learnscope.run_directory.record import append_entries
        >>> run = Path(tempfile.mkdtemp())
        >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 12.5}])
        >>> run_started(run)
        12.5
    """
    try:
        read = run_folder(run_dir).record_head(_FIRST_LINE_BYTES)
    except OSError:
        read = None
    if read is None:
        return 0.0
    head, modified = read
    line, newline, _ = head.partition(b"\n")
    try:
        entry = json.loads(line) if newline else None
    except ValueError:
        entry = None
    if isinstance(entry, dict) and entry.get("kind") == "run" and is_number(entry.get("time")):
        return float(entry["time"])
    return modified


def run_outcome(run_dir: str | Path | RunFolder) -> dict[str, Any]:
    """How the record's newest run ended, whether it failed, and whether the record holds data.

    Read from the record's last 64 KiB (an object store's last segments, whole):
    ``failed`` is the exception (``type: message``) of the newest run's ``end`` entry when it
    says ``failed``, else ``None``; ``has_data`` is whether there is a snapshot, an
    autocorrelation analysis or a findings table with rows (a longer record always holds
    some); ``ended`` is the newest run's ``end`` entry, ``{"step", "status"}`` (``finished``,
    ``interrupted`` or ``failed``), or ``None`` while it has none (the run goes on, or its
    process was killed). An unreadable record has none of them.

    Example:
        >>> import tempfile
        >>> from learnscope.run_directory.file_names import RECORD_FILE
        >>> from learnscope.run_directory.record import append_entries
        >>> run = Path(tempfile.mkdtemp())
        >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 1.0},
        ...     {"kind": "end", "step": 0, "status": "failed",
        ...      "error": {"type": "ValueError", "message": "no such module"}}])
        >>> run_outcome(run)
        {'failed': 'ValueError: no such module', 'has_data': False, \
'ended': {'step': 0, 'status': 'failed'}}
    """
    try:
        tail = run_folder(run_dir).record_tail(_TAIL_BYTES + 1)
    except OSError:
        tail = None
    if tail is None:
        return {"failed": None, "has_data": False, "ended": None}
    lines = tail.split(b"\n")
    longer = len(tail) > _TAIL_BYTES  # more than 64 KiB: data, and the first line is cut
    if longer:
        lines = lines[1:]
    newest = RunEntries()
    has_data = longer
    for line in lines:
        try:
            entry = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        kind = entry.get("kind")
        if kind == "run":
            newest.ended = None  # a newer run: the end read so far was an older run's
        elif kind == "end":
            try:
                newest.fold_end(entry)
            except DamagedEntry:  # a step that is no whole number: the view names it
                continue
        elif kind in _DATA_KINDS or (kind == "findings" and entry.get("rows")):
            has_data = True
    failed = error_text(newest.ended) if newest.failure() is not None else None
    ended = None
    if newest.ended is not None:
        ended = {"step": newest.ended["step"], "status": newest.ended["status"]}
    return {"failed": failed, "has_data": has_data, "ended": ended}


def glance_outcome(glance: RecordGlance) -> dict[str, Any]:
    """:func:`run_outcome` of a record, as its summary file says it (no request).

    Example:
        >>> glance = RecordGlance()
        >>> glance.add({"kind": "run", "time": 1.0}, 20)
        >>> glance.add({"kind": "end", "step": 0, "status": "failed",
        ...     "error": {"type": "ValueError", "message": "no such module"}}, 90)
        >>> glance_outcome(glance)
        {'failed': 'ValueError: no such module', 'has_data': False, \
'ended': {'step': 0, 'status': 'failed'}}
    """
    newest = RunEntries()
    if glance.end is not None:
        with contextlib.suppress(DamagedEntry):  # as run_outcome skips it
            newest.fold_end(glance.end)
    failed = error_text(newest.ended) if newest.failure() is not None else None
    ended = None
    if newest.ended is not None:
        ended = {"step": newest.ended["step"], "status": newest.ended["status"]}
    return {"failed": failed, "has_data": glance.has_data, "ended": ended}
