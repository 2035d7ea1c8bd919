"""Opening a run folder from a logger's path: a local one, or an fsspec URL's object store."""

from __future__ import annotations

from pathlib import Path

from learnscope.storage.folder import MissingFileSystem, RunFolder, is_url
from learnscope.storage.local import LocalFolder
from learnscope.storage.object_store import ObjectStoreFolder

_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs"}
_PACKAGES |= {"abfs": "adlfs", "abfss": "adlfs", "adl": "adlfs", "hf": "huggingface_hub"}


def open_run_folder(location: str | Path) -> RunFolder:
    """The :class:`RunFolder` of a logger's path: local, or an fsspec URL's object store.

    Args:
        location: A local path, a ``file://`` URL, or any URL fsspec knows (``s3://``, ...).

    Raises:
        MissingFileSystem: The URL's file system package is not installed (or fsspec does not
            know the scheme), naming the package.

    Example:
        >>> open_run_folder("runs/version_0").name
        'version_0'
        >>> open_run_folder("memory://runs/version_0").location
        'memory://runs/version_0'
    """
    if not is_url(location):
        return LocalFolder(Path(location))
    text = str(location)
    scheme = text.split("://", 1)[0].lower()
    if scheme == "file":
        return LocalFolder(Path(text.split("://", 1)[1]))
    try:
        import fsspec

        fs, root = fsspec.core.url_to_fs(text)
    except (ImportError, ValueError) as error:
        raise MissingFileSystem(text, _PACKAGES.get(scheme), str(error)) from error
    return ObjectStoreFolder(fs, root, text)
