"""A run folder on an object store (``s3://``, ``gs://``, ``memory://``, ...), through fsspec.

An object store writes an object whole or not at all, and has no append, no rename and no lock.
So here:

* every file is one ``PUT`` of its whole content (a reader sees the old object or the new one);
* the run record is a folder ``learnscope_record.d/`` of immutable segments, one per append,
  named ``<sequence, 12 digits>-<writer token>.jsonl`` so that they list in the order written,
  and a reader lists the folder and reads only the segments it has not read (a segment is
  never seen half written: it exists only once its ``PUT`` is complete);
* a run record copied up whole from a local disk (``learnscope_record.jsonl``) is read too,
  from where the last read stopped;
* nothing is locked: a file shared by two writers of one run folder at the same moment keeps
  the last one written (learnscope's writers keep such files in memory and check, before each
  write, that nobody else changed them; see the TensorBoard writer).

Listings are asked afresh each time (fsspec's listing cache is dropped first), so a view sees
new segments; the view's own cache decides how often it lists.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import secrets
from collections.abc import Callable
from typing import Any

from learnscope.run_directory.file_names import RECORD_FILE, RECORD_SEGMENTS
from learnscope.storage.files import aside_name, say_moved_aside
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

_SEGMENT = re.compile(r"^(\d{12})-[0-9a-z]+\.jsonl$")
_NO_BUCKETS = frozenset({"memory", "file", "local", "ftp", "sftp", "http", "https"})


class ObjectStoreFolder(RunFolder):
    r"""A run folder under an fsspec URL.

    Args:
        fs: The fsspec file system (``fsspec.core.url_to_fs``'s first result).
        root: The folder's path in ``fs`` (its second result).
        location: The URL, for messages and commands.

    Example:
        >>> import fsspec
        >>> fs, root = fsspec.core.url_to_fs("memory://doc/run")
        >>> folder = ObjectStoreFolder(fs, root, "memory://doc/run")
        >>> _ = folder.append_record(b'{"kind":"run"}\n')
        >>> folder.listing()
        (['learnscope_record.d'], [])
        >>> folder.record_source().read(1 << 20)
        b'{"kind":"run"}\n'
    """

    keeps_summary = True  # each segment read is a request: the writer keeps a summary file

    def __init__(self, fs: Any, root: str, location: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.location = location.rstrip("/")
        self._token = secrets.token_hex(4)  # this writer's segments never overwrite another's
        self._next_segment: int | None = None  # listed at the first append
        self._appended = 0  # objects written by this folder's append files: none share a number

    def __repr__(self) -> str:
        return f"ObjectStoreFolder({self.location!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_next_segment"] = None  # a copy lists the segments again before it appends
        state["_token"] = secrets.token_hex(4)
        return state

    def _path(self, path: str) -> str:
        return "/".join([self.root, *check_relative(path)]) if path else self.root

    @property
    def name(self) -> str:
        """The last part of the URL."""
        return self.location.rstrip("/").rsplit("/", 1)[-1]

    def same_as(self, other: RunFolder) -> bool:
        """Whether ``other`` has the same URL."""
        return other.location.rstrip("/") == self.location.rstrip("/")

    def child(self, path: str) -> ObjectStoreFolder:
        """The folder ``path`` under this one."""
        relative = "/".join(check_relative(path))
        return ObjectStoreFolder(self.fs, self._path(path), f"{self.location}/{relative}")

    def exists(self) -> bool:
        """An object store's folder is always there (it is a prefix of names)."""
        return True

    def make(self) -> None:
        """Nothing to make: objects need no folder."""

    def write(self, path: str, data: bytes | memoryview) -> None:
        """One ``PUT`` of the whole object ``path``, refusing a path that leaves the folder."""
        try:
            target = "/".join([self.root, *check_relative(path)])
        except UnreadableFile as error:
            raise ValueError(f"refusing to write {path!r}: {error}") from None
        self._before_change()
        self.fs.pipe_file(target, bytes(data))

    def read(self, path: str, max_bytes: int, size: int | None = None) -> bytes:
        """The object ``path``: one ranged ``GET`` of at most ``max_bytes + 1`` bytes."""
        try:
            data = self.fs.cat_file(self._path(path), start=0, end=max_bytes + 1)
        except FileNotFoundError:
            raise UnreadableFile(f"{path!r} cannot be opened (No such file)") from None
        except OSError as error:
            raise UnreadableFile(f"{path!r} cannot be read ({error})") from None
        if len(data) > max_bytes:
            raise UnreadableFile(f"{path!r} has more than {max_bytes:,} bytes")
        if size is not None and len(data) != size:
            raise UnreadableFile(f"{path!r} has {len(data):,} bytes, not {size:,}")
        return data

    def stamp(self, path: str) -> tuple[object, ...] | None:
        """The object's size and its entity tag (or time): one ``HEAD``."""
        info = self._info(self._path(path))
        if info is None:
            return None
        return (info.get("size"), _version(info))

    def size(self, path: str) -> int | None:
        """The object's size: one ``HEAD``."""
        info = self._info(self._path(path))
        return None if info is None or info.get("type") != "file" else int(info["size"])

    def remove(self, path: str) -> None:
        """Delete the object ``path``; a missing one is no error."""
        self._before_change()
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(path))

    def remove_tree(self, path: str) -> None:
        """Delete every object under ``path``; none is no error."""
        self._before_change()
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._path(path), recursive=True)

    def write_marker(self, path: str, data: bytes) -> None:
        """Nothing: an object store keeps no markers (see :meth:`RunFolder.write_marker`)."""

    def markers(self, prefix: str) -> list[str]:
        """None: an object store keeps no markers (and is asked nothing)."""
        return []

    def remove_empty(self, path: str) -> None:
        """Nothing: an object store has no folder apart from the objects under it."""

    def remove_debris(self) -> list[str]:
        """Nothing to remove: a ``PUT`` leaves no temporary, and nothing is locked."""
        return []

    def free_space(self) -> DiskSpace | None:
        """``None``: an object store has no free space to keep."""
        return None

    def append_file(self, names: Callable[[int], str], header: bytes) -> AppendFile:
        """Records kept until each flush, written as one new object (see :class:`AppendFile`).

        The objects of every append file of this folder are numbered in one sequence, so two
        files named alike (two writers of one process in one second) never share an object.
        """
        return _ObjectAppendFile(self, names, header)

    def _next_number(self) -> int:
        """The number of the next object an append file of this folder writes."""
        self._appended += 1
        return self._appended

    def lasting_failure(self, error: BaseException) -> str | None:
        """A refusal of the credentials lasts; anything else may pass."""
        if isinstance(error, PermissionError):
            return "the object store refuses its credentials"
        return None

    def shows_record(self, folders: list[str], files: list[str]) -> bool:
        """Record segments (``learnscope_record.d/``) or a record file copied up whole."""
        return RECORD_SEGMENTS in folders or RECORD_FILE in files

    def record_stamp(self) -> RecordStamp | None:
        """The first and last segment's names and their count (one listing).

        Segments are never rewritten; a record file copied up whole: its size and entity tag
        (one ``HEAD``).
        """
        try:
            _, names = self.listing(RECORD_SEGMENTS)
        except (OSError, UnreadableFile):
            names = []
        segments = sorted(name for name in names if name.endswith(".jsonl"))
        if segments:
            return RecordStamp(segments[0], (len(segments), segments[0], segments[-1]))
        stamp = self.stamp(RECORD_FILE)
        return None if stamp is None else RecordStamp(stamp, stamp)

    def searched_record_source(
        self, written: Callable[[], object], after: tuple[int, str, str] | None = None
    ) -> RecordSource:
        """The record, read only when the search saw it change (:class:`SearchedRecord`).

        From after the segments ``after`` (see :meth:`record_source`): nothing is read while
        the search's stamp is still ``after``.
        """
        return SearchedRecord(self.record_source(after), written, after)

    def set_aside(self, path: str, error: Exception, what: str, then: str) -> str:
        """Copy the object ``path`` aside, then delete it (see :meth:`RunFolder.set_aside`)."""
        full = self._path(path)
        parent, name = full.rsplit("/", 1)
        aside = aside_name(name, lambda taken: self._info(f"{parent}/{taken}") is not None)
        self._before_change()
        self.fs.copy(full, f"{parent}/{aside}")
        self.remove(path)
        say_moved_aside(f"{self.location}/{path}", what, error, aside, then)
        return aside

    def listing(self, path: str = "") -> tuple[list[str], list[str]]:
        """Folders (common prefixes) and objects directly in ``path``: one ``LIST``.

        Raises:
            FileNotFoundError: The folder itself is empty because its bucket does not exist
                (a store with buckets: ``s3://``, ``gs://``, ...; one more request to tell).
            OSError: The store fails otherwise (its client's own error, said in the message).
        """
        folders, files = [], []
        try:
            entries = self._entries(self._path(path))
        except OSError:
            raise
        except Exception as error:  # a store's client fails in ways of its own
            raise OSError(f"{type(error).__name__}: {error}") from error
        for entry in entries:
            (folders if entry.get("type") == "directory" else files).append(_name(entry))
        if not entries and not path and self._bucket_missing():
            raise FileNotFoundError(f"{self.location}: there is no bucket {self._bucket()!r}")
        return folders, files

    def locked(self, name: str) -> contextlib.AbstractContextManager[None]:
        """No lock: an object store has none."""
        return contextlib.nullcontext()

    def append_record(self, data: bytes) -> str | None:
        """Write ``data`` as the record's next segment (one ``PUT``; a ``LIST`` the first time).

        Returns:
            The segment's name.
        """
        if self._next_segment is None:
            numbers = [int(m[1]) for m in map(_SEGMENT.match, self._segments()) if m]
            self._next_segment = max(numbers, default=0) + 1
        name = f"{self._next_segment:012d}-{self._token}.jsonl"
        self.write(f"{RECORD_SEGMENTS}/{name}", data)
        self._next_segment += 1
        return name

    def record_source(self, after: tuple[int, str, str] | None = None) -> RecordSource:
        """A reader of the record's segments (or of a record file copied up whole).

        ``after``: the segments a summary file covers, ``(count, first, last)`` (see
        :meth:`RunFolder.record_source`); checked at the first read, which lists anyway.
        """
        return _ObjectSource(self, after)

    def record_head(self, size: int) -> tuple[bytes, float] | None:
        """The first segment's first ``size`` bytes and its time."""
        entries = self._segment_entries()
        if entries:
            first = entries[0]
            return self.fs.cat_file(first["name"], start=0, end=size), _time(first)
        info = self._record_file()
        if info is None:
            return None
        data = self.fs.cat_file(info["name"], start=0, end=size)
        return data, _time(info)

    def record_tail(self, size: int) -> bytes | None:
        """The last segments, whole, until they hold ``size`` bytes (or a record file's end)."""
        entries = self._segment_entries()
        if not entries:
            info = self._record_file()
            if info is None:
                return None
            start = max(0, int(info["size"]) - size)
            return self.fs.cat_file(info["name"], start=start)
        chunks: list[bytes] = []
        total = 0
        for entry in reversed(entries):
            chunks.append(self.fs.cat_file(entry["name"]))
            total += len(chunks[-1])
            if total >= size:
                break
        return b"".join(reversed(chunks))

    def has_record(self, path: str = "") -> bool:
        """Whether ``path`` holds record segments or a record file."""
        return self.shows_record(*self.listing(path))

    def _entries(self, path: str) -> list[dict[str, Any]]:
        """The listing of ``path`` with details, asked afresh; empty when it has nothing."""
        self.fs.invalidate_cache(path)
        try:
            return list(self.fs.ls(path, detail=True))
        except FileNotFoundError:
            return []

    def _record_file(self) -> dict[str, Any] | None:
        """The details of a record file copied up whole, or ``None`` without one."""
        info = self._info(self._path(RECORD_FILE))
        return info if info is not None and info.get("type") == "file" else None

    def _bucket(self) -> str:
        return self.root.lstrip("/").split("/", 1)[0]

    def _bucket_missing(self) -> bool:
        """Whether the store has buckets and this folder's is not there."""
        if self.location.split("://", 1)[0].lower() in _NO_BUCKETS or not self._bucket():
            return False
        try:
            return not self.fs.exists(self._bucket())
        except OSError:
            return False  # cannot tell: an empty folder, as listed

    def _info(self, path: str) -> dict[str, Any] | None:
        self.fs.invalidate_cache(path)
        try:
            return self.fs.info(path)
        except FileNotFoundError:
            return None

    def _segment_entries(self) -> list[dict[str, Any]]:
        """The record's segments, in order, with their details."""
        entries = self._entries(self._path(RECORD_SEGMENTS))
        named = [e for e in entries if e.get("type") == "file" and _SEGMENT.match(_name(e))]
        return sorted(named, key=_name)

    def _segments(self) -> list[str]:
        return [_name(entry) for entry in self._segment_entries()]


class _ObjectAppendFile(AppendFile):
    """Records kept until each :meth:`flush`, which writes them after the header as a new object.

    Its objects are named ``names(n)``, ``n`` the folder's next number (1, 2, ...); a failed
    flush drops its records (they are not written twice).
    """

    def __init__(self, folder: ObjectStoreFolder, names: Callable[[int], str], header: bytes):
        self.folder = folder
        self.names = names
        self.header = header
        self.written = 0  # objects written so far
        self._number = 0  # the newest object's number
        self._pending: list[bytes] = []
        self._closed = False

    @property
    def location(self) -> str:  # type: ignore[override]
        """The newest object (or the first, before any), for messages."""
        return f"{self.folder.location}/{self.names(max(self._number, 1))}"

    def touch(self) -> None:
        """Write a first object, the header only, when none is written yet."""
        if self.written == 0:
            self.written = 1
            self._number = self.folder._next_number()
            self.folder.write(self.names(self._number), self.header)

    def append(self, data: bytes) -> None:
        """Keep ``data`` for the next :meth:`flush`."""
        if self._closed:
            raise ValueError(f"{self.location} is closed")
        self._pending.append(data)

    def flush(self) -> None:
        """Write the records kept since the last flush as one new object (one ``PUT``)."""
        if not self._pending:
            return
        data = b"".join([self.header, *self._pending])
        self._pending = []
        self.written += 1
        self._number = self.folder._next_number()
        self.folder.write(self.names(self._number), data)

    def close(self) -> None:
        """Write what is kept; later records raise ``ValueError``."""
        self._closed = True
        self.flush()


class _ObjectSource(RecordSource):
    """Reads new segments (or the new end of a record file copied up whole)."""

    def __init__(
        self, folder: ObjectStoreFolder, after: tuple[int, str, str] | None = None
    ) -> None:
        self.folder = folder
        self._read: set[str] = set()  # the segments read
        self._file: tuple[object, int] | None = None  # a record file: its version, offset
        self._after = after  # segments to take as read, checked at the first read

    def read(self, max_bytes: int) -> bytes:
        """Whole segments not read yet, in order (see :class:`RecordSource`)."""
        self.restarted = False
        entries = self.folder._segment_entries()
        if self._after is not None:
            self.restarted = not self._start_after(self._after, [_name(e) for e in entries])
            self._after = None
        if not entries:
            return self._read_file(max_bytes)
        names = {_name(e) for e in entries}
        if not self._read <= names:  # a segment read is gone: the record was started again
            self.restarted = bool(self._read)
            self._read = set()
        chunks: list[bytes] = []
        total = 0
        for entry in entries:
            name = _name(entry)
            if name in self._read:
                continue
            if chunks and total + int(entry.get("size") or 0) > max_bytes:
                break
            data = self.folder.fs.cat_file(entry["name"])
            if data and not data.endswith(b"\n"):
                data += b"\n"
            chunks.append(data)
            total += len(data)
            self._read.add(name)
        return b"".join(chunks)

    def _start_after(self, after: tuple[int, str, str], names: list[str]) -> bool:
        """Take the segments ``after`` covers as read; whether the record begins with them."""
        count, first, last = after
        if count == 0:
            return True
        if len(names) < count or names[0] != first or names[count - 1] != last:
            return False
        self._read = set(names[:count])
        return True

    def _read_file(self, max_bytes: int) -> bytes:
        info = self.folder._record_file()
        if info is None:
            return b""
        size, version = int(info["size"]), _version(info)
        if self._file is None or self._file[0] != version and size < self._file[1]:
            self.restarted = self._file is not None
            self._file = (version, 0)
        offset = self._file[1]
        if size <= offset:
            self._file = (version, offset)
            return b""
        end_at = min(size, offset + max_bytes)
        data = self.folder.fs.cat_file(info["name"], start=offset, end=end_at)
        end = whole_lines(data, max_bytes)
        self._file = (version, offset + end)
        return data[:end]


def _name(entry: dict[str, Any]) -> str:
    return str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]


def _version(info: dict[str, Any]) -> object:
    """What changes when an object is written again: its entity tag, else its time."""
    for key in ("ETag", "etag", "md5Hash", "generation", "LastModified", "mtime", "created"):
        if info.get(key) is not None:
            return str(info[key])
    return None


def _time(info: dict[str, Any]) -> float:
    """The object's time as seconds since the epoch (``0.0`` when the store gives none)."""
    for key in ("LastModified", "mtime", "created", "updated"):
        value = info.get(key)
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, int | float):
            return float(value)
    return 0.0


class SearchedRecord(RecordSource):
    r"""An object store's record, read only when the tab's search saw it change.

    Each :meth:`read` asks ``written`` (what the last search noted of the record:
    :attr:`RecordStamp.written`); while it is what it was at the last read that found nothing
    more, nothing is read (no request to the store). Otherwise the record is read until
    nothing more comes.

    Args:
        source: The record's own source (:meth:`~learnscope.storage.RunFolder.record_source`).
        written: What the last search noted of the record, or ``None`` when it has not seen
            it (then every read reads).

    Example:
        >>> import uuid
        >>> from learnscope.storage import open_run_folder
        >>> folder = open_run_folder(f"memory://doc/{uuid.uuid4().hex}")
        >>> _ = folder.append_record(b'{"kind":"run"}\n')
        >>> noted = {"written": 1}
        >>> source = SearchedRecord(folder.record_source(), lambda: noted["written"])
        >>> source.read(1 << 20)
        b'{"kind":"run"}\n'
        >>> _ = folder.append_record(b'{"kind":"end"}\n')
        >>> source.read(1 << 20)  # the search has not seen it yet
        b''
        >>> noted["written"] = 2
        >>> source.read(1 << 20)
        b'{"kind":"end"}\n'
    """

    _NOT_YET = object()

    def __init__(
        self, source: RecordSource, written: Callable[[], object], caught_up: object = None
    ) -> None:
        self.source = source
        self.written = written
        # ``written`` when the last read ended (the stamp the source starts after, if given)
        self._caught_up: object = self._NOT_YET if caught_up is None else caught_up

    def read(self, max_bytes: int) -> bytes:
        """What was added, when the search saw the record change (see the class)."""
        self.restarted = False
        written = self.written()
        if written is not None and written == self._caught_up:
            return b""
        chunks: list[bytes] = []
        total = 0
        while total < max_bytes:
            data = self.source.read(max_bytes - total)
            if self.source.restarted:  # read again from its start: what came before is gone
                chunks, total, self.restarted = [], 0, True
            if not data:
                if written is not None:
                    self._caught_up = written
                break
            chunks.append(data)
            total += len(data)
        return b"".join(chunks)
