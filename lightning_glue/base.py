"""The base of learnscope's callbacks: accepted by both Lightning packages, fails softly.

Both ``lightning.pytorch`` and ``pytorch_lightning`` check callbacks against their own
``Callback`` class; the base inherits from every one of the two that imports, so either Trainer
accepts learnscope's callbacks.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from typing_extensions import override

from learnscope.lightning_glue import session
from learnscope.lightning_glue.session import WriterSession
from learnscope.plugins.background import BackgroundWriters
from learnscope.strict import strict_mode

log = logging.getLogger("learnscope")


def _callback_bases() -> tuple[type, ...]:
    bases = []
    for package in ("lightning.pytorch", "pytorch_lightning"):
        try:
            bases.append(importlib.import_module(package).Callback)
        except ImportError:
            continue
    if not bases:
        raise ModuleNotFoundError(
            "learnscope's callbacks need Lightning: pip install 'learnscope[lightning]'",
            name="lightning",
        )
    return tuple(bases)


class LearnscopeCallback(*_callback_bases()):  # type: ignore[misc]
    """Common plumbing: the trainer's writer session, and diagnostics that fail softly.

    In ``setup`` a callback joins the writer session of its trainer (see
    :mod:`learnscope.lightning_glue.session`): one writer per logger, shared by every learnscope
    callback on that trainer, closed when the last one leaves in ``teardown``. Subclasses that
    override ``setup``, ``teardown`` or ``on_exception`` call ``super()`` first. They reach the
    writers with :meth:`writers` (empty on ranks other than zero), and run each diagnostic
    inside :meth:`guard`, which logs a failure once with its traceback and switches that
    diagnostic off instead of stopping training.

    Example:
        >>> class Hello(LearnscopeCallback):
        ...     pass
        >>> Hello().switched_off
        set()
    """

    def __init__(self) -> None:
        super().__init__()
        self._session: WriterSession | None = None
        self._session_trainer: weakref.ref[Any] | None = None
        self.switched_off: set[str] = set()

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Join the writer session of ``trainer``."""
        self._join(trainer)

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Leave the writer session; the last callback to leave flushes and closes the writers."""
        self._leave()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Leave the writer session (Lightning does not call ``teardown`` after an exception)."""
        self._leave()

    def _join(self, trainer: Any) -> WriterSession:
        if self._session is not None and self._session_trainer is not None:
            if self._session_trainer() is trainer:
                return self._session
            self._leave()
        self._session = session.join(trainer, self)
        self._session_trainer = weakref.ref(trainer)
        return self._session

    def _leave(self) -> None:
        trainer = self._session_trainer() if self._session_trainer is not None else None
        if trainer is not None:
            session.leave(trainer, self)
        self._session = self._session_trainer = None

    def writers(
        self,
        trainer: Any,
        shows_method: str | Sequence[str] | None = None,
        *,
        warn_without_logger: bool = True,
    ) -> BackgroundWriters:
        """The writers of ``trainer``'s loggers, shared with the other learnscope callbacks.

        Args:
            trainer: The Lightning trainer.
            shows_method: When given, warn once per logger whose writer cannot show records of
                this :class:`~learnscope.plugins.Writer` method (or of any of these methods,
                named in one warning), and once when there is no logger at all.
            warn_without_logger: Whether to warn when there is no logger at all.

        Returns:
            The writers, failure-isolated, written on a worker thread; none on ranks other than
            zero.
        """
        joined = self._join(trainer)
        if shows_method is not None:
            methods = (shows_method,) if isinstance(shows_method, str) else tuple(shows_method)
            joined.tell_unshown(methods, warn_without_logger=warn_without_logger)
        return joined.writers()

    def is_on(self, part: str) -> bool:
        """Whether diagnostic ``part`` is still switched on."""
        return part not in self.switched_off

    @contextlib.contextmanager
    def guard(self, part: str, record: str | None = None) -> Iterator[None]:
        """Run a diagnostic; on failure log it once with its traceback and switch it off.

        Under ``LEARNSCOPE_STRICT=1`` (see :mod:`learnscope.strict`) the failure is raised
        instead, so that learnscope's own bugs fail its tests.

        Args:
            part: A short name of the diagnostic, such as ``"embedding projector"``.
            record: What it was working on, for the message, such as ``"step 40"``.
        """
        try:
            yield
        except Exception as error:
            if strict_mode():
                raise
            log.exception(
                "learnscope: %s of %s failed%s (%s: %s) and is switched off; training goes on",
                part,
                type(self).__name__,
                f" on {record}" if record else "",
                type(error).__name__,
                error,
            )
            self.switched_off.add(part)
