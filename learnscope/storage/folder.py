"""The interface of a run folder, its errors, and :func:`open_run_folder`.

A :class:`RunFolder` is one run directory (or the log directory above several): files are
named by paths relative to it, ``/`` separated, and checked by :func:`check_relative` before
anything is touched, so no name leads out of it.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger("learnscope")

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class UnreadableFile(Exception):
    """A file a view asked for is not read: the message says why (missing, too large, a link)."""


class MissingFileSystem(ImportError):
    """The package of a file system is not installed (``s3fs`` for ``s3://``, ...).

    Args:
        location: The URL that was to be opened.
        package: The package to install, or ``None`` when fsspec does not know the scheme.
        reason: fsspec's own message.

    Example:
        >>> print(MissingFileSystem("s3://b/runs", "s3fs", "Install s3fs to access S3"))
        learnscope cannot write to or read s3://b/runs: its file system needs the package \
's3fs' (pip install s3fs)
    """

    def __init__(self, location: str, package: str | None, reason: str) -> None:
        self.location = location
        self.package = package
        if package is None:
            text = f"learnscope cannot open {location}: {reason}"
        else:
            text = (
                f"learnscope cannot write to or read {location}: its file system needs the "
                f"package {package!r} (pip install {package})"
            )
        super().__init__(text, name=package)


def is_url(location: str | Path) -> bool:
    """Whether ``location`` is a URL with a scheme (``s3://...``) rather than a local path.

    ``file://`` URLs count as URLs too; :func:`open_run_folder` opens them as local folders.

    Example:
        >>> is_url("s3://bucket/runs"), is_url("runs/version_0"), is_url(Path("/tmp"))
        (True, False, False)
    """
    return isinstance(location, str) and _SCHEME.match(location) is not None


def check_relative(path: str) -> list[str]:
    """The parts of ``path``, a file's name relative to a run folder, when it stays inside.

    Raises:
        UnreadableFile: When the path is empty, absolute, names a drive or scheme, or has a
            ``..`` part.

    Example:
        >>> check_relative("projector/enc/./tensor.bin")
        ['projector', 'enc', 'tensor.bin']
        >>> check_relative("../x")
        Traceback (most recent call last):
        ...
        learnscope.storage.folder.UnreadableFile: path '../x' leaves the run directory
    """
    parts = path.replace("\\", "/").split("/")
    if not path or path.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts:
        raise UnreadableFile(f"path {path!r} leaves the run directory")
    kept = [part for part in parts if part not in ("", ".")]
    if not kept:
        raise UnreadableFile(f"path {path!r} names no file")
    return kept


def whole_lines(data: bytes, max_bytes: int) -> int:
    r"""How many bytes of ``data``, read at most ``max_bytes`` at a time, are whole lines.

    A line cut short (no newline yet) waits for the next read; a single line as long as a
    whole read is returned as it is (damage, which the record's reader counts).

    Example:
        >>> whole_lines(b"a\nb", 100), whole_lines(b"abc", 3)
        (2, 3)
    """
    end = data.rfind(b"\n") + 1
    return len(data) if end == 0 and len(data) >= max_bytes else end


@dataclass(frozen=True)
class DiskSpace:
    """The free and total bytes of the file system a folder is on.

    Example:
        >>> DiskSpace(free=3 << 20, total=1 << 30).free
        3145728
    """

    free: int
    total: int


class RecordStamp(NamedTuple):
    """What a search notes of a record to know, next time, what to read again.

    ``identity`` changes when the record is another one (read its first line again),
    ``written`` whenever anything was added to it (read its end again).
    """

    identity: object
    written: object


class AppendFile(abc.ABC):
    """A file that grows by whole records, each written on the calling thread.

    On a local disk it is one file, created (never one already there) with its ``header``
    and appended to: a record is in the file when :meth:`append` returns, and a record the
    disk took only in part is cut off again. On an object store, which cannot append, the
    records appended are kept until :meth:`flush`, which writes them after the header as one
    new object (the names sort in the order written).

    Attributes:
        location: Where it is, for messages.
    """

    location: str

    @abc.abstractmethod
    def touch(self) -> None:
        """Make sure the file is there, its header at least."""

    @abc.abstractmethod
    def append(self, data: bytes) -> None:
        """Add one whole record (kept for :meth:`flush` on an object store).

        Raises:
            OSError: The disk took none or part of it (then cut off again), or the file is
                closed (``ValueError``).
        """

    @abc.abstractmethod
    def flush(self) -> None:
        """Write what is kept (an object store's records, as one new object)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Write what is kept and close; a later :meth:`append` raises ``ValueError``."""


class RecordSource(abc.ABC):
    """The run record of one folder, read incrementally: each :meth:`read` gives what is new.

    Attributes:
        restarted: The last :meth:`read` found the record replaced or cut shorter (another run
            started over in the folder) and read it again from its start.
    """

    restarted = False

    @abc.abstractmethod
    def read(self, max_bytes: int) -> bytes:
        """Whole lines added since the last call, about ``max_bytes`` at most.

        A line cut short by a crash waits; a single line longer than ``max_bytes`` is
        returned as it is (the reader counts it as damage).
        """


class RunFolder(abc.ABC):
    """One run directory (or log directory), local or on an object store.

    Every file operation learnscope does in a run directory is a method here, implemented
    once for a local disk and once for an object store; no caller asks which it has. The
    first change a folder makes (a write, an append, a removal) first removes the debris a
    crashed writer left (:meth:`remove_debris`), so a writer's constructor touches nothing.

    Attributes:
        location: The path or URL as the logger gave it, for messages and commands.
        keeps_summary: Whether the run record's writer keeps the summary file beside the
            record (:mod:`learnscope.run_directory.summary_file`), and readers look for it:
            on an object store, where each segment read is a request; never on a disk.
    """

    location: str
    keeps_summary = False  # whether the record's writer keeps a summary file beside the record
    _tidied = False  # whether remove_debris ran before this folder's first change

    def _before_change(self) -> None:
        """Remove the debris once, before the first change this folder makes."""
        if not self._tidied:
            self._tidied = True
            with contextlib.suppress(OSError):
                self.remove_debris()

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The folder's own name: the last part of its path (resolved when it has none) or URL."""

    @abc.abstractmethod
    def same_as(self, other: RunFolder) -> bool:
        """Whether ``other`` is this folder: the same resolved directory, or the same URL."""

    @abc.abstractmethod
    def child(self, path: str) -> RunFolder:
        """The folder ``path`` (relative, checked) under this one."""

    @abc.abstractmethod
    def exists(self) -> bool:
        """Whether the folder is there (an object store's folder always is)."""

    @abc.abstractmethod
    def make(self) -> None:
        """Make the folder where a file system has folders."""

    @abc.abstractmethod
    def write(self, path: str, data: bytes | memoryview) -> None:
        """Write the whole file ``path``; a reader sees the old file or the new one, never half.

        Raises:
            ValueError: ``path`` leaves the folder (see :func:`check_relative`).
        """

    @abc.abstractmethod
    def read(self, path: str, max_bytes: int, size: int | None = None) -> bytes:
        """The file ``path``: at most ``max_bytes``, exactly ``size`` when given.

        Raises:
            UnreadableFile: Saying why it is not read.
        """

    @abc.abstractmethod
    def stamp(self, path: str) -> tuple[object, ...] | None:
        """What changes whenever the file ``path`` is written; ``None`` when it is missing."""

    @abc.abstractmethod
    def size(self, path: str) -> int | None:
        """The size of the regular file ``path`` in bytes; ``None`` when it is missing."""

    @abc.abstractmethod
    def remove(self, path: str) -> None:
        """Remove the file ``path``; a missing one is no error."""

    @abc.abstractmethod
    def set_aside(self, path: str, error: Exception, what: str, then: str) -> str:
        """Move the unreadable file ``path`` to ``<name>.corrupt-<UTC time>``, with a warning.

        Args:
            path: The file that cannot be read.
            error: Why not.
            what: What it is, for the message (``"the projector config"``).
            then: What happens next, for the message (``"a new config is started"``).

        Returns:
            The name it was moved to.
        """

    @abc.abstractmethod
    def listing(self, path: str = "") -> tuple[list[str], list[str]]:
        """The names of the folders and of the files directly in ``path`` (no link followed)."""

    @abc.abstractmethod
    def remove_tree(self, path: str) -> None:
        """Remove the folder ``path`` and all it holds (no link followed); missing is no error."""

    @abc.abstractmethod
    def write_marker(self, path: str, data: bytes) -> None:
        """Write a short-lived marker file (such as a refresh marker run's event file).

        On a disk as :meth:`write`; an object store keeps no markers (each would cost requests,
        and one a crash left would stay in the bucket): nothing is written.
        """

    @abc.abstractmethod
    def markers(self, prefix: str) -> list[str]:
        """The marker folders directly in this folder whose name starts with ``prefix``.

        None on an object store (no request is made); on a disk, one listing.
        """

    @abc.abstractmethod
    def remove_empty(self, path: str) -> None:
        """Remove the folder ``path`` when it holds nothing (an object store has no folder)."""

    @abc.abstractmethod
    def remove_debris(self) -> list[str]:
        """Remove what a crashed writer left: temporaries of atomic writes, stale locks.

        Returns:
            The names removed, relative to the folder (none on an object store, whose
            writes leave no temporaries and which has no locks).
        """

    @abc.abstractmethod
    def free_space(self) -> DiskSpace | None:
        """The free and total space of the folder's file system, or ``None``.

        ``None`` where it cannot be known: an object store, a folder not there.
        """

    @abc.abstractmethod
    def append_file(self, names: Callable[[int], str], header: bytes) -> AppendFile:
        """A new :class:`AppendFile` in this folder.

        Args:
            names: The name of file number ``n``: on a disk the lowest ``n`` from 0 naming no
                file yet is taken; on an object store each flush's object is number 1, 2, ...
            header: The bytes every file (every object) starts with.
        """

    @abc.abstractmethod
    def lasting_failure(self, error: BaseException) -> str | None:
        """Why ``error`` will recur at every later write here, or ``None`` when it may not.

        The folder is gone (a removed run directory), or an object store refuses the
        credentials; a full disk is not lasting.
        """

    @abc.abstractmethod
    def shows_record(self, folders: list[str], files: list[str]) -> bool:
        """Whether a folder whose :meth:`listing` is ``folders``, ``files`` holds a record."""

    @abc.abstractmethod
    def record_stamp(self) -> RecordStamp | None:
        """The stamp of the run record (see :class:`RecordStamp`), or ``None`` without one."""

    @abc.abstractmethod
    def searched_record_source(
        self, written: Callable[[], object], after: tuple[int, str, str] | None = None
    ) -> RecordSource:
        """A reader of the record for a view whose search notes the record's stamp.

        Where a read is a request to a store, it reads only when ``written`` (what the last
        search noted: :attr:`RecordStamp.written`) changed; on a disk, where a read costs one
        ``stat``, it is :meth:`record_source`. ``after``: as :meth:`record_source`'s, and
        nothing is read while ``written`` is still ``after``.
        """

    @abc.abstractmethod
    def locked(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Hold the lock of the shared file ``name`` (nothing on an object store)."""

    @abc.abstractmethod
    def append_record(self, data: bytes) -> str | None:
        """Add ``data``, whole JSON lines, to the run record; all of it or, on a failure, none.

        Returns:
            The name of the segment written, where the record is segments; else ``None``.
        """

    @abc.abstractmethod
    def record_source(self, after: tuple[int, str, str] | None = None) -> RecordSource:
        """A reader of the run record's bytes from its start.

        Args:
            after: Where :attr:`keeps_summary`: the segments a summary file covers
                (``(count, first name, last name)``); the reader starts after them, or, when
                the record does not begin with them, reads it whole from its start and its
                first read says :attr:`RecordSource.restarted`. A disk takes none
                (``ValueError``).
        """

    @abc.abstractmethod
    def record_head(self, size: int) -> tuple[bytes, float] | None:
        """The record's first ``size`` bytes and its time; ``None`` without a readable record."""

    @abc.abstractmethod
    def record_tail(self, size: int) -> bytes | None:
        """The record's last ``size`` bytes (whole segments where it has them), or ``None``."""

    @abc.abstractmethod
    def has_record(self, path: str = "") -> bool:
        """Whether the folder ``path`` holds a run record."""

    def walk_folders(self, skipped: tuple[str, ...], prefix: str) -> Iterator[str]:
        """Every folder under this one, relative (``""`` for itself), without following links.

        Folders named in ``skipped``, or whose name starts with ``prefix``, are not entered.
        """
        stack = [""]
        while stack:
            relative = stack.pop()
            yield relative
            try:
                folders, _ = self.listing(relative)
            except (OSError, UnreadableFile):
                continue
            for name in folders:
                if name not in skipped and not name.startswith(prefix):
                    stack.append(f"{relative}/{name}" if relative else name)
