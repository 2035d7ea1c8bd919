"""Finding the runs under a log directory, without links: the views' search and the summaries'.

A log directory is a local path or any fsspec URL (``s3://bucket/runs``, ``gs://...``,
``memory://...``): every read goes through a :class:`~learnscope.storage.RunFolder`
(:func:`run_folder`; a missing file-system package is a
:class:`~learnscope.storage.MissingFileSystem` naming it). Only run records are looked for, with
one listing per folder (none per file), never through a link. The learnscope tab, ``learnscope
export`` and :func:`learnscope.read_summaries` all find runs with :func:`find_runs`. Nothing here
imports torch.
"""

from __future__ import annotations

from pathlib import Path

from learnscope.run_directory.file_names import RECORD_SEGMENTS, REFRESH_MARKER_PREFIX
from learnscope.storage import RunFolder, UnreadableFile, open_run_folder

SKIPPED_FOLDERS = ("projector", "wandb")  # never searched for runs (a run's own data, wandb's)
# the record's segments, and names an object store's keys can hold that are no folder below
_NOT_SEARCHED = (RECORD_SEGMENTS, "", ".", "..")


def run_folder(location: str | Path | RunFolder) -> RunFolder:
    """The :class:`~learnscope.storage.RunFolder` of a local path, a URL, or a folder as it is.

    Raises:
        MissingFileSystem: A URL whose file-system package is not installed, naming it.

    Example:
        >>> run_folder("memory://runs/a").location, run_folder(Path("runs")).location
        ('memory://runs/a', 'runs')
    """
    return location if isinstance(location, RunFolder) else open_run_folder(location)


def folder_name(folder: RunFolder) -> str:
    """The last part of a folder's path or URL: a run's name in a view by default.

    Example:
        >>> folder_name(run_folder("memory://bucket/runs/version_3/"))
        'version_3'
    """
    return folder.name


def run_of(logdir: RunFolder, name: str) -> RunFolder:
    """The folder of run ``name`` (as :func:`find_runs` names it) under ``logdir``.

    Example:
        >>> run_of(run_folder("memory://b/runs"), "a/version_0").location
        'memory://b/runs/a/version_0'
    """
    return logdir if name == "." else logdir.child(name)


def find_runs(logdir: str | Path | RunFolder) -> list[str]:
    """The run directories under ``logdir`` that hold a run record, relative, sorted.

    Folders are searched without following symbolic links (a linked folder may lead out of the
    log directory), with one listing each, and ``projector``, ``wandb``, refresh-marker and
    record-segment folders are not searched. A record that is not a regular file (a link, a
    FIFO) is listed too, so that the view can say it is not read. On an object store a run is
    a folder holding record segments (``learnscope_record.d/``) or a record file copied up
    whole. ``logdir`` itself is named ``"."``, as TensorBoard names it.

    Args:
        logdir: A local path, a URL (``s3://bucket/runs``) or a run folder.

    Raises:
        MissingFileSystem: A URL whose file-system package is not installed.
        OSError: A log directory that cannot be listed (no such bucket, no credentials, no
            permission), saying why; one that is missing has no runs.

    Example:
        >>> import tempfile
        >>> from learnscope.run_directory.file_names import RECORD_FILE
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "a" / "version_0").mkdir(parents=True)
        >>> _ = (root / "a" / "version_0" / RECORD_FILE).write_bytes(b"")
        >>> find_runs(root)
        ['a/version_0']
    """
    root = run_folder(logdir)
    runs = []
    stack = [""]
    while stack:
        relative = stack.pop()
        try:
            folders, files = root.listing(relative)
        except (OSError, UnreadableFile) as error:
            if not relative:
                what = f"{type(error).__name__}: {error}"
                raise OSError(f"cannot list {root.location}: {what}") from error
            continue  # a folder that went away, or cannot be read: no runs in it
        if root.shows_record(folders, files):
            runs.append(relative or ".")
        for name in folders:
            if (
                name not in _NOT_SEARCHED
                and name not in SKIPPED_FOLDERS
                and not name.startswith(REFRESH_MARKER_PREFIX)
            ):
                stack.append(f"{relative}/{name}" if relative else name)
    return sorted(runs)
