"""One TensorBoard event file, written on the calling thread, a whole record at a time.

``SummaryWriter`` hands every record to a thread of its own, which writes it later: a failure
(a full disk, a removed directory) then surfaces on another record than the one that caused
it, or as a traceback printed by that thread. learnscope already writes on a worker thread of
its own (:mod:`learnscope.plugins.background`), so its event file is written directly: a record
is in the file when :meth:`EventFile.add_summary` returns, and a failure is raised by that call.
A record the disk could only take in part is cut off again, so the file never ends in half a
record (TensorBoard stops reading a file at one).
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import time
from pathlib import Path
from typing import Any

from learnscope.optional import import_optional

_NUMBERS = itertools.count()  # tells apart files opened in one second by one process


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
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(_NUMBERS)}{suffix}"
        )
        self.path = run_dir / name
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = 0
        self._add(version_event())

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
