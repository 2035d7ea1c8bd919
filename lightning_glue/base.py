"""The base of learnscope's callbacks: accepted by both Lightning packages, fails softly.

Both ``lightning.pytorch`` and ``pytorch_lightning`` check callbacks against their own
``Callback`` class; the base inherits from every one of the two that imports, so either Trainer
accepts learnscope's callbacks.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from learnscope.plugins import Writers, shows, writers_for
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
    """Common plumbing: the writers of the trainer's loggers, and diagnostics that fail softly.

    Subclasses call :meth:`writers` to reach every logger (empty on ranks other than zero), and
    run each diagnostic inside :meth:`guard`, which logs a failure once with its traceback and
    switches that diagnostic off instead of stopping training.

    Example:
        >>> class Hello(LearnscopeCallback):
        ...     pass
        >>> Hello().switched_off
        set()
    """

    def __init__(self) -> None:
        super().__init__()
        self._writers: Writers | None = None
        self.switched_off: set[str] = set()

    def writers(
        self,
        trainer: Any,
        shows_method: str | Sequence[str] | None = None,
        *,
        warn_without_logger: bool = True,
    ) -> Writers:
        """The writers for ``trainer.loggers``, made once; none on ranks other than zero.

        Args:
            trainer: The Lightning trainer.
            shows_method: When given, warn once for each logger whose writer cannot show
                records of this :class:`~learnscope.plugins.Writer` method (or of any of these
                methods, named in one warning), and once when there is no logger at all.
            warn_without_logger: Whether to warn when there is no logger at all.

        Returns:
            The writers, failure-isolated.
        """
        if self._writers is None:
            self._writers = Writers(writers_for(trainer.loggers) if trainer.is_global_zero else [])
            if trainer.is_global_zero and shows_method is not None:
                methods = (shows_method,) if isinstance(shows_method, str) else shows_method
                self._warn_unshown(tuple(methods), warn_without_logger)
        return self._writers

    def _warn_unshown(self, methods: tuple[str, ...], warn_without_logger: bool) -> None:
        assert self._writers is not None

        def kinds(names: Sequence[str]) -> str:
            return " or ".join(m.removeprefix("write_").replace("_", " ") for m in names)

        if not self._writers.active and warn_without_logger:
            log.warning(
                "learnscope: %s has no logger to show %s; add a TensorBoardLogger or WandbLogger",
                type(self).__name__,
                kinds(methods),
            )
        for writer in self._writers.active:
            unshown = [m for m in methods if not shows(writer, m)]
            if unshown:
                log.warning(
                    "learnscope: %s cannot show %s records; they are not written there",
                    writer.describe(),
                    kinds(unshown),
                )

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
