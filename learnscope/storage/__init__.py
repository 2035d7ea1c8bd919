"""Where a run's files live: one interface for a local run directory and an object store's.

Everything learnscope writes into a run directory, and everything its views read back, goes
through a :class:`RunFolder`, made from the logger's own path by :func:`open_run_folder`:

* a local path gets a :class:`LocalFolder`: atomic replaces, locks, an append-only run record,
  nothing read, written or removed outside the folder (no link followed);
* any fsspec URL (``s3://``, ``gs://``, ``az://``, ``memory://``, ...) gets an
  :class:`ObjectStoreFolder`: every file is one object written whole, the run record is a
  series of immutable segments, and nothing is locked (an object store has no lock).

A file system package that is missing (``s3fs``, ``gcsfs``, ``adlfs``) is a
:class:`MissingFileSystem` error naming it, raised when the folder is opened: never a local
folder named after the scheme. Nothing here imports torch.

Every file operation learnscope does in a run directory is a method of :class:`RunFolder`,
implemented once for each kind (writes, reads, the appended record, event files
(:class:`AppendFile`), markers, removals, free space, the debris a crash left); the local
primitives (atomic writes, locks, safe names) are in :mod:`learnscope.storage.files`.

Example:
    >>> folder = open_run_folder("memory://runs/doc/version_0")
    >>> folder.write("a/b.txt", b"hi")
    >>> folder.read("a/b.txt", max_bytes=10)
    b'hi'
    >>> folder.free_space() is None  # an object store has no disk to keep free
    True
"""

from learnscope.storage.folder import (
    AppendFile,
    DiskSpace,
    MissingFileSystem,
    RecordSource,
    RecordStamp,
    RunFolder,
    UnreadableFile,
    check_relative,
    is_url,
)
from learnscope.storage.local import LocalFolder
from learnscope.storage.object_store import ObjectStoreFolder, SearchedRecord
from learnscope.storage.opener import open_run_folder

__all__ = [
    "AppendFile",
    "DiskSpace",
    "LocalFolder",
    "MissingFileSystem",
    "ObjectStoreFolder",
    "RecordSource",
    "RecordStamp",
    "RunFolder",
    "SearchedRecord",
    "UnreadableFile",
    "check_relative",
    "is_url",
    "open_run_folder",
]
