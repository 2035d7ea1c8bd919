"""The W&B dashboard's entry: the writers a ``WandbLogger`` gets, and where they wrote.

Named for ``WandbLogger`` in ``OWN_DASHBOARDS`` (see
:mod:`learnscope.plugins.pipeline.loggers`). Importing it imports no wandb: the writers' modules
are imported when a logger's writers are made.

Example:
    >>> WANDB.package, WANDB.extra
    ('wandb', 'wandb')
"""

from __future__ import annotations

import logging
import os
from typing import Any

from learnscope.plugins.pipeline.base import Writer
from learnscope.plugins.pipeline.loggers import Dashboard, Place
from learnscope.plugins.pipeline.run_record_writer import record_writer
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.shell import shell_command

log = logging.getLogger("learnscope")


def wandb_writers(logger: Any, limits: WriteLimits) -> list[Writer]:
    """A writer into the logger's run and its view page; none when the run is disabled.

    The run's files folder has one run record, made here and handed to the writer that appends
    to it (both keep the free-space reserve of ``limits``); the view page is made from it.
    """
    from learnscope.plugins.wandb.page_writer import WandbPageWriter
    from learnscope.plugins.wandb.writer import WandbWriter, disabled_by, run_mode

    run = logger.experiment
    if run_mode(run) == "disabled":
        log.warning(
            "learnscope: W&B is disabled (%s), so learnscope writes nothing to %s's run",
            disabled_by(),
            type(logger).__name__,
        )
        return []
    record = record_writer(run.dir, limits)
    # the page after the record it reads
    return [WandbWriter(run, record, limits), WandbPageWriter(run)]


def wandb_place(logger: Any, missing: str | None) -> Place:
    """The logger's W&B run in words: its name and address, or for an offline run its upload.

    A disabled run gets nothing, and is named by what disabled it. Never starts a run: the
    logger's run is read only when it was started (``WandbLogger._experiment``).

    Args:
        logger: The W&B logger.
        missing: Not used: without the wandb package there is no W&B logger.

    Example:
        >>> class WandbLogger:
        ...     _experiment = None
        >>> wandb_place(WandbLogger(), None).name
        'the W&B run (not started)'
    """
    from learnscope.plugins.wandb.writer import disabled_by, run_mode

    run = getattr(logger, "_experiment", None)  # never starts one
    if run is not None and run_mode(run) == "disabled":
        return Place(f"W&B (disabled by {disabled_by()})", written=False)
    return Place(run_words(run))


def run_words(run: Any) -> str:
    """A W&B run in words: its name and address, or for an offline run its upload.

    The mode comes from the run's settings, never from ``run.url`` (which makes wandb print a
    line for an offline run).

    Example:
        >>> run_words(None)
        'the W&B run (not started)'
    """
    from learnscope.plugins.wandb.writer import run_mode

    if run is None:
        return "the W&B run (not started)"
    try:
        mode = run_mode(run)
        label = getattr(run, "name", None) or getattr(run, "id", None)
        if mode == "offline":
            folder = os.path.dirname(str(run.dir))  # .../offline-run-<time>-<id>, without files/
            return f"the offline W&B run {label} (upload: {shell_command('wandb', 'sync', folder)})"
        url = getattr(run, "url", None)
        return f"the W&B run {label} ({url})" if url else f"the W&B run {label}"
    except Exception:  # a finished or broken run: no more to say
        return "the W&B run"


WANDB = Dashboard(wandb_writers, wandb_place, "wandb", "wandb")
