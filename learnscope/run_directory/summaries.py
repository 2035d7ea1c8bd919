"""Every run under a log directory at a glance: one :class:`RunSummary` per run, for scripts.

:func:`read_summaries` (``learnscope.read_summaries``) finds the runs as the views do
(:func:`~learnscope.run_directory.run_search.find_runs`: only folders inside the log directory,
no link followed, only learnscope's run records, each read through its run folder, which
refuses a record that is a link) and folds each record with
:func:`~learnscope.run_directory.summary.summarize_record`. Nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path

from learnscope.run_directory.record import RecordReader
from learnscope.run_directory.run_search import find_runs, run_folder, run_of
from learnscope.run_directory.summary import RunSummary, summarize_record
from learnscope.storage import RunFolder


def read_summaries(logdir: str | Path | RunFolder) -> dict[str, RunSummary]:
    """The summary of every run under ``logdir``, by the run's folder relative to it.

    Args:
        logdir: A log directory: a local path or a URL (``s3://bucket/runs``).

    Raises:
        MissingFileSystem: A URL whose file-system package is not installed.
        OSError: When the log directory or a run's record cannot be read (a record that is a
            symbolic link, say), naming the run.

    Example:
        >>> import tempfile
        >>> from learnscope.run_directory.file_names import RECORD_FILE
        >>> from learnscope.run_directory.record import append_entries
        >>> logdir = Path(tempfile.mkdtemp())
        >>> (logdir / "lr_0.1").mkdir()
        >>> append_entries(logdir / "lr_0.1" / RECORD_FILE, [{"kind": "run"},
        ...     {"kind": "end", "step": 40, "status": "finished"}])
        >>> {run: summary.status for run, summary in read_summaries(logdir).items()}
        {'lr_0.1': 'finished'}
    """
    root = run_folder(logdir)
    summaries = {}
    for name in find_runs(root):
        folder = run_of(root, name)
        reader = RecordReader(folder.record_source())
        entries = []
        try:
            while batch := reader.read():
                entries += batch
        except OSError as error:
            raise OSError(f"cannot read the run record of {name}: {error}") from error
        summaries[name] = summarize_record(entries)
    return summaries
