"""A fixed subsample of a snapshot's points, chosen by a hash of each point's id (no torch).

The same ids keep the same points in every snapshot, every run that shares them and every
export: the comparison of two runs, a view's shown points and a snapshot's label silhouette
all choose their points here.
"""

from __future__ import annotations

import zlib


def subsample_ids(ids: list[str], count: int) -> list[str]:
    """``count`` of ``ids``, always the same ones for the same ids, kept in their order.

    Each id is ranked by the CRC-32 of its text, so a point is kept or dropped the same way in
    every snapshot, every run that shares its ids, and every export.

    Example:
        >>> subsample_ids([str(i) for i in range(10)], 3) == subsample_ids(
        ...     [str(i) for i in reversed(range(10))], 3)[::-1]
        True
    """
    ranked = sorted(ids, key=lambda i: (zlib.crc32(i.encode("utf-8", "surrogatepass")), i))
    keep = set(ranked[:count])
    return [i for i in ids if i in keep]
