"""Map loggers (Lightning's or anything alike) to learnscope writers, without importing Lightning.

A logger is recognised by the name of its class or one of its bases, so the same code serves
``lightning.pytorch`` and ``pytorch_lightning`` loggers. A new dashboard is one new entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from learnscope.plugins.base import Writer
from learnscope.plugins.metrics import LoggerMetricsWriter


def _tensorboard(logger: Any) -> Writer:
    """A writer with its own event file in the logger's run directory (never the logger's)."""
    from learnscope.plugins.tensorboard import TensorBoardWriter

    return TensorBoardWriter(logger.log_dir)


def _wandb(logger: Any) -> Writer:
    from learnscope.plugins.wandb import WandbWriter

    return WandbWriter(logger.experiment)


WRITER_FACTORIES: dict[str, Callable[[Any], Writer]] = {
    "TensorBoardLogger": _tensorboard,
    "WandbLogger": _wandb,
}


def writer_for(logger: Any) -> Writer:
    """The writer that shows learnscope records through ``logger``.

    Args:
        logger: A Lightning logger. TensorBoard and wandb loggers get their dashboard writer;
            any other logger gets a :class:`LoggerMetricsWriter` (scalars only).

    Returns:
        A writer bound to the logger's experiment.

    Example:
        >>> class CSVLogger:
        ...     def log_metrics(self, metrics, step):
        ...         pass
        >>> writer_for(CSVLogger()).describe()
        'LoggerMetricsWriter(CSVLogger)'
    """
    for cls in type(logger).__mro__:
        factory = WRITER_FACTORIES.get(cls.__name__)
        if factory is not None:
            return factory(logger)
    return LoggerMetricsWriter(logger)


def writers_for(loggers: Iterable[Any]) -> list[Writer]:
    """One writer per logger, in order (see :func:`writer_for`).

    The TensorBoard and wandb writers each keep a run record in their own directory, and the
    wandb writer's ``~learnscope/view`` panel is made from its own: neither needs the other.

    Example:
        >>> writers_for([])
        []
    """
    return [writer_for(logger) for logger in loggers]
