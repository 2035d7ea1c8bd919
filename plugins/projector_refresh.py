"""Make a running TensorBoard show projector snapshots written after it started.

TensorBoard's projector plugin caches every run's ``projector_config.pbtxt`` and reads the files
again only when the list of runs changes (``ProjectorPlugin._update_configs``; its other trigger,
a new TensorFlow checkpoint, exists only when TensorFlow is installed). So after each snapshot a
tiny marker run is created inside the run directory (a folder holding an event file with nothing
but its version record). The server's next reload (every 5 s by default) lists it, the run list
differs, and the projector re-reads every config: a page reload then shows the new snapshot.
The marker is removed again after ``linger_s`` seconds (and when the writer closes or the
process exits), which changes the run list once more, harmlessly.

Checked against real servers, with both the Python event reader and the Rust data server
(``--load_fast``). The cost is one folder and one 40-byte file per snapshot; the price is that
the marker run, named ``<run>/.projector-refresh-<n>``, is listed (with no data) in the run
selectors for ``linger_s`` seconds after each snapshot. A server started with
``--reload_interval`` longer than ``linger_s`` may miss a marker.
"""

from __future__ import annotations

import shutil
import threading
import time
import weakref
from pathlib import Path

from learnscope.optional import import_optional

MARKER_PREFIX = ".projector-refresh-"
LINGER_S = 30.0  # six of TensorBoard's default 5 s reload intervals


class ProjectorRefresh:
    """Nudges running TensorBoard servers to re-read the projector configs of one run.

    Args:
        run_dir: The TensorBoard run directory that holds ``projector_config.pbtxt``.
        linger_s: Seconds a marker run stays before it is removed.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> refresh = ProjectorRefresh(run)
        >>> refresh.announce()
        >>> [p.name.startswith(MARKER_PREFIX) for p in run.iterdir()]
        [True]
        >>> refresh.close()
        >>> list(run.iterdir())
        []
    """

    def __init__(self, run_dir: str | Path, linger_s: float = LINGER_S) -> None:
        self.run_dir = Path(run_dir)
        self.linger_s = linger_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        weakref.finalize(self, _remove_markers, self.run_dir)  # also runs at exit

    def announce(self) -> None:
        """Replace any marker run with a new one, removed again after ``linger_s`` seconds."""
        with self._lock:
            self._cancel_timer()
            _remove_markers(self.run_dir)
            marker = self.run_dir / f"{MARKER_PREFIX}{time.time_ns():x}"
            marker.mkdir(parents=True)
            (marker / f"events.out.tfevents.{int(time.time())}.learnscope").write_bytes(
                _version_record()
            )
            self._timer = threading.Timer(self.linger_s, _remove_markers, (self.run_dir,))
            self._timer.daemon = True
            self._timer.start()

    def close(self) -> None:
        """Remove the marker run now."""
        with self._lock:
            self._cancel_timer()
            _remove_markers(self.run_dir)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _remove_markers(run_dir: Path) -> None:
    try:
        markers = [p for p in run_dir.iterdir() if p.name.startswith(MARKER_PREFIX)]
    except OSError:  # the run directory is gone (a temporary directory, a deleted run)
        return
    for path in markers:
        shutil.rmtree(path, ignore_errors=True)


def _version_record() -> bytes:
    """One TFRecord-framed ``Event`` holding the event-file version, as TensorBoard writes it."""
    event_pb2 = import_optional("tensorboard.compat.proto.event_pb2", "tensorboard")
    record_writer = import_optional("tensorboard.summary.writer.record_writer", "tensorboard")
    event = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")

    class _Bytes:
        def __init__(self) -> None:
            self.data = b""

        def write(self, data: bytes) -> None:
            self.data += data

    sink = _Bytes()
    record_writer.RecordWriter(sink).write(event.SerializeToString())
    return sink.data
