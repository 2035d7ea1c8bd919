"""Every run under a log directory at a glance: one :class:`RunSummary` per run, for scripts.

:func:`read_summaries` (``learnscope.read_summaries``) finds the runs as the views do
(:func:`~learnscope.run_directory.run_search.find_runs`: only folders inside the log directory,
no link followed, only learnscope's run records, each read through its run folder, which
refuses a record that is a link) and folds each record with
:func:`~learnscope.run_directory.summary.summarize_record`. On an object store a run's summary
file (:mod:`learnscope.run_directory.summary_file`) gives the fold of the segments it covers,
and only the segments after them are read (the whole record when the file is missing, damaged
or not what the record begins with). Nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path

from learnscope.run_directory.record import RecordReader
from learnscope.run_directory.run_search import find_runs, run_folder, run_of
from learnscope.run_directory.summary import RunSummary, SummaryFold
from learnscope.run_directory.summary_file import read_glance
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
        summaries[name] = _summary(name, run_of(root, name))
    return summaries


def _summary(name: str, folder: RunFolder) -> RunSummary:
    """A run's summary: from its summary file on, where it has one, else its whole record."""
    glance = read_glance(folder)
    after = glance.covers if glance is not None else None
    fold = SummaryFold() if glance is None or after is None else glance.fold
    reader = RecordReader(folder.record_source(after))
    try:
        while True:
            entries = reader.read()
            if reader.restarted:  # not the record the summary file covers: read whole
                fold = SummaryFold()
            if not entries:
                break
            for entry in entries:
                fold.add(entry)
    except OSError as error:
        raise OSError(f"cannot read the run record of {name}: {error}") from error
    return fold.summary()
