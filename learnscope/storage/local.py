"""A run folder on a local disk: atomic replaces, locks, one append-only record file.

Files are replaced whole (:func:`learnscope.storage.files.write_atomic`), shared files are changed
under a lock (:func:`learnscope.storage.files.locked`), and the run record is one file of JSON lines
that grows by whole appends. Nothing is read, written or removed outside the folder: every
name is checked by :func:`~learnscope.storage.folder.check_relative`, and a file is read only
when it is reached through no symbolic link and is a regular file (a FIFO never blocks a view).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from learnscope.run_directory.file_names import RECORD_FILE, lock_name
from learnscope.storage.files import (
    append_lines,
    inside,
    locked,
    move_aside,
    remove_orphan_temporaries,
    write_atomic,
)
from learnscope.storage.folder import (
    AppendFile,
    DiskSpace,
    RecordSource,
    RecordStamp,
    RunFolder,
    UnreadableFile,
    check_relative,
    whole_lines,
)


class LocalFolder(RunFolder):
    r"""A run directory on a local (or mounted) file system.

    Args:
        root: The directory.

    Example:
        >>> import tempfile
        >>> folder = LocalFolder(Path(tempfile.mkdtemp()))
        >>> folder.write("projector/a.txt", b"x")
        >>> folder.listing("projector")
        ([], ['a.txt'])
        >>> folder.append_record(b'{"kind":"run"}\n')
        >>> folder.record_source().read(1 << 20)
        b'{"kind":"run"}\n'
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.location = str(root)

    def __repr__(self) -> str:
        return f"LocalFolder({self.location!r})"

    @property
    def name(self) -> str:
        """The directory's name (the resolved directory's for ``.`` or ``..``)."""
        name = self.root.name
        return name if name not in ("", ".", "..") else self.root.resolve().name

    def same_as(self, other: RunFolder) -> bool:
        """Whether ``other`` is the same directory, resolved (links followed)."""
        if isinstance(other, LocalFolder):
            return self.root.resolve() == other.root.resolve()
        return other.location.rstrip("/") == self.location.rstrip("/")

    def child(self, path: str) -> LocalFolder:
        """The folder ``path`` under this one."""
        return LocalFolder(self.root.joinpath(*check_relative(path)))

    def exists(self) -> bool:
        """Whether the directory is there."""
        return self.root.is_dir()

    def make(self) -> None:
        """Make the directory and its parents."""
        self.root.mkdir(parents=True, exist_ok=True)

    def write(self, path: str, data: bytes | memoryview) -> None:
        """Replace the file ``path`` atomically, refusing a path that leaves the directory."""
        try:
            target = inside(self.root, *check_relative(path))
        except UnreadableFile as error:
            raise ValueError(f"refusing to write {path!r}: {error}") from None
        self._before_change()
        write_atomic(target, data)

    def read(self, path: str, max_bytes: int, size: int | None = None) -> bytes:
        """The regular file ``path``, reached through no link, of at most ``max_bytes``."""
        parts = check_relative(path)
        root = os.path.realpath(self.root)
        candidate = os.path.join(root, *parts)
        if os.path.realpath(candidate) != candidate:
            raise UnreadableFile(f"path {path!r} goes through a symbolic link")
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as error:
            raise UnreadableFile(f"{path!r} cannot be opened ({error.strerror})") from None
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise UnreadableFile(f"{path!r} is not a regular file")
            _check_size(path, status.st_size, max_bytes, size)
            data = _read_at_most(fd, 0, max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > max_bytes or (size is not None and len(data) != size):
            raise UnreadableFile(f"{path!r} changed while it was read")
        return data

    def stamp(self, path: str) -> tuple[object, ...] | None:
        """The file's device, inode, size and change times (every atomic write changes them)."""
        try:
            st = os.stat(self.root.joinpath(*check_relative(path)), follow_symlinks=False)
        except (OSError, UnreadableFile):
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def size(self, path: str) -> int | None:
        """The size of the regular file ``path`` (not through a link)."""
        try:
            st = os.stat(self.root.joinpath(*check_relative(path)), follow_symlinks=False)
        except (OSError, UnreadableFile):
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def remove(self, path: str) -> None:
        """Remove the file ``path`` (inside the directory); a missing one is no error."""
        self._before_change()
        with contextlib.suppress(FileNotFoundError):
            inside(self.root, *check_relative(path)).unlink()

    def remove_tree(self, path: str) -> None:
        """Remove the folder ``path`` and everything in it (a link is not followed)."""
        self._before_change()
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(inside(self.root, *check_relative(path)))

    def write_marker(self, path: str, data: bytes) -> None:
        """Write the marker file ``path`` (see :meth:`write`)."""
        self.write(path, data)

    def markers(self, prefix: str) -> list[str]:
        """The folders directly here named ``prefix...`` (none when the folder is gone)."""
        try:
            folders, _ = self.listing()
        except OSError:
            return []
        return [name for name in folders if name.startswith(prefix)]

    def remove_empty(self, path: str) -> None:
        """Remove the folder ``path`` when it is empty; otherwise, or missing, nothing."""
        with contextlib.suppress(OSError):
            inside(self.root, *check_relative(path)).rmdir()

    def remove_debris(self) -> list[str]:
        """Remove the temporaries a crashed writer left, and stale locks.

        See :func:`~learnscope.storage.files.remove_orphan_temporaries`.
        """
        self._tidied = True
        removed = remove_orphan_temporaries(self.root)
        return [path.relative_to(self.root).as_posix() for path in removed]

    def free_space(self) -> DiskSpace | None:
        """The free space of the directory's file system (``None`` when it is not there)."""
        try:
            usage = shutil.disk_usage(self.root)
        except OSError:
            return None
        return DiskSpace(usage.free, usage.total)

    def append_file(self, names: Callable[[int], str], header: bytes) -> AppendFile:
        """A new file, never one already there, appended to (see :class:`AppendFile`).

        The directory is made when missing.
        """
        self._before_change()
        return _LocalAppendFile(self.root, names, header)

    def lasting_failure(self, error: BaseException) -> str | None:
        """The directory is gone (removed, or replaced by a file)."""
        return None if self.root.is_dir() else f"its run directory {self.location} is gone"

    def shows_record(self, folders: list[str], files: list[str]) -> bool:
        """A ``learnscope_record.jsonl`` (of any kind: the view says why it is not read)."""
        return RECORD_FILE in files

    def record_stamp(self) -> RecordStamp | None:
        """The record file's device and inode, and its size and times (one ``stat``)."""
        stamp = self.stamp(RECORD_FILE)
        return None if stamp is None else RecordStamp(stamp[:2], stamp[2:])

    def searched_record_source(
        self, written: Callable[[], object], after: tuple[int, str, str] | None = None
    ) -> RecordSource:
        """The record's own source: a read costs one ``stat`` when nothing was added."""
        return self.record_source(after)

    def set_aside(self, path: str, error: Exception, what: str, then: str) -> str:
        """Rename the file ``path`` aside (see :meth:`RunFolder.set_aside`)."""
        target = inside(self.root, *check_relative(path))
        self._before_change()
        return move_aside(target, error, what, then).name

    def listing(self, path: str = "") -> tuple[list[str], list[str]]:
        """Folders (not links to folders) and other entries directly in ``path``.

        A folder that is not there holds nothing, as on an object store.
        """
        folder = self.root.joinpath(*check_relative(path)) if path else self.root
        folders, files = [], []
        if not os.path.lexists(folder):
            return folders, files
        with os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    (folders if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
        return folders, files

    def locked(self, name: str) -> contextlib.AbstractContextManager[None]:
        """The lock of the shared file ``name``: ``.<name>.lock`` in the directory."""
        return locked(self.root / lock_name(name))

    def append_record(self, data: bytes) -> str | None:
        """Append whole lines to the record in one write, under the record's lock.

        A record whose last line was cut short (by a crash) is first ended with a newline.

        Raises:
            OSError: When the file cannot be written (a full disk); it is then cut back to its
                length before the call, so nothing of ``data`` is left in it.
        """
        self._before_change()
        append_lines(self.root / RECORD_FILE, data)
        return None

    def record_source(self, after: tuple[int, str, str] | None = None) -> RecordSource:
        """A reader of ``learnscope_record.jsonl`` that keeps its place in the file.

        Raises:
            ValueError: ``after`` is given: a disk keeps no summary file, whose segments it is.
        """
        if after is not None:
            raise ValueError("a local record has no segments to start after")
        return FileRecordSource(self.root / RECORD_FILE)

    def record_head(self, size: int) -> tuple[bytes, float] | None:
        """The record's first ``size`` bytes and its modification time."""
        return _read_record_file(self.root / RECORD_FILE, size, from_end=False)

    def record_tail(self, size: int) -> bytes | None:
        """The record's last ``size`` bytes."""
        read = _read_record_file(self.root / RECORD_FILE, size, from_end=True)
        return None if read is None else read[0]

    def has_record(self, path: str = "") -> bool:
        """Whether ``path`` holds a ``learnscope_record.jsonl``, of any kind.

        A record that is no regular file counts: the view says why it is not read.
        """
        folder = self.root.joinpath(*check_relative(path)) if path else self.root
        return os.path.lexists(folder / RECORD_FILE)


class _LocalAppendFile(AppendFile):
    """One new file, appended to a whole record at a time; a record cut short is cut off.

    Args:
        root: The directory (made when missing).
        names: The name of file ``n``; the lowest ``n`` naming no file yet is taken (made with
            ``O_EXCL``: never a file already there).
        header: The file's first bytes.
    """

    def __init__(self, root: Path, names: Callable[[int], str], header: bytes) -> None:
        root.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
        number = 0
        while True:
            path = inside(root, *check_relative(names(number)))
            try:
                self._fd: int | None = os.open(path, flags, 0o644)
                break
            except FileExistsError:
                number += 1
        self.path = path
        self.location = str(path)
        self._size = 0
        self.append(header)

    def touch(self) -> None:
        """Nothing: the file is there from the start."""

    def append(self, data: bytes) -> None:
        """Append ``data``; it is in the file when this returns, or none of it is."""
        if self._fd is None:
            raise ValueError(f"the file {self.location} is closed")
        written = 0
        try:
            while written < len(data):
                count = os.write(self._fd, data[written:])
                if count == 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.location)
                written += count
        except BaseException:
            if written:
                os.ftruncate(self._fd, self._size)  # no half record at the end of the file
            raise
        self._size += len(data)

    def flush(self) -> None:
        """Nothing: every record is in the file already."""

    def close(self) -> None:
        """Close the file; later records raise ``ValueError``."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class FileRecordSource(RecordSource):
    """A record file, read from where the last read stopped; from its start when replaced.

    Args:
        path: The file (it need not exist yet); never read through a link or from a FIFO.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file read
        self._offset = 0

    def read(self, max_bytes: int) -> bytes:
        """Whole lines added since the last call (see :class:`RecordSource`).

        Raises:
            OSError: The record is a symbolic link or no regular file, or cannot be read;
                said with the record's name, not its full path.
        """
        self.restarted = False
        name = self.path.name
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError):
            return b""
        except OSError as error:
            if os.path.islink(self.path):
                raise OSError(f"{name} is a symbolic link (links are not followed)") from None
            raise OSError(f"{name} cannot be opened ({error.strerror})") from None
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise OSError(f"{name} is not a regular file")
            identity = (status.st_dev, status.st_ino)
            if identity != self._identity or status.st_size < self._offset:
                self.restarted = self._identity is not None
                self._identity, self._offset = identity, 0
            length = min(status.st_size - self._offset, max_bytes)
            data = _read_at_most(fd, self._offset, length) if length > 0 else b""
        finally:
            os.close(fd)
        end = whole_lines(data, max_bytes)
        self._offset += end
        return data[:end]


def _read_record_file(path: Path, size: int, from_end: bool) -> tuple[bytes, float] | None:
    """At most ``size`` bytes of a record file, from its start or end, and its time."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return None
        start = max(0, status.st_size - size) if from_end else 0
        return os.pread(fd, size, start), status.st_mtime
    except OSError:
        return None
    finally:
        os.close(fd)


def _check_size(path: str, actual: int, max_bytes: int, size: int | None) -> None:
    """Refuse a file larger than ``max_bytes`` or other than ``size`` bytes."""
    if actual > max_bytes:
        raise UnreadableFile(f"{path!r} has {actual:,} bytes (at most {max_bytes:,})")
    if size is not None and actual != size:
        raise UnreadableFile(f"{path!r} has {actual:,} bytes, not {size:,}")


def _read_at_most(fd: int, offset: int, count: int) -> bytes:
    """Up to ``count`` bytes of ``fd`` from ``offset`` (``pread`` gives at most 2 GiB a call)."""
    chunks, done = [], 0
    while done < count:
        chunk = os.pread(fd, min(count - done, 1 << 30), offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)
