"""Map loggers (Lightning's or anything alike) to learnscope writers, without importing Lightning.

A logger is recognised by the name of its class or one of its bases, so the same code serves
``lightning.pytorch`` and ``pytorch_lightning`` loggers. A new dashboard is one new entry in
:data:`DASHBOARDS`.

A dashboard whose package is not installed does not cost the fit (Lightning's
``TensorBoardLogger`` writes through tensorboardX when the ``tensorboard`` package is missing):
its logger gets what can be written without the package (:func:`stand_in_writers`: the scalars
through the logger itself, and the run record, which ``learnscope export`` reads), said in one
warning, with the install that adds the rest, when the writers are made. A wandb run that is
disabled (``WANDB_MODE=disabled``) gets no writer, said in one warning. A logger whose log
directory is on a file system whose package is missing (``s3fs`` for ``s3://``) gets no writer
either, said in one error naming the package: never a local folder named after the scheme.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnscope.plugins.pipeline.base import Writer
from learnscope.plugins.pipeline.metrics import LoggerMetricsWriter
from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter
from learnscope.shell import shell_command
from learnscope.storage import LocalFolder, MissingFileSystem, open_run_folder

log = logging.getLogger("learnscope")


def _tensorboard(logger: Any) -> list[Writer]:
    """A writer with its own event file in the logger's run directory (never the logger's)."""
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter

    return [TensorBoardWriter(logger.log_dir)]


def _wandb(logger: Any) -> list[Writer]:
    """A writer into the logger's run and its view page; none when the run is disabled."""
    from learnscope.plugins.wandb.view_page import WandbViewWriter
    from learnscope.plugins.wandb.writer import WandbWriter, disabled_by, run_mode

    run = logger.experiment
    if run_mode(run) == "disabled":
        log.warning(
            "learnscope: W&B is disabled (%s), so learnscope writes nothing to %s's run",
            disabled_by(),
            type(logger).__name__,
        )
        return []
    return [WandbWriter(run), WandbViewWriter(run)]  # the page after the record it reads


@dataclass(frozen=True)
class Dashboard:
    """How learnscope writes to the dashboard of one kind of logger.

    Args:
        writers: Makes the writers for a logger (none: nothing is written there).
        package: The package they need, as ``pip install`` names it.
        extra: learnscope's extra that installs it.

    Example:
        >>> DASHBOARDS["TensorBoardLogger"].package
        'tensorboard'
    """

    writers: Callable[[Any], list[Writer]]
    package: str
    extra: str

    def install(self) -> str:
        """The commands that install the package, for messages.

        Example:
            >>> print(DASHBOARDS["WandbLogger"].install())
            pip install wandb or pip install 'learnscope[wandb]'
        """
        package = shell_command("pip", "install", self.package)
        extra = shell_command("pip", "install", f"learnscope[{self.extra}]")
        return f"{package} or {extra}"


DASHBOARDS: dict[str, Dashboard] = {
    "TensorBoardLogger": Dashboard(_tensorboard, "tensorboard", "tensorboard"),
    "WandbLogger": Dashboard(_wandb, "wandb", "wandb"),
}


@dataclass(frozen=True)
class LoggerWriters:
    """The writers made for one logger.

    Args:
        logger: The logger.
        writers: Its writers, in order; none when nothing is written there.
        missing: The package its dashboard needs and that cannot be imported: the writers then
            stand in for the dashboard's (:func:`stand_in_writers`), and what they cannot show
            was said when they were made. ``None``: they are the dashboard's own, or the
            logger has no dashboard writer.
        unwritable: Why nothing can be written where the logger writes (its log directory's
            file system package is missing), said in one error when the writers were made;
            ``None`` when it can be written.

    Example:
        >>> LoggerWriters(None, []).missing is None
        True
    """

    logger: Any
    writers: list[Writer]
    missing: str | None = None
    unwritable: str | None = None


def logger_writers(logger: Any) -> LoggerWriters:
    """The writers that show learnscope records through ``logger``.

    A TensorBoard or wandb logger gets its dashboard writer (none for a disabled wandb run);
    when the dashboard's package cannot be imported, the stand-ins of
    :func:`stand_in_writers`, with one warning naming the package and its install. Any other
    logger gets a :class:`LoggerMetricsWriter` (scalars only).

    Args:
        logger: A Lightning logger, or anything with its ``log_metrics`` method.

    Raises:
        ModuleNotFoundError: A module of learnscope's own is missing (a broken install).

    Example:
        >>> class CSVLogger:
        ...     def log_metrics(self, metrics, step):
        ...         pass
        >>> [w.describe() for w in logger_writers(CSVLogger()).writers]
        ['LoggerMetricsWriter(CSVLogger)']
    """
    dashboard = _dashboard(logger)
    if dashboard is None:
        return LoggerWriters(logger, [LoggerMetricsWriter(logger)])
    try:
        try:
            return LoggerWriters(logger, dashboard.writers(logger))
        except ModuleNotFoundError as error:
            if (error.name or "").partition(".")[0] == "learnscope":
                raise
            writers = stand_in_writers(logger)
            _tell_stand_ins(logger, dashboard, error, writers)
            return LoggerWriters(logger, writers, dashboard.package)
    except MissingFileSystem as error:
        log.error("%s, so it writes nothing for %s", error, type(logger).__name__)
        return LoggerWriters(logger, [], unwritable=_unwritable(error))


def stand_in_writers(logger: Any) -> list[Writer]:
    """What a logger whose dashboard package is missing gets: what needs no dashboard package.

    The scalars go through the logger's own ``log_metrics`` (:class:`LoggerMetricsWriter`),
    and, when the logger has a run directory (``log_dir``), the run record goes there (made if
    missing), as the dashboard's writer would have kept it: ``learnscope export`` shows it,
    and so does TensorBoard's learnscope tab once TensorBoard is installed.

    Example:
        >>> import tempfile
        >>> class Logger:
        ...     log_dir = tempfile.mkdtemp()
        ...     def log_metrics(self, metrics, step):
        ...         pass
        >>> [type(w).__name__ for w in stand_in_writers(Logger())]
        ['LoggerMetricsWriter', 'RunRecordWriter']
    """
    writers: list[Writer] = [LoggerMetricsWriter(logger)]
    log_dir = getattr(logger, "log_dir", None)
    if isinstance(log_dir, str | Path):
        from learnscope.plugins.pipeline.disk_reserve import DiskReserve

        folder = open_run_folder(log_dir)
        folder.make()
        local = folder.root if isinstance(folder, LocalFolder) else None
        writers.append(RunRecordWriter(folder, DiskReserve(local)))
    return writers


def _tell_stand_ins(
    logger: Any, dashboard: Dashboard, error: ModuleNotFoundError, writers: list[Writer]
) -> None:
    """Say once what ``logger`` gets without its dashboard, and the install that adds the rest."""
    kept = "only its scalars (through the logger)"
    for writer in writers:
        if isinstance(writer, RunRecordWriter):
            kept += f" and its run record in {writer.location} (learnscope export shows it)"
    log.warning(
        "learnscope: cannot import %r (%s installs it), so learnscope writes to %s %s: no "
        "embeddings, charts or pictures in the dashboard",
        error.name or dashboard.package,
        dashboard.install(),
        type(logger).__name__,
        kept,
    )


def _unwritable(error: MissingFileSystem) -> str:
    """Why nothing is written, for the end-of-fit line.

    Example:
        >>> _unwritable(MissingFileSystem("gs://b/runs", "gcsfs", "Install gcsfs"))
        "no 'gcsfs' package for gs://b/runs"
    """
    if error.package is None:
        return f"{error.location} cannot be opened"
    return f"no {error.package!r} package for {error.location}"


def dashboard_of(logger: Any) -> str | None:
    """The name under which :data:`DASHBOARDS` knows ``logger``'s class or its nearest base.

    The one way learnscope recognises a logger (the writers it gets, the end-of-fit line).

    Example:
        >>> class TensorBoardLogger:
        ...     pass
        >>> class MyLogger(TensorBoardLogger):
        ...     pass
        >>> dashboard_of(MyLogger()), dashboard_of(object())
        ('TensorBoardLogger', None)
    """
    for cls in type(logger).__mro__:
        if cls.__name__ in DASHBOARDS:
            return cls.__name__
    return None


def _dashboard(logger: Any) -> Dashboard | None:
    """The dashboard of ``logger``'s class or of its nearest base that has one."""
    name = dashboard_of(logger)
    return None if name is None else DASHBOARDS[name]


def writers_for(loggers: Iterable[Any]) -> list[Writer]:
    """The writers of every logger, in order (see :func:`logger_writers`).

    The TensorBoard and wandb writers each keep a run record in their own directory, and the
    wandb writer's ``~learnscope/view`` panel is made from its own: neither needs the other.

    Example:
        >>> writers_for([])
        []
    """
    return [writer for logger in loggers for writer in logger_writers(logger).writers]
