"""Hand each record to every writer; a failed record is skipped, a failing writer switched off.

The pictures of a record (an aligned snapshot's scatter, an analysis's ACF charts) are drawn here
once, by the picture stage (:mod:`learnscope.plugins.pipeline.pictures`), and handed to every
writer as image records: writers only write what they are handed.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from learnscope.plugins.pipeline.base import Writer, forwards_records, shows
from learnscope.plugins.pipeline.pictures import analysis_pictures, snapshot_pictures
from learnscope.records import AutocorrelationSummary, EmbeddingSnapshot, Finding, RenderedImage
from learnscope.strict import strict_mode

log = logging.getLogger("learnscope")


@forwards_records("_call")
class Writers(Writer):
    """Every writer of a run, behind the :class:`Writer` methods.

    Diagnostics never kill a training run, and one bad record does not cost the later ones.
    The rule, per writer:

    * A failure while writing one record (a snapshot, a set of scalars) is logged once, naming
      the writer, the record (tag and step) and the reason; that record is skipped and the
      writer goes on with the next one. The first failure of a kind of record carries its
      traceback, later ones are one line.
    * :attr:`MAX_FAILURES_IN_A_ROW` failures in a row of one kind of record (three snapshots,
      say) switch that kind off for this writer, with one message; its other kinds go on (so
      a broken projector folder does not cost the scalars). Any success resets the count.
    * A failure that is clearly permanent switches the whole writer off at once, with one
      message: its run directory is gone, its wandb run has finished, or the file system is
      read-only. So a dead disk logs a handful of lines, not one per step.
    * A full disk (or quota) is the writer's, not one kind's: its failures are also counted
      over every kind of record together, and :attr:`MAX_FAILURES_IN_A_ROW` of them with no
      success in between switch the whole writer off, with one message.

    Under ``LEARNSCOPE_STRICT=1`` (see :mod:`learnscope.strict`) the error is raised.

    **One findings table.** Every callback of a run hands its findings to the same
    :class:`Writers`, and each writer always gets the whole table: the findings of every call
    so far, one per ``(code, subject)``, the newest one of each (by step; at the same step the
    later call), in the order they were first seen. A callback may hand its own full table or
    only a new finding; no writer ever shows a one-callback table.

    What each writer wrote and lost is kept for the end-of-fit line: :attr:`written` counts the
    records each wrote (by ``id`` of the writer), :attr:`lost` the records each failed to write
    and the first reason.

    Args:
        writers: The writers to call, in order.

    Example:
        >>> from learnscope.plugins.pipeline.base import Writer
        >>> class Flaky(Writer):
        ...     def write_scalars(self, scalars, step):
        ...         if step == 1:
        ...             raise OSError("disk hiccup")
        ...         print("wrote step", step)
        >>> writers = Writers([Flaky()])
        >>> for step in range(3):
        ...     writers.write_scalars({"a": 1.0}, step=step)  # step 1 is logged and skipped
        wrote step 0
        wrote step 2
        >>> len(writers.active)
        1
    """

    MAX_FAILURES_IN_A_ROW = 3

    def __init__(self, writers: Iterable[Writer]) -> None:
        self.active: list[Writer] = list(writers)
        self._in_a_row: dict[tuple[int, str], int] = {}  # (writer id, method) -> failures
        self._off: set[tuple[int, str]] = set()  # kinds of record switched off per writer
        self._findings: dict[tuple[str, str], Finding] = {}  # the run's table, first-seen order
        self.records: collections.Counter[str] = collections.Counter()  # method -> calls
        self.written: collections.Counter[int] = collections.Counter()  # id(writer) -> records
        self.lost: dict[int, tuple[int, str]] = {}  # id(writer) -> (records lost, first reason)
        self._unpictured: set[str] = set()  # pictures that failed to draw, said once

    def write_findings(self, findings: Sequence[Finding], step: int) -> None:
        """Merge ``findings`` into the run's table and hand the whole table to every writer.

        Example:
            >>> from learnscope.plugins.pipeline.base import Writer
            >>> class Table(Writer):
            ...     def write_findings(self, findings, step):
            ...         print(step, [(f.subject, f.step) for f in findings])
            >>> writers = Writers([Table()])
            >>> writers.write_findings([Finding("zero-gradient", "head", "zero", 3)], 3)
            3 [('head', 3)]
            >>> writers.write_findings([Finding("non-finite-output", "enc", "NaN", 4)], 4)
            4 [('head', 3), ('enc', 4)]
            >>> writers.write_findings([Finding("zero-gradient", "head", "still", 9)], 9)
            9 [('head', 9), ('enc', 4)]
            >>> writers.findings[0].life
            'found at steps 3-9; still holds'
        """
        for finding in findings:
            key = finding.identity
            held = self._findings.get(key)
            if held is None:
                self._findings[key] = finding
            elif finding.step >= held.step:  # the newer, first seen when the older was
                first = min(held.first_seen, finding.first_seen)
                self._findings[key] = dataclasses.replace(finding, first_step=first)
        self._call("write_findings", list(self._findings.values()), step)

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        """Hand ``snapshot`` to every writer, then the pictures of its aligned views, if any.

        The pictures (:func:`~learnscope.plugins.pipeline.pictures.snapshot_pictures`) are drawn
        once, for the writers that show pictures.
        """
        self._call("write_embedding", snapshot)
        if snapshot.views and self._shown("write_image"):
            self._pictures("the embedding pictures", lambda: snapshot_pictures(snapshot))

    def write_autocorrelation(self, summary: AutocorrelationSummary) -> None:
        """Hand ``summary`` to every writer, then its mean-ACF pictures, drawn once."""
        self._call("write_autocorrelation", summary)
        if self._shown("write_image"):
            self._pictures("the ACF pictures", lambda: analysis_pictures(summary))

    @property
    def findings(self) -> list[Finding]:
        """The run's findings table so far (see the class description)."""
        return list(self._findings.values())

    def flush(self) -> None:
        """Flush every writer."""
        self._call("flush")

    def close(self) -> None:
        """Close every writer."""
        self._call("close")

    def _shown(self, method: str) -> bool:
        """Whether a writer still on shows records of ``method``."""
        return any(shows(w, method) and (id(w), method) not in self._off for w in self.active)

    def _pictures(self, what: str, draw: Callable[[], list[RenderedImage | None]]) -> None:
        """Hand what ``draw`` draws to every writer; a picture that fails is said once, skipped."""
        try:
            pictures = draw()
        except Exception as error:
            if strict_mode():
                raise
            if what not in self._unpictured:
                self._unpictured.add(what)
                log.warning(
                    "learnscope: %s could not be drawn (%s: %s); it is skipped, everything else "
                    "is written",
                    what,
                    type(error).__name__,
                    error,
                    exc_info=error,
                )
            return
        for picture in pictures:
            if picture is not None:
                self._call("write_image", picture)

    def _call(self, method: str, *args: Any) -> None:
        self.records[method] += 1
        for writer in list(self.active):
            key = (id(writer), method)
            if key in self._off:
                continue
            try:
                getattr(writer, method)(*args)
            except Exception as error:
                if strict_mode():
                    raise
                lost, reason = self.lost.get(id(writer), (0, f"{type(error).__name__}: {error}"))
                self.lost[id(writer)] = (lost + 1, reason)
                self._failed(writer, method, args, error)
            else:
                self._in_a_row.pop(key, None)
                self._in_a_row.pop((id(writer), _DISK_FULL), None)
                if method.startswith("write_"):
                    self.written[id(writer)] += 1

    def _failed(self, writer: Writer, method: str, args: tuple[Any, ...], error: Exception) -> None:
        """Log one failed record and switch off what keeps failing (the rule in the class doc)."""
        key = (id(writer), method)
        count = self._in_a_row.get(key, 0) + 1
        self._in_a_row[key] = count
        record = _record_name(method, args)
        reason = f"{type(error).__name__}: {error}"
        permanent = _permanent_reason(writer, error)
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            full = self._in_a_row.get((id(writer), _DISK_FULL), 0) + 1
            self._in_a_row[(id(writer), _DISK_FULL)] = full
            if full >= self.MAX_FAILURES_IN_A_ROW:
                permanent = f"the disk stayed full for {full} records in a row"
        if permanent is not None:
            log.error(
                "learnscope: %s failed in %s%s (%s); %s, so it is switched off for the rest of "
                "the run, training goes on",
                writer.describe(),
                method,
                record,
                reason,
                permanent,
                exc_info=error,
            )
            self.active.remove(writer)
        elif count >= self.MAX_FAILURES_IN_A_ROW and method != "close":
            log.error(
                "learnscope: %s failed in %s%s (%s), %d times in a row; %s is switched off for "
                "this writer for the rest of the run, its other records and training go on",
                writer.describe(),
                method,
                record,
                reason,
                count,
                method,
                exc_info=error,
            )
            self._off.add(key)
        else:
            log.warning(
                "learnscope: %s failed in %s%s (%s); that record is skipped, the writer goes on",
                writer.describe(),
                method,
                record,
                reason,
                exc_info=error if count == 1 else None,
            )


_DISK_FULL = "disk full"  # the failure count shared by every kind of record of a writer


def _permanent_reason(writer: Writer, error: Exception) -> str | None:
    """Why ``error`` will recur on every later record of ``writer``, or ``None`` if it may not.

    Example:
        >>> _permanent_reason(Writer(), OSError(30, "Read-only file system"))
        'the file system is read-only'
        >>> _permanent_reason(Writer(), OSError(28, "No space left on device")) is None
        True
    """
    run_dir = getattr(writer, "run_dir", None)
    if isinstance(run_dir, Path) and not run_dir.is_dir():
        return f"its run directory {run_dir} is gone"
    folder = getattr(writer, "folder", None)
    if getattr(folder, "on_object_store", False) and isinstance(error, PermissionError):
        return "the object store refuses its credentials"
    run = getattr(writer, "run", None)
    if run is not None and getattr(run, "_is_finished", False) is True:
        return "its wandb run has finished"
    if isinstance(error, OSError) and error.errno == errno.EROFS:
        return "the file system is read-only"
    return None


def _record_name(method: str, args: tuple[Any, ...]) -> str:
    """`` on <tag> at step <n>`` for the record being written (``""`` for flush and close)."""
    if not args:
        return ""
    record = args[0]
    name = getattr(record, "key", None) or getattr(record, "tag", None)
    if not isinstance(name, str):
        name = method.removeprefix("write_")
    step = getattr(record, "step", args[1] if len(args) > 1 else None)
    return f" on {name}" + (f" at step {step}" if isinstance(step, int) else "")
