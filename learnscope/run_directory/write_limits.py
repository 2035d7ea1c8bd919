"""How long the end of a fit may wait for learnscope's writes, and how much disk they leave free.

A :class:`WriteLimits` is given to whoever owns the writes: the writers' queue
(:class:`~learnscope.plugins.pipeline.background.BackgroundWriters`, for the end-of-fit wait),
the free-space reserve of a writer
(:class:`~learnscope.plugins.pipeline.disk_reserve.DiskReserve`) and the writers and dashboards
that make them (``limits=``); the Lightning callbacks take it as ``write_limits=`` and the
callbacks of one fit share it. Nothing process-wide: each fit has the limits it was given.

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
    >>> limits = WriteLimits(end_timeout_s=60)
    >>> limits.end_timeout_s, limits.reserve_min_bytes == 64 << 20
    (60.0, True)
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class WriteLimits:
    """The limits of one fit's writes (see the module's description).

    Args:
        end_timeout_s: Seconds the end of a fit waits for queued writes (``0`` abandons what
            is queued at once; ``math.inf`` waits for ever).
        reserve_fraction: Fraction of the run directory's file system left free, from 0 to 1
            (``0`` with ``reserve_min_bytes=0`` turns the reserve off).
        reserve_min_bytes: Bytes left free at the least.

    Raises:
        ValueError: A negative or not-a-number timeout or reserve, or a fraction above 1.

    Example:
        >>> WriteLimits(reserve_fraction=2)
        Traceback (most recent call last):
        ...
        ValueError: reserve_fraction must be from 0 to 1 (a fraction of the file system), not 2
    """

    end_timeout_s: float = 300.0
    reserve_fraction: float = 0.01
    reserve_min_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if isinstance(self.end_timeout_s, bool) or not (self.end_timeout_s >= 0):  # also NaN
            raise ValueError(
                f"end_timeout_s must be >= 0 seconds (math.inf: no limit), not {self.end_timeout_s}"
            )
        if isinstance(self.reserve_fraction, bool) or not (0 <= self.reserve_fraction <= 1):
            raise ValueError(
                "reserve_fraction must be from 0 to 1 (a fraction of the file system), "
                f"not {self.reserve_fraction}"
            )
        if (
            isinstance(self.reserve_min_bytes, bool)
            or not isinstance(self.reserve_min_bytes, int)
            or self.reserve_min_bytes < 0
        ):
            raise ValueError(
                f"reserve_min_bytes must be an int >= 0 (bytes), not {self.reserve_min_bytes!r}"
            )
        object.__setattr__(self, "end_timeout_s", float(self.end_timeout_s))
        object.__setattr__(self, "reserve_fraction", float(self.reserve_fraction))

    def reserve_bytes(self, total_bytes: int) -> int:
        """The bytes to leave free on a file system of ``total_bytes``.

        Example:
            >>> WriteLimits().reserve_bytes(100 << 30) == (1 << 30)
            True
        """
        return max(int(self.reserve_fraction * total_bytes), self.reserve_min_bytes)


__all__ = ["WriteLimits"]
