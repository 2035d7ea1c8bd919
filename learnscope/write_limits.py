"""How long the end of a fit may wait for learnscope's writes, and how much disk they leave free.

Two process-wide settings, read by every writer when it needs them (so a change applies to the
next fit, and to a fit already running from its next large write or its end):

* ``end_timeout_s`` (default 300): at the end of a fit, learnscope waits at most this long for
  the records still queued (snapshots, pictures, tables) to be written. One line is logged
  when the wait is long, naming what is queued and how many bytes; past the limit what is still
  queued is abandoned with one message naming it, and the fit returns. A write that hangs (a
  hung network file system) is left behind on its daemon thread, with a message.
* ``reserve_fraction`` and ``reserve_min_bytes`` (defaults 1% and 64 MiB): before a large write
  (a snapshot's tensor, metadata and sprite, a wandb table), learnscope checks the free space of
  the run directory's file system and skips the record, saying so once per run directory, when
  less than ``max(reserve_fraction * size of the file system, reserve_min_bytes)`` would be left
  for the training's own logs and checkpoints; the end-of-fit line counts every record skipped.

Example:
    >>> previous = set_write_limits(end_timeout_s=60)
    >>> write_limits().end_timeout_s, write_limits().reserve_min_bytes == 64 << 20
    (60.0, True)
    >>> _ = set_write_limits(**previous.as_dict())
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any


@dataclasses.dataclass(frozen=True)
class WriteLimits:
    """The settings in force (see the module's description).

    Attributes:
        end_timeout_s: Seconds the end of a fit waits for queued writes.
        reserve_fraction: Fraction of the run directory's file system left free.
        reserve_min_bytes: Bytes left free at the least.
    """

    end_timeout_s: float = 300.0
    reserve_fraction: float = 0.01
    reserve_min_bytes: int = 64 << 20

    def reserve_bytes(self, total_bytes: int) -> int:
        """The bytes to leave free on a file system of ``total_bytes``.

        Example:
            >>> WriteLimits().reserve_bytes(100 << 30) == (1 << 30)
            True
        """
        return max(int(self.reserve_fraction * total_bytes), self.reserve_min_bytes)

    def as_dict(self) -> dict[str, Any]:
        """The settings as keyword arguments of :func:`set_write_limits`."""
        return dataclasses.asdict(self)


_lock = threading.Lock()
_limits = WriteLimits()


def write_limits() -> WriteLimits:
    """The settings in force.

    Example:
        >>> write_limits().reserve_fraction
        0.01
    """
    return _limits


def set_write_limits(
    *,
    end_timeout_s: float | None = None,
    reserve_fraction: float | None = None,
    reserve_min_bytes: int | None = None,
) -> WriteLimits:
    """Change some settings for this process; the others keep their values.

    Args:
        end_timeout_s: Seconds the end of a fit waits for queued writes (``0`` abandons what
            is queued at once; ``math.inf`` waits for ever).
        reserve_fraction: Fraction of the file system to leave free, from 0 to 1 (``0`` with
            ``reserve_min_bytes=0`` turns the reserve off).
        reserve_min_bytes: Bytes to leave free at the least.

    Returns:
        The settings before the change (give ``previous.as_dict()`` back to restore them).

    Raises:
        ValueError: A negative or not-a-number timeout or reserve, or a fraction above 1.

    Example:
        >>> set_write_limits(reserve_fraction=2)
        Traceback (most recent call last):
        ...
        ValueError: reserve_fraction must be from 0 to 1 (a fraction of the file system), not 2
    """
    global _limits
    if end_timeout_s is not None and not (end_timeout_s >= 0):  # also NaN
        raise ValueError(
            f"end_timeout_s must be >= 0 seconds (math.inf: no limit), not {end_timeout_s}"
        )
    if reserve_fraction is not None and not (0 <= reserve_fraction <= 1):
        raise ValueError(
            "reserve_fraction must be from 0 to 1 (a fraction of the file system), "
            f"not {reserve_fraction}"
        )
    if reserve_min_bytes is not None and (
        isinstance(reserve_min_bytes, bool)
        or not isinstance(reserve_min_bytes, int)
        or reserve_min_bytes < 0
    ):
        raise ValueError(
            f"reserve_min_bytes must be an int >= 0 (bytes), not {reserve_min_bytes!r}"
        )
    with _lock:
        previous = _limits
        changes: dict[str, Any] = {}
        if end_timeout_s is not None:
            changes["end_timeout_s"] = float(end_timeout_s)
        if reserve_fraction is not None:
            changes["reserve_fraction"] = float(reserve_fraction)
        if reserve_min_bytes is not None:
            changes["reserve_min_bytes"] = reserve_min_bytes
        _limits = dataclasses.replace(previous, **changes)
    return previous


__all__ = ["WriteLimits", "set_write_limits", "write_limits"]
