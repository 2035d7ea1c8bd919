"""The run summary in TensorBoard's HParams dashboard: one session per run, written as it ends.

TensorBoard's HParams dashboard shows one row per *session*: a run that holds a session start
(``_hparams_/session_start_info``, whose hyper-parameters are the row's hparam columns), with
the last value of each scalar of that run (or of its sub-runs) as its metric columns. Three of
its rules decide what learnscope writes, and when:

* A run's tag keeps the first metadata TensorBoard reads for it: a session start, once read,
  is never replaced. So a run's session is written once, when its run record ends
  (``finished``, ``failed``, ``interrupted``), with the values that no longer change: the run's
  hyper-parameters, ``~learnscope/status`` and ``~learnscope/first_finding/code`` (text
  columns), and the session's own end status (success, failure; unknown for an interrupted
  run), which the dashboard's status filter reads. A run still being written has no session
  yet, and so no row.
* The columns of every run come from the first ``_hparams_/experiment`` TensorBoard finds in any
  run, or, when no run has one, from every session's hyper-parameters and every scalar of the
  session runs. learnscope writes no experiment, so the columns are every run's, whatever it
  logged; an experiment written by anyone else (Lightning's ``TensorBoardLogger`` writes one
  with ``hp_metric`` unless it is made with ``default_hp_metric=False``) replaces them all.
* A metric's value is the last scalar of its tag: the numbers of the run summary
  (:meth:`~learnscope.run_directory.summary.RunSummary.flat`) are written once, as the session
  is, as scalars at the run's last step.

Every name learnscope gives a column is the summary's flat name with TensorBoard's ``~``
(:data:`PREFIX`, as every learnscope name in TensorBoard: :mod:`learnscope.tags`), so its
scalars form one chart group listed after the run's own metrics.

Example:
    >>> from learnscope.run_directory.summary import RunSummary
    >>> summary = RunSummary(status="failed", last_step=7, hyperparameters={"lr": 0.1})
    >>> session_hparams(summary)
    {'lr': 0.1, '~learnscope/status': 'failed'}
    >>> session_metrics(summary)["~learnscope/last_step"]
    7
"""

from __future__ import annotations

import logging
import time
import types
from collections.abc import Callable
from typing import Any

from learnscope.optional import import_optional
from learnscope.run_directory.summary import RunSummary

log = logging.getLogger("learnscope")

PREFIX = "~"  # learnscope's names in TensorBoard sort after the user's (learnscope.tags)
TEXT_COLUMNS = ("learnscope/status", "learnscope/first_finding/code")
# How a run ended, as the HParams session's own status (api_pb2.Status, which has no word for
# a run stopped by hand: an interrupted run's is STATUS_UNKNOWN, its text column says it).
SESSION_STATUS = types.MappingProxyType({"finished": "STATUS_SUCCESS", "failed": "STATUS_FAILURE"})


def column(name: str) -> str:
    """The HParams column (and scalar tag) of a flat summary name.

    Example:
        >>> column("learnscope/finding_count")
        '~learnscope/finding_count'
    """
    return f"{PREFIX}{name}"


def session_hparams(summary: RunSummary) -> dict[str, bool | int | float | str]:
    """The session's hyper-parameters: the run's own, then learnscope's text columns.

    A hyper-parameter that is ``None`` has no value (the column is empty for that run, as
    TensorBoard shows a value not given); one named like a learnscope column is left out,
    with a warning.

    Example:
        >>> from learnscope.run_directory.summary import FirstFinding
        >>> first = FirstFinding("zero-gradient", "head.bias", 3)
        >>> summary = RunSummary(status="finished", first_finding=first,
        ...     hyperparameters={"lr": 0.01, "scheduler": None, "amp": True})
        >>> session_hparams(summary)  # doctest: +NORMALIZE_WHITESPACE
        {'lr': 0.01, 'amp': True, '~learnscope/status': 'finished',
         '~learnscope/first_finding/code': 'zero-gradient'}
    """
    flat = summary.flat()
    own = {column(name): flat[name] for name in TEXT_COLUMNS if name in flat}
    given = {name: value for name, value in summary.hyperparameters.items() if value is not None}
    clashing = sorted(set(given) & set(own))
    if clashing:
        log.warning(
            "learnscope: the hyper-parameters %s are named like learnscope's HParams columns "
            "and are left out of TensorBoard's HParams dashboard",
            ", ".join(repr(name) for name in clashing),
        )
    return {**{k: v for k, v in given.items() if k not in own}, **own}


def session_metrics(summary: RunSummary) -> dict[str, int | float]:
    """The session's metrics: every number of the flat summary, by its column.

    Example:
        >>> metrics = session_metrics(RunSummary(status="finished", last_step=4))
        >>> metrics["~learnscope/last_step"], metrics["~learnscope/finding_count"]
        (4, 0)
        >>> "~learnscope/status" in metrics
        False
    """
    return {
        column(name): value
        for name, value in summary.flat().items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def session_protos(summary: RunSummary, started: float | None, ended: float) -> list[Any]:
    """The ``Summary`` protos of the session: the metrics' scalars, its start and its end.

    Args:
        summary: The run summary, of a run that has ended.
        started: When the run started (Unix seconds), or ``None`` when not known.
        ended: When it ended.

    Example:
        >>> protos = session_protos(RunSummary(status="interrupted"), 1.0, 2.0)
        >>> [proto.value[0].tag for proto in protos[-2:]]
        ['_hparams_/session_start_info', '_hparams_/session_end_info']
    """
    summary_pb2 = import_optional("tensorboard.compat.proto.summary_pb2", "tensorboard")
    metadata = import_optional("tensorboard.plugins.hparams.metadata", "tensorboard")
    plugin_data_pb2 = import_optional("tensorboard.plugins.hparams.plugin_data_pb2", "tensorboard")
    api_pb2 = import_optional("tensorboard.plugins.hparams.api_pb2", "tensorboard")

    start = plugin_data_pb2.SessionStartInfo(start_time_secs=started or 0.0)
    for given, value in session_hparams(summary).items():
        name = utf8_text(given)
        if isinstance(value, bool):
            start.hparams[name].bool_value = value
        elif isinstance(value, int | float):
            start.hparams[name].number_value = value
        else:
            start.hparams[name].string_value = utf8_text(value)
    status = api_pb2.Status.Value(SESSION_STATUS.get(summary.status, "STATUS_UNKNOWN"))
    end = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=ended)

    def hparams_proto(tag: str, data: Any) -> Any:
        value = summary_pb2.Summary.Value(
            tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR
        )
        return summary_pb2.Summary(value=[value])

    scalars = [
        summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=utf8_text(name), simple_value=value)]
        )
        for name, value in session_metrics(summary).items()
    ]
    return [
        *scalars,
        hparams_proto(
            metadata.SESSION_START_INFO_TAG,
            plugin_data_pb2.HParamsPluginData(session_start_info=start),
        ),
        hparams_proto(
            metadata.SESSION_END_INFO_TAG,
            plugin_data_pb2.HParamsPluginData(session_end_info=end),
        ),
    ]


def utf8_text(text: str) -> str:
    """``text`` as UTF-8 can hold it: surrogate pairs joined, lone surrogates U+FFFD.

    Example:
        >>> utf8_text("enc" + chr(0xD800)) == "enc" + chr(0xFFFD)
        True
    """
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class HParamsSession:
    """A run's session in the HParams dashboard, written once, when the run record ends.

    The writer tells it when the run started (:meth:`start`) and hands it the run record's
    summary after each end (:meth:`end`); the first summary whose status is no longer
    ``running`` is written, through ``add_summary`` (the writer's, at the run's last step).
    Later ones are not: TensorBoard would keep the first session start it read anyway.

    Example:
        >>> written = []
        >>> session = HParamsSession(lambda proto, step: written.append(step))
        >>> session.end(RunSummary(status="running"))  # not ended: nothing yet
        >>> session.end(RunSummary(status="finished", last_step=9))
        >>> session.end(RunSummary(status="finished", last_step=9))  # once
        >>> session.written, set(written)
        (True, {9})
    """

    def __init__(self, add_summary: Callable[[Any, int], None]) -> None:
        self._add_summary = add_summary
        self._started: float | None = None
        self.written = False

    def start(self, started: float) -> None:
        """The run started at ``started`` (Unix seconds)."""
        self._started = started

    def end(self, summary: RunSummary) -> None:
        """Write the session of ``summary`` if its run has ended and none was written yet."""
        if self.written or summary.status == "running":
            return
        step = summary.last_step or 0
        for proto in session_protos(summary, self._started, time.time()):
            self._add_summary(proto, step)
        self.written = True  # a write that failed is tried again at the next end
