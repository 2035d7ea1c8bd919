"""A run folder on a local disk: atomic replaces, locks, one append-only record file.

Files are replaced whole (:func:`learnscope.storage.files.write_atomic`), shared files are changed
under a lock (:func:`learnscope.storage.files.locked`), and the run record is one file of JSON lines
that grows by whole appends. Nothing is read, written or removed outside the folder: every
name is checked by :func:`~learnscope.storage.folder.check_relative`, and a file is read only
when it is reached through no symbolic link and is a regular file (a FIFO never blocks a view).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from learnscope.storage.files import append_lines, inside, locked, move_aside, write_atomic
from learnscope.run_files import RECORD_FILE, lock_name
from learnscope.storage.folder import (
    RecordSource,
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

    on_object_store = False

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.location = str(root)

    def __repr__(self) -> str:
        return f"LocalFolder({self.location!r})"

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
        with contextlib.suppress(FileNotFoundError):
            inside(self.root, *check_relative(path)).unlink()

    def set_aside(self, path: str, error: Exception, what: str, then: str) -> str:
        """Rename the file ``path`` aside (see :meth:`RunFolder.set_aside`)."""
        target = inside(self.root, *check_relative(path))
        return move_aside(target, error, what, then).name

    def listing(self, path: str = "") -> tuple[list[str], list[str]]:
        """Folders (not links to folders) and other entries directly in ``path``."""
        folder = self.root.joinpath(*check_relative(path)) if path else self.root
        folders, files = [], []
        with os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    (folders if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
        return folders, files

    def locked(self, name: str) -> contextlib.AbstractContextManager[None]:
        """The lock of the shared file ``name``: ``.<name>.lock`` in the directory."""
        return locked(self.root / lock_name(name))

    def append_record(self, data: bytes) -> None:
        """Append whole lines to the record in one write, under the record's lock.

        A record whose last line was cut short (by a crash) is first ended with a newline.

        Raises:
            OSError: When the file cannot be written (a full disk); it is then cut back to its
                length before the call, so nothing of ``data`` is left in it.
        """
        append_lines(self.root / RECORD_FILE, data)

    def record_source(self) -> RecordSource:
        """A reader of ``learnscope_record.jsonl`` that keeps its place in the file."""
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
        """Whole lines added since the last call (see :class:`RecordSource`)."""
        self.restarted = False
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError):
            return b""
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise OSError(f"{self.path} is not a regular file")
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
