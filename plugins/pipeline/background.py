"""The writers of a run behind one worker thread, so that the training thread only queues records.

Writing a snapshot costs seconds (tensor file, metadata, sprite, a wandb table of 10,000 rows);
the training thread should pay none of it. :class:`BackgroundWriters` takes every record, and
any other work that produces records (a PCA, a picture), as a job in a queue, and one worker
thread runs the jobs in the order they came, so a dashboard sees records in training order.

Writers that write through an object the training loop also uses (``Writer.on_training_thread``:
a CSV or MLflow logger's ``log_metrics``) are called on the training thread at once instead.

A record whose making is itself work for the worker (an analysis's arithmetic) is queued with
:meth:`BackgroundWriters.submit_record`: the worker makes it and hands it to its writers, and the
training-thread writers get it on the training thread at its next call of these writers.

The queue is bounded by the bytes of the snapshots it holds (and by a number of jobs): when it
is full, the training thread waits until the worker catches up, so a run that makes snapshots
faster than the disk takes them slows down instead of running out of memory. :meth:`drain`
waits until everything queued is written; :meth:`close` drains and closes the writers.

**What it owns.** Each :class:`BackgroundWriters` owns its worker thread
(``learnscope-writer``) and a :class:`~learnscope.plugins.pipeline.drawing.Drawing`, the thread its
jobs draw pictures on (``learnscope-draw``, started by the first picture); :meth:`close` stops both.
A queue that has been given a record registers its own :mod:`atexit` call, removed by
:meth:`close`: a queue still open when the interpreter exits is closed then, what it holds
written. A queue made with ``writes_nothing`` (the writers of a run that is over), or with no
writer at all (a fit without a logger, a disabled W&B run: nothing would read what it is given),
drops what it is given and starts no thread; :attr:`~BackgroundWriters.writes_nothing` tells the
callbacks, which then make no record for it.

The end is bounded: :meth:`close` waits at most ``end_timeout_s`` seconds (of the
:class:`~learnscope.run_directory.write_limits.WriteLimits` it is given, default 300), says in one
line what it waits for when the wait is long, and past the limit abandons what is still queued with
one message naming it. The first Ctrl-C during that wait abandons the queue at once, saying so. A
write that never returns (a hung file system) keeps only its own thread, a daemon left behind
with a message. The worker thread ends when it has had nothing to do for a few seconds and is
started again by the next record, so a queue that is not closed yet keeps no idle thread.

Failures: the writers isolate their own (see :class:`~learnscope.plugins.pipeline.fanout.Writers`);
a job that raises anything else is logged and skipped. Under ``LEARNSCOPE_STRICT=1`` the first
failure is raised on the training thread, at its next call.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from learnscope.plugins.pipeline.base import Writer, forwards_records
from learnscope.plugins.pipeline.drawing import CLOSE_WAIT_S, Drawing
from learnscope.plugins.pipeline.fanout import Writers
from learnscope.records import EmbeddingSnapshot, Finding
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.strict import strict_mode

log = logging.getLogger("learnscope")

Job = Callable[[Writers], None]

PROGRESS_AFTER_S = 5.0  # the end of a fit says once what it waits for when it waited this long
IDLE_EXIT_S = 2.0  # the worker thread ends after this long with nothing to do
LEFT_BEHIND_JOIN_S = 1.0  # how long an abandoned worker is given to finish its write
# The longest the training thread sleeps in one wait. The kernel may hand a Ctrl-C to any thread
# (the worker, blocked in a write, say), and Python runs the handler only when the main thread
# wakes: a wait in slices sees it within this long instead of at the end of the wait.
SIGNAL_CHECK_S = 0.25


@forwards_records("_record")
class BackgroundWriters(Writer):
    """:class:`Writers` whose records are written by a worker thread, in the order given.

    It has the :class:`Writers` methods (each queues the record and returns),
    :meth:`submit` for other work to run on the worker, such as drawing a picture, and
    :meth:`submit_record` for a record the worker makes.

    Args:
        writers: The writers. Those with ``on_training_thread`` are called at once, on the
            calling thread; the others on the worker thread, failure-isolated by one
            :class:`Writers` each.
        max_pending_bytes: How many bytes of snapshots may be queued or being written before
            the training thread waits (one snapshot larger than this is still taken, alone).
        max_pending_jobs: How many jobs may wait in the queue.
        limits: How long :meth:`close` waits for what is queued (``end_timeout_s``).
        writes_nothing: Drop every record and job as it comes, starting no thread (the writers
            of a run that is over). Without writers it does so anyway.

    Example:
        >>> class Printing(Writer):
        ...     def write_scalars(self, scalars, step):
        ...         print("step", step, dict(scalars))
        >>> background = BackgroundWriters([Printing()])
        >>> background.write_scalars({"loss": 0.5}, step=3)  # queued, written by the worker
        >>> background.drain()
        step 3 {'loss': 0.5}
        >>> background.close()
        >>> BackgroundWriters([]).writes_nothing  # no writer reads: no thread, no job
        True
    """

    def __init__(
        self,
        writers: Iterable[Writer],
        *,
        max_pending_bytes: int = 1 << 30,
        max_pending_jobs: int = 1000,
        writes_nothing: bool = False,
        limits: WriteLimits = WriteLimits(),
    ) -> None:
        writers = list(writers)
        self.limits = limits
        self.drawing = Drawing()  # the pictures of the jobs, on its own thread
        self.inline = Writers([w for w in writers if w.on_training_thread])
        self.queued = Writers([w for w in writers if not w.on_training_thread], self.drawing)
        self.max_pending_bytes = max_pending_bytes
        self.max_pending_jobs = max_pending_jobs
        # what is given is dropped: a run that is over, or no writer to read it
        self.writes_nothing = writes_nothing or not writers
        self._jobs: collections.deque[_Queued] = collections.deque()
        # Records the worker made for the training-thread writers: (method, record), in order.
        self._made: collections.deque[tuple[str, Any]] = collections.deque()
        self._pending_bytes = 0
        self._busy: str | None = None  # what the worker is running, if anything
        self._closed = False
        self._error: BaseException | None = None  # strict mode: raised on the caller's thread
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None  # started by the first job
        self._at_exit = False  # whether _close_at_exit is registered with atexit

    @property
    def active(self) -> list[Writer]:
        """The writers still switched on."""
        return self.inline.active + self.queued.active

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        """Queue ``snapshot`` for every writer."""
        self._record("write_embedding", snapshot, size=_nbytes(snapshot))

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Queue ``scalars`` at ``step`` for every writer."""
        self._record("write_scalars", dict(scalars), step)

    def write_findings(self, findings: Sequence[Finding], step: int) -> None:
        """Queue the findings table for every writer."""
        self._record("write_findings", list(findings), step)

    def flush(self) -> None:
        """Flush the training-thread writers, and queue a flush of the others (no wait)."""
        self._record("flush")

    def _record(self, method: str, *args: Any, size: int = 0) -> None:
        """``method(*args)`` of the training-thread writers now, of the others queued."""
        if self.writes_nothing:
            return
        self.deliver()  # what the worker made before comes first
        getattr(self.inline, method)(*args)
        label = method.removeprefix("write_").replace("_", " ")  # "run end"
        if method == "write_embedding":
            label = f"snapshot {args[0].key} step {args[0].step}"
        record = method if method.startswith("write_") else None
        self.submit(
            lambda writers: getattr(writers, method)(*args), size=size, label=label, record=record
        )

    def submit(self, job: Job, *, label: str, size: int = 0, record: str | None = None) -> None:
        """Queue ``job(writers)`` to run on the worker after everything queued before it.

        The job gets the worker's writers only (not those with ``on_training_thread``): give
        records for every writer to the ``write_...`` methods.

        Waits while the queue is full (see the class arguments). Made with ``writes_nothing``
        or without writers, the job is dropped.

        Args:
            job: Called with the :class:`Writers` on the worker thread.
            label: What the job writes, for messages, such as ``"snapshot encoder step 3"``
                (what the job is named by, in the end-of-fit messages: a kind, then
                ``step N`` when it has one, so that jobs of one kind are said together).
            size: Bytes the job holds until it has run (a snapshot's vectors), for the bound.
            record: The :class:`Writer` method of the record the job hands the writers (such
                as ``"write_embedding"``), if any: abandoned at the end of a fit, the record is
                counted as not written (:meth:`Writers.not_written`).

        Raises:
            RuntimeError: The queue was closed.
        """
        if self.writes_nothing:
            return
        self.deliver()
        with self._changed:
            self._raise_failure()
            if self._closed:
                raise RuntimeError("learnscope: these writers are closed")
            while (self._jobs and len(self._jobs) >= self.max_pending_jobs) or (
                self._pending_bytes and self._pending_bytes + size > self.max_pending_bytes
            ):
                self._changed.wait(SIGNAL_CHECK_S)
                self._raise_failure()
            self._jobs.append(_Queued(job, size, label, record))
            self._pending_bytes += size
            if not self._at_exit:  # written at exit unless closed before
                atexit.register(self._close_at_exit)
                self._at_exit = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="learnscope-writer", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def submit_record(
        self,
        method: str,
        make: Callable[[], Any],
        *,
        label: str,
        size: int = 0,
        guard: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> Future[Any]:
        """Queue ``make()`` on the worker: its result is a record of ``method`` for every writer.

        For a record whose making is work the training thread should not pay, such as an
        analysis's arithmetic. The worker's writers get the record there, after everything
        queued before it; the training-thread writers (``on_training_thread``) get it on the
        training thread, at its next call of these writers (any record or job, :meth:`deliver`,
        :meth:`drain` or :meth:`close`).

        Args:
            method: The :class:`Writer` method that takes the record (its one argument), such
                as ``"write_autocorrelation"``.
            make: Makes the record on the worker; ``None`` makes none.
            label: What the job makes, for messages, such as ``"autocorrelation step 100"``.
            size: Bytes the job holds until it has run, for the bound (see :meth:`submit`).
            guard: Makes the context ``make`` runs in (the owner's failure isolation); a
                failure it swallows makes no record.

        Returns:
            The record, once the worker's writers have it (``None`` when none was made);
            cancelled when the job is dropped (``writes_nothing``).

        Example:
            >>> from learnscope.records import AutocorrelationSummary
            >>> class Printing(Writer):
            ...     def write_autocorrelation(self, summary):
            ...         print("analysis of step", summary.step)
            >>> background = BackgroundWriters([Printing()])
            >>> made = background.submit_record(
            ...     "write_autocorrelation",
            ...     lambda: AutocorrelationSummary(step=7, lags=(1,)),
            ...     label="autocorrelation step 7",
            ... )
            >>> made.result(timeout=10).step
            analysis of step 7
            7
            >>> background.close()
        """
        made: Future[Any] = Future()

        def job(writers: Writers) -> None:
            record = None
            try:
                with guard() if guard is not None else contextlib.nullcontext():
                    record = make()
            except BaseException as error:
                made.set_exception(error)
                raise
            try:
                if record is not None:
                    getattr(writers, method)(record)
            finally:
                if record is not None and self.inline.writers:
                    with self._changed:
                        self._made.append((method, record))
                made.set_result(record)

        self.submit(job, size=size, label=label, record=method)
        if self.writes_nothing:
            made.cancel()
        return made

    def deliver(self) -> None:
        """Hand the training-thread writers the records the worker made (see :meth:`submit_record`).

        Call it on the training thread; it does nothing when there are none.
        """
        if not self._made:
            return
        with self._changed:
            made = list(self._made)
            self._made.clear()
        for method, record in made:
            getattr(self.inline, method)(record)

    def drain(self) -> None:
        """Wait until every job queued so far has run."""
        with self._changed:
            while (self._jobs or self._busy) and self._working():
                self._changed.wait(SIGNAL_CHECK_S)
            self._raise_failure()
        self.deliver()

    def close(self, timeout_s: float | None = None) -> None:
        """Write what is queued, close the writers, stop the worker and the drawing thread.

        Later calls do nothing.

        Args:
            timeout_s: The longest wait for what is queued (default: ``end_timeout_s`` of
                :attr:`limits`); past it what is still queued is abandoned,
                with one message naming it, and the writers are left unclosed.

        Raises:
            KeyboardInterrupt: Ctrl-C during the wait, after abandoning what is queued.
        """
        with self._changed:
            if self._closed:
                return
            if self.writes_nothing:
                self._closed = True
                return
        limit = self.limits.end_timeout_s if timeout_s is None else timeout_s
        abandoned = False
        try:
            self.submit(lambda w: w.close(), label="close")
            if not self._wait(limit):
                abandoned = True
                self._abandon(f"the end of the fit waited {limit:g} s for learnscope's writes")
        except KeyboardInterrupt:
            abandoned = True
            self._abandon("Ctrl-C")
            raise
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()
                thread = self._thread
            if thread is not None:
                _join(thread, LEFT_BEHIND_JOIN_S if abandoned else limit)
                if thread.is_alive() and not abandoned:
                    self._abandon(f"the end of the fit waited {limit:g} s for learnscope's writes")
                if thread.is_alive():
                    log.warning(
                        "learnscope: the writer thread is still inside '%s' (a hung file system?); "
                        "it is left behind as a daemon thread and the fit goes on",
                        self._busy,
                    )
            # a job left behind may still be drawing: the drawing thread finishes that picture
            left_behind = thread is not None and thread.is_alive()
            self.drawing.close(LEFT_BEHIND_JOIN_S if left_behind else CLOSE_WAIT_S)
            with self._changed:
                registered, self._at_exit = self._at_exit, False
            if registered:
                atexit.unregister(self._close_at_exit)
            try:  # after every record the worker made for them
                self.deliver()
            finally:
                self.inline.close()

    def _close_at_exit(self) -> None:
        """Close at interpreter exit, writing what is queued (a script that never tore down)."""
        try:
            self.close()
        except Exception:
            log.exception("learnscope: writing the last queued records at exit failed")

    def _working(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _wait(self, limit: float) -> bool:
        """Wait up to ``limit`` seconds until nothing is queued; whether that came."""
        start = time.monotonic()
        report = start + PROGRESS_AFTER_S
        with self._changed:
            while (self._jobs or self._busy) and self._working():
                now = time.monotonic()
                if now - start >= limit:
                    return False
                if now >= report:
                    log.warning(
                        "learnscope: the fit ends once learnscope's writer thread is done with "
                        "%s; %.0f s so far, at most %g s (Ctrl-C abandons what is queued)",
                        self._queued(),
                        now - start,
                        limit,
                    )
                    report = math.inf  # one line
                self._changed.wait(min(start + limit - now, report - now, SIGNAL_CHECK_S))
            self._raise_failure()
        return True

    def _queued(self) -> str:
        """What the worker is doing and what is queued, in words (call with the lock held)."""
        busy, queued = self._in_progress(), self._queue_words()
        if busy and queued:
            return f"{busy} (in progress), then {queued}"
        if busy:
            return f"{busy} (in progress, {_mb(self._pending_bytes)})"
        return queued or "closing the writers"

    def _in_progress(self) -> str | None:
        """The label of the job the worker runs, but flushing and closing (with the lock held)."""
        return self._busy if self._busy not in (None, "close", "flush") else None

    def _queue_words(self) -> str:
        """The records queued, in words; ``""`` for none (call with the lock held)."""
        labels = [job.label for job in self._jobs if job.label not in ("close", "flush")]
        if not labels:
            return ""
        size = _mb(self._pending_bytes)
        return f"{_count(len(labels), 'queued record')} ({size}): {_in_words(labels)}"

    def _abandon(self, reason: str) -> None:
        """Drop every queued job, saying what was dropped and why."""
        with self._changed:
            busy, queued = self._in_progress(), self._queue_words()
            dropped = list(self._jobs)
            for job in dropped:
                self._pending_bytes -= job.size
            self._jobs.clear()
            self._closed = True
            self._changed.notify_all()
        for job in dropped:  # counted for the end-of-fit line
            if job.record is not None:
                self.queued.not_written(job.record, f"abandoned: {reason}")
        if queued:
            log.warning(
                "learnscope: %s; abandoning %s; those records are not written%s",
                reason,
                queued,
                f" ({busy} was still in progress)" if busy else "",
            )
        else:
            what = f"{busy}, still in progress" if busy else "closing the writers"
            log.warning("learnscope: %s; abandoning %s", reason, what)

    def _raise_failure(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _work(self) -> None:
        while True:
            with self._changed:
                idle_since = time.monotonic()
                while not self._jobs and not self._closed:
                    left = IDLE_EXIT_S - (time.monotonic() - idle_since)
                    if left <= 0:
                        break
                    self._changed.wait(left)
                if not self._jobs:
                    self._thread = None  # the next job starts another
                    self._changed.notify_all()
                    return
                job, size, label, _ = self._jobs.popleft()
                self._busy = label
                self._changed.notify_all()  # a place in the queue is free
            try:
                job(self.queued)  # its pictures on the drawing thread (the queue's Writers')
            except Exception as error:
                if strict_mode():
                    self._error = self._error or error
                else:
                    log.exception("learnscope: a background write failed and is skipped")
            finally:
                with self._changed:
                    self._busy = None
                    self._pending_bytes -= size
                    self._changed.notify_all()


class _Queued(NamedTuple):
    """A job in the queue: what it runs, the bytes it holds, its label, the record it makes."""

    job: Job
    size: int
    label: str
    record: str | None


def _in_words(labels: Sequence[str]) -> str:
    """Job labels in words, those of one kind together with their steps and count.

    Example:
        >>> _in_words(["snapshot enc step 20", "scalars", "scalars", "snapshot enc step 60"])
        'snapshot enc steps 20-60 (2), scalars (2)'
        >>> _in_words(["snapshot enc step 20", "autocorrelation"])
        'snapshot enc step 20, autocorrelation'
    """
    kinds: dict[str, list[str]] = {}  # each kind's steps ("" where none), in queue order
    for label in labels:
        kind, _, step = label.partition(" step ")
        kinds.setdefault(kind, []).append(step)
    words = []
    for kind, steps in kinds.items():
        known = sorted(int(step) for step in steps if step.isdigit())
        if len(known) == 1:
            kind += f" step {known[0]}"
        elif known:
            kind += f" steps {known[0]}-{known[-1]}"
        words.append(kind if len(steps) == 1 else f"{kind} ({len(steps)})")
    return ", ".join(words)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _nbytes(snapshot: EmbeddingSnapshot) -> int:
    return int(snapshot.vectors.nbytes)  # a tensor's or a numpy array's


def _join(thread: threading.Thread, timeout: float) -> None:
    """``thread.join(timeout)`` in slices of :data:`SIGNAL_CHECK_S` (``inf``: until it ends)."""
    end = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < end:
        thread.join(min(end - time.monotonic(), SIGNAL_CHECK_S))
