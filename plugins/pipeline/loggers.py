"""Map loggers (Lightning's or anything alike) to learnscope writers, without importing Lightning.

A dashboard is a :class:`Dashboard`: the writers a logger of its kind gets, where their records
go and how to open them (the end-of-fit line's words), and the package it needs. learnscope's own,
for ``TensorBoardLogger`` and ``WandbLogger``, are named in :data:`OWN_DASHBOARDS` (each in its
dashboard's folder); another package adds one as an entry point of the group
:data:`ENTRY_POINTS`, named by the logger class it serves. Both are read once per writer session
(:func:`installed_dashboards`). A logger is recognised by the name of its class or of its nearest
base that has a dashboard (:func:`dashboard_of`), so the same code serves ``lightning.pytorch``
and ``pytorch_lightning`` loggers. A logger with no dashboard gets its scalars through its own
``log_metrics`` (:class:`~learnscope.plugins.pipeline.logger_metrics.LoggerMetricsWriter`).

A dashboard whose package is not installed does not cost the fit (Lightning's
``TensorBoardLogger`` writes through tensorboardX when the ``tensorboard`` package is missing):
its logger gets what can be written without the package (:func:`stand_in_writers`: the scalars
through the logger itself, and the run record, which ``learnscope export`` reads), said in one
warning, with the install that adds the rest, when the writers are made. A dashboard may make
no writer for a logger (a disabled wandb run), saying why itself. A logger whose log
directory is on a file system whose package is missing (``s3fs`` for ``s3://``) gets no writer
either, said in one error naming the package: never a local folder named after the scheme.
"""

from __future__ import annotations

import importlib
import logging
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from learnscope.plugins.pipeline.base import Writer
from learnscope.plugins.pipeline.logger_metrics import LoggerMetricsWriter
from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter, record_writer
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.shell import shell_command
from learnscope.storage import MissingFileSystem, open_run_folder

log = logging.getLogger("learnscope")

ENTRY_POINTS = "learnscope.dashboards"  # the entry-point group: logger class name -> Dashboard
# learnscope's own dashboards: logger class name -> where its Dashboard is (module:name), imported
# when a writer session reads them (importing one imports no dashboard package).
OWN_DASHBOARDS = types.MappingProxyType(
    {
        "TensorBoardLogger": "learnscope.plugins.tensorboard.dashboard:TENSORBOARD",
        "WandbLogger": "learnscope.plugins.wandb.dashboard:WANDB",
    }
)


@dataclass(frozen=True)
class Place:
    """Where a logger's records go, in words, and the commands that open them.

    Args:
        name: The place (a run directory, a W&B run with its address).
        opens: The commands that open it, quoted for the user's shell, if any.
        written: Whether anything is written there: ``False`` for a place that gets nothing
            (a disabled W&B run), which the end-of-fit line names among those.

    Example:
        >>> Place("runs/version_0", "tensorboard --logdir runs").written
        True
    """

    name: str
    opens: str | None = None
    written: bool = True


@dataclass(frozen=True)
class Dashboard:
    """How learnscope writes to the dashboard of one kind of logger, and says where it wrote.

    Args:
        writers: Makes the writers for a logger (none: nothing is written there), called with
            the logger and the :class:`~learnscope.run_directory.write_limits.WriteLimits` of its
            writes (the free-space reserve the writers keep). A run folder's writers share its one
            run record, which this makes
            (:func:`~learnscope.plugins.pipeline.run_record_writer.record_writer`).
        place: Where a logger's records went and how to open them, for the end-of-fit line:
            called with the logger and the package its writers lacked (they were then the
            stand-ins of :func:`stand_in_writers`) or ``None``. It never starts anything (a
            W&B run not started is said as such).
        package: The package the writers need, as ``pip install`` names it.
        extra: learnscope's extra that installs it, if any.

    Example:
        >>> dashboard = Dashboard(lambda logger, limits: [], logger_place, "tensorboard")
        >>> dashboard.package
        'tensorboard'
    """

    writers: Callable[[Any, WriteLimits], list[Writer]]
    place: Callable[[Any, str | None], Place]
    package: str
    extra: str | None = None

    def install(self) -> str:
        """The commands that install the package, for messages.

        Example:
            >>> wandb = Dashboard(lambda logger, limits: [], logger_place, "wandb", "wandb")
            >>> print(wandb.install())
            pip install wandb or pip install 'learnscope[wandb]'
        """
        package = shell_command("pip", "install", self.package)
        if self.extra is None:
            return package
        extra = shell_command("pip", "install", f"learnscope[{self.extra}]")
        return f"{package} or {extra}"


def installed_dashboards() -> Mapping[str, Dashboard]:
    """The dashboards by logger class name: learnscope's own, and those other packages add.

    learnscope's own (:data:`OWN_DASHBOARDS`) are always there. An entry point of another
    package (:data:`ENTRY_POINTS`) that cannot be loaded, is not a :class:`Dashboard`, or names a
    logger class that another dashboard serves too is said in one error and left out (the
    loggers of that class keep learnscope's dashboard, or get only their scalars).

    Example:
        >>> sorted(installed_dashboards())
        ['TensorBoardLogger', 'WandbLogger']
    """
    found: dict[str, Dashboard] = {}
    for name, where in OWN_DASHBOARDS.items():
        module, _, attribute = where.partition(":")
        found[name] = getattr(importlib.import_module(module), attribute)
    named: dict[str, list[EntryPoint]] = {}
    for entry in entry_points(group=ENTRY_POINTS):
        named.setdefault(entry.name, []).append(entry)
    for name, same in named.items():
        if len(same) > 1 or name in found:
            serving = [f"{entry.value} of {_package(entry)}" for entry in same]
            if name in found:
                serving.insert(0, f"learnscope's own ({OWN_DASHBOARDS[name]})")
            kept = "learnscope's own" if name in found else "neither, only its scalars"
            log.error(
                "learnscope: %d dashboards are installed for %s (%s); it gets %s: uninstall "
                "the others",
                len(serving),
                name,
                ", ".join(serving),
                kept,
            )
            continue
        dashboard = _load(same[0])
        if dashboard is not None:
            found[name] = dashboard
    return types.MappingProxyType(found)


def _load(entry: EntryPoint) -> Dashboard | None:
    """The :class:`Dashboard` of ``entry``; ``None`` (said in one error) for a broken one."""
    try:
        dashboard = entry.load()
    except Exception as error:
        log.error(
            "learnscope: the dashboard %s of %s cannot be loaded (%s: %s); %s loggers get only "
            "their scalars",
            entry.value,
            _package(entry),
            type(error).__name__,
            error,
            entry.name,
        )
        return None
    if not isinstance(dashboard, Dashboard):
        log.error(
            "learnscope: the dashboard %s of %s is a %s, not a learnscope Dashboard; %s loggers "
            "get only their scalars",
            entry.value,
            _package(entry),
            type(dashboard).__name__,
            entry.name,
        )
        return None
    return dashboard


def _package(entry: EntryPoint) -> str:
    return entry.dist.name if entry.dist is not None else "an unnamed package"


def logger_place(logger: Any, missing: str | None = None) -> Place:
    """Where the records of a logger with no dashboard of its own went: its class and folder.

    Args:
        logger: The logger (its ``log_dir``, else its ``save_dir``, names the folder).
        missing: Not used: such a logger has no dashboard package.

    Example:
        >>> class CSVLogger:
        ...     save_dir = "logs"
        >>> logger_place(CSVLogger()).name
        'CSVLogger (logs)'
    """
    name = type(logger).__name__
    folder = getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None)
    return Place(f"{name} ({folder})" if folder else name)


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
        dashboard: The dashboard that made them; ``None`` for a logger with none.

    Example:
        >>> LoggerWriters(None, []).missing is None
        True
    """

    logger: Any
    writers: list[Writer]
    missing: str | None = None
    unwritable: str | None = None
    dashboard: Dashboard | None = None

    def place(self) -> Place:
        """Where the logger's records went and how to open them, as its dashboard says.

        A logger with no dashboard is named by its class and folder (:func:`logger_place`).

        Example:
            >>> class CSVLogger:
            ...     log_dir = "logs/version_0"
            >>> LoggerWriters(CSVLogger(), []).place()
            Place(name='CSVLogger (logs/version_0)', opens=None, written=True)
        """
        if self.dashboard is None:
            return logger_place(self.logger)
        return self.dashboard.place(self.logger, self.missing)


def logger_writers(
    logger: Any,
    dashboards: Mapping[str, Dashboard] | None = None,
    limits: WriteLimits = WriteLimits(),
) -> LoggerWriters:
    """The writers that show learnscope records through ``logger``.

    A logger with a dashboard (TensorBoard, wandb, or one another package installs) gets its
    dashboard's writers (none for a disabled wandb run); when the dashboard's package cannot be
    imported, the stand-ins of :func:`stand_in_writers`, with one warning naming the package
    and its install. Any other logger gets a :class:`LoggerMetricsWriter` (scalars only).

    Args:
        logger: A Lightning logger, or anything with its ``log_metrics`` method.
        dashboards: The dashboards, by logger class name (default:
            :func:`installed_dashboards`, read anew).
        limits: The limits of the writers' writes (the free-space reserve they keep).

    Raises:
        ModuleNotFoundError: A module of learnscope's own is missing (a broken install).

    Example:
        >>> class CSVLogger:
        ...     def log_metrics(self, metrics, step):
        ...         pass
        >>> [w.describe() for w in logger_writers(CSVLogger()).writers]
        ['LoggerMetricsWriter(CSVLogger)']
    """
    dashboards = installed_dashboards() if dashboards is None else dashboards
    name = dashboard_of(logger, dashboards)
    if name is None:
        return LoggerWriters(logger, [LoggerMetricsWriter(logger)])
    dashboard = dashboards[name]
    try:
        try:
            return LoggerWriters(logger, dashboard.writers(logger, limits), dashboard=dashboard)
        except ModuleNotFoundError as error:
            if (error.name or "").partition(".")[0] == "learnscope":  # a broken install
                raise
            writers = stand_in_writers(logger, limits)
            _tell_stand_ins(logger, dashboard, error, writers)
            return LoggerWriters(logger, writers, dashboard.package, dashboard=dashboard)
    except MissingFileSystem as error:
        log.error("%s, so it writes nothing for %s", error, type(logger).__name__)
        return LoggerWriters(logger, [], unwritable=_unwritable(error), dashboard=dashboard)


def stand_in_writers(logger: Any, limits: WriteLimits = WriteLimits()) -> list[Writer]:
    """What a logger whose dashboard package is missing gets: what needs no dashboard package.

    The scalars go through the logger's own ``log_metrics`` (:class:`LoggerMetricsWriter`),
    and, when the logger has a run directory (``log_dir``), the run record goes there (made if
    missing), as the dashboard's writer would have kept it: ``learnscope export`` shows it,
    and so does TensorBoard's learnscope tab once TensorBoard is installed.

    Args:
        logger: The logger.
        limits: The free-space reserve the run record keeps.

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
        folder = open_run_folder(log_dir)
        folder.make()
        writers.append(record_writer(folder, limits))
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


def dashboard_of(logger: Any, dashboards: Mapping[str, Dashboard] | None = None) -> str | None:
    """The name under which the dashboards know ``logger``'s class or its nearest base.

    The one way learnscope recognises a logger (the writers it gets, the end-of-fit line).

    Args:
        logger: The logger.
        dashboards: The dashboards, by logger class name (default:
            :func:`installed_dashboards`, read anew).

    Example:
        >>> class TensorBoardLogger:
        ...     pass
        >>> class MyLogger(TensorBoardLogger):
        ...     pass
        >>> dashboard_of(MyLogger()), dashboard_of(object())
        ('TensorBoardLogger', None)
    """
    dashboards = installed_dashboards() if dashboards is None else dashboards
    for cls in type(logger).__mro__:
        if cls.__name__ in dashboards:
            return cls.__name__
    return None


def writers_for(loggers: Iterable[Any], limits: WriteLimits = WriteLimits()) -> list[Writer]:
    """The writers of every logger, in order (see :func:`logger_writers`).

    Each dashboard keeps the run record of its own folder (the wandb writer's
    ``~learnscope/view`` panel is made from its own): none needs another.

    Args:
        loggers: The loggers.
        limits: The limits of the writers' writes (the free-space reserve they keep).

    Example:
        >>> writers_for([])
        []
    """
    loggers = list(loggers)
    dashboards = installed_dashboards() if loggers else {}
    made = [logger_writers(logger, dashboards, limits) for logger in loggers]
    return [writer for writers in made for writer in writers.writers]
