"""TensorBoard event files, written on the calling thread, a whole record at a time.

``SummaryWriter`` hands every record to a thread of its own, which writes it later: a failure
(a full disk, a removed directory) then surfaces on another record than the one that caused
it, or as a traceback printed by that thread. learnscope already writes on a worker thread of
its own (:mod:`learnscope.plugins.pipeline.background`), so its event file is written directly,
through the run folder's :class:`~learnscope.storage.AppendFile`: on a disk a record is in the
file when :meth:`EventFile.add_summary` returns, a failure is raised by that call, and a record
the disk could only take in part is cut off again, so the file never ends in half a record
(TensorBoard stops reading a file at one). On an object store, which cannot append, the records
of each :meth:`EventFile.flush` are one new event file, with a six-digit sequence number before
the suffix, so the names sort in the order written (the order in which TensorBoard reads them).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from learnscope.optional import import_optional
from learnscope.storage import AppendFile, RunFolder


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


def event_file_name(number: int, suffix: str) -> str:
    """The name of event file ``number``, as TensorBoard names them, ending in ``suffix``.

    The time in seconds, the host and the process, then the number: on a disk the lowest that
    names no file yet (files opened in one second by one process), on an object store the
    sequence number of the file (six digits, so the names sort in the order written).

    Example:
        >>> event_file_name(1, ".learnscope").endswith(".000001.learnscope")
        True
    """
    stem = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
    return f"{stem}.{number:06d}{suffix}"


class EventFile:
    """An event file of a run folder, ending in ``suffix``, opened when this is made.

    Args:
        folder: The run folder (a local directory is made if missing).
        suffix: The end of the file name, such as ``".learnscope"``.

    Example:
        >>> import tempfile
        >>> from torch.utils.tensorboard.summary import scalar
        >>> from learnscope.storage import open_run_folder
        >>> events = EventFile(open_run_folder(tempfile.mkdtemp()), ".learnscope")
        >>> events.add_summary(scalar("loss", 0.5), step=3)
        >>> events.location.rsplit("/", 1)[-1].startswith("events.out.tfevents.")
        True
        >>> events.close()
    """

    def __init__(self, folder: RunFolder, suffix: str) -> None:
        self.event_pb2 = import_optional("tensorboard.compat.proto.event_pb2", "tensorboard")
        header = framed(version_event())
        self._file: AppendFile = folder.append_file(lambda n: event_file_name(n, suffix), header)

    @property
    def location(self) -> str:
        """Where the file is (on an object store, its newest part), for messages."""
        return self._file.location

    def touch(self) -> None:
        """Make sure an event file is there, so that TensorBoard lists the run."""
        self._file.touch()

    def add_summary(self, summary: Any, step: int) -> None:
        """Add one ``Summary`` proto at ``step`` (on an object store, at the next flush)."""
        event = self.event_pb2.Event(wall_time=time.time(), step=step, summary=summary)
        self._file.append(framed(event))

    def flush(self) -> None:
        """Write what is kept (on an object store, the records since the last flush)."""
        self._file.flush()

    def close(self) -> None:
        """Write what is kept and close the file; later records raise ``ValueError``."""
        self._file.close()
