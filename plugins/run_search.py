"""Finding the runs under a log directory, when each started and how it ended, without links.

The learnscope tab searches on a background thread with :func:`find_runs`; ``learnscope
export`` writes each run it finds. Only run records are looked at: the first line of each to
know when its run started (:func:`run_started`), and its last 64 KiB to know whether its newest
run failed and whether it holds any data (:func:`run_outcome`), so that a view opens on the
newest run with data rather than on one that failed before writing any. Nothing here imports
torch.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from learnscope.plugins.record_checks import is_number
from learnscope.plugins.run_status import RunEntries, error_text
from learnscope.run_files import RECORD_FILE, REFRESH_MARKER_PREFIX

SKIPPED_FOLDERS = ("projector", "wandb")  # never searched for runs (a run's own data, wandb's)
_FIRST_LINE_BYTES = 65_536  # the ``run`` entry a run starts with is shorter than this
_TAIL_BYTES = 65_536  # a record longer than this holds data: run and end entries are short
_DATA_KINDS = ("snapshot", "autocorrelation")  # and a findings table with rows


def find_runs(logdir: str | Path) -> list[str]:
    """The run directories under ``logdir`` that hold a run record, relative, sorted.

    Folders are searched without following symbolic links (a linked folder may lead out of the
    log directory), and ``projector`` and ``wandb`` folders are not searched. A record that is
    not a regular file (a link, a FIFO) is listed too, so that the view can say it is not read.
    ``logdir`` itself is named ``"."``, as TensorBoard names it.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "a" / "version_0").mkdir(parents=True)
        >>> _ = (root / "a" / "version_0" / RECORD_FILE).write_bytes(b"")
        >>> find_runs(root)
        ['a/version_0']
    """
    root = Path(logdir)
    runs = []
    stack = [""]
    while stack:
        relative = stack.pop()
        folder = root / relative if relative else root
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    name = entry.name
                    if name not in SKIPPED_FOLDERS and not name.startswith(REFRESH_MARKER_PREFIX):
                        stack.append(f"{relative}/{name}" if relative else name)
                elif entry.name == RECORD_FILE:
                    runs.append(relative or ".")
            except OSError:
                continue
    return sorted(runs)


def run_started(run_dir: str | Path) -> float:
    """When the run started: the ``time`` of its record's first line, a ``run`` entry.

    The modification time of the record when its first line is no ``run`` entry; ``0.0`` when
    there is no readable record. Reads at most the first 64 KiB, never through a link, never
    from a FIFO.

    Example:
        >>> import tempfile
        >>> from learnscope.run_record import append_entries
        >>> run = Path(tempfile.mkdtemp())
        >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 12.5}])
        >>> run_started(run)
        12.5
    """
    read = _read_record(run_dir, _FIRST_LINE_BYTES)
    if read is None:
        return 0.0
    head, status = read
    line, newline, _ = head.partition(b"\n")
    try:
        entry = json.loads(line) if newline else None
    except ValueError:
        entry = None
    if isinstance(entry, dict) and entry.get("kind") == "run" and is_number(entry.get("time")):
        return float(entry["time"])
    return status.st_mtime


def _read_record(
    run_dir: str | Path, size: int, from_end: bool = False
) -> tuple[bytes, os.stat_result] | None:
    """At most ``size`` bytes of the run's record, from its start or its end, and its status.

    ``None`` when there is no readable record; never read through a link or from a FIFO.
    """
    try:
        fd = os.open(Path(run_dir) / RECORD_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return None
        start = max(0, status.st_size - size) if from_end else 0
        return os.pread(fd, size, start), status
    except OSError:
        return None
    finally:
        os.close(fd)


def run_outcome(run_dir: str | Path) -> dict[str, Any]:
    """Whether the record's newest run failed, and whether the record holds any data.

    Read from the record's last 64 KiB: ``failed`` is the exception (``type: message``) of
    the newest run's ``end`` entry when it says ``failed``, else ``None``; ``has_data`` is
    whether there is a snapshot, an autocorrelation analysis or a findings table with rows
    (a longer record always holds some). An unreadable record has neither.

    Example:
        >>> import tempfile
        >>> from learnscope.run_record import append_entries
        >>> run = Path(tempfile.mkdtemp())
        >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 1.0},
        ...     {"kind": "end", "step": 0, "status": "failed",
        ...      "error": {"type": "ValueError", "message": "no such module"}}])
        >>> run_outcome(run)
        {'failed': 'ValueError: no such module', 'has_data': False}
    """
    read = _read_record(run_dir, _TAIL_BYTES, from_end=True)
    if read is None:
        return {"failed": None, "has_data": False}
    tail, status = read
    lines = tail.split(b"\n")
    if status.st_size > len(tail):
        lines = lines[1:]  # the first line is cut
    newest = RunEntries()
    has_data = status.st_size > _TAIL_BYTES
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
            newest.fold_end(entry)
        elif kind in _DATA_KINDS or (kind == "findings" and entry.get("rows")):
            has_data = True
    ended = newest.ended if newest.failure() is not None else None
    failed = error_text(ended) if ended is not None else None
    return {"failed": failed, "has_data": has_data}
