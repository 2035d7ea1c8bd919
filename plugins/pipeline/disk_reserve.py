"""A free-space reserve: learnscope's large records never take the last free space of a disk.

Before a large write (a snapshot's tensor, metadata and sprite, a wandb table), a writer asks
its :class:`DiskReserve` whether the write leaves the reserve of the directory's file system
free: ``max(reserve_fraction * size of the file system, reserve_min_bytes)``, 1% and 64 MiB by
default (the :class:`~learnscope.run_directory.write_limits.WriteLimits` it is given). When it would
not, the record is skipped, and the first skip of a writer says so in one warning; the training's
own logs and checkpoints keep the room. Small records (scalars, histograms, pictures, the run
record's entries) are skipped too while the free space is below the reserve: on a nearly full
disk learnscope writes nothing.
A writer skips a record by raising :class:`~learnscope.plugins.pipeline.base.RecordSkipped`
(:meth:`DiskReserve.check`), so the fan-out counts every skipped record, with the free space
and the reserve, for the end-of-fit line. The free space comes from the run folder
(:meth:`~learnscope.storage.RunFolder.free_space`), asked at most every 0.2 s; the bytes allowed
meanwhile are counted off. Where it cannot be known (an object store) every write is allowed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from learnscope.plugins.pipeline.base import RecordSkipped
from learnscope.run_directory.write_limits import WriteLimits

if TYPE_CHECKING:
    from learnscope.records import EmbeddingSnapshot
    from learnscope.storage import RunFolder

log = logging.getLogger("learnscope")

ASK_EVERY_S = 0.2  # how often the file system is asked for its free space
LARGE_BYTES = 1 << 20  # a record this large always asks


class DiskReserve:
    """Whether writes into one run folder leave the reserve of its file system free.

    Args:
        folder: Where the writer puts its files; ``None``, or a folder whose free space cannot
            be known (an object store, which has no free space to keep): every write is allowed.
        limits: The reserve to leave free (``reserve_fraction``, ``reserve_min_bytes``).

    Example:
        >>> import tempfile
        >>> from learnscope.storage import open_run_folder
        >>> reserve = DiskReserve(open_run_folder(tempfile.mkdtemp()))
        >>> reserve.allows(1024, "a small record")
        True
        >>> reserve.allows(1 << 62, "an impossibly large record")
        False
        >>> unbounded = WriteLimits(0, 0, 0)
        >>> DiskReserve(open_run_folder(tempfile.mkdtemp()), unbounded).allows(1 << 62, "")
        True
    """

    def __init__(self, folder: RunFolder | None, limits: WriteLimits = WriteLimits()) -> None:
        self.folder = folder
        self.limits = limits
        self.skipped = 0  # records skipped so far
        self.last_reason = ""  # why the latest write did not fit
        self._asked = -1.0  # when the file system was last asked (time.monotonic)
        self._free = self._total = 0  # what it said, less the bytes allowed since

    def allows(self, nbytes: int, what: str) -> bool:
        """Whether writing ``nbytes`` more leaves the reserve free; when not, the first says so.

        A directory whose file system cannot be asked (gone, not made yet) allows the write:
        the write itself then fails or succeeds as it would.

        Args:
            nbytes: About how many bytes the record takes on disk.
            what: The record, for the message, such as ``"snapshot encoder step 40"``.
        """
        short = self.shortfall(nbytes)
        if short is None:
            return True
        self.skipped += 1
        if self.skipped == 1:
            limits = self.limits
            log.warning(
                "learnscope: %s is not written: %s has %s free and learnscope leaves %s "
                "(%g%% of %s, at least %s) for the training's own logs and checkpoints; later "
                "records are skipped too while it has less, without a message each (the "
                "end-of-fit line counts them; the reserve is set with WriteLimits, the "
                "write_limits argument of learnscope's callbacks)",
                f"{what} ({_size(nbytes)})" if nbytes else what,
                short.directory,
                _size(short.free),
                _size(short.reserve),
                100 * limits.reserve_fraction,
                _size(short.total),
                _size(limits.reserve_min_bytes),
            )
        return False

    def check(self, nbytes: int, what: str) -> None:
        """Raise :class:`RecordSkipped` unless writing ``nbytes`` more leaves the reserve free.

        The rule and the one message of :meth:`allows`; the exception says the free space and
        the reserve of this skip, for the end-of-fit line.

        Example:
            >>> import tempfile
            >>> from learnscope.storage import open_run_folder
            >>> DiskReserve(open_run_folder(tempfile.mkdtemp())).check(1 << 62, "a record")
            Traceback (most recent call last):
            ...
            learnscope.plugins.pipeline.base.RecordSkipped: the free-space reserve: ...
        """
        if not self.allows(nbytes, what):
            raise RecordSkipped(self.last_reason)

    def shortfall(self, nbytes: int) -> Shortfall | None:
        """``None`` when ``nbytes`` more leave the reserve free (they are counted off), else why.

        Says nothing and counts no skip: :meth:`allows` and :meth:`check` do.
        """
        limits = self.limits
        if self.folder is None:
            return None  # no folder given: no disk to keep free
        if limits.reserve_fraction == 0 and limits.reserve_min_bytes == 0:
            return None  # no reserve: a write that does not fit fails as it would
        now = time.monotonic()
        if now - self._asked > ASK_EVERY_S or nbytes >= LARGE_BYTES:
            space = self.folder.free_space()
            if space is None:
                return None  # an object store, or a folder gone or not made yet
            self._asked = now
            self._free, self._total = space.free, space.total
        free, total = self._free, self._total
        reserve = limits.reserve_bytes(total)
        if free - nbytes >= reserve:
            self._free -= nbytes
            return None
        short = Shortfall(self.folder.location, free, reserve, total)
        self.last_reason = short.reason
        return short


@dataclass(frozen=True)
class Shortfall:
    """Why a write does not fit above the reserve: the free space and the reserve, in bytes.

    Example:
        >>> Shortfall("/runs", 3 << 20, 64 << 20, 1 << 30).reason
        'the free-space reserve: /runs has 3.0 MiB free and learnscope leaves 64.0 MiB'
    """

    directory: str
    free: int
    reserve: int
    total: int

    @property
    def reason(self) -> str:
        """The shortfall in words, for the end-of-fit line."""
        return (
            f"the free-space reserve: {self.directory} has {_size(self.free)} free and "
            f"learnscope leaves {_size(self.reserve)}"
        )


def snapshot_bytes(snapshot: EmbeddingSnapshot) -> int:
    """About how many bytes a writer puts on disk for ``snapshot`` (vectors twice, images, text).

    Example:
        >>> import torch
        >>> from learnscope.records import EmbeddingSnapshot
        >>> snapshot_bytes(EmbeddingSnapshot("enc", 0, torch.zeros(100, 8)))
        6400
    """
    vectors = int(np.prod(snapshot.vectors.shape)) * 4  # float32 tensor, and the record's copy
    images = 0 if snapshot.images is None else int(np.prod(np.shape(snapshot.images)))
    text = 16 * snapshot.num_points * len(snapshot.metadata)  # metadata TSV and the record
    return 2 * vectors + images + text


def _size(nbytes: int) -> str:
    """Bytes for a person.

    Example:
        >>> _size(64 << 20), _size(1536), _size(1 << 60)
        ('64.0 MiB', '1.5 KiB', '1024.0 PiB')
    """
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"


def writer_reserve(
    record_reserve: DiskReserve | None, folder: RunFolder | None, limits: WriteLimits
) -> DiskReserve:
    """A writer's free-space reserve: that of its run record, else one of its own.

    Args:
        record_reserve: The reserve of the run record the writer was given, if any.
        folder: The writer's run folder.
        limits: The writer's limits.

    Raises:
        ValueError: The run record keeps other limits than the writer's: a folder has one
            reserve, so give both the same limits.

    Example:
        >>> reserve = DiskReserve(None, WriteLimits(reserve_min_bytes=0))
        >>> writer_reserve(reserve, None, WriteLimits())
        Traceback (most recent call last):
        ...
        ValueError: the run record given keeps the free-space reserve of WriteLimits(...
    """
    if record_reserve is None:
        return DiskReserve(folder, limits)
    if record_reserve.limits != limits:
        raise ValueError(
            f"the run record given keeps the free-space reserve of {record_reserve.limits}, not "
            f"the writer's {limits}: make the record with the writer's limits "
            "(record_writer(folder, limits))"
        )
    return record_reserve
