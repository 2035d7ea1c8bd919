"""TensorBoard event files, written on the calling thread, a whole record at a time.

``SummaryWriter`` hands every record to a thread of its own, which writes it later: a failure
(a full disk, a removed directory) then surfaces on another record than the one that caused
it, or as a traceback printed by that thread. learnscope already writes on a worker thread of
its own (:mod:`learnscope.plugins.pipeline.background`), so its event file is written directly: a
record is in the file when :meth:`EventFile.add_summary` returns, and a failure is raised by that
call. A record the disk could only take in part is cut off again, so the file never ends in half a
record (TensorBoard stops reading a file at one). On an object store, which cannot append, a
batch of records is one new event file instead (:class:`EventSegments`).
"""

from __future__ import annotations

import errno
import os
import socket
import time
from pathlib import Path
from typing import Any

from learnscope.optional import import_optional
from learnscope.storage import RunFolder


def framed(event: Any) -> bytes:
    """``event`` serialised and framed as a TFRecord, the way event files hold it.

    Example:
        >>> from tensorboard.compat.proto.event_pb2 import Event
        >>> len(framed(Event(step=3)))  # 8 length, 4 its CRC, 2 data, 4 data CRC
        18
    """
    record_writer = import_optional("tensorboard.summary.writer.record_writer", "tensorboard")

    class _Bytes:
        data = b""

        def write(self, data: bytes) -> None:
            self.data += data

    sink = _Bytes()
    record_writer.RecordWriter(sink).write(event.SerializeToString())
    return sink.data


def version_event() -> Any:
    """The first event of every event file: the file format's version, as TensorBoard writes it.

    Example:
        >>> version_event().file_version
        'brain.Event:2'
    """
    event_pb2 = import_optional("tensorboard.compat.proto.event_pb2", "tensorboard")
    return event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")


class EventFile:
    """An event file in ``run_dir`` named as TensorBoard names them, ending in ``suffix``.

    Args:
        run_dir: The run directory (made if missing).
        suffix: The end of the file name, such as ``".learnscope"``.

    Example:
        >>> import tempfile
        >>> from torch.utils.tensorboard.summary import scalar
        >>> events = EventFile(Path(tempfile.mkdtemp()), ".learnscope")
        >>> events.add_summary(scalar("loss", 0.5), step=3)
        >>> events.path.name.startswith("events.out.tfevents.")
        True
        >>> events.close()
    """

    def __init__(self, run_dir: Path, suffix: str) -> None:
        self.event_pb2 = import_optional("tensorboard.compat.proto.event_pb2", "tensorboard")
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path, self._fd = _new_file(run_dir, suffix)
        self._size = 0
        self._add(version_event())

    def touch(self) -> None:
        """Nothing: the file is there from the start, so TensorBoard lists the run."""

    def add_summary(self, summary: Any, step: int) -> None:
        """Append one ``Summary`` proto at ``step``; it is in the file when this returns."""
        self._add(self.event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def _add(self, event: Any) -> None:
        if self._fd is None:
            raise ValueError(f"the event file {self.path} is closed")
        data = framed(event)
        written = 0
        try:
            while written < len(data):
                count = os.write(self._fd, data[written:])
                if count == 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
                written += count
        except BaseException:
            if written:
                os.ftruncate(self._fd, self._size)  # no half record at the end of the file
            raise
        self._size += len(data)

    def close(self) -> None:
        """Close the file; later records raise ``ValueError``."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _new_file(run_dir: Path, suffix: str) -> tuple[Path, int]:
    """A new event file, named as TensorBoard names them, opened for appending.

    The name holds the time in seconds, the host and the process, then the lowest number that
    names no file yet (files opened in one second by one process), made with ``O_EXCL``: never
    a file already there.
    """
    stem = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
    number = 0
    while True:
        path = run_dir / f"{stem}.{number}{suffix}"
        try:
            return path, os.open(path, flags, 0o644)
        except FileExistsError:
            number += 1


class EventSegments:
    """Event files on an object store: each batch of records one new, immutable event file.

    An object store cannot append, so the records given to :meth:`add_summary` are kept until
    :meth:`flush`, which writes them, after a version record, as a new object named as
    TensorBoard names event files, with a six-digit sequence number before ``suffix``: the
    names sort in the order written, the order in which TensorBoard reads a run's event
    files. A record is in the store when the :meth:`flush` after it returns, and a failure is
    raised by that call (the batch is then dropped, not written twice).

    Args:
        folder: The run folder (:class:`~learnscope.storage.ObjectStoreFolder`).
        suffix: The end of the file names, such as ``".learnscope"``.

    Example:
        >>> from learnscope.storage import open_run_folder
        >>> from torch.utils.tensorboard.summary import scalar
        >>> folder = open_run_folder("memory://doc/events")
        >>> events = EventSegments(folder, ".learnscope")
        >>> events.add_summary(scalar("loss", 0.5), step=3)
        >>> events.flush()
        >>> [name.endswith(".000001.learnscope") for name in folder.listing()[1]]
        [True]
    """

    def __init__(self, folder: RunFolder, suffix: str) -> None:
        self.event_pb2 = import_optional("tensorboard.compat.proto.event_pb2", "tensorboard")
        self.folder = folder
        self.suffix = suffix
        self.segments = 0  # written so far
        self._pending: list[bytes] = []
        self._prefix = f"events.out.tfevents.{{:010d}}.{socket.gethostname()}.{os.getpid()}."

    @property
    def path(self) -> str:
        """The folder and the names' pattern, for messages."""
        return f"{self.folder.location}/{self._prefix.format(0)}<n>{self.suffix}"

    def touch(self) -> None:
        """Write a first event file (its version record only) when none is written yet.

        TensorBoard lists a run, and its projector the run's snapshots, by its event files.
        """
        if self.segments == 0:
            self.segments = 1
            self.folder.write(self._name(), framed(version_event()))

    def add_summary(self, summary: Any, step: int) -> None:
        """Keep one ``Summary`` proto at ``step`` for the next :meth:`flush`."""
        event = self.event_pb2.Event(wall_time=time.time(), step=step, summary=summary)
        self._pending.append(framed(event))

    def flush(self) -> None:
        """Write the records kept since the last flush as one new event file (one ``PUT``)."""
        if not self._pending:
            return
        data = b"".join([framed(version_event()), *self._pending])
        self._pending = []
        self.segments += 1
        self.folder.write(self._name(), data)

    def _name(self) -> str:
        """The next event file's name: the time, then the sequence number, so they sort."""
        return f"{self._prefix.format(int(time.time()))}{self.segments:06d}{self.suffix}"

    def close(self) -> None:
        """Write what is kept."""
        self.flush()
