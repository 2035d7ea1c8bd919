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
from collections.abc import Iterator
from pathlib import Path

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

    Attributes:
        location: The path or URL as the logger gave it, for messages and commands.
        on_object_store: Whether files are objects written whole (no append, no lock).
    """

    location: str
    on_object_store: bool

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
        """Write the whole file ``path``; a reader sees the old file or the new one, never half."""

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
    def locked(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Hold the lock of the shared file ``name`` (nothing on an object store)."""

    @abc.abstractmethod
    def append_record(self, data: bytes) -> None:
        """Add ``data``, whole JSON lines, to the run record; all of it or, on a failure, none."""

    @abc.abstractmethod
    def record_source(self) -> RecordSource:
        """A reader of the run record's bytes from its start."""

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
