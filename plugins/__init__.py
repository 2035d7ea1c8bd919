"""Writers: one per dashboard, behind the :class:`Writer` base.

Importing this package imports neither TensorBoard nor wandb; each writer imports its dashboard
when it is created. ``learnscope.plugins.tensorboard.TensorBoardWriter`` and
``learnscope.plugins.wandb.WandbWriter`` are the dashboard writers.
"""

from learnscope.plugins.base import Writer, shows
from learnscope.plugins.fanout import Writers
from learnscope.plugins.loggers import writer_for, writers_for
from learnscope.plugins.metrics import LoggerMetricsWriter

__all__ = ["LoggerMetricsWriter", "Writer", "Writers", "shows", "writer_for", "writers_for"]
