"""Give freed memory back to the operating system, so a large snapshot does not stay resident.

glibc's ``malloc`` keeps freed blocks of up to 32 MB in the process heap for reuse (larger
ones are returned at once). A snapshot made of 10,000-row batches of 768 floats (30 MB each)
frees them one by one while its rows are copied into one tensor, and without a trim the
process would hold both the freed batches and the copy: twice the snapshot's size.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc), or ``None`` elsewhere (macOS, musl, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """Return the heap's free pages to the operating system (does nothing without glibc).

    Example:
        >>> release_free_memory()
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
