"""Files the TensorBoard projector plugin reads: tensor, metadata TSV, sprite, merged config.

Layout inside a run directory::

    projector_config.pbtxt                      one entry per snapshot, merged with every other
                                                writer's (parsed again only after another
                                                writer changed it)
    projector/<tag>/<stage>/step_<N>/tensor.bin   raw little-endian float32, or tensor.tsv
    projector/<tag>/<stage>/step_<N>/metadata.tsv
    projector/<tag>/<stage>/step_<N>/sprite.png

See DESIGN.md section 4 for the facts behind each choice.
"""

from __future__ import annotations

import io
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.files import inside, locked, safe_name, write_atomic
from learnscope.optional import import_optional
from learnscope.png import encode_png
from learnscope.records import EmbeddingSnapshot

log = logging.getLogger("learnscope")

CONFIG_NAME = "projector_config.pbtxt"
MAX_POINTS = 100_000  # the projector front end loads at most this many points
MAX_SPRITE_SIDE = 8192  # pixels; larger sprites break silently in the front end
_EMPTY = "<empty>"


def tensor_bytes(vectors: np.ndarray) -> tuple[bytes, str]:
    r"""Encode vectors for the projector: raw float32 when safe, else TSV.

    The plugin tries to read every tensor file as UTF-8 TSV first and falls back to raw float32
    only on a decoding error, so raw bytes that happen to decode (an all-zero tensor does) must
    be written as TSV instead.

    Args:
        vectors: ``[N, D]`` float array.

    Returns:
        The file's bytes and its suffix, ``"bin"`` or ``"tsv"``.

    Example:
        >>> import numpy as np
        >>> tensor_bytes(np.zeros((1, 2), np.float32))
        (b'0\t0\n', 'tsv')
    """
    raw = np.ascontiguousarray(vectors, dtype="<f4").tobytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw, "bin"
    out = io.StringIO()
    np.savetxt(out, vectors, fmt="%.9g", delimiter="\t")
    return out.getvalue().encode(), "tsv"


def metadata_tsv(columns: dict[str, list[Any]]) -> bytes:
    r"""Metadata TSV: no header row for one column, a header row for two or more.

    Tabs and newlines inside values become spaces; an empty value in a one-column file becomes
    ``<empty>``, since the front end skips blank lines and would shift every later label.

    Args:
        columns: Column name to values, all of the same length.

    Returns:
        UTF-8 bytes of the file.

    Example:
        >>> metadata_tsv({"label": ["a\tb", 1]})
        b'a b\n1\n'
    """
    names = list(columns)
    cells = [[_cell(v) for v in columns[name]] for name in names]
    if len(names) == 1:
        lines = [value if value.strip() else _EMPTY for value in cells[0]]
    else:
        lines = ["\t".join(_cell(name) for name in names)]
        lines += ["\t".join(row) for row in zip(*cells, strict=True)]
    return ("\n".join(lines) + "\n").encode("utf-8")


def sprite_png(images: np.ndarray) -> tuple[bytes, tuple[int, int]] | None:
    """Tile ``[N, H, W, C]`` uint8 thumbnails into one square sprite of at most 8192 px a side.

    Thumbnails are shrunk (nearest neighbour) when the grid would exceed the limit.

    Args:
        images: ``uint8`` thumbnails, row ``i`` for point ``i``.

    Returns:
        PNG bytes and the single image size ``(width, height)``, or ``None`` when even 1-pixel
        thumbnails would not fit.

    Example:
        >>> import numpy as np
        >>> png, size = sprite_png(np.zeros((5, 8, 8, 3), np.uint8))
        >>> size
        (8, 8)
    """
    n, height, width, channels = images.shape
    per_side = math.ceil(math.sqrt(n))
    scale = min(1.0, MAX_SPRITE_SIDE / (per_side * max(height, width)))
    thumb_h, thumb_w = int(height * scale), int(width * scale)
    if thumb_h < 1 or thumb_w < 1:
        return None
    if (thumb_h, thumb_w) != (height, width):
        rows = (np.arange(thumb_h) * height // thumb_h)[:, None]
        cols = (np.arange(thumb_w) * width // thumb_w)[None, :]
        images = images[:, rows, cols]
    grid = np.zeros((per_side * per_side, thumb_h, thumb_w, channels), np.uint8)
    grid[:n] = images
    grid = grid.reshape(per_side, per_side, thumb_h, thumb_w, channels)
    sheet = grid.transpose(0, 2, 1, 3, 4).reshape(per_side * thumb_h, per_side * thumb_w, channels)
    return encode_png(sheet, compression=1), (thumb_w, thumb_h)


def entry_name(snapshot: EmbeddingSnapshot) -> str:
    """The tensor name the projector lists, such as ``encoder/validate/step_120``.

    Example:
        >>> import torch
        >>> entry_name(EmbeddingSnapshot("encoder", 7, torch.ones(1, 1), stage="validate"))
        'encoder/validate/step_7'
    """
    return f"{snapshot.key}/step_{snapshot.step}"


def write_snapshot(run_dir: Path, snapshot: EmbeddingSnapshot) -> str:
    """Write one snapshot's files under ``run_dir`` and merge its entry into the config.

    Args:
        run_dir: The TensorBoard run directory (the one holding the event files).
        snapshot: What to write. More than 100,000 rows are subsampled deterministically, with a
            warning, since the front end loads no more.

    Returns:
        The tensor name of the entry.

    Example:
        >>> import tempfile, torch
        >>> run = Path(tempfile.mkdtemp())
        >>> write_snapshot(run, EmbeddingSnapshot("enc", 3, torch.randn(4, 2)))
        'enc/step_3'
        >>> [e.tensor_name for e in read_config(run).embeddings]
        ['enc/step_3']
    """
    if snapshot.num_points > MAX_POINTS:
        log.warning(
            "learnscope: %s has %d rows; the projector loads at most %d, keeping a fixed subsample",
            snapshot.key,
            snapshot.num_points,
            MAX_POINTS,
        )
        snapshot = snapshot.subsample(MAX_POINTS)
    pb = import_optional("tensorboard.plugins.projector.projector_config_pb2", "tensorboard")
    name = entry_name(snapshot)
    tag_parts = [safe_name(part) for part in snapshot.key.split("/") if part]
    folder = ("projector", *tag_parts, f"step_{snapshot.step}")
    entry = pb.EmbeddingInfo(tensor_name=name, tensor_shape=[snapshot.num_points, snapshot.dim])

    data, suffix = tensor_bytes(snapshot.vectors_numpy())
    entry.tensor_path = _write(run_dir, folder, f"tensor.{suffix}", data)
    columns = snapshot.metadata_columns()
    if columns:
        entry.metadata_path = _write(run_dir, folder, "metadata.tsv", metadata_tsv(columns))
    images = snapshot.images_uint8()
    if images is not None:
        sprite = sprite_png(images)
        if sprite is None:
            log.warning(
                "learnscope: %d thumbnails do not fit an 8192 px sprite; %s has no images",
                snapshot.num_points,
                name,
            )
        else:
            entry.sprite.image_path = _write(run_dir, folder, "sprite.png", sprite[0])
            entry.sprite.single_image_dim.extend(sprite[1])
    _merge_entry(run_dir, entry)
    return name


def read_config(run_dir: Path) -> Any:
    """The ``ProjectorConfig`` message on disk in ``run_dir`` (empty when there is none).

    Example:
        >>> import tempfile
        >>> len(read_config(Path(tempfile.mkdtemp())).embeddings)
        0
    """
    pb = import_optional("tensorboard.plugins.projector.projector_config_pb2", "tensorboard")
    text_format = import_optional("google.protobuf.text_format", "tensorboard")
    config = pb.ProjectorConfig()
    path = run_dir / CONFIG_NAME
    if path.exists():
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    return config


def _write(run_dir: Path, folder: tuple[str, ...], filename: str, data: bytes) -> str:
    path = inside(run_dir, *folder, filename)
    write_atomic(path, data)
    return path.relative_to(run_dir).as_posix()


@dataclass
class _CachedConfig:
    """The config as this process last wrote it: parsed once, then appended to."""

    stamp: tuple[int, ...]  # the file's identity, size and times right after our write
    head: str  # text of every field other than ``embeddings``
    entries: dict[str, str]  # tensor name -> text of its ``embeddings { ... }`` block(s)

    def text(self) -> str:
        return self.head + "".join(self.entries.values())


# Resolved config path -> what this process last wrote there. Used and changed only while the
# config's lock is held, so two writers of one process never see half an update.
_CACHE: dict[str, _CachedConfig] = {}
_CACHE_RUNS = 64  # the most recently written run directories kept; older ones are parsed again


def _stamp(path: Path) -> tuple[int, ...] | None:
    """The file's device, inode, size and change times; ``None`` when it is missing.

    Every learnscope write replaces the file (a new inode, new times, usually a new size), so a
    change by another writer or by hand shows here without reading the file.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _parse_config(path: Path) -> _CachedConfig:
    """Read and parse the config on disk into per-entry texts (the costly path, taken rarely)."""
    pb = import_optional("tensorboard.plugins.projector.projector_config_pb2", "tensorboard")
    text_format = import_optional("google.protobuf.text_format", "tensorboard")
    config = pb.ProjectorConfig()
    if path.exists():
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    entries: dict[str, str] = {}
    for embedding in config.embeddings:  # two entries of one name (another tool's) are both kept
        entries[embedding.tensor_name] = entries.get(embedding.tensor_name, "") + _entry_text(
            embedding
        )
    del config.embeddings[:]
    head = text_format.MessageToString(config, as_utf8=True)
    return _CachedConfig(stamp=(), head=head, entries=entries)


def _entry_text(entry: Any) -> str:
    """``embeddings { ... }`` as protobuf's text format writes it inside a ``ProjectorConfig``."""
    pb = import_optional("tensorboard.plugins.projector.projector_config_pb2", "tensorboard")
    text_format = import_optional("google.protobuf.text_format", "tensorboard")
    one = pb.ProjectorConfig()
    one.embeddings.append(entry)
    return text_format.MessageToString(one, as_utf8=True)


def _merge_entry(run_dir: Path, entry: Any) -> None:
    """Add or replace ``entry`` in the config on disk, keeping every other entry.

    The parsed config is kept between calls and the file is parsed again only when its stamp
    (inode, size, modification and change times) differs from the one left by this process's
    last write, that is when another writer, a resumed run or a person changed or removed it.
    So a snapshot costs the same after 1,000 earlier ones as after 10: one ``stat``, one
    serialised entry, and one atomic write of the joined entry texts.
    """
    path = run_dir / CONFIG_NAME
    key = str(path.resolve())
    with locked(run_dir / f".{CONFIG_NAME}.lock"):
        cached = _CACHE.pop(key, None)  # dropped for good if anything below fails
        if cached is None or cached.stamp != _stamp(path):
            cached = _parse_config(path)
        cached.entries.pop(entry.tensor_name, None)  # a rewritten snapshot moves to the end
        cached.entries[entry.tensor_name] = _entry_text(entry)
        write_atomic(path, cached.text().encode("utf-8"))
        stamp = _stamp(path)
        if stamp is not None:
            cached.stamp = stamp
            _CACHE[key] = cached  # re-inserted last: the dict's order is least recently used first
            if len(_CACHE) > _CACHE_RUNS:
                del _CACHE[next(iter(_CACHE))]


def _cell(value: Any) -> str:
    return str(value).replace("\r\n", " ").replace("\t", " ").replace("\n", " ").replace("\r", " ")
