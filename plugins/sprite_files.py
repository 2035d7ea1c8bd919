"""Reading the thumbnails (sprite PNGs) a run record names, only from inside the run.

A record can name any path; the views read a sprite only when it lies inside its run
directory, is reached through no symbolic link, and is a regular PNG of at most 4 MB, never
blocking on a FIFO. Nothing here imports torch.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from learnscope.plugins.record_checks import DamagedEntry, sprite_fields

MAX_SPRITE_BYTES = 4_000_000  # thumbnails larger than this stay out of the view
_PNG = b"\x89PNG\r\n\x1a\n"


def read_sprite(run_dir: str | Path, path: str, max_bytes: int = MAX_SPRITE_BYTES) -> bytes:
    """The PNG at ``path`` relative to ``run_dir``, read only when it lies inside the run.

    The path must be relative, without ``..``, reach the file through no symbolic link, and
    name a regular PNG file of at most ``max_bytes``; it is opened without following a link
    and without blocking (a FIFO is never read).

    Raises:
        DamagedEntry: Naming the reason the file is not read.

    Example:
        >>> try:
        ...     read_sprite("/tmp", "../etc/passwd")
        ... except DamagedEntry as error:
        ...     print(error)
        sprite path '../etc/passwd' leaves the run directory
    """
    parts = path.replace("\\", "/").split("/")
    if not path or path.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts:
        raise DamagedEntry(f"sprite path {path!r} leaves the run directory")
    root = os.path.realpath(run_dir)
    candidate = os.path.join(root, *[p for p in parts if p not in ("", ".")])
    if os.path.realpath(candidate) != candidate:
        raise DamagedEntry(f"sprite path {path!r} goes through a symbolic link")
    try:
        fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise DamagedEntry(f"sprite {path!r} cannot be opened ({error.strerror})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise DamagedEntry(f"sprite {path!r} is not a regular file")
        if status.st_size > max_bytes:
            raise DamagedEntry(
                f"sprite {path!r} has {status.st_size:,} bytes (at most {max_bytes:,})"
            )
        data = os.pread(fd, max_bytes + 1, 0)
    finally:
        os.close(fd)
    if not data.startswith(_PNG) or len(data) > max_bytes:
        raise DamagedEntry(f"sprite {path!r} is not a PNG file")
    return data


class KeptSprite:
    """The thumbnails of a key's newest snapshot as the view shows them, read again on change.

    The PNG is read only when the file named differs from the last one read (path, inode,
    size or modification time), so a view refreshed after every snapshot reads each sprite once.

    Example:
        >>> import tempfile
        >>> kept = KeptSprite()
        >>> try:
        ...     kept.view(tempfile.mkdtemp(), {"path": "s.png", "cell": [2, 2], "per_row": 2})
        ... except DamagedEntry as error:
        ...     print(error)
        sprite 's.png' cannot be opened (No such file or directory)
    """

    def __init__(self) -> None:
        self._last: tuple[tuple, dict[str, Any]] | None = None  # (file stamp, its view)

    def view(self, run_dir: str | Path, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``png`` (a data URL), ``width``, ``height``, ``per_row`` of a ``sprite`` field.

        Raises:
            DamagedEntry: When the field or the file cannot be shown, saying why.
        """
        path, width, height, per_row = sprite_fields(fields)
        try:
            status = os.stat(Path(run_dir) / path, follow_symlinks=False)
            stamp: tuple = (path, status.st_ino, status.st_size, status.st_mtime_ns)
        except OSError:
            stamp = (path, None)
        if self._last is not None and self._last[0] == stamp:
            return self._last[1]
        data = read_sprite(run_dir, path)
        sprite = {
            "png": "data:image/png;base64," + base64.b64encode(data).decode("ascii"),
            "width": width,
            "height": height,
            "per_row": per_row,
        }
        self._last = (stamp, sprite)
        return sprite
