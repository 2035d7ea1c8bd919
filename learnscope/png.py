"""PNG encoding with numpy and the standard library alone (no Pillow, no matplotlib)."""

from __future__ import annotations

import struct
import zlib

import numpy as np

_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type (grey, grey+alpha, RGB, RGBA)


def encode_png(image: np.ndarray, compression: int = 6) -> bytes:
    r"""Encode an 8-bit image as PNG bytes.

    Args:
        image: ``uint8`` array ``[H, W]`` or ``[H, W, C]`` with ``C`` in 1 to 4.
        compression: zlib level, 0 (fastest) to 9 (smallest).

    Returns:
        The PNG file's bytes.

    Raises:
        ValueError: If the array is not an 8-bit image.

    Example:
        >>> import numpy as np
        >>> encode_png(np.zeros((2, 3, 3), np.uint8))[:8]
        b'\x89PNG\r\n\x1a\n'
    """
    if image.ndim == 2:
        image = image[:, :, None]
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in _COLOR_TYPES:
        raise ValueError(
            f"expected a uint8 image [H, W, C<=4], got {image.dtype} {tuple(image.shape)}"
        )
    height, width, channels = image.shape
    rows = np.zeros((height, 1 + width * channels), np.uint8)  # filter byte 0 on every row
    rows[:, 1:] = image.reshape(height, width * channels)
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPES[channels], 0, 0, 0)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(rows.tobytes(), compression)),
            _chunk(b"IEND", b""),
        ]
    )


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)
