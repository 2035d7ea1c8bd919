"""The diagnostics of one callback and which of them a failure switched off.

A callback runs each of its diagnostics ("embedding projector", "input checks", ...) inside
:meth:`Parts.guard`: a failure is logged once with its traceback and switches that part off for
the rest of the run, and the training goes on. A callback owns one :class:`Parts`, and gives it
(not itself) to the work it queues on the writer thread, so that work switches parts off
through this small object, under its lock, never by reaching into the callback.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from learnscope.strict import strict_mode

log = logging.getLogger("learnscope")


class Parts:
    """Which diagnostics of one callback are switched off; safe from any thread.

    Args:
        owner: The callback's name, for the messages.

    Example:
        >>> parts = Parts("EmbeddingProjector")
        >>> parts.is_on("embedding projector")
        True
        >>> parts.switch_off("embedding projector")
        >>> parts.switched_off
        {'embedding projector'}
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._off: set[str] = set()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"owner": self.owner, "_off": set(self._off)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.owner, self._off, self._lock = state["owner"], set(state["_off"]), threading.Lock()

    @property
    def switched_off(self) -> set[str]:
        """The parts switched off so far (a copy)."""
        with self._lock:
            return set(self._off)

    def is_on(self, part: str) -> bool:
        """Whether ``part`` is still switched on."""
        with self._lock:
            return part not in self._off

    def switch_off(self, part: str) -> None:
        """Switch ``part`` off for the rest of the run."""
        with self._lock:
            self._off.add(part)

    @contextlib.contextmanager
    def guard(self, part: str, record: str | None = None) -> Iterator[None]:
        """Run ``part``; on failure log it once with its traceback and switch it off.

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
                self.owner,
                f" on {record}" if record else "",
                type(error).__name__,
                error,
            )
            self.switch_off(part)
