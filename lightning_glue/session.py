"""One writer session per trainer: the writers of its loggers, shared by every learnscope callback.

Every learnscope callback on a trainer joins that trainer's session in ``setup`` and leaves it in
``teardown`` (or when training stops with an exception). The session makes one writer per logger
when the first callback joins (so three callbacks write through one TensorBoard writer and one
wandb writer, not three of each), hands them one ``run`` record (:class:`~learnscope.records.
RunStart`) naming every learnscope callback of the trainer with its settings, says once per
logger what that logger cannot show, and, when the last callback leaves, hands them the
``end`` record (``interrupted`` when a callback left through ``on_exception``, else
``finished``) and flushes and closes them. The writers run on a worker thread
(:class:`~learnscope.plugins.pipeline.background.BackgroundWriters`): callbacks only queue records,
and leaving waits until everything queued is written. A callback reused with another trainer
joins that trainer's session and writes to that trainer's loggers. Only the process of global rank
zero gets writers; on the others the session holds none. Under ``Trainer(fast_dev_run=...)``,
which turns Lightning's loggers off, the session holds no writer and says so in one line. A
hook called after the trainer's fit (or validate, test, predict) ended, as code that drives
Lightning's loops by hand does, gets a session that writes nothing (said once at info level):
no thread, event file or run-record entry is left behind by a run that is over. When
the last callback leaves at the end of a fit, rank zero says in one info line, on a child of
Lightning's logger (shown by default, as Lightning's own lines are), how many snapshots,
analyses and findings reached each place, what did not and why, and the commands that open
them, quoted for the shell (:meth:`WriterSession.summary`). A logger whose dashboard package
is missing gets stand-in writers and a disabled W&B run none, each said once when the writers
are made (see :func:`~learnscope.plugins.pipeline.loggers.logger_writers`); the end-of-fit line
names them as such.

**Who owns it.** No registry: the callbacks hold the session. The first learnscope callback of
a trainer to join makes it; the others find it through ``trainer.callbacks`` (the session a
callback holds for this very trainer, :func:`find`), and the last to leave closes it. A session
owns its writers (:class:`~learnscope.plugins.pipeline.background.BackgroundWriters`, made on first
use), which own the writer thread and the drawing thread; closing the session stops both. A callback
hook run by hand on a trainer whose callbacks do not include it gets a session of its own.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Mapping, Sequence
from typing import Any

from learnscope.hyperparameter_values import HyperValue
from learnscope.lightning_glue.end_of_fit import FitWritten, end_of_fit_line
from learnscope.plugins import LoggerWriters, logger_writers, shows
from learnscope.plugins.pipeline.background import BackgroundWriters
from learnscope.plugins.pipeline.fanout import Outcome
from learnscope.plugins.pipeline.loggers import installed_dashboards
from learnscope.records import CallbackSettings, Finding, RunEnd, RunStart
from learnscope.records.hyperparameters import flat_hyperparameters
from learnscope.run_directory.write_limits import WriteLimits

log = logging.getLogger("learnscope")


class WriterSession:
    """The writers of one trainer's loggers, made on first use and shared by its callbacks.

    Args:
        loggers: The trainer's loggers (``trainer.loggers``).
        is_global_zero: Whether this process writes (global rank zero).
        fast_dev_run: The trainer runs with ``fast_dev_run``: nothing is written, and nothing
            is said about what the loggers (Lightning's stand-in ``DummyLogger``) cannot show.
        ended: The trainer's run is over (a hook called after ``fit`` returned): nothing is
            written, and nothing said.
        limits: The limits of the writes: how long closing waits for what is queued, the
            free-space reserve the writers keep (:func:`shared_limits` gives the callbacks').

    Example:
        >>> class CSVLogger:
        ...     def log_metrics(self, metrics, step):
        ...         print(step, metrics)
        >>> session = WriterSession([CSVLogger()], is_global_zero=True)
        >>> session.writers().write_scalars({"loss": 0.5}, step=3)  # on this thread: a logger's
        3 {'loss': 0.5}
        >>> [w.describe() for w in session.writers().active]
        ['LoggerMetricsWriter(CSVLogger)']
    """

    def __init__(
        self,
        loggers: Sequence[Any],
        is_global_zero: bool,
        fast_dev_run: bool = False,
        ended: bool = False,
        limits: WriteLimits = WriteLimits(),
    ) -> None:
        self.fast_dev_run = fast_dev_run or ended  # either way: no writer, nothing said
        self.limits = limits
        self.ended = ended  # made for a run that is over: its writers drop what they get
        self.loggers = [] if self.fast_dev_run else list(loggers)
        self.is_global_zero = is_global_zero
        self.members: set[int] = set()  # ids of the callbacks that joined
        self.stopped_by: BaseException | None = None  # what a callback left on_exception with
        self.callbacks: tuple[CallbackSettings, ...] = ()  # the attached, as the run started
        self.end: RunEnd | None = None  # how the run ended, once closed
        self.findings: list[Finding] = []  # the findings table the writers were given
        self._writers: BackgroundWriters | None = None
        self._made: list[LoggerWriters] = []  # the writers of each logger, as made
        self._outcomes: dict[int, Outcome] = {}  # id(writer) -> what it wrote, after close
        self._said: set[tuple[str, str]] = set()  # (who, what) already warned about
        self.written: dict[str, int] = dict.fromkeys(
            ("write_embedding", "write_autocorrelation", "findings"), 0
        )  # what the writers were given, when closed

    def writers(self) -> BackgroundWriters:
        """The writers of every logger, made on the first call; none on ranks other than zero.

        Making them says once what a logger gets without its dashboard's package, and that a
        disabled W&B run gets nothing (see
        :func:`~learnscope.plugins.pipeline.loggers.logger_writers`).
        """
        if self._writers is None:
            loggers = self.loggers if self.is_global_zero else []
            dashboards = installed_dashboards() if loggers else {}  # read once per session
            self._made = [logger_writers(lg, dashboards, self.limits) for lg in loggers]
            self._writers = BackgroundWriters(
                (w for made in self._made for w in made.writers),
                writes_nothing=self.ended,
                limits=self.limits,
            )
        return self._writers

    def start(
        self,
        callbacks: Sequence[CallbackSettings],
        hyperparameters: Mapping[str, HyperValue] | None = None,
    ) -> None:
        """Hand the writers the start of the run: the attached callbacks, the hyper-parameters.

        Nothing is written on ranks other than zero or under ``fast_dev_run``.
        """
        self.callbacks = tuple(callbacks)
        if self.is_global_zero and not self.fast_dev_run:
            start = RunStart(tuple(callbacks), hyperparameters=hyperparameters or {})
            self.writers().write_run_start(start)

    def drain(self) -> None:
        """Wait until every record queued so far is written."""
        if self._writers is not None:
            self._writers.drain()

    def warn_once(self, who: str, what: str, message: str, *args: Any) -> None:
        """Log ``message % args`` as a warning the first time ``(who, what)`` comes up.

        Example:
            >>> session = WriterSession([], is_global_zero=True)
            >>> session.warn_once("csv", "embedding", "learnscope: %s", "said once")
            >>> session.warn_once("csv", "embedding", "learnscope: %s", "not again")
        """
        if (who, what) not in self._said:
            self._said.add((who, what))
            log.warning(message, *args)

    def tell_unshown(self, methods: Sequence[str], *, warn_without_logger: bool = True) -> None:
        """Warn once per logger that cannot show records of these :class:`Writer` methods.

        Also warn once when there is no logger at all (unless ``warn_without_logger`` is false).
        Nothing is said on ranks other than zero.

        Args:
            methods: Writer method names, such as ``("write_histogram", "write_findings")``.
            warn_without_logger: Whether to warn when there is no logger at all.
        """
        if not self.is_global_zero or self.fast_dev_run:
            return
        writers = self.writers()
        if not self.loggers and warn_without_logger:  # not writers switched off by failures
            for method in methods:
                self.warn_once(
                    "no logger",
                    method,
                    "learnscope: no logger to show %s; add a TensorBoardLogger or WandbLogger",
                    _kinds([method]),
                )
        told = {id(w) for made in self._made if made.missing for w in made.writers}
        for writer in writers.active:
            if id(writer) in told:  # stand-ins: what they cannot show was said when made
                continue
            unshown = [m for m in methods if not shows(writer, m)]
            lost = [m for m in unshown if m not in _FALLBACKS]
            if lost:
                self.warn_once(
                    writer.describe(),
                    ",".join(lost),
                    "learnscope: %s cannot show %s records; they are not written there",
                    writer.describe(),
                    _kinds(lost),
                )
            for method in unshown:
                if method in _FALLBACKS:
                    self.warn_once(
                        writer.describe(),
                        method,
                        "learnscope: %s cannot show %s; %s",
                        writer.describe(),
                        *_FALLBACKS[method],
                    )

    def close(self, step: int | None = None) -> None:
        """End the run at ``step`` (when given), write what is queued, then close the writers.

        The run ends as :attr:`stopped_by` says (see :meth:`RunEnd.after`), kept in :attr:`end`.
        A logger's own writer stays open. What was written is then in :attr:`written` and
        :attr:`findings` (nothing when no logger got a writer, as a disabled W&B run gets none).
        """
        if step is not None:
            self.end = RunEnd.after(step, self.stopped_by)
        if self._writers is not None:
            try:
                if self.end is not None:
                    self._writers.write_run_end(self.end)
            finally:
                self._writers.close()
                if any(made.writers for made in self._made):
                    self._count_written(self._writers)
                self._writers = None

    def _count_written(self, writers: BackgroundWriters) -> None:
        """Keep in :attr:`written` what ``writers`` were given, and what each of them wrote."""
        parts = (writers.inline, writers.queued)
        for method in ("write_embedding", "write_autocorrelation"):
            self.written[method] = max(part.records[method] for part in parts)
        self.findings = max((part.findings for part in parts), key=len)
        self.written["findings"] = len(self.findings)
        for part in parts:
            self._outcomes.update((id(w), part.outcomes[id(w)]) for w in part.writers)

    def summary(self, stage: str = "fit") -> str | None:
        """One line on what was written, where, and the commands that open it; after :meth:`close`.

        The counts are what reached each place (:meth:`_places`): the places that got every
        record made lead the line; a place that did not says what it got, what it did not and
        why (the first reason: the free-space reserve, a store's refusal, a failure, the end's
        bound), and a place that got nothing is named only among those that got nothing, with
        no command to open it. A finished run's line also names the findings it counts (a few)
        and why a section of an attached callback is empty
        (:mod:`learnscope.run_directory.endings`). A failed run's line says how it failed
        and what was written before, with no command to open it.
        ``None`` on ranks other than zero, under ``fast_dev_run`` and without a logger.

        Example:
            >>> class CSVLogger:
            ...     save_dir = "logs"
            ...     def log_metrics(self, metrics, step):
            ...         pass
            >>> session = WriterSession([CSVLogger()], is_global_zero=True)
            >>> session.close(step=5)
            >>> print(session.summary())
            learnscope wrote 0 embedding snapshots, 0 autocorrelation analyses and 0 findings \
in this fit, to CSVLogger (logs)
            >>> failed = WriterSession([CSVLogger()], is_global_zero=True)
            >>> failed.stopped_by = RuntimeError("the loader broke")
            >>> failed.close(step=5)
            >>> print(failed.summary())
            learnscope: the fit failed at step 5 (RuntimeError: the loader broke); what \
learnscope wrote before it (0 embedding snapshots, 0 autocorrelation analyses and 0 findings) \
is in CSVLogger (logs), its run record ending 'failed'
        """
        if not self.is_global_zero or self.fast_dev_run or not self.loggers:
            return None
        fit = FitWritten(
            self.loggers,
            tuple(self._made),
            dict(self._outcomes),
            dict(self.written),
            tuple(self.findings),
            self.end,
            tuple(self.callbacks),
        )
        return end_of_fit_line(fit, stage)


# Records that a writer which cannot show them still gets in another form (see plugins.base).
_FALLBACKS = types.MappingProxyType(
    {
        "write_autocorrelation": (
            "autocorrelation charts",
            "it gets the autocorrelation scalars only",
        )
    }
)


def _kinds(methods: Sequence[str]) -> str:
    return " or ".join(m.removeprefix("write_").replace("_", " ") for m in methods)


def find(trainer: Any) -> WriterSession | None:
    """The session that a callback of ``trainer`` holds for it, if any.

    Each callback in ``trainer.callbacks`` with a ``writer_session(trainer)`` method (every
    learnscope callback) is asked; the first session found is the trainer's. A session made
    for a run that was over is not the trainer's once it runs anew (:func:`outlived`).

    Example:
        >>> class Callback:
        ...     session = None
        ...     def writer_session(self, trainer):
        ...         return self.session
        >>> class Trainer:
        ...     loggers, is_global_zero, callbacks = [], True, [Callback()]
        >>> trainer = Trainer()
        >>> find(trainer) is None
        True
        >>> trainer.callbacks[0].session = join(trainer, trainer.callbacks[0])
        >>> find(trainer) is trainer.callbacks[0].session
        True
    """
    for callback in list(getattr(trainer, "callbacks", None) or []):
        held = getattr(callback, "writer_session", None)
        session = held(trainer) if callable(held) else None
        if isinstance(session, WriterSession) and not outlived(session, trainer):
            return session
    return None


def join(trainer: Any, callback: object) -> WriterSession:
    """The session of ``trainer``, made when the first callback joins; ``callback`` is a member.

    The session is found through the trainer's callbacks (:func:`find`): the caller holds the
    session it is given, and answers ``writer_session(trainer)`` with it. A new session's
    writers get the start of the run at once: every callback of the trainer that has
    ``learnscope_settings()`` (every learnscope callback), with its settings.

    Example:
        >>> class Callback:
        ...     session = None
        ...     def writer_session(self, trainer):
        ...         return self.session
        >>> class Trainer:
        ...     loggers, is_global_zero = [], True
        ...     callbacks = [Callback(), Callback()]
        >>> trainer = Trainer()
        >>> first, second = trainer.callbacks
        >>> first.session = join(trainer, first)
        >>> join(trainer, second) is first.session
        True
    """
    session = find(trainer)
    limits = shared_limits(trainer, callback)
    if session is not None and limits != session.limits:
        raise ValueError(
            f"learnscope: {_name(callback)} gives write_limits={limits}, but the writer session "
            f"it joins keeps {session.limits}: the callbacks of one fit share their write limits"
        )
    if session is None:
        fast_dev_run = bool(getattr(trainer, "fast_dev_run", False))
        ended = _ended(trainer)
        session = WriterSession(
            trainer.loggers, bool(trainer.is_global_zero), fast_dev_run, ended=ended, limits=limits
        )
        if ended:
            log.info(
                "learnscope: a callback hook ran after the trainer's run ended (%s); "
                "nothing is written for it",
                trainer.state.status.value,
            )
        elif fast_dev_run and session.is_global_zero:
            log.warning(
                "learnscope: fast_dev_run is on, so Lightning's loggers are off and learnscope "
                "writes nothing in this run"
            )
        session.start(_attached(trainer, callback), run_hyperparameters(trainer))
    session.members.add(id(callback))
    return session


def shared_limits(trainer: Any, callback: object) -> WriteLimits:
    """The write limits of ``trainer``'s writer session: those its callbacks give.

    Each callback of the trainer (and ``callback``, which joins it) with a ``write_limits``
    attribute that is not ``None`` gives them; the others leave them to those. Callbacks that
    give equal limits agree; none giving any leaves the defaults.

    Raises:
        ValueError: Two callbacks give different limits (naming both, with their limits).

    Example:
        >>> class Callback:
        ...     def __init__(self, write_limits=None):
        ...         self.write_limits = write_limits
        >>> class Trainer:
        ...     callbacks = [Callback(), Callback(WriteLimits(end_timeout_s=60))]
        >>> shared_limits(Trainer(), Callback()).end_timeout_s
        60.0
        >>> shared_limits(Trainer(), Callback(WriteLimits(end_timeout_s=5)))
        Traceback (most recent call last):
        ...
        ValueError: learnscope: Callback gives write_limits=WriteLimits(end_timeout_s=60.0, ...
    """
    callbacks = list(getattr(trainer, "callbacks", None) or [])
    if callback not in callbacks:
        callbacks.append(callback)
    given = [(c, c.write_limits) for c in callbacks if getattr(c, "write_limits", None) is not None]
    for other, limits in given[1:]:
        first, first_limits = given[0]
        if limits != first_limits:
            raise ValueError(
                f"learnscope: {_name(first)} gives write_limits={first_limits} and "
                f"{_name(other)} gives write_limits={limits}; the callbacks of one fit share "
                "one writer session and its limits: give them to one callback, or the same to "
                "each"
            )
    return given[0][1] if given else WriteLimits()


def _name(callback: object) -> str:
    """A callback in messages: its checkpoint key (which tells projectors apart), else class.

    Example:
        >>> _name(object())
        'object'
    """
    key = getattr(callback, "state_key", None)
    return key if isinstance(key, str) else type(callback).__name__


def outlived(session: WriterSession, trainer: Any) -> bool:
    """Whether ``session`` was made for a run of ``trainer`` that was over, and a new one runs.

    A callback holding such a session (a hook called after ``fit``) leaves it and joins the
    trainer's session again when the trainer runs anew.

    Example:
        >>> class Trainer:  # no Lightning state: running
        ...     pass
        >>> outlived(WriterSession([], True, ended=True), Trainer())
        True
    """
    return session.ended and not _ended(trainer)


def _ended(trainer: Any) -> bool:
    """Whether ``trainer`` is a Lightning trainer whose last run is over (finished, interrupted).

    Example:
        >>> class Trainer:  # no Lightning state: not over
        ...     pass
        >>> _ended(Trainer())
        False
    """
    status = getattr(getattr(trainer, "state", None), "status", None)
    return getattr(status, "value", None) in ("finished", "interrupted")


def run_hyperparameters(trainer: Any) -> dict[str, HyperValue]:
    """The hyper-parameters the trainer's model and datamodule saved, flat.

    They are what Lightning gives its loggers at the fit's start: the ``hparams_initial``
    (what ``save_hyperparameters()`` saved) of the LightningModule and of the datamodule,
    each unless saved with ``logger=False``, merged (Lightning refuses a fit where the two
    differ), without LightningCLI's ``_class_path``, flattened by
    :func:`~learnscope.records.hyperparameters.flat_hyperparameters`. Empty without them.

    Example:
        >>> class Module:
        ...     hparams_initial = {"lr": 0.1, "encoder": {"width": 64}}
        >>> class Trainer:
        ...     lightning_module, datamodule = Module(), None
        >>> run_hyperparameters(Trainer())
        {'lr': 0.1, 'encoder/width': 64}
    """
    saved: dict[str, Any] = {}
    for owner in (getattr(trainer, "lightning_module", None), getattr(trainer, "datamodule", None)):
        params = getattr(owner, "hparams_initial", None)
        if isinstance(params, Mapping) and getattr(owner, "_log_hyperparams", True):
            saved.update(params)
    saved.pop("_class_path", None)  # LightningCLI's own, which Lightning does not log either
    return flat_hyperparameters(saved)


def _attached(trainer: Any, callback: object) -> list[CallbackSettings]:
    """The settings of the learnscope callbacks of ``trainer`` (``callback`` when it has none).

    Example:
        >>> class Trainer:
        ...     callbacks = [object()]
        >>> _attached(Trainer(), object())
        []
    """
    callbacks = list(getattr(trainer, "callbacks", None) or [])
    if callback not in callbacks:
        callbacks.append(callback)
    return [
        c.learnscope_settings()
        for c in callbacks
        if callable(getattr(c, "learnscope_settings", None))
    ]


def leave(
    trainer: Any,
    callback: object,
    exception: BaseException | None = None,
    session: WriterSession | None = None,
) -> None:
    """``callback`` leaves the session of ``trainer``; the last to leave closes the writers.

    The last to leave ends the run at the trainer's global step: ``failed`` when a callback
    left with an ``exception`` (from ``on_exception``; ``interrupted`` for Ctrl-C), else
    ``finished``; then it says so in one line (:meth:`WriterSession.summary`): at info level
    at the end of a fit, as a warning when the run failed (whatever the trainer was doing).

    Args:
        trainer: The trainer.
        callback: The callback leaving.
        exception: What the callback left ``on_exception`` with.
        session: The session ``callback`` holds (default: the one :func:`find` finds).

    Example:
        >>> class Trainer:
        ...     loggers, is_global_zero = [], True
        >>> trainer, callback = Trainer(), object()
        >>> session = join(trainer, callback)
        >>> leave(trainer, callback, session=session)
        >>> session.end
        RunEnd(step=0, status='finished', error=None)
    """
    session = session if session is not None else find(trainer)
    if session is None or id(callback) not in session.members:
        return
    session.members.discard(id(callback))
    if session.stopped_by is None:
        session.stopped_by = exception
    if not session.members:
        session.close(int(getattr(trainer, "global_step", 0) or 0))
        stage = getattr(getattr(getattr(trainer, "state", None), "fn", None), "value", None)
        failed = session.end is not None and session.end.status == "failed"
        line = session.summary(stage or "run") if stage == "fit" or failed else None
        if line is not None:
            _lightning_log(trainer).log(logging.WARNING if failed else logging.INFO, line)


def _lightning_log(trainer: Any) -> logging.Logger:
    """A child of the trainer's Lightning package logger, which shows info lines by default.

    Example:
        >>> _lightning_log(object()).name
        'lightning.pytorch.learnscope'
    """
    package = "pytorch_lightning" if type(trainer).__module__.startswith("pytorch_") else None
    return logging.getLogger(f"{package or 'lightning.pytorch'}.learnscope")
