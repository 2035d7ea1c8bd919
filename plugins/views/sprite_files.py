"""Reading the files a run record names (sprite PNGs, embedding tensors), only inside the run.

A record can name any path; the views read a file only through the run's
:class:`~learnscope.storage.RunFolder` (a local run directory, or a run folder on an object
store such as ``s3://bucket/runs/version_0``), and only when its path is relative and without
``..``. On a local disk the file must also be reached through no symbolic link and be a regular
file (a FIFO never blocks a view). Everywhere its size is capped (a sprite: a PNG of at most
4 MB; a tensor: exactly the bytes its shape says, at most 1 GiB), and a file that fails a
check is a :class:`~learnscope.plugins.views.record_checks.DamagedEntry` saying why. Nothing here
imports torch.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.plugins.views.record_checks import DamagedEntry, sprite_fields
from learnscope.plugins.views.run_search import run_folder
from learnscope.storage import RunFolder, UnreadableFile

MAX_SPRITE_BYTES = 4_000_000  # thumbnails larger than this stay out of the view
MAX_TENSOR_BYTES = 1 << 30  # embeddings larger than this are not compared
_PNG = b"\x89PNG\r\n\x1a\n"


def read_run_file(
    run_dir: str | Path | RunFolder, path: str, what: str, max_bytes: int, size: int | None = None
) -> bytes:
    """The file at ``path`` relative to ``run_dir``, read only when it lies inside the run.

    The path must be relative and without ``..``, and name a file of at most ``max_bytes``
    (of exactly ``size`` bytes when given). On a local disk it must be reached through no
    symbolic link and be a regular file, opened without following a link and without blocking
    (a FIFO is never read); on an object store it is one ranged ``GET``.

    Args:
        run_dir: The run directory: a local path, a URL, or a run folder.
        path: The path the record names, ``/`` separated.
        what: What the file is, for the messages (``sprite``, ``tensor``).
        max_bytes: The most bytes read.
        size: The size the file must have, or ``None``.

    Raises:
        DamagedEntry: Naming the reason the file is not read.

    Example:
        >>> try:
        ...     read_run_file("/tmp", "/etc/passwd", "tensor", 100)
        ... except DamagedEntry as error:
        ...     print(error)
        tensor path '/etc/passwd' leaves the run directory
    """
    try:
        return run_folder(run_dir).read(path, max_bytes, size)
    except UnreadableFile as error:
        raise DamagedEntry(f"{what} {error}") from None


def read_sprite(
    run_dir: str | Path | RunFolder, path: str, max_bytes: int = MAX_SPRITE_BYTES
) -> bytes:
    """The PNG at ``path`` relative to ``run_dir``, read only when it lies inside the run.

    The checks of :func:`read_run_file`, and the file must be a PNG of at most ``max_bytes``.

    Raises:
        DamagedEntry: Naming the reason the file is not read.

    Example:
        >>> try:
        ...     read_sprite("/tmp", "../etc/passwd")
        ... except DamagedEntry as error:
        ...     print(error)
        sprite path '../etc/passwd' leaves the run directory
    """
    data = read_run_file(run_dir, path, "sprite", max_bytes)
    if not data.startswith(_PNG):
        raise DamagedEntry(f"sprite {path!r} is not a PNG file")
    return data


def tensor_fields(tensor: Any) -> tuple[str, int, int]:
    """``(path, points, dim)`` of a snapshot's ``tensor`` field (raw ``<f4``), checked.

    Example:
        >>> tensor_fields({"path": "t.bin", "shape": [4, 3], "dtype": "<f4"})
        ('t.bin', 4, 3)
    """
    if not isinstance(tensor, Mapping) or not isinstance(tensor.get("path"), str):
        raise DamagedEntry("tensor has no path")
    shape = tensor.get("shape")
    if not (
        isinstance(shape, list)
        and len(shape) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)
    ):
        raise DamagedEntry(f"tensor shape {shape!r} is not [points, dim]")
    if tensor.get("dtype") != "<f4":
        raise DamagedEntry(f"tensor dtype {tensor.get('dtype')!r} is not '<f4'")
    return tensor["path"], shape[0], shape[1]


def read_tensor(
    run_dir: str | Path | RunFolder, tensor: Any, max_bytes: int = MAX_TENSOR_BYTES
) -> np.ndarray:
    """The ``[points, dim]`` float32 embedding a snapshot's ``tensor`` field names.

    The checks of :func:`read_run_file`, and the file holds exactly ``points * dim * 4``
    bytes, at most ``max_bytes``.

    Raises:
        DamagedEntry: Naming the reason the file is not read.

    Example:
        >>> import tempfile
        >>> run = tempfile.mkdtemp()
        >>> _ = (Path(run) / "t.bin").write_bytes(np.arange(6, dtype="<f4").tobytes())
        >>> read_tensor(run, {"path": "t.bin", "shape": [3, 2], "dtype": "<f4"})[2].tolist()
        [4.0, 5.0]
    """
    path, points, dim = tensor_fields(tensor)
    data = read_run_file(run_dir, path, "tensor", max_bytes, size=points * dim * 4)
    return np.frombuffer(data, "<f4").reshape(points, dim)


class KeptSprite:
    """The thumbnails of a key's newest snapshot as the view shows them, read again on change.

    The PNG is read only when the file named differs from the last one read (its path and its
    folder's stamp of it: device, inode, size and times on a local disk, size and entity tag
    on an object store), so a view refreshed after every snapshot reads each sprite once.

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

    def view(self, run_dir: str | Path | RunFolder, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``png`` (a data URL), ``width``, ``height``, ``per_row`` of a ``sprite`` field.

        Raises:
            DamagedEntry: When the field or the file cannot be shown, saying why.
        """
        path, width, height, per_row = sprite_fields(fields)
        folder = run_folder(run_dir)
        try:
            stamp: tuple = (folder.location, path, folder.stamp(path))
        except (OSError, UnreadableFile):
            stamp = (folder.location, path, None)
        if stamp[2] is not None and self._last is not None and self._last[0] == stamp:
            return self._last[1]
        data = read_sprite(folder, path)
        sprite = {
            "png": "data:image/png;base64," + base64.b64encode(data).decode("ascii"),
            "width": width,
            "height": height,
            "per_row": per_row,
        }
        self._last = (stamp, sprite)
        return sprite
