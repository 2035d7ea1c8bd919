"""Writers: one per dashboard, behind the :class:`Writer` base.

Importing this package imports neither TensorBoard, wandb nor torch (the views and the
``learnscope export`` command use it without loading a model's dependencies); the names below
are imported when first used, and each writer imports its dashboard when it is created.
``learnscope.plugins.tensorboard.TensorBoardWriter``, ``learnscope.plugins.wandb.WandbWriter`` and
``learnscope.plugins.wandb.WandbPageWriter`` are the dashboard writers. The folders show the
layers: ``pipeline/`` (the fan-out, its worker thread, the picture stage, which writers a logger
gets), ``tensorboard/`` and ``wandb/`` (the writers by dashboard, each with its ``dashboard.py``
entry, named in ``pipeline/loggers.py``'s ``OWN_DASHBOARDS``), ``views/`` (everything that reads
run records) and ``tab/`` (the TensorBoard plugin).
"""

from typing import TYPE_CHECKING

from learnscope.optional import lazy_names

if TYPE_CHECKING:
    from learnscope.plugins.pipeline.base import Writer, shows
    from learnscope.plugins.pipeline.fanout import Writers
    from learnscope.plugins.pipeline.logger_metrics import LoggerMetricsWriter
    from learnscope.plugins.pipeline.loggers import LoggerWriters, logger_writers, writers_for

__all__ = [
    "LoggerMetricsWriter",
    "LoggerWriters",
    "Writer",
    "Writers",
    "logger_writers",
    "shows",
    "writers_for",
]
_MODULES = {
    "LoggerMetricsWriter": "pipeline.metrics",
    "LoggerWriters": "pipeline.loggers",
    "Writer": "pipeline.base",
    "Writers": "pipeline.fanout",
    "shows": "pipeline.base",
    "logger_writers": "pipeline.loggers",
    "writers_for": "pipeline.loggers",
}


__getattr__ = lazy_names(__name__, _MODULES)  # the writers' names, imported when first used
