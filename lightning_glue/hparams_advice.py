"""What the user must set for learnscope's run summary to show in TensorBoard's HParams dashboard.

TensorBoard takes the HParams columns of every run from the first ``_hparams_/experiment`` it
finds in any run. Lightning's ``TensorBoardLogger`` writes one at the start of each fit whose
model or datamodule saved its hyper-parameters (``save_hyperparameters()``), with those and
``hp_metric`` as the only columns, unless it is made with ``default_hp_metric=False``; a fit
whose model saved none writes none. learnscope writes no experiment (see
:mod:`learnscope.plugins.tensorboard.hparams`), so that its columns and every run's appear; it
cannot replace Lightning's, which is written first. :func:`hp_metric_advice` says so, in one
line per fit, when the trainer is about to write one. It looks at the trainer and its loggers
by their attributes only (no logger class is named here).

Example:
    >>> class Logger:
    ...     _default_hp_metric = True
    >>> class Module:
    ...     _log_hyperparams = True
    >>> class Trainer:
    ...     loggers, lightning_module, datamodule = [Logger()], Module(), None
    >>> print(hp_metric_advice(Trainer()))  # doctest: +ELLIPSIS
    learnscope: TensorBoard's HParams dashboard will show only hp_metric and the \
hyper-parameters, ... TensorBoardLogger(..., default_hp_metric=False) ...
    >>> Trainer.enable_autolog_hparams = False
    >>> hp_metric_advice(Trainer()) is None
    True
"""

from __future__ import annotations

from typing import Any

ADVICE = (
    "learnscope: TensorBoard's HParams dashboard will show only hp_metric and the "
    "hyper-parameters, for every run of the log directory: the TensorBoardLogger writes its "
    "own HParams columns (default_hp_metric=True), which replace learnscope's run summary "
    "there; make it TensorBoardLogger(..., default_hp_metric=False) to see the summary "
    "(~learnscope/status, finding counts, ...) beside the hyper-parameters"
)


def hp_metric_advice(trainer: Any) -> str | None:
    """:data:`ADVICE` when a logger of ``trainer`` will write Lightning's HParams experiment.

    That is: the trainer logs hyper-parameters (``enable_autolog_hparams``, on by default),
    its model or datamodule hands them to the loggers (``_log_hyperparams``: not
    ``save_hyperparameters(logger=False)``), and a logger has ``default_hp_metric`` on.
    """
    if not getattr(trainer, "enable_autolog_hparams", True):
        return None
    parts = (getattr(trainer, "lightning_module", None), getattr(trainer, "datamodule", None))
    if not any(getattr(part, "_log_hyperparams", False) is True for part in parts):
        return None
    loggers = getattr(trainer, "loggers", None) or []
    if any(getattr(logger, "_default_hp_metric", None) is True for logger in loggers):
        return ADVICE
    return None
