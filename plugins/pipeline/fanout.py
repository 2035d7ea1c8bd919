"""Hand each record to every writer; a failed record is skipped, a failing writer switched off.

The pictures of a record (an aligned snapshot's scatter, an analysis's ACF charts) are drawn here
once, by the picture stage (:mod:`learnscope.plugins.pipeline.pictures`), and handed to every
writer as image records: writers only write what they are handed.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from learnscope.plugins.pipeline.base import RecordSkipped, Writer, forwards_records, shows
from learnscope.plugins.pipeline.drawing import Drawing, missing_pictures
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
    * A writer whose writes keep failing is switched off, with one message naming the record,
      the reason and that later records are not written: :attr:`MAX_FAILURES_IN_A_ROW`
      records in a row failed, of any kind, with none written in between (a full disk, a
      store that refuses every write), or its failed writes in a row took
      :attr:`GIVE_UP_AFTER_S` seconds or more (a store's client, botocore and s3fs, retries a
      refused request with back-off for about 30 s before it gives up: one such failure is
      already many). So the end of a fit is not held by a writer that cannot write.
    * A failure that the writer says is permanent (:meth:`Writer.permanent_failure
      <learnscope.plugins.pipeline.base.Writer.permanent_failure>`) switches the whole writer
      off at once, with one message giving its reason: its run directory is gone, its wandb
      run has finished, the file system is read-only, or an object store refuses the
      credentials.
    * A record a writer skips on purpose (it raises
      :class:`~learnscope.plugins.pipeline.base.RecordSkipped`: the disk is below the
      free-space reserve) is not written and not a failure: nothing is logged for it (the
      writer says once why it skips) and nothing is switched off.

    Under ``LEARNSCOPE_STRICT=1`` (see :mod:`learnscope.strict`) the error is raised.

    **Pictures** (:mod:`~learnscope.plugins.pipeline.pictures`) are drawn once per record, on
    ``drawing``'s thread when given; without matplotlib they are skipped, said once per
    :class:`Writers` (:func:`~learnscope.plugins.pipeline.drawing.missing_pictures`).

    **One findings table.** Every callback of a run hands its findings to the same
    :class:`Writers`, and each writer always gets the whole table: the findings of every call
    so far, one per ``(code, subject)``, the newest one of each (by step; at the same step the
    later call), in the order they were first seen. A callback may hand its own full table or
    only a new finding; no writer ever shows a one-callback table.

    **What reached each writer** is kept for the end-of-fit line: :attr:`records` counts the
    records made (by method), and :attr:`outcomes` (by ``id`` of the writer) what each writer
    wrote and what it did not write, with the first reason: every record that failed, was
    skipped, came after the writer (or that kind) was switched off, or was abandoned at the
    end of the fit (:meth:`not_written`).

    Args:
        writers: The writers to call, in order.
        drawing: Where the pictures are drawn (default: the calling thread).

    Example:
        >>> from learnscope.plugins.pipeline.base import Writer
        >>> class Flaky(Writer):
        ...     def write_scalars(self, scalars, step):
        ...         if step == 1:
        ...             raise OSError("disk hiccup")
        ...         print("wrote step", step)
        >>> flaky = Flaky()
        >>> writers = Writers([flaky])
        >>> for step in range(3):
        ...     writers.write_scalars({"a": 1.0}, step=step)  # step 1 is logged and skipped
        wrote step 0
        wrote step 2
        >>> len(writers.active)
        1
        >>> outcome = writers.outcomes[id(flaky)]
        >>> outcome.written["write_scalars"], outcome.lost["write_scalars"], outcome.reason
        (2, 1, 'OSError: disk hiccup')
    """

    MAX_FAILURES_IN_A_ROW = 3
    GIVE_UP_AFTER_S = 20.0

    def __init__(self, writers: Iterable[Writer], drawing: Drawing | None = None) -> None:
        self.writers: list[Writer] = list(writers)  # every writer, switched off or not
        self.drawing = drawing
        self.active: list[Writer] = list(self.writers)
        self._in_a_row: dict[tuple[int, str], int] = {}  # (writer id, method) -> failures
        self._failing: dict[int, FailingStreak] = {}  # writer id -> its failures in a row
        self._off: set[tuple[int, str]] = set()  # kinds of record switched off per writer
        self._findings: dict[tuple[str, str], Finding] = {}  # the run's table, first-seen order
        self.records: collections.Counter[str] = collections.Counter()  # method -> records made
        self.outcomes: dict[int, Outcome] = {id(w): Outcome() for w in self.writers}
        self._unpictured: set[str] = set()  # pictures that failed to draw, said once
        self._said_no_pictures = False  # that matplotlib is missing

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
        if snapshot.images is not None and self._shown("write_embedding"):
            self._tell_missing_pictures()  # the projector's thumbnails
        if snapshot.views and self._shown("write_image") and self._tell_missing_pictures():
            pictures = functools.partial(snapshot_pictures, snapshot, self.drawing)
            self._pictures("the embedding pictures", pictures)

    def write_autocorrelation(self, summary: AutocorrelationSummary) -> None:
        """Hand ``summary`` to every writer, then its mean-ACF pictures, drawn once."""
        self._call("write_autocorrelation", summary)
        if self._shown("write_image") and self._tell_missing_pictures():
            pictures = functools.partial(analysis_pictures, summary, self.drawing)
            self._pictures("the ACF pictures", pictures)

    def _tell_missing_pictures(self) -> bool:
        """Whether pictures can be drawn; when not, say why, once."""
        missing = missing_pictures()
        if missing is not None and not self._said_no_pictures:
            self._said_no_pictures = True
            log.warning(missing)
        return missing is None

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

    def not_written(self, method: str, reason: str) -> None:
        """Count one record of ``method`` as made and not written by any writer, for ``reason``.

        For a record that never reached the writers (abandoned at the end of a fit).

        Example:
            >>> from learnscope.plugins.pipeline.base import Writer
            >>> class Scalars(Writer):
            ...     def write_scalars(self, scalars, step):
            ...         pass
            >>> writer = Scalars()
            >>> writers = Writers([writer])
            >>> writers.not_written("write_scalars", "the end of the fit waited 60 s")
            >>> writers.records["write_scalars"], writers.outcomes[id(writer)].lost
            (1, Counter({'write_scalars': 1}))
        """
        self.records[method] += 1
        for writer in self.writers:
            if takes(writer, method):
                self.outcomes[id(writer)].not_written(method, reason)

    def _call(self, method: str, *args: Any) -> None:
        record = method.startswith("write_")
        if record:
            self.records[method] += 1
        for writer in self.writers:
            key = (id(writer), method)
            outcome = self.outcomes[id(writer)]
            if writer not in self.active or key in self._off:
                if record and takes(writer, method):
                    outcome.not_written(method, "")  # the reason it was switched off is kept
                continue
            started = time.monotonic()
            try:
                getattr(writer, method)(*args)
            except RecordSkipped as skipped:
                outcome.not_written(method, str(skipped))
            except Exception as error:
                if strict_mode():
                    raise
                outcome.not_written(method, f"{type(error).__name__}: {error}")
                self._failed(writer, method, args, error, time.monotonic() - started)
            else:
                self._in_a_row.pop(key, None)
                if record:
                    self._failing.pop(id(writer), None)
                    outcome.written[method] += 1
                    if method == "write_findings":
                        outcome.findings = len(args[0])

    def _failed(
        self, writer: Writer, method: str, args: tuple[Any, ...], error: Exception, seconds: float
    ) -> None:
        """Log one failed record and switch off what keeps failing (the rule in the class doc)."""
        key = (id(writer), method)
        count = self._in_a_row.get(key, 0) + 1
        self._in_a_row[key] = count
        failing = self._failing.setdefault(id(writer), FailingStreak())
        failing.add(seconds)
        record = _record_name(method, args)
        reason = f"{type(error).__name__}: {error}"
        permanent = writer.permanent_failure(error) or failing.gives_up(
            self.MAX_FAILURES_IN_A_ROW, self.GIVE_UP_AFTER_S, error
        )
        if permanent is not None:
            log.error(
                "learnscope: %s failed in %s%s (%s); %s, so it is switched off for the rest of "
                "the run: this record and those after it are not written there (the end-of-fit "
                "line counts them), training goes on",
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


@dataclasses.dataclass
class Outcome:
    """What one writer wrote and did not write in a run, for the end-of-fit line.

    Attributes:
        written: Records written, by :class:`Writer` method.
        lost: Records not written, by method: failed, skipped (the free-space reserve), given
            after the writer or that kind was switched off, or abandoned at the end.
        reason: Why the first record was not written (``""`` when all were written).
        findings: The rows of the last findings table written.

    Example:
        >>> outcome = Outcome()
        >>> outcome.not_written("write_embedding", "OSError: SlowDown")
        >>> outcome.not_written("write_scalars", "OSError: later")
        >>> sum(outcome.lost.values()), outcome.reason
        (2, 'OSError: SlowDown')
    """

    written: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    lost: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    reason: str = ""
    findings: int = 0

    def not_written(self, method: str, reason: str) -> None:
        """Count one record of ``method`` not written; ``reason`` is kept if it is the first."""
        self.lost[method] += 1
        self.reason = self.reason or reason


@dataclasses.dataclass
class FailingStreak:
    """A writer's failed records in a row, with none written in between, and their seconds.

    Example:
        >>> streak = FailingStreak()
        >>> streak.add(31.0)  # one write its client retried for 31 s
        >>> streak.gives_up(3, 20.0, OSError("Please reduce your request rate."))
        'its writes kept failing for 31 s, none written in between (the client retried them)'
    """

    count: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        """One more failed record, which took ``seconds``."""
        self.count += 1
        self.seconds += seconds

    def gives_up(self, most: int, most_s: float, error: Exception) -> str | None:
        """Why the writer is switched off after this streak, or ``None`` while it is not."""
        if self.count >= most:
            if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
                return f"the disk stayed full for {self.count} records in a row"
            return f"its last {self.count} records failed with none written in between"
        if self.seconds >= most_s:
            return (
                f"its writes kept failing for {self.seconds:.0f} s, none written in between "
                "(the client retried them)"
            )
        return None


def takes(writer: Writer, method: str) -> bool:
    """Whether ``writer`` writes records of ``method`` somewhere (itself, or as scalars).

    Example:
        >>> class Scalars(Writer):
        ...     def write_scalars(self, scalars, step):
        ...         pass
        >>> takes(Scalars(), "write_autocorrelation"), takes(Scalars(), "write_embedding")
        (True, False)
    """
    if method == "write_autocorrelation" and shows(writer, "write_scalars"):
        return True  # Writer.write_autocorrelation hands the analysis's scalars on
    return shows(writer, method)


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
