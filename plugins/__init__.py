"""Writers: one per dashboard, behind the :class:`Writer` base.

Importing this package imports neither TensorBoard, wandb nor torch (the views and the
``learnscope export`` command use it without loading a model's dependencies); the names below
are imported when first used, and each writer imports its dashboard when it is created.
``learnscope.plugins.tensorboard.TensorBoardWriter`` and ``learnscope.plugins.wandb.WandbWriter``
are the dashboard writers.
"""

from typing import TYPE_CHECKING

from learnscope.optional import lazy_names

if TYPE_CHECKING:
    from learnscope.plugins.base import Writer, shows
    from learnscope.plugins.fanout import Writers
    from learnscope.plugins.loggers import LoggerWriters, logger_writers, writers_for
    from learnscope.plugins.metrics import LoggerMetricsWriter

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
    "LoggerMetricsWriter": "metrics",
    "LoggerWriters": "loggers",
    "Writer": "base",
    "Writers": "fanout",
    "shows": "base",
    "logger_writers": "loggers",
    "writers_for": "loggers",
}


__getattr__ = lazy_names(__name__, _MODULES)  # the writers' names, imported when first used
