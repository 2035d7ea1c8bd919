"""Fold a run record into the training-dynamics view model: one JSON-able dict per run.

Every view (the learnscope tab in TensorBoard, ``learnscope export``, the W&B
``learnscope/view`` page) is built from the run's record, ``learnscope_record.jsonl``
(:mod:`learnscope.run_record`; the entries are described in ``docs/run_record.md``), and
from nothing else but the sprite PNGs the record names. :class:`RunView` keeps one run's
view and reads only the lines added since its last refresh, so a refresh costs the same after
ten snapshots as after five hundred. The view model holds:

* **Embedding evolution**: per key (``encoder/validate``), the snapshots in step order, their
  aligned PCA view in units of each snapshot's spread (root-mean-square distance from the
  centre), the record's fixed frame for the key, the metadata columns of the newest snapshot
  (typed by the record: categories with a code per point, or numbers for a colour bar), and its
  thumbnails. The points shown are those present in every snapshot, matched by id; at most
  ``max_points``, a fixed subsample chosen by a hash of the id. Coordinates travel as
  little-endian float16, base64-encoded, ``x0 y0 x1 y1 ...`` per snapshot, in the order of
  ``ids``.
* **Autocorrelation**: per kind (``params``, ``grads``), groups x lags at each analysis step,
  and the median lag-1 autocorrelation of each group over the steps.
* **Findings**: the newest findings table (every finding of the run so far).

What is attached comes from the record's ``run`` entries, so an empty section says "waiting for
the first snapshot" while the run goes on, and "attach ..." only when no ``run`` entry lists
that callback. A damaged entry is skipped and named in ``messages``. Nothing here imports torch,
Lightning or TensorBoard.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import os
import stat
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.run_files import RECORD_FILE, REFRESH_MARKER_PREFIX
from learnscope.run_record import FORMAT as RECORD_FORMAT
from learnscope.run_record import RecordReader, decode_array
from learnscope.scatter import MAX_CATEGORIES

log = logging.getLogger("learnscope")

FORMAT = "learnscope-view/2"
MAX_POINTS = 5_000  # points animated by default; more are subsampled by id, saying so
MAX_SPRITE_BYTES = 4_000_000  # thumbnails larger than this stay out of the view
MAX_DAMAGE_MESSAGES = 20  # damaged entries named one by one; the rest are counted
CHARTED_LAGS = (1, 2, 5, 10, 20, 50)  # ModelAutocorrelation's default lags
PCA_HINT = "run with EmbeddingProjector(aligned_pca=True)"
SKIPPED_FOLDERS = ("projector", "wandb")  # never searched for runs (a run's own data, wandb's)
PROJECTOR = "EmbeddingProjector"
AUTOCORRELATION = "ModelAutocorrelation"
HELPER = "TrainingHelper"
_PNG = b"\x89PNG\r\n\x1a\n"
_FIRST_LINE_BYTES = 65_536  # the ``run`` entry a run starts with is shorter than this


class DamagedEntry(ValueError):
    """An entry of the record that cannot be shown; the message says what is wrong with it."""


def find_runs(logdir: str | Path) -> list[str]:
    """The run directories under ``logdir`` that hold a run record, relative, sorted.

    Folders are searched without following symbolic links (a linked folder may lead out of the
    log directory), and ``projector`` and ``wandb`` folders are not searched. A record that is
    not a regular file (a link, a FIFO) is listed too, so that the view can say it is not read.
    ``logdir`` itself is named ``"."``, as TensorBoard names it.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "a" / "version_0").mkdir(parents=True)
        >>> _ = (root / "a" / "version_0" / RECORD_FILE).write_bytes(b"")
        >>> find_runs(root)
        ['a/version_0']
    """
    root = Path(logdir)
    runs = []
    stack = [""]
    while stack:
        relative = stack.pop()
        folder = root / relative if relative else root
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    name = entry.name
                    if name not in SKIPPED_FOLDERS and not name.startswith(REFRESH_MARKER_PREFIX):
                        stack.append(f"{relative}/{name}" if relative else name)
                elif entry.name == RECORD_FILE:
                    runs.append(relative or ".")
            except OSError:
                continue
    return sorted(runs)


def run_started(run_dir: str | Path) -> float:
    """When the run started: the ``time`` of its record's first line, a ``run`` entry.

    The modification time of the record when its first line is no ``run`` entry; ``0.0`` when
    there is no readable record. Reads at most the first 64 KiB, never through a link, never
    from a FIFO.

    Example:
        >>> import tempfile
        >>> from learnscope.run_record import append_entries
        >>> run = Path(tempfile.mkdtemp())
        >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 12.5}])
        >>> run_started(run)
        12.5
    """
    try:
        fd = os.open(Path(run_dir) / RECORD_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0.0
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return 0.0
        head = os.pread(fd, _FIRST_LINE_BYTES, 0)
    except OSError:
        return 0.0
    finally:
        os.close(fd)
    line, newline, _ = head.partition(b"\n")
    try:
        entry = json.loads(line) if newline else None
    except ValueError:
        entry = None
    if isinstance(entry, dict) and entry.get("kind") == "run" and _is_number(entry.get("time")):
        return float(entry["time"])
    return status.st_mtime


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


# ------------------------------------------------------------------------------ the fold


@dataclass
class _Layout:
    """The ids of a snapshot in row order, shared by consecutive snapshots with the same ids."""

    ids: list[str]
    index: dict[str, int]
    rows: tuple[int, np.ndarray] | None = None  # (version of the shown ids, their rows)

    def rows_of(self, shown: list[str], version: int) -> np.ndarray:
        if self.rows is None or self.rows[0] != version:
            self.rows = (version, np.fromiter((self.index[i] for i in shown), np.int64, len(shown)))
        return self.rows[1]


@dataclass
class _Snapshot:
    step: int
    layout: _Layout
    xy: np.ndarray  # [n, 2] float16, in units of the snapshot's spread, rows in snapshot order
    spread: float
    encoded: tuple[int, str] | None = None  # (version of the shown ids, base64 of their xy)


@dataclass
class _Embedding:
    """The snapshots of one key (``tag/stage``) with aligned PCA coordinates."""

    key: str
    snapshots: list[_Snapshot] = field(default_factory=list)
    has_ids: bool | None = None
    common: set[str] | None = None  # ids present in every snapshot
    seen: set[str] = field(default_factory=set)  # ids present in some snapshot
    frame: list[float] | None = None
    last: Mapping[str, Any] | None = None  # the newest snapshot's entry (columns, sprite)
    version: int = 0  # changes whenever the shown ids may have changed
    shown: tuple[int, list[str], int] | None = None  # (version, ids shown, ids in common)

    def add(self, entry: Mapping[str, Any], xy: np.ndarray, ids: list[str] | None) -> None:
        step = int(entry["step"])
        previous = self.snapshots[-1].layout if self.snapshots else None
        given = ids is not None
        if self.has_ids is not None and self.has_ids != given:
            had = "ids" if self.has_ids else "no ids"
            raise DamagedEntry(f"it has {'ids' if given else 'no ids'}, the key's snapshots {had}")
        if ids is None:
            if previous is not None and len(previous.ids) != len(xy):
                raise DamagedEntry(
                    f"it has {len(xy)} points without ids, the earlier snapshots "
                    f"{len(previous.ids)} (without ids, points are matched by row)"
                )
            ids = [str(i) for i in range(len(xy))]
        if previous is not None and previous.ids == ids:
            layout = previous
        else:
            index = {point: row for row, point in enumerate(ids)}
            if len(index) != len(ids):
                raise DamagedEntry("its ids are not unique")
            layout = _Layout(ids, index)
        spread = entry.get("spread")
        if not (_is_number(spread) and math.isfinite(spread) and spread > 0):
            finite = xy[np.isfinite(xy).all(1)].astype(np.float64)
            spread = float(np.sqrt((finite**2).sum(1).mean())) if len(finite) else 0.0
            spread = spread if spread > 0 else 1.0
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = (xy.astype(np.float64) / spread).astype("<f2")
        snapshot = _Snapshot(step, layout, scaled, float(spread))
        steps = [s.step for s in self.snapshots]
        if not steps or step > steps[-1]:
            self.snapshots.append(snapshot)
            self.last = entry
            keys = set(layout.index) if layout is not previous or self.common is None else None
            if self.common is None:
                self.common = set(keys or ())
            elif keys is not None and not self.common <= keys:
                self.common &= keys
                self.version += 1
            if keys is not None:
                self.seen |= keys
        else:  # a snapshot written again (or late): replace or insert it, and start over
            position = int(np.searchsorted(steps, step))
            if steps[position] == step:
                self.snapshots[position] = snapshot
            else:
                self.snapshots.insert(position, snapshot)
            if position == len(self.snapshots) - 1:
                self.last = entry
            layouts = {id(s.layout): s.layout for s in self.snapshots}.values()
            self.common = set.intersection(*(set(x.index) for x in layouts))
            self.seen = set().union(*(set(x.index) for x in layouts))
            self.version += 1
        self.has_ids = given
        frame = entry.get("frame")
        if frame is not None:
            self.frame = [float(v) for v in frame]

    def shown_ids(self, max_points: int) -> tuple[list[str], int]:
        """The ids drawn (in the first snapshot's order) and how many are in every snapshot."""
        if self.shown is None or self.shown[0] != self.version:
            common = self.common or set()
            ids = [i for i in self.snapshots[0].layout.ids if i in common]
            total = len(ids)
            if total > max_points:
                ids = subsample_ids(ids, max_points)
            self.shown = (self.version, ids, total)
        return self.shown[1], self.shown[2]


@dataclass
class _Autocorrelation:
    """The analyses of one kind (``params`` or ``grads``), by step."""

    kind: str
    groups: dict[str, None] = field(default_factory=dict)  # in first-seen order
    lags: set[int] = field(default_factory=set)
    by_step: dict[int, dict[str, tuple[dict[int, float | None], float | None]]] = field(
        default_factory=dict
    )

    def view(self, charted: Sequence[int]) -> dict[str, Any]:
        """Groups x the ``charted`` lags (those the record has) at each step, and lag 1."""
        groups, steps = list(self.groups), sorted(self.by_step)
        lags = [lag for lag in charted if lag in self.lags]
        empty: tuple[dict[int, float | None], float | None] = ({}, None)
        values = [
            [[self.by_step[s].get(g, empty)[0].get(lag) for lag in lags] for g in groups]
            for s in steps
        ]
        rho1 = [[self.by_step[s].get(g, empty)[1] for s in steps] for g in groups]
        return {
            "kind": self.kind,
            "groups": groups,
            "lags": lags,
            "steps": steps,
            "values": values,
            "rho1": rho1,
        }


class RunView:
    """The view model of one run, kept up to date from its record, reading only new lines.

    Args:
        run_dir: The folder that holds the run record (a TensorBoard run directory, a wandb
            run's ``files`` folder).
        max_points: The most points per key drawn (a fixed subsample by id beyond).
        sprites: Include the thumbnails of each key's newest snapshot (as a PNG data URL).
        name: The run's name in the view; the folder's name by default.

    Example:
        >>> import tempfile
        >>> from learnscope.run_record import append_entries
        >>> run = Path(tempfile.mkdtemp())
        >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 1.0,
        ...     "callbacks": [{"name": "EmbeddingProjector", "settings": {}}]}])
        >>> view = RunView(run)
        >>> view.view()["status"]["embeddings"]
        'waiting for the first snapshot'
        >>> append_entries(run / RECORD_FILE, [{"kind": "end", "step": 8, "status": "finished"}])
        >>> view.view()["status"]["embeddings"]
        'EmbeddingProjector wrote no snapshot in this run'
    """

    def __init__(
        self,
        run_dir: str | Path,
        max_points: int = MAX_POINTS,
        sprites: bool = True,
        name: str | None = None,
    ) -> None:
        if max_points < 1:
            raise ValueError(f"max_points must be at least 1, got {max_points}")
        self.run_dir = Path(run_dir)
        self.name = name if name is not None else self.run_dir.name
        self.max_points = max_points
        self.sprites = sprites
        self.reader = RecordReader(self.run_dir / RECORD_FILE)
        self.entries_read = 0  # entries folded since the record was first read
        self.snapshots_encoded = 0  # snapshot coordinates encoded for the view (cost measure)
        self._sprite_cache: tuple[tuple, dict[str, Any] | None] | None = None
        self._clear()

    def _clear(self) -> None:
        self._callbacks: dict[str, Any] = {}
        self._run_entries = 0
        self._started: float | None = None
        self._ended: dict[str, Any] | None = None
        self._newer_format = False
        self._embeddings: dict[str, _Embedding] = {}
        self._without_pca: dict[str, int] = {}
        self._autocorrelation: dict[str, _Autocorrelation] = {}
        self._findings: list[dict[str, Any]] | None = None
        self._damage: list[str] = []
        self._damaged = 0
        self._view: dict[str, Any] | None = None

    @property
    def started(self) -> float:
        """When the newest ``run`` entry began (Unix seconds), else the record's mtime."""
        if self._started is not None:
            return self._started
        try:
            return (self.run_dir / RECORD_FILE).stat(follow_symlinks=False).st_mtime
        except OSError:
            return 0.0

    def refresh(self) -> bool:
        """Fold the entries added to the record since the last call; whether any came.

        Raises:
            OSError: When the record cannot be read (it is not a regular file, say).
        """
        skipped = self.reader.skipped
        path = self.run_dir / RECORD_FILE
        try:
            if path.is_symlink():
                raise OSError(f"{RECORD_FILE} is a symbolic link (links are not followed)")
            entries = self.reader.read()
        except OSError as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise OSError(str(error).replace(str(path), RECORD_FILE)) from None
        if self.reader.restarted:  # the file was replaced: another run in this directory
            self._clear()
        for entry in entries:
            self.entries_read += 1
            try:
                self._fold(entry)
            except (DamagedEntry, ValueError, TypeError, KeyError, IndexError) as error:
                self._note_damage(f"{_describe(entry)} skipped: {error}")
        changed = bool(entries) or self.reader.skipped != skipped or self.reader.restarted
        if changed:
            self._view = None
        return changed

    def view(self) -> dict[str, Any]:
        """The view model, refreshed first (the same dict while nothing changed).

        Raises:
            OSError: When the record cannot be read.
        """
        self.refresh()
        if self._view is None:
            self._view = self._build()
        return self._view

    # -------------------------------------------------------------------------- folding

    def _note_damage(self, message: str) -> None:
        self._damaged += 1
        if len(self._damage) < MAX_DAMAGE_MESSAGES:
            self._damage.append(message)

    def _fold(self, entry: dict[str, Any]) -> None:
        kind = entry["kind"]
        if kind == "run":
            self._fold_run(entry)
        elif self._newer_format:
            return
        elif kind == "snapshot":
            self._fold_snapshot(entry)
        elif kind == "autocorrelation":
            self._fold_autocorrelation(entry)
        elif kind == "findings":
            self._findings = [_finding(row) for row in _list(entry, "rows")]
        elif kind == "end":
            status = entry.get("status")
            self._ended = {
                "step": _int(entry, "step") if entry.get("step") is not None else None,
                "status": status if isinstance(status, str) else "finished",
            }
        # other kinds are from a newer learnscope: nothing to show of them

    def _fold_run(self, entry: Mapping[str, Any]) -> None:
        version = entry.get("format", RECORD_FORMAT)
        self._newer_format = not isinstance(version, int) or version > RECORD_FORMAT
        if self._newer_format:
            raise DamagedEntry(
                f"format {version!r} is newer than this learnscope reads ({RECORD_FORMAT}); "
                "the entries that follow it are not shown (update learnscope)"
            )
        self._run_entries += 1
        self._ended = None
        if _is_number(entry.get("time")):
            self._started = float(entry["time"])
        for callback in _list(entry, "callbacks", required=False):
            if isinstance(callback, Mapping) and isinstance(callback.get("name"), str):
                self._callbacks[callback["name"]] = callback.get("settings")

    def _fold_snapshot(self, entry: Mapping[str, Any]) -> None:
        key = entry.get("key")
        if not isinstance(key, str) or not key:
            raise DamagedEntry("it has no key")
        _int(entry, "step")
        if entry.get("xy") is None:
            self._without_pca[key] = self._without_pca.get(key, 0) + 1
            return
        xy = _array(entry, "xy")
        if xy.ndim != 2 or xy.shape[1] != 2 or not np.issubdtype(xy.dtype, np.floating):
            raise DamagedEntry(f"xy has shape {list(xy.shape)} ({xy.dtype}), not [points, 2]")
        points = entry.get("points")
        if points is not None and points != len(xy):
            raise DamagedEntry(f"xy has {len(xy)} points, the entry says {points!r}")
        ids = entry.get("ids")
        if ids is not None:
            if not isinstance(ids, list) or len(ids) != len(xy):
                raise DamagedEntry(f"ids is not a list of {len(xy)} ids")
            ids = [i if isinstance(i, str) else json.dumps(i) for i in ids]
        frame = entry.get("frame")
        if frame is not None and not (
            isinstance(frame, list)
            and len(frame) == 4
            and all(_is_number(v) and math.isfinite(v) for v in frame)
            and frame[0] < frame[1]
            and frame[2] < frame[3]
        ):
            raise DamagedEntry(f"frame {frame!r} is not [xmin, xmax, ymin, ymax]")
        for column in _list(entry, "columns", required=False):
            _column(column, len(xy), [])  # checked now: a damaged one skips the snapshot
        sprite = entry.get("sprite")
        if sprite is not None:
            _sprite_fields(sprite)
        embedding = self._embeddings.get(key)
        if embedding is None:
            embedding = self._embeddings[key] = _Embedding(key)
        embedding.add(entry, xy, ids)

    def _fold_autocorrelation(self, entry: Mapping[str, Any]) -> None:
        kind = entry.get("what")
        if not isinstance(kind, str) or not kind:
            raise DamagedEntry("it has no 'what' (params or grads)")
        step = _int(entry, "step")
        groups = _list(entry, "groups")
        lags = _list(entry, "lags")
        if not all(isinstance(g, str) for g in groups) or not all(
            isinstance(lag, int) and not isinstance(lag, bool) for lag in lags
        ):
            raise DamagedEntry("groups must be names and lags whole numbers")
        acf = entry.get("acf")
        acf = decode_array(acf).tolist() if isinstance(acf, Mapping) else acf
        if not (
            isinstance(acf, list)
            and len(acf) == len(groups)
            and all(isinstance(row, list) and len(row) == len(lags) for row in acf)
        ):
            raise DamagedEntry(f"acf is not [{len(groups)} groups][{len(lags)} lags]")
        rho1 = entry.get("rho1_median")
        if rho1 is None:
            rho1 = [None] * len(groups)
        if not isinstance(rho1, list) or len(rho1) != len(groups):
            raise DamagedEntry(f"rho1_median is not one value per group ({len(groups)})")
        fold = self._autocorrelation.get(kind)
        if fold is None:
            fold = self._autocorrelation[kind] = _Autocorrelation(kind)
        analysis = fold.by_step.setdefault(step, {})
        for group, row, lag_one in zip(groups, acf, rho1, strict=True):
            fold.groups.setdefault(group)
            values = {lag: _rounded(v) for lag, v in zip(lags, row, strict=True)}
            median = _rounded(lag_one)
            analysis[group] = (values, median if median is not None else values.get(1))
        fold.lags.update(lags)

    # -------------------------------------------------------------------------- the view

    def _build(self) -> dict[str, Any]:
        known = self._run_entries > 0
        ended = self._ended is not None
        attached = set(self._callbacks)
        messages: list[str] = []
        status: dict[str, str | None] = {"embeddings": None, "autocorrelation": None}

        embeddings = []
        for embedding in self._embeddings.values():
            embeddings.append(self._embedding_view(embedding, messages))
        for key, count in self._without_pca.items():
            if key not in self._embeddings:
                messages.append(f"{key}: {count} snapshot(s) without aligned PCA; {PCA_HINT}")
        if not embeddings:
            if self._without_pca:
                status["embeddings"] = f"no snapshot with aligned PCA coordinates; {PCA_HINT}"
            elif known and PROJECTOR not in attached:
                status["embeddings"] = "no embedding snapshots (attach EmbeddingProjector)"
                messages.append(status["embeddings"])
            elif ended:
                status["embeddings"] = f"{PROJECTOR} wrote no snapshot in this run"
            elif known:
                status["embeddings"] = "waiting for the first snapshot"
            else:
                status["embeddings"] = "no embedding snapshots in this run"

        charted = self._charted_lags()
        autocorrelation = [a.view(charted) for a in self._autocorrelation.values()]
        order = {"params": 0, "grads": 1}
        autocorrelation.sort(key=lambda k: (order.get(k["kind"], 2), k["kind"]))
        if not autocorrelation:
            if known and AUTOCORRELATION not in attached:
                status["autocorrelation"] = "no autocorrelation (attach ModelAutocorrelation)"
                messages.append(status["autocorrelation"])
            elif ended:
                status["autocorrelation"] = (
                    "the run ended before the first autocorrelation analysis"
                )
            elif known:
                status["autocorrelation"] = "waiting for the first autocorrelation analysis"
            else:
                status["autocorrelation"] = "no autocorrelation analysis in this run"

        findings = self._findings or []
        if known and HELPER not in attached:
            messages.append("no health checks (attach TrainingHelper)")
        if findings:
            status["findings"] = None
        elif known and HELPER not in attached and self._findings is None:
            status["findings"] = "no findings table (attach TrainingHelper)"
        else:
            status["findings"] = "no findings" if ended else "no findings yet"

        if self.reader.skipped:
            messages.append(f"{self.reader.skipped} damaged line(s) of the record skipped")
        messages.extend(self._damage)
        if self._damaged > len(self._damage):
            messages.append(f"... and {self._damaged - len(self._damage)} more damaged entries")
        return {
            "format": FORMAT,
            "run": self.name,
            "time": self.started,
            "attached": sorted(attached) if known else None,
            "ended": self._ended,
            "embeddings": embeddings,
            "autocorrelation": autocorrelation,
            "findings": findings,
            "status": status,
            "messages": messages,
        }

    def _charted_lags(self) -> list[int]:
        """The lags ``ModelAutocorrelation`` was made with (its ``run`` settings), else 1..50."""
        settings = self._callbacks.get(AUTOCORRELATION)
        lags = settings.get("lags") if isinstance(settings, Mapping) else None
        if isinstance(lags, list) and lags and all(type(lag) is int and lag > 0 for lag in lags):
            return sorted(set(lags))
        return list(CHARTED_LAGS)

    def _embedding_view(self, embedding: _Embedding, messages: list[str]) -> dict[str, Any]:
        ids, total = embedding.shown_ids(self.max_points)
        version = embedding.version
        notes = []
        if not embedding.has_ids:
            notes.append("no ids: points matched by row")
        if len(embedding.common or ()) < len(embedding.seen):
            notes.append("only points present in every snapshot are shown")
        if total > len(ids):
            notes.append(f"{len(ids):,} of {total:,} points shown (a fixed subsample by id)")
        if len(embedding.snapshots) == 1:
            notes.append("one snapshot only: nothing moves yet")
        xy = []
        for snapshot in embedding.snapshots:
            if snapshot.encoded is None or snapshot.encoded[0] != version:
                rows = snapshot.layout.rows_of(ids, version)
                data = np.ascontiguousarray(snapshot.xy[rows], "<f2").tobytes()
                snapshot.encoded = (version, base64.b64encode(data).decode("ascii"))
                self.snapshots_encoded += 1
            xy.append(snapshot.encoded[1])
        last = embedding.snapshots[-1]
        rows = last.layout.rows_of(ids, version)
        entry = embedding.last or {}
        columns = [
            _column(c, len(last.layout.ids), rows) for c in _list(entry, "columns", required=False)
        ]
        columns = [c for c in columns if c["name"] not in ("id", "pca_x", "pca_y", "pca_z")]
        sprite = None
        if self.sprites and entry.get("sprite") is not None:
            sprite = self._sprite(embedding.key, last.step, entry["sprite"], notes)
            if sprite is not None:
                sprite = {**sprite, "rows": rows.tolist()}
        for note in notes:
            messages.append(f"{embedding.key}: {note}")
        return {
            "key": embedding.key,
            "steps": [s.step for s in embedding.snapshots],
            "ids": ids,
            "xy": xy,
            "encoding": "float16-le-base64",
            "units": "spread",
            "spreads": [_rounded(s.spread, 6) for s in embedding.snapshots],
            "frame": embedding.frame,
            "columns": columns,
            "points_total": total,
            "points_shown": len(ids),
            "sprite": sprite,
            "notes": notes,
        }

    def _sprite(
        self, key: str, step: int, fields: Mapping[str, Any], notes: list[str]
    ) -> dict[str, Any] | None:
        path, width, height, per_row = _sprite_fields(fields)
        try:
            status = os.stat(self.run_dir / path, follow_symlinks=False)
            stamp: tuple = (path, status.st_ino, status.st_size, status.st_mtime_ns)
        except OSError:
            stamp = (path, None)
        if self._sprite_cache is not None and self._sprite_cache[0] == stamp:
            return self._sprite_cache[1]
        try:
            data = read_sprite(self.run_dir, path)
            sprite = {
                "png": "data:image/png;base64," + base64.b64encode(data).decode("ascii"),
                "width": width,
                "height": height,
                "per_row": per_row,
            }
        except DamagedEntry as error:
            notes.append(f"step {step}: thumbnails not shown: {error}")
            return None
        self._sprite_cache = (stamp, sprite)
        return sprite


def read_view(
    run_dir: str | Path, max_points: int = MAX_POINTS, sprites: bool = True
) -> dict[str, Any]:
    """The view model of one run directory (see :class:`RunView`), read once.

    Args:
        run_dir: A folder with a run record.
        max_points: The most points per key drawn.
        sprites: Include the thumbnails of each key's newest snapshot.

    Returns:
        A dict that ``json.dumps`` takes: ``format``, ``run``, ``time``, ``attached``,
        ``ended``, ``embeddings``, ``autocorrelation``, ``findings``, ``status``, ``messages``.

    Raises:
        OSError: When the record cannot be read.

    Example:
        >>> import tempfile
        >>> view = read_view(tempfile.mkdtemp())
        >>> view["embeddings"], view["status"]["embeddings"]
        ([], 'no embedding snapshots in this run')
    """
    return RunView(run_dir, max_points, sprites).view()


def error_view(name: str, message: str) -> dict[str, Any]:
    """The view model of a run that cannot be read: empty, with ``message`` saying why.

    Example:
        >>> error_view("a", "boom")["messages"]
        ['a cannot be read: boom']
    """
    text = f"{name} cannot be read: {message}"
    return {
        "format": FORMAT,
        "run": name,
        "time": 0.0,
        "attached": None,
        "ended": None,
        "embeddings": [],
        "autocorrelation": [],
        "findings": [],
        "status": {"embeddings": text, "autocorrelation": text, "findings": text},
        "messages": [text],
    }


def thin_snapshots(view: dict[str, Any], most: int) -> dict[str, Any]:
    """``view`` with at most ``most`` snapshots per key: evenly spaced, first and last kept.

    Example:
        >>> view = {"embeddings": [{"key": "e", "steps": list(range(10)), "xy": list("abcdefghij"),
        ...          "spreads": [1.0] * 10, "notes": []}], "messages": []}
        >>> thin_snapshots(view, 4)["embeddings"][0]["steps"]
        [0, 3, 6, 9]
    """
    embeddings = []
    messages = list(view["messages"])
    for embedding in view["embeddings"]:
        count = len(embedding["steps"])
        if count <= most:
            embeddings.append(embedding)
            continue
        keep = sorted({round(i * (count - 1) / (max(most, 2) - 1)) for i in range(max(most, 2))})
        note = f"{len(keep)} of {count} snapshots shown (evenly spaced)"
        messages.append(f"{embedding['key']}: {note}")
        embeddings.append(
            {
                **embedding,
                "steps": [embedding["steps"][i] for i in keep],
                "xy": [embedding["xy"][i] for i in keep],
                "spreads": [embedding["spreads"][i] for i in keep],
                "notes": [*embedding["notes"], note],
            }
        )
    return {**view, "embeddings": embeddings, "messages": messages}


# ------------------------------------------------------------------------------ pages


def module_source() -> str:
    """The view's ES module (``static/learnscope_view.js``), shipped with the package.

    Example:
        >>> "export async function render()" in module_source()
        True
    """
    return (Path(__file__).parent / "static" / "learnscope_view.js").read_text(encoding="utf-8")


def page_html(
    runs: Sequence[tuple[str, dict]], title: str = "learnscope: training dynamics"
) -> str:
    """One self-contained HTML page: the views as inline JSON and the module inline.

    The page loads nothing from the network and opens from ``file://``; it shows the newest
    run first (the largest ``time`` of the views).

    Args:
        runs: ``(name, view)`` pairs, views as :func:`read_view` returns them.
        title: The page title.

    Returns:
        The HTML text.

    Example:
        >>> html = page_html([("run", error_view("run", "nothing"))])
        >>> html.count("<script"), html.count("</script")
        (2, 2)
    """
    data = json.dumps({"runs": [{"name": n, "view": v} for n, v in runs]}, separators=(",", ":"))
    data = data.replace("<", "\\u003c")  # no "</script>" can end the JSON block early
    module = module_source()
    if "<script" in module.lower() or "</script" in module.lower() or "<!--" in module:
        raise ValueError("the view module must not contain '<script', '</script' or '<!--'")
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head><body>\n"
        f'<script type="application/json" id="learnscope-data">{data}</script>\n'
        f'<script type="module">\n{module}\n</script>\n</body></html>\n'
    )


@dataclass(frozen=True)
class Export:
    """What :func:`export_html` wrote: the runs in the page, and those it could not read."""

    runs: list[str]
    failed: list[tuple[str, str]]  # (run, why)


def export_html(
    logdir: str | Path, out: str | Path, max_points: int = MAX_POINTS, sprites: bool = True
) -> Export:
    """Write the view of every learnscope run under ``logdir`` as one page ``out``.

    A run whose record cannot be read is left out and listed in :attr:`Export.failed`; the
    other runs are written. No file is written when no run could be read.

    Args:
        logdir: A log directory (or one run directory).
        out: The HTML file to write.
        max_points: The most points per key.
        sprites: Include thumbnails.

    Returns:
        The runs written and the runs left out.

    Example:
        >>> import tempfile
        >>> export_html(tempfile.mkdtemp(), "never-written.html")
        Export(runs=[], failed=[])
    """
    root = Path(logdir)
    runs, failed = [], []
    for name in find_runs(root):
        shown = root.resolve().name if name == "." else name
        try:
            runs.append((shown, RunView(root / name, max_points, sprites, shown).view()))
        except (OSError, ValueError) as error:
            failed.append((shown, str(error)))
    if runs:
        Path(out).write_text(page_html(runs), encoding="utf-8")
    return Export([name for name, _ in runs], failed)


# ------------------------------------------------------------------------------ checks


def _describe(entry: Mapping[str, Any]) -> str:
    """An entry named for a message: its kind, key or kind of series, and step."""
    parts = [str(entry.get("kind"))]
    for name in ("key", "what"):
        if isinstance(entry.get(name), str):
            parts.append(entry[name])
    if entry.get("step") is not None:
        parts.append(f"at step {entry['step']!r}")
    return " ".join(parts)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(entry: Mapping[str, Any], name: str) -> int:
    value = entry.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise DamagedEntry(f"{name} is {value!r}, not a whole number")
    return value


def _list(entry: Mapping[str, Any], name: str, required: bool = True) -> list[Any]:
    value = entry.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise DamagedEntry(f"{name} is not a list")
    return value


def _array(entry: Mapping[str, Any], name: str) -> np.ndarray:
    value = entry.get(name)
    if not isinstance(value, Mapping):
        raise DamagedEntry(f"{name} is not an array")
    try:
        return decode_array(value)
    except (ValueError, TypeError) as error:
        raise DamagedEntry(f"{name}: {error}") from None


def _rounded(value: Any, digits: int = 4) -> float | None:
    if not _is_number(value) or not math.isfinite(value):
        return None
    return round(float(value), digits)


def _finding(row: Any) -> dict[str, Any]:
    if not isinstance(row, Mapping):
        raise DamagedEntry("a row of its table is not an object")
    out: dict[str, Any] = {}
    for name in ("severity", "code", "subject", "message"):
        if not isinstance(row.get(name), str):
            raise DamagedEntry(f"a row of its table has no text {name!r}")
        out[name] = row[name]
    step = row.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise DamagedEntry(f"a row of its table has step {step!r}, not a whole number")
    return {"code": out["code"], "subject": out["subject"], "message": out["message"],
            "step": step, "severity": out["severity"]}  # fmt: skip


def _column(column: Any, points: int, rows: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """A typed metadata column of the record, at ``rows`` (checked against ``points``)."""
    if not isinstance(column, Mapping) or not isinstance(column.get("name"), str):
        raise DamagedEntry("a column has no name")
    name, kind = column["name"], column.get("kind")
    if kind == "categorical":
        categories = _list(column, "categories")
        codes = _array(column, "codes")
        if codes.shape != (points,) or not np.issubdtype(codes.dtype, np.integer):
            raise DamagedEntry(f"column {name!r}: codes are not {points} whole numbers")
        codes = codes.astype(np.int64)
        codes[(codes < 0) | (codes >= len(categories))] = -1  # no category: "other"
        counts = np.bincount(codes[codes >= 0], minlength=len(categories))
        frequent = sorted(range(len(categories)), key=lambda i: (-counts[i], i))
        return {
            "name": name,
            "kind": "categorical",
            "categories": [c if isinstance(c, str) else json.dumps(c) for c in categories],
            "codes": codes[np.asarray(rows, np.int64)].tolist(),
            "coloured": sorted(frequent[:MAX_CATEGORIES]),  # as the Images-tab picture
        }
    if kind == "numeric":
        values = _array(column, "values")
        if values.shape != (points,) or not np.issubdtype(values.dtype, np.number):
            raise DamagedEntry(f"column {name!r}: values are not {points} numbers")
        picked = values[np.asarray(rows, np.int64)].astype(np.float64)
        return {"name": name, "kind": "numeric", "values": [_rounded(v, 6) for v in picked]}
    raise DamagedEntry(f"column {name!r} is of kind {kind!r}, not categorical or numeric")


def _sprite_fields(sprite: Any) -> tuple[str, int, int, int]:
    """``(path, width, height, per_row)`` of a snapshot's ``sprite`` field."""
    if not isinstance(sprite, Mapping) or not isinstance(sprite.get("path"), str):
        raise DamagedEntry("sprite has no path")
    cell = sprite.get("cell")
    sizes = [
        *(cell if isinstance(cell, list) and len(cell) == 2 else [None]),
        sprite.get("per_row"),
    ]
    if len(sizes) != 3 or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes
    ):
        raise DamagedEntry(f"sprite cell {cell!r} and per_row are not positive whole numbers")
    return sprite["path"], sizes[0], sizes[1], sizes[2]
