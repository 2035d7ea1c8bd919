"""The writers of a run behind one worker thread, so that the training thread only queues records.

Writing a snapshot costs seconds (tensor file, metadata, sprite, a wandb table of 10,000 rows);
the training thread should pay none of it. :class:`BackgroundWriters` takes every record, and
any other work that produces records (a PCA, a picture), as a job in a queue, and one worker
thread runs the jobs in the order they came, so a dashboard sees records in training order.

Writers that write through an object the training loop also uses (``Writer.on_training_thread``:
a CSV or MLflow logger's ``log_metrics``) are called on the training thread at once instead.

The queue is bounded by the bytes of the snapshots it holds (and by a number of jobs): when it
is full, the training thread waits until the worker catches up, so a run that makes snapshots
faster than the disk takes them slows down instead of running out of memory. :meth:`drain`
waits until everything queued is written; :meth:`close` drains and closes the writers. Queues
still open when the interpreter exits are drained then.

Failures: the writers isolate their own (see :class:`~learnscope.plugins.fanout.Writers`); a
job that raises anything else is logged and skipped. Under ``LEARNSCOPE_STRICT=1`` the first
failure is raised on the training thread, at its next call.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from learnscope.plugins.base import Writer, forwards_records
from learnscope.plugins.fanout import Writers
from learnscope.records import EmbeddingSnapshot, Finding
from learnscope.strict import strict_mode

log = logging.getLogger("learnscope")

Job = Callable[[Writers], None]


@forwards_records("_record")
class BackgroundWriters(Writer):
    """:class:`Writers` whose records are written by a worker thread, in the order given.

    It has the :class:`Writers` methods (each queues the record and returns) and
    :meth:`submit` for other work to run on the worker, such as drawing a picture.

    Args:
        writers: The writers. Those with ``on_training_thread`` are called at once, on the
            calling thread; the others on the worker thread, failure-isolated by one
            :class:`Writers` each.
        max_pending_bytes: How many bytes of snapshots may be queued or being written before
            the training thread waits (one snapshot larger than this is still taken, alone).
        max_pending_jobs: How many jobs may wait in the queue.

    Example:
        >>> class Printing(Writer):
        ...     def write_scalars(self, scalars, step):
        ...         print("step", step, dict(scalars))
        >>> background = BackgroundWriters([Printing()])
        >>> background.write_scalars({"loss": 0.5}, step=3)  # queued, written by the worker
        >>> background.drain()
        step 3 {'loss': 0.5}
        >>> background.close()
    """

    def __init__(
        self,
        writers: Iterable[Writer],
        *,
        max_pending_bytes: int = 1 << 30,
        max_pending_jobs: int = 1000,
    ) -> None:
        writers = list(writers)
        self.inline = Writers([w for w in writers if w.on_training_thread])
        self.queued = Writers([w for w in writers if not w.on_training_thread])
        self.max_pending_bytes = max_pending_bytes
        self.max_pending_jobs = max_pending_jobs
        self._jobs: collections.deque[tuple[Job, int]] = collections.deque()
        self._pending_bytes = 0
        self._busy = False  # the worker is running a job
        self._closed = False
        self._error: BaseException | None = None  # strict mode: raised on the caller's thread
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._work, name="learnscope-writer", daemon=True)
        self._thread.start()
        _OPEN.add(self)

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
        getattr(self.inline, method)(*args)
        self.submit(lambda writers: getattr(writers, method)(*args), size=size)

    def submit(self, job: Job, size: int = 0) -> None:
        """Queue ``job(writers)`` to run on the worker after everything queued before it.

        The job gets the worker's writers only (not those with ``on_training_thread``): give
        records for every writer to the ``write_...`` methods.

        Waits while the queue is full (see the class arguments).

        Args:
            job: Called with the :class:`Writers` on the worker thread.
            size: Bytes the job holds until it has run (a snapshot's vectors), for the bound.

        Raises:
            RuntimeError: The queue was closed.
        """
        with self._changed:
            self._raise_failure()
            if self._closed:
                raise RuntimeError("learnscope: these writers are closed")
            while (self._jobs and len(self._jobs) >= self.max_pending_jobs) or (
                self._pending_bytes and self._pending_bytes + size > self.max_pending_bytes
            ):
                self._changed.wait()
                self._raise_failure()
            self._jobs.append((job, size))
            self._pending_bytes += size
            self._changed.notify_all()

    def drain(self) -> None:
        """Wait until every job queued so far has run."""
        with self._changed:
            while (self._jobs or self._busy) and self._thread.is_alive():
                self._changed.wait()
            self._raise_failure()

    def close(self) -> None:
        """Drain, close the writers and stop the worker; later calls do nothing."""
        with self._changed:
            if self._closed:
                return
        try:
            self.inline.close()
            self.submit(lambda w: w.close())
            self.drain()
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()
            self._thread.join()
            _OPEN.discard(self)

    def _raise_failure(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._jobs and not self._closed:
                    self._changed.wait()
                if not self._jobs:
                    return
                job, size = self._jobs.popleft()
                self._busy = True
                self._changed.notify_all()  # a place in the queue is free
            try:
                job(self.queued)
            except Exception as error:
                if strict_mode():
                    self._error = self._error or error
                else:
                    log.exception("learnscope: a background write failed and is skipped")
            finally:
                with self._changed:
                    self._busy = False
                    self._pending_bytes -= size
                    self._changed.notify_all()


def _nbytes(snapshot: EmbeddingSnapshot) -> int:
    return int(snapshot.vectors.nbytes)  # a tensor's or a numpy array's


_OPEN: weakref.WeakSet[BackgroundWriters] = weakref.WeakSet()


@atexit.register
def _drain_at_exit() -> None:
    """Write what is still queued when the interpreter exits (a script that never tore down)."""
    for background in list(_OPEN):
        try:
            background.close()
        except Exception:
            log.exception("learnscope: writing the last queued records at exit failed")
