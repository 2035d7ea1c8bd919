"""The summary file: a run record at a glance, kept beside the record on an object store.

On an object store each segment of a run record is one request to read, so a view that shows
every run of a sweep (the runs table, the tab's search) would read thousands. There the run
record's writer also keeps ``learnscope_summary.json`` in the run folder (one ``PUT`` of a
small object after each segment it writes): a :class:`RecordGlance`, what those views need of
the record (the run summary's fold, when the first and the newest run started, whether the
record holds data, the newest run's ``end`` entry) and which segments it covers (their count,
the first and the last one's names: the record's stamp as the folder gives it). A reader
uses it only when its stamp is the record's, or reads the segments after those it covers; it
reads the whole record when the file is missing (an older run), damaged, or covers segments
the record no longer begins with. A local disk keeps no summary file (reading a record there
costs no request). Nothing here imports torch.

Example:
    >>> glance = RecordGlance()
    >>> glance.add({"kind": "run", "format": 1, "time": 4.0}, 30)
    >>> glance.add({"kind": "end", "step": 9, "status": "finished"}, 40)
    >>> glance.covered("000000000001-ab.jsonl")
    >>> again = RecordGlance.decode(glance.encode())
    >>> again.fold.summary().status, again.first_time, again.end, again.covers
    ('finished', 4.0, {'kind': 'end', 'step': 9, 'status': 'finished'}, \
(1, '000000000001-ab.jsonl', '000000000001-ab.jsonl'))
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from learnscope.run_directory.file_names import SUMMARY_FILE
from learnscope.run_directory.summary import SummaryFold
from learnscope.storage import RecordStamp, RunFolder, UnreadableFile

log = logging.getLogger("learnscope")

FORMAT = 1  # a reader reads the whole record when the file has another format
MAX_SUMMARY_BYTES = 16 * 1024 * 1024  # a larger summary file is damage
DATA_BYTES = 65_536  # a record longer than this holds data (as the tab's search says it)
_DATA_KINDS = ("snapshot", "autocorrelation")  # and a findings table with rows


class RecordGlance:
    """What the runs table and the tab's search need of a run record, kept entry by entry.

    Attributes:
        fold: The run summary's fold (:class:`~learnscope.run_directory.summary.SummaryFold`).
        first_time: The ``time`` of the record's first line when it is a ``run`` entry, else
            ``None`` (a reader then asks the record).
        newest_time: The ``time`` of the newest ``run`` entry (``0.0`` before one).
        has_data: Whether the record holds a snapshot, an autocorrelation analysis or a
            findings table with rows, or is longer than 64 KiB.
        end: The newest run's ``end`` entry as written, ``None`` while it has none.
        covers: The segments folded: ``(count, first name, last name)``, the record's stamp
            (:attr:`~learnscope.storage.RecordStamp.written`) when nothing was added since;
            ``None`` when not known (a record this writer did not start).
    """

    def __init__(self) -> None:
        self.fold = SummaryFold()
        self.first_time: float | None = None
        self.newest_time = 0.0
        self.has_data = False
        self.end: dict[str, Any] | None = None
        self.covers: tuple[int, str, str] | None = (0, "", "")
        self._entries = 0
        self._bytes = 0

    def add(self, entry: Mapping[str, Any], size: int) -> None:
        """Fold in the record's next entry, whose line has ``size`` bytes."""
        kind = entry.get("kind")
        time = _time(entry.get("time"))
        if kind == "run":
            self.end = None
            if time is not None:
                self.newest_time = time
                if self._entries == 0:
                    self.first_time = time
        elif kind == "end":
            self.end = dict(entry)
        elif kind in _DATA_KINDS or (kind == "findings" and entry.get("rows")):
            self.has_data = True
        self._entries += 1
        self._bytes += size
        self.has_data = self.has_data or self._bytes > DATA_BYTES
        self.fold.add(entry)

    def covered(self, segment: str | None) -> None:
        """Note the segment the entries added since the last call were written as.

        ``None`` (no segment: a local file): what the glance covers is no longer known.
        """
        if self.covers is None or segment is None:
            self.covers = None
            return
        count, first, _ = self.covers
        self.covers = (count + 1, first or segment, segment)

    def current(self, stamp: RecordStamp | None) -> bool:
        """Whether the glance covers the whole record whose stamp is ``stamp``."""
        return stamp is not None and self.covers is not None and stamp.written == self.covers

    def encode(self) -> bytes:
        """The glance as the summary file holds it (JSON, UTF-8)."""
        state = {
            "format": FORMAT,
            "covers": list(self.covers) if self.covers is not None else None,
            "entries": self._entries,
            "bytes": self._bytes,
            "first_time": self.first_time,
            "newest_time": self.newest_time,
            "has_data": self.has_data,
            "end": self.end,
            "fold": self.fold.state(),
        }
        return json.dumps(state, separators=(",", ":"), allow_nan=False).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> RecordGlance:
        """The glance a summary file holds.

        Raises:
            ValueError: When it is not one (damaged, cut short, another format).
        """
        try:
            state = json.loads(data)
            if not isinstance(state, dict) or state.get("format") != FORMAT:
                raise ValueError("not a summary file of this format")
            glance = cls()
            glance.fold = SummaryFold.from_state(state["fold"])
            covers = state["covers"]
            if covers is None:
                glance.covers = None
            else:
                count, first, last = covers
                if not isinstance(count, int) or not isinstance(first, str):
                    raise ValueError(f"covers {covers!r}")
                glance.covers = (count, first, str(last))
            glance._entries, glance._bytes = int(state["entries"]), int(state["bytes"])
            first_time = state["first_time"]
            glance.first_time = None if first_time is None else float(first_time)
            glance.newest_time = float(state["newest_time"])
            glance.has_data = bool(state["has_data"])
            end = state["end"]
            if end is not None and not isinstance(end, dict):
                raise ValueError(f"end {end!r}")
            glance.end = end
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"a damaged summary file: {error}") from None
        return glance


def read_glance(folder: RunFolder) -> RecordGlance | None:
    """The summary file of a run folder, or ``None``: none kept there, missing, or damaged.

    One ``GET`` on an object store; nothing asked of a local disk (it keeps none).

    Example:
        >>> import uuid
        >>> from learnscope.storage import open_run_folder
        >>> folder = open_run_folder(f"memory://doc/{uuid.uuid4().hex}")
        >>> read_glance(folder) is None
        True
        >>> folder.write(SUMMARY_FILE, RecordGlance().encode())
        >>> read_glance(folder).fold.summary().status
        'running'
    """
    if not folder.keeps_summary:
        return None
    try:
        return RecordGlance.decode(folder.read(SUMMARY_FILE, MAX_SUMMARY_BYTES))
    except UnreadableFile:
        return None  # an older run's, or a record copied up: the record is read
    except ValueError as error:
        log.debug("learnscope: %s/%s: %s", folder.location, SUMMARY_FILE, error)
        return None


def _time(value: Any) -> float | None:
    """A finite number (not a bool) as a float, else ``None``."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
