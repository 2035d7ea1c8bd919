"""A writer for any Lightning-style logger: scalar summaries through ``logger.log_metrics``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from learnscope.plugins.pipeline.base import Writer
from learnscope.tags import plain_name


class LoggerMetricsWriter(Writer):
    """Send scalar summaries to any object with ``log_metrics(metrics, step)`` (CSV, MLflow...).

    It shows scalars only; embeddings and charts need a dashboard writer. It is called on the
    training thread, since the logger is Lightning's too. Names lose their leading ``~``
    (``learnscope/health/loss``; see :mod:`learnscope.tags`): MLflow accepts only letters,
    digits and ``_-./ :`` in a name.

    Args:
        logger: A Lightning logger or anything with the same ``log_metrics`` method.

    Example:
        >>> class Collect:
        ...     def __init__(self):
        ...         self.rows = []
        ...     def log_metrics(self, metrics, step):
        ...         self.rows.append((step, metrics))
        >>> sink = Collect()
        >>> LoggerMetricsWriter(sink).write_scalars({"~learnscope/health/loss": 1.0}, step=2)
        >>> sink.rows
        [(2, {'learnscope/health/loss': 1.0})]
    """

    on_training_thread = True  # Lightning calls the same logger from the training loop

    def __init__(self, logger: Any) -> None:
        self.logger = logger

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Log ``scalars`` at ``step`` with the logger's own ``log_metrics``."""
        self.logger.log_metrics({plain_name(k): v for k, v in scalars.items()}, step)

    def flush(self) -> None:
        """Ask the logger to save, when it can."""
        save = getattr(self.logger, "save", None)
        if callable(save):
            save()

    def describe(self) -> str:
        """The logger's class name."""
        return f"LoggerMetricsWriter({type(self.logger).__name__})"
