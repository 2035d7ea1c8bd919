"""Files the TensorBoard projector plugin reads: tensor, metadata TSV, sprite, merged config.

Layout inside a run directory::

    projector_config.pbtxt                      one entry per snapshot, merged with every other
                                                writer's (kept by the writer's ProjectorConfig,
                                                parsed again only after another writer changed
                                                it)
    projector/<tag>/<stage>/step_<N>/tensor.bin   raw little-endian float32, or tensor.tsv
    projector/<tag>/<stage>/step_<N>/metadata.tsv
    projector/<tag>/<stage>/step_<N>/sprite.png

``<N>`` is the step zero-padded to nine digits (``step_000000120``), so names and folders sort
as text in training order, which is the order of the Projector's tensor menu.

``docs/projector_files.md`` gives the facts about the Projector behind each choice.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import hashlib
import io
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.optional import import_optional
from learnscope.plugins.pipeline.drawing import pictures_available, png_bytes
from learnscope.records import EmbeddingSnapshot
from learnscope.run_directory.file_names import (
    METADATA_FILE,
    PROJECTOR_CONFIG,
    PROJECTOR_FOLDER,
    SPRITE_FILE,
    TENSOR_FILE,
    TENSOR_TEXT_FILE,
    parse_snapshot_name,
    snapshot_name,
    step_name,
)
from learnscope.storage import RunFolder, UnreadableFile, open_run_folder
from learnscope.storage.files import safe_name

log = logging.getLogger("learnscope")

CONFIG_NAME = PROJECTOR_CONFIG
MAX_POINTS = 100_000  # the projector front end loads at most this many points
MAX_SPRITE_SIDE = 8192  # pixels; larger sprites break silently in the front end
MAX_CONFIG_BYTES = 64 << 20  # a larger projector config is damage, not a config
_EMPTY = "<empty>"
_MAX_FOLDER = 160  # characters of tag folders under projector/; longer ones are shortened
_KEPT_FOLDER = 100  # characters of leading tag folders kept when shortening
_STEP = re.compile(r"step_-?\d+")  # the snapshot folder's own name
_SURROGATE = re.compile("[\ud800-\udfff]")
_BREAKS = re.compile("\r\n|[\t\n\r\u2028\u2029\ufeff]")
# Empty or only what JavaScript's String.prototype.trim removes (U+180E too, which older engines
# still count as a space).
_JS_BLANK = re.compile(
    "[\t\n\x0b\x0c\r \xa0\u1680\u180e\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]*"
)


def tensor_bytes(vectors: np.ndarray) -> tuple[bytes | memoryview, str]:
    r"""Encode vectors for the projector: raw float32 when safe, else TSV.

    The plugin tries to read every tensor file as UTF-8 TSV first and falls back to raw float32
    only on a decoding error, so raw bytes that happen to decode (an all-zero tensor does) must
    be written as TSV instead.

    Args:
        vectors: ``[N, D]`` float array.

    Returns:
        The file's bytes and its name, ``tensor.bin`` or ``tensor.tsv``.

    Example:
        >>> import numpy as np
        >>> tensor_bytes(np.zeros((1, 2), np.float32))
        (b'0\t0\n', 'tensor.tsv')
    """
    # A view of the array's own memory, not a copy: a 200,000 x 768 snapshot is 614 MB.
    raw = memoryview(np.ascontiguousarray(vectors, dtype="<f4")).cast("B")
    try:
        codecs.utf_8_decode(raw, "strict", True)  # fails within the first bytes, as a rule
    except UnicodeDecodeError:
        return raw, TENSOR_FILE
    out = io.StringIO()
    np.savetxt(out, vectors, fmt="%.9g", delimiter="\t")
    return out.getvalue().encode(), TENSOR_TEXT_FILE


def metadata_tsv(columns: dict[str, list[Any]]) -> bytes:
    r"""Metadata TSV: no header row for one column, a header row for two or more.

    Written for the projector front end's parser, which splits the file on ``"\n"`` only, skips
    every line whose JavaScript ``trim()`` is empty (which shifts every later label) and decodes
    each 1,000,000-byte chunk on its own (dropping a byte order mark at a chunk's start). So in
    every value and column name, tabs, ``"\r\n"``, ``"\n"``, ``"\r"``, U+2028, U+2029 and
    U+FEFF become a space, lone surrogates become U+FFFD, and a cell that is then empty or only
    JavaScript whitespace becomes ``<empty>``. A blank column name becomes ``column <i>``, and
    names that clash after cleaning (or ``__proto__``, which a JavaScript object cannot hold)
    get `` (2)``, `` (3)``, ... appended.

    Args:
        columns: Column name to values, all of the same length.

    Returns:
        UTF-8 bytes of the file.

    Example:
        >>> metadata_tsv({"label": ["a\tb", 1, "\ufeff"]})
        b'a b\n1\n<empty>\n'
        >>> metadata_tsv({"": [1], "\u2028": [2]})
        b'column 1\tcolumn 2\n1\t2\n'
    """
    names = list(columns)
    cells = [[_cell(v) for v in columns[name]] for name in names]
    if len(names) == 1:
        lines = cells[0]
    else:
        lines = ["\t".join(_column_names(names))]
        lines += ["\t".join(row) for row in zip(*cells, strict=True)]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _column_names(names: list[str]) -> list[str]:
    """Cleaned header cells: never blank, never ``__proto__``, never the same twice."""
    cleaned = [_clean(str(name)) for name in names]
    cleaned = ["" if _JS_BLANK.fullmatch(name) else name for name in cleaned]
    given = set(cleaned)  # a name as given is never taken by another column's new name
    used = {"__proto__"}
    out: list[str] = []
    for i, name in enumerate(cleaned, start=1):
        if not name or name in used:
            base = name or f"column {i}"
            name, n = base, 1
            while name in used or name in given:
                n += 1
                name = f"{base} ({n})"
        used.add(name)
        out.append(name)
    return out


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
    per_side = sprite_per_row(n)
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
    return png_bytes(sheet, compress_level=1), (thumb_w, thumb_h)


def sprite_per_row(count: int) -> int:
    """Thumbnails per row of the sprite of ``count`` points: the sprite is a square grid.

    Example:
        >>> sprite_per_row(5), sprite_per_row(9)
        (3, 3)
    """
    return math.ceil(math.sqrt(count))


@dataclass(frozen=True)
class SnapshotFiles:
    """What :func:`write_snapshot` wrote for one snapshot.

    Attributes:
        name: The tensor name of the entry in the projector config.
        points: The rows written (fewer than the snapshot's when it was subsampled).
        sprite: The sprite's path relative to the run directory, or ``None`` when none.
        cell: ``(width, height)`` of one thumbnail in the sprite, in pixels.
        per_row: Thumbnails per row of the sprite (point ``i`` at column ``i % per_row``).
        tensor: The tensor file's path relative to the run directory and its size in bytes.
    """

    name: str
    points: int
    sprite: str | None = None
    cell: tuple[int, int] | None = None
    per_row: int | None = None
    tensor: tuple[str, int] | None = None


def entry_name(snapshot: EmbeddingSnapshot) -> str:
    r"""The tensor name the projector lists, such as ``encoder/validate/step_000000120``.

    The tag is kept as given; only text that cannot be written as UTF-8 (lone surrogates) is
    replaced with U+FFFD, and then a short hash of the original is added so that the name still
    differs from every other tag's.

    Example:
        >>> import torch
        >>> entry_name(EmbeddingSnapshot("encoder", 7, torch.ones(1, 1), stage="validate"))
        'encoder/validate/step_000000007'
        >>> name = entry_name(EmbeddingSnapshot("enc\ud800", 7, torch.ones(1, 1)))
        >>> name.startswith("enc\ufffd [") and name.endswith("]/step_000000007")
        True
    """
    key = snapshot.key
    text = _valid_text(key)
    if text != key:
        text = f"{text} [{_digest(key)[:8]}]"
    return f"{text}/{step_name(snapshot.step)}"


def tag_folder(key: str) -> tuple[str, ...]:
    """The folder names under ``projector/`` for a snapshot key such as ``"encoder/validate"``.

    Each ``/``-separated part, empty ones included, goes through :func:`safe_name`, so two
    different keys never share a folder (``enc//x``, ``enc/x`` and ``enc/x/`` stay apart). When
    the parts would be longer than 160 characters, the leading parts that fit in 100 are kept
    and the rest replaced by one ``_<hash of the whole key>`` part (a name ``safe_name`` never
    gives, since its names never start with ``_``). A part such as ``step_3`` gets a hash too,
    the way ``safe_name`` marks a name it changed.

    Example:
        >>> tag_folder("encoder/validate")
        ('encoder', 'validate')
        >>> len(tag_folder("enc//x")), len(tag_folder("enc/x/")), tag_folder("enc/x")
        (3, 3, ('enc', 'x'))
        >>> len("/".join(tag_folder("x" * 10_000))) <= 160
        True
    """
    parts = [
        f"{part[:80]}-{_digest(part)[:8]}" if _STEP.fullmatch(part) else safe_name(part)
        for part in key.split("/")
    ]  # a tag part never reads as a step folder, so no entry's file is another's folder
    if len("/".join(parts)) <= _MAX_FOLDER:
        return tuple(parts)
    kept: list[str] = []
    for part in parts:
        if len("/".join([*kept, part])) > _KEPT_FOLDER:
            break
        kept.append(part)
    return (*kept, f"_{_digest(key)[:16]}")


def _valid_text(text: str) -> str:
    """``text`` with surrogate pairs joined into their character and lone surrogates U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _digest(text: str) -> str:
    """SHA-1 hex digest of any text, lone surrogates included."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def write_snapshot(
    run_dir: Path | RunFolder, snapshot: EmbeddingSnapshot, config: ProjectorConfig | None = None
) -> SnapshotFiles:
    """Write one snapshot's files under ``run_dir`` and merge its entry into the config.

    Args:
        run_dir: The TensorBoard run directory (the one holding the event files), as a path or
            a :class:`~learnscope.storage.RunFolder`.
        snapshot: What to write. More than 100,000 rows are subsampled deterministically, with a
            warning, since the front end loads no more.
        config: The writer's :class:`ProjectorConfig` of ``run_dir`` (it keeps the parsed
            config between snapshots); ``None``: the config is read afresh for this one.

    Returns:
        The tensor name of the entry and what was written (see :class:`SnapshotFiles`).

    Example:
        >>> import tempfile, torch
        >>> run = Path(tempfile.mkdtemp())
        >>> write_snapshot(run, EmbeddingSnapshot("enc", 3, torch.randn(4, 2))).name
        'enc/step_000000003'
        >>> [e.tensor_name for e in read_config(run).embeddings]
        ['enc/step_000000003']
    """
    folder = run_dir if isinstance(run_dir, RunFolder) else open_run_folder(run_dir)
    config = config if config is not None else ProjectorConfig(folder)
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
    where = "/".join((PROJECTOR_FOLDER, *tag_folder(snapshot.key), step_name(snapshot.step)))
    entry = pb.EmbeddingInfo(tensor_name=name, tensor_shape=[snapshot.num_points, snapshot.dim])

    try:
        return _write_files(folder, snapshot, where, entry, config)
    except OSError:  # a full disk: the files of a snapshot not in the config go again
        for written in (entry.tensor_path, entry.metadata_path, entry.sprite.image_path):
            if written:
                with contextlib.suppress(OSError, ValueError):
                    folder.remove(written)
        with contextlib.suppress(OSError, ValueError):
            folder.remove_empty(where)  # only when empty
        raise


def _write_files(
    folder: RunFolder, snapshot: EmbeddingSnapshot, where: str, entry: Any, config: ProjectorConfig
) -> SnapshotFiles:
    """Write the snapshot's files into ``where``, filling in ``entry``, and merge ``entry``."""
    name = entry.tensor_name
    data, tensor_name = tensor_bytes(snapshot.vectors_numpy())
    entry.tensor_path = f"{where}/{tensor_name}"
    folder.write(entry.tensor_path, data)
    columns = snapshot.metadata_columns()
    if columns:
        entry.metadata_path = f"{where}/{METADATA_FILE}"
        folder.write(entry.metadata_path, metadata_tsv(columns))
    images = snapshot.images_uint8()
    tensor = (entry.tensor_path, memoryview(data).nbytes)
    files = SnapshotFiles(name, snapshot.num_points, tensor=tensor)
    if images is not None and pictures_available():  # else no sprite (the pipeline says why)
        sprite = sprite_png(images)
        if sprite is None:
            log.warning(
                "learnscope: %d thumbnails do not fit an 8192 px sprite; %s has no images",
                snapshot.num_points,
                name,
            )
        else:
            entry.sprite.image_path = f"{where}/{SPRITE_FILE}"
            folder.write(entry.sprite.image_path, sprite[0])
            entry.sprite.single_image_dim.extend(sprite[1])
            per_row = sprite_per_row(snapshot.num_points)
            files = dataclasses.replace(
                files, sprite=entry.sprite.image_path, cell=sprite[1], per_row=per_row
            )
    config.add(entry)
    return files


def read_config(run_dir: Path | RunFolder) -> Any:
    """The ``ProjectorConfig`` message in ``run_dir`` (empty when there is none).

    Example:
        >>> import tempfile
        >>> len(read_config(Path(tempfile.mkdtemp())).embeddings)
        0
    """
    pb = import_optional("tensorboard.plugins.projector.projector_config_pb2", "tensorboard")
    text_format = import_optional("google.protobuf.text_format", "tensorboard")
    folder = run_dir if isinstance(run_dir, RunFolder) else open_run_folder(run_dir)
    config = pb.ProjectorConfig()
    if folder.stamp(CONFIG_NAME) is not None:
        text_format.Parse(folder.read(CONFIG_NAME, MAX_CONFIG_BYTES).decode("utf-8"), config)
    return config


class ProjectorConfig:
    """The ``projector_config.pbtxt`` of one run folder, owned by the writer that adds to it.

    The config is parsed once, kept as one text per entry, and written whole after each
    entry. It is parsed again only when its stamp differs from the one this owner's last write
    left, that is when another writer, a resumed run or a person changed or removed it. So a
    snapshot costs the same after 1,000 earlier ones as after 10: one ``stat``, one serialised
    entry, and one atomic write of the joined entry texts (on an object store: a ``HEAD``, a
    ``PUT`` of the whole config, about 250 bytes per entry, and a ``HEAD``). On a local disk
    the config is changed under its lock; an object store has none, so a second writer in the
    same run folder at the same moment can lose an entry of the other (its files stay).

    Args:
        folder: The run folder (see :mod:`learnscope.storage`).

    Example:
        >>> import tempfile
        >>> from learnscope.storage import open_run_folder
        >>> config = ProjectorConfig(open_run_folder(tempfile.mkdtemp()))
        >>> pb = import_optional("tensorboard.plugins.projector.projector_config_pb2", "x")
        >>> config.add(pb.EmbeddingInfo(tensor_name="enc/step_000000001"))
        >>> list(config.entries())
        ['enc/step_000000001']
    """

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self._stamp: tuple[object, ...] | None = None
        self._head = ""  # text of every field other than ``embeddings``
        self._entries: dict[str, str] | None = None  # tensor name -> its ``embeddings`` text

    def entries(self) -> list[str]:
        """The tensor names this owner last wrote, in the config's order."""
        return list(self._entries or {})

    def add(self, entry: Any) -> None:
        """Add or replace ``entry`` in the config, keeping every other entry.

        Replacing an entry of the same name is said with a warning: learnscope's callbacks give
        every snapshot of a run its own name, so only a resumed run that repeats a step does it.
        """
        with self.folder.locked(CONFIG_NAME):
            entries, self._entries = self._entries, None  # dropped for good if anything fails
            if entries is None or self._stamp != self.folder.stamp(CONFIG_NAME):
                entries = self._parse()
            if entries.pop(entry.tensor_name, None) is not None:  # it moves to the end
                log.warning(
                    "learnscope: the projector snapshot %s was written again (a resumed run "
                    "that repeats a step); it replaces the one written before",
                    entry.tensor_name,
                )
            entries[entry.tensor_name] = _entry_text(entry)
            text = self._head + "".join(entries.values())
            self.folder.write(CONFIG_NAME, text.encode("utf-8"))
            self._stamp = self.folder.stamp(CONFIG_NAME)
            if self._stamp is not None:
                self._entries = entries

    def _parse(self) -> dict[str, str]:
        """Read and parse the config into per-entry texts (the costly path, taken rarely).

        A config that cannot be parsed (garbage, half a hand edit) is set aside to
        ``projector_config.pbtxt.corrupt-<UTC time>`` with a warning naming both files, and a
        new config is started; the files of its entries stay.
        """
        pb = import_optional("tensorboard.plugins.projector.projector_config_pb2", "tensorboard")
        text_format = import_optional("google.protobuf.text_format", "tensorboard")
        config = pb.ProjectorConfig()
        if self.folder.stamp(CONFIG_NAME) is not None:
            try:
                text = self.folder.read(CONFIG_NAME, MAX_CONFIG_BYTES).decode("utf-8")
                text_format.Parse(text, config)
            except (text_format.ParseError, UnicodeDecodeError, UnreadableFile) as error:
                then = "a new config is started (the files of its entries stay on disk)"
                self.folder.set_aside(CONFIG_NAME, error, "the projector config", then)
                config = pb.ProjectorConfig()
        entries: dict[str, str] = {}
        for embedding in config.embeddings:  # two entries of one name (another tool's): both kept
            _pad_old_name(embedding)
            name = embedding.tensor_name
            entries[name] = entries.get(name, "") + _entry_text(embedding)
        del config.embeddings[:]
        self._head = text_format.MessageToString(config, as_utf8=True)
        return entries


def _pad_old_name(entry: Any) -> None:
    """Rename an entry written by an older learnscope (``enc/step_20``) to ``enc/step_000000020``.

    Only learnscope's own entries (files under ``projector/.../step_<N>/``) are renamed; their
    files stay where they are. A resumed run then lists old and new snapshots in training order,
    and a snapshot written again at an old step replaces the old entry instead of adding one.
    """
    parsed = parse_snapshot_name(entry.tensor_name)
    if parsed is None or not entry.tensor_path.startswith(f"{PROJECTOR_FOLDER}/"):
        return
    folder = entry.tensor_path.rsplit("/", 2)[-2] if entry.tensor_path.count("/") >= 2 else ""
    if folder == entry.tensor_name.rsplit("/", 1)[1]:  # its own step folder, as named then
        entry.tensor_name = snapshot_name(*parsed)


def _entry_text(entry: Any) -> str:
    """``embeddings { ... }`` as protobuf's text format writes it inside a ``ProjectorConfig``."""
    pb = import_optional("tensorboard.plugins.projector.projector_config_pb2", "tensorboard")
    text_format = import_optional("google.protobuf.text_format", "tensorboard")
    one = pb.ProjectorConfig()
    one.embeddings.append(entry)
    return text_format.MessageToString(one, as_utf8=True)


def _clean(text: str) -> str:
    """``text`` with lone surrogates replaced and every line break, tab and BOM made a space."""
    return _BREAKS.sub(" ", _valid_text(text))


def _cell(value: Any) -> str:
    """One metadata value as the front end will show it (see :func:`metadata_tsv`)."""
    text = _clean(str(value))
    return _EMPTY if _JS_BLANK.fullmatch(text) else text
