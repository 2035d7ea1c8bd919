"""Make a running TensorBoard show projector snapshots written after it started.

TensorBoard's projector plugin caches every run's ``projector_config.pbtxt`` and reads the files
again only when the list of runs changes (``ProjectorPlugin._update_configs``; its other trigger,
a new TensorFlow checkpoint, exists only when TensorFlow is installed). So after each snapshot a
tiny marker run is created inside the run directory (a folder holding an event file with nothing
but its version record). The server's next reload (every 5 s by default) lists it, the run list
differs, and the projector re-reads every config: a page reload then shows the new snapshot.
The marker is removed again after ``linger_s`` seconds (and when the writer closes or the
process exits), which changes the run list once more, harmlessly.

Several writers may share one run directory (two processes, two trainers). Each removes only
its own markers, named ``.projector-refresh-<pid>-<token>-<n>`` with a random token per writer,
and tolerates one already gone; a writer's first marker also removes markers whose process id
is not a running process here, left by a crash (on a file system shared by several hosts
another host's marker may so go early, which only costs that refresh). Every marker is written,
listed and removed through the run folder (:mod:`learnscope.storage`), nothing before the first
snapshot; an object store keeps no markers
(:meth:`~learnscope.storage.RunFolder.write_marker`), so there a running TensorBoard sees new
snapshots when it reloads the config on its own.

Checked against real servers, with both the Python event reader and the Rust data server
(``--load_fast``). The cost is one folder and one 40-byte file per snapshot; the price is that
the marker run, named ``<run>/.projector-refresh-<pid>-<token>-<n>``, is listed (with no data)
in the run selectors for ``linger_s`` seconds after each snapshot. A server started with
``--reload_interval`` longer than ``linger_s`` may miss a marker.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable

from learnscope.plugins.tensorboard.event_file import framed, version_event
from learnscope.run_directory.file_names import REFRESH_MARKER_PREFIX
from learnscope.storage import RunFolder, UnreadableFile

MARKER_PREFIX = REFRESH_MARKER_PREFIX
LINGER_S = 30.0  # six of TensorBoard's default 5 s reload intervals


class ProjectorRefresh:
    """Nudges running TensorBoard servers to re-read the projector configs of one run.

    Args:
        folder: The TensorBoard run folder that holds ``projector_config.pbtxt``.
        linger_s: Seconds a marker run stays before it is removed.

    Example:
        >>> import tempfile
        >>> from learnscope.storage import open_run_folder
        >>> run = open_run_folder(tempfile.mkdtemp())
        >>> refresh = ProjectorRefresh(run)
        >>> refresh.announce()
        >>> [name.startswith(MARKER_PREFIX) for name in run.listing()[0]]
        [True]
        >>> refresh.close()
        >>> run.listing()
        ([], [])
    """

    def __init__(self, folder: RunFolder, linger_s: float = LINGER_S) -> None:
        self.folder = folder
        self.linger_s = linger_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._own = f"{MARKER_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-"
        self._announced = False  # a crashed writer's markers go at the first announcement
        weakref.finalize(self, _remove_markers, self.folder, self._own)  # also runs at exit

    def announce(self) -> None:
        """Replace this writer's marker run with a new one, removed after ``linger_s`` seconds."""
        with self._lock:
            self._cancel_timer()
            if not self._announced:
                self._announced = True
                _remove_markers(self.folder, _dead_writer)
            _remove_markers(self.folder, self._own)
            marker = f"{self._own}{time.time_ns():x}"
            events = f"events.out.tfevents.{int(time.time())}.learnscope"
            with contextlib.suppress(FileNotFoundError):  # removed by another host's cleaning
                self.folder.write_marker(f"{marker}/{events}", framed(version_event()))
            args = (self.folder, self._own)
            self._timer = threading.Timer(self.linger_s, _remove_markers, args)
            self._timer.daemon = True
            self._timer.start()

    def close(self) -> None:
        """Remove this writer's marker run now; the timer's thread has ended when this returns."""
        with self._lock:
            timer = self._timer
            self._cancel_timer()
            if timer is not None and timer is not threading.current_thread():
                timer.join(timeout=10)  # cancelled: it wakes and ends at once
            _remove_markers(self.folder, self._own)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _remove_markers(folder: RunFolder, which: str | Callable[[str], bool]) -> None:
    """Remove the marker runs whose name starts with ``which`` (or for which it is true).

    A marker already removed, or the run directory gone, is no error.
    """
    for name in folder.markers(MARKER_PREFIX):  # none when the run directory is gone
        if name.startswith(which) if isinstance(which, str) else which(name):
            with contextlib.suppress(OSError, ValueError, UnreadableFile):
                folder.remove_tree(name)


def _dead_writer(name: str) -> bool:
    """Whether the marker ``name`` was left by a process of this host that no longer runs.

    Example:
        >>> _dead_writer(f"{MARKER_PREFIX}999999999-0a1b2c3d-1"), _dead_writer(MARKER_PREFIX + "1")
        (True, False)
    """
    pid = name.removeprefix(MARKER_PREFIX).split("-")[0]
    if not pid.isdigit() or "-" not in name.removeprefix(MARKER_PREFIX):
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return False
    return False
