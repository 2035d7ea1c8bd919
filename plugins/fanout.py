"""Hand each record to every writer; a writer that fails is reported once and switched off."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from learnscope.plugins.base import Writer
from learnscope.records import (
    AutocorrelationSummary,
    EmbeddingSnapshot,
    Finding,
    Histogram,
    RenderedImage,
)
from learnscope.strict import strict_mode

log = logging.getLogger("learnscope")


class Writers:
    """Every writer of a run, behind the :class:`Writer` methods.

    Diagnostics never kill a training run: when a writer raises (disk full, a run finished early),
    the error is logged once with its traceback, that writer is switched off, and the others go
    on. Under ``LEARNSCOPE_STRICT=1`` (see :mod:`learnscope.strict`) the error is raised.

    Args:
        writers: The writers to call, in order.

    Example:
        >>> from learnscope.plugins.base import Writer
        >>> class Broken(Writer):
        ...     def write_scalars(self, scalars, step):
        ...         raise OSError("disk full")
        >>> writers = Writers([Broken()])
        >>> writers.write_scalars({"a": 1.0}, step=0)  # logged, not raised
        >>> len(writers.active)
        0
    """

    def __init__(self, writers: Iterable[Writer]) -> None:
        self.active: list[Writer] = list(writers)

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        """Hand ``snapshot`` to every writer."""
        self._call("write_embedding", snapshot)

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Hand ``scalars`` at ``step`` to every writer."""
        self._call("write_scalars", scalars, step)

    def write_autocorrelation(self, summary: AutocorrelationSummary) -> None:
        """Hand ``summary`` to every writer."""
        self._call("write_autocorrelation", summary)

    def write_histogram(self, histogram: Histogram) -> None:
        """Hand ``histogram`` to every writer."""
        self._call("write_histogram", histogram)

    def write_image(self, image: RenderedImage) -> None:
        """Hand ``image`` to every writer."""
        self._call("write_image", image)

    def write_findings(self, findings: Sequence[Finding], step: int) -> None:
        """Hand the findings table to every writer."""
        self._call("write_findings", findings, step)

    def flush(self) -> None:
        """Flush every writer."""
        self._call("flush")

    def close(self) -> None:
        """Close every writer."""
        self._call("close")

    def _call(self, method: str, *args: Any) -> None:
        for writer in list(self.active):
            try:
                getattr(writer, method)(*args)
            except Exception as error:
                if strict_mode():
                    raise
                log.exception(
                    "learnscope: %s failed in %s%s (%s: %s); it is switched off for the rest of "
                    "the run, training goes on",
                    writer.describe(),
                    method,
                    _record_name(method, args),
                    type(error).__name__,
                    error,
                )
                self.active.remove(writer)


def _record_name(method: str, args: tuple[Any, ...]) -> str:
    """`` on <tag> at step <n>`` for the record being written (``""`` for flush and close)."""
    if not args:
        return ""
    record = args[0]
    name = getattr(record, "key", None) or getattr(record, "tag", None)
    if not isinstance(name, str):
        name = method.removeprefix("write_")
    step = getattr(record, "step", args[1] if len(args) > 1 else None)
    return f" on {name}" + (f" at step {step}" if isinstance(step, int) else "")
