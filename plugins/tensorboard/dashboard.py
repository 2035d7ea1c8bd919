"""The TensorBoard dashboard's entry: the writer a ``TensorBoardLogger`` gets, and where it wrote.

Named for ``TensorBoardLogger`` in ``OWN_DASHBOARDS`` (see
:mod:`learnscope.plugins.pipeline.loggers`). Importing it imports no TensorBoard: the writer's
module is imported when a logger's writers are made.

Example:
    >>> TENSORBOARD.package, TENSORBOARD.extra
    ('tensorboard', 'tensorboard')
"""

from __future__ import annotations

from typing import Any

from learnscope.plugins.pipeline.base import Writer
from learnscope.plugins.pipeline.loggers import Dashboard, Place, logger_place
from learnscope.plugins.pipeline.run_record_writer import record_writer
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.shell import shell_command
from learnscope.storage import open_run_folder


def tensorboard_writers(logger: Any, limits: WriteLimits) -> list[Writer]:
    """A writer with its own event file in the logger's run directory (never the logger's).

    The run directory's one run record is made here and handed to the writer; both keep the
    free-space reserve of ``limits``.
    """
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter

    folder = open_run_folder(logger.log_dir)
    return [TensorBoardWriter(folder, record=record_writer(folder, limits), limits=limits)]


def tensorboard_place(logger: Any, missing: str | None) -> Place:
    """Where a TensorBoard logger's records went, and the commands that open them.

    Args:
        logger: The TensorBoard logger (its ``log_dir``, and ``save_dir``, the root of its runs).
        missing: The package learnscope's TensorBoard writer lacked (the logger got only its
            stand-ins: scalars and the run record), or ``None``.

    Example:
        >>> class TensorBoardLogger:
        ...     save_dir, log_dir = "runs dir", "runs dir/version_0"
        >>> place = tensorboard_place(TensorBoardLogger(), "tensorboard")
        >>> print(place.name)
        runs dir/version_0 (scalars and the run record only: no 'tensorboard' package)
        >>> print(place.opens)
        learnscope export 'runs dir' --html view.html (one page)
    """
    if not getattr(logger, "log_dir", None):
        return logger_place(logger)
    root = getattr(logger, "save_dir", None) or logger.log_dir
    export = shell_command("learnscope", "export", root, "--html", "view.html") + " (one page)"
    if missing is not None:
        only = f"(scalars and the run record only: no {missing!r} package)"
        return Place(f"{logger.log_dir} {only}", export)
    tensorboard = shell_command("tensorboard", "--logdir", root)
    opens = f"{tensorboard} (its learnscope tab, Projector, Custom Scalars); {export}"
    return Place(str(logger.log_dir), opens)


TENSORBOARD = Dashboard(tensorboard_writers, tensorboard_place, "tensorboard", "tensorboard")
