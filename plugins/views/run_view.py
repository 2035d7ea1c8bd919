"""One run's view model, folded incrementally from its run record: one JSON-able dict.

Every view (the learnscope tab in TensorBoard, ``learnscope export``, the W&B
``~learnscope/view`` page) is built from the run's record, ``learnscope_record.jsonl``
(:mod:`learnscope.run_directory.record`; the entries are described in ``docs/run_record.md``), and
from nothing else but the sprite PNGs the record names. The run is a
:class:`~learnscope.storage.RunFolder`: a local directory, or a folder on an object store
(``s3://bucket/runs/version_0``), whose record is a series of immutable segments.
:class:`RunModel` keeps one run's view and reads only the lines (the segments) added since its
last refresh, so a refresh costs the same after ten snapshots as after five hundred. The view
model holds:

* **Embedding evolution**: per key (``encoder/validate``), the snapshots in step order, their
  aligned PCA view in units of each snapshot's spread (root-mean-square distance from the
  centre), the record's fixed frame for the key, each further aligned view the snapshots carry
  (``projections``: ``umap``, with its own steps, spreads, frame and ``fitted`` counts; a
  damaged one is named in ``messages`` and the snapshot shows without it), the metadata
  columns of the newest snapshot (typed by the record: categories with a code per point, or
  numbers for a colour bar), and its thumbnails. The points shown are those present in every
  snapshot, matched by id; at most ``max_points``, a fixed subsample chosen by a hash of the
  id. Coordinates travel as little-endian float16, base64-encoded, ``x0 y0 x1 y1 ...`` per
  snapshot, in the order of ``ids`` (:mod:`learnscope.plugins.views.embedding_fold`).
* **Autocorrelation**: per kind (``params``, ``grads``), groups x lags at each analysis step,
  and the median lag-1 autocorrelation of each group over the steps
  (:mod:`learnscope.plugins.views.autocorrelation_fold`).
* **Findings**: the newest findings table (every finding of the run so far), those that still
  hold first, each with its life in words
  (:mod:`learnscope.plugins.views.findings_fold`).

What is attached comes from the record's ``run`` entries, so an empty section says "waiting for
the first snapshot" while the run goes on, why it is empty once the run ended (the setting and
the value that would fill it: :mod:`learnscope.plugins.views.run_status`), and "attach ..." only
when no ``run`` entry lists that callback. A run whose ``end`` entry says ``failed`` is marked so:
``failed`` holds its exception and the first message says so; one that says ``interrupted``
(Ctrl-C) has a first message that says at which step it stopped. A damaged entry is skipped and
named in ``messages``. Nothing here imports torch, Lightning or TensorBoard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learnscope.plugins.views.autocorrelation_fold import (
    AutocorrelationSeries,
    fold_autocorrelation,
)
from learnscope.plugins.views.embedding_fold import (
    EmbeddingEvolution,
    projection_views,
    snapshot_fields,
)
from learnscope.plugins.views.findings_fold import findings_view
from learnscope.plugins.views.record_checks import (
    DamagedEntry,
    describe_entry,
    finding_row,
    list_field,
)
from learnscope.plugins.views.run_search import folder_name, run_folder
from learnscope.plugins.views.run_status import RunEntries, pca_hint, section_status
from learnscope.plugins.views.sprite_files import KeptSprite
from learnscope.run_directory.endings import error_text
from learnscope.run_directory.record import RecordReader
from learnscope.storage import RecordSource, RunFolder

FORMAT = "learnscope-view/2"
# Points per key animated by default in the learnscope tab, where WebGL draws them
# (static/scatter_gl.js; a 2-D canvas where WebGL is missing); more are subsampled by id, saying
# so. At 100,000 points x 50 snapshots the tab's /view response is 27.7 MB (float16
# coordinates) and the tab opens in about 0.8 s (BENCHMARKS.md, issue 24). The export command
# keeps 5,000 (its --max-points default): 100,000 x 50 would be a 28 MB page to share.
MAX_POINTS = 100_000
MAX_DAMAGE_MESSAGES = 20  # damaged entries named one by one; the rest are counted


@dataclass
class DamageLog:
    """The damaged entries skipped: the first ones named, the rest counted."""

    named: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, message: str) -> None:
        """Note one skipped entry."""
        self.count += 1
        if len(self.named) < MAX_DAMAGE_MESSAGES:
            self.named.append(message)

    def messages(self) -> list[str]:
        """The named entries, and how many more there were."""
        more = self.count - len(self.named)
        return [*self.named, *([f"... and {more} more damaged entries"] if more > 0 else [])]


class RunModel:
    """The view model of one run, kept up to date from its record, reading only new lines.

    Args:
        run_dir: The folder that holds the run record (a TensorBoard run directory, a wandb
            run's ``files`` folder): a local path, a URL (``s3://bucket/runs/version_0``) or
            a run folder.
        max_points: The most points per key drawn (a fixed subsample by id beyond).
        sprites: Include the thumbnails of each key's newest snapshot (as a PNG data URL).
        name: The run's name in the view; the folder's name by default.
        source: Where the record's bytes come from; the folder's
            :meth:`~learnscope.storage.RunFolder.record_source` by default (the learnscope tab
            gives one that reads an object store's record only when its search saw it change).

    Raises:
        MissingFileSystem: A URL whose file-system package is not installed.

    Example:
        >>> import tempfile
        >>> from learnscope.run_directory.file_names import RECORD_FILE
        >>> from learnscope.run_directory.record import append_entries
        >>> run = Path(tempfile.mkdtemp())
        >>> append_entries(run / RECORD_FILE, [{"kind": "run", "format": 1, "time": 1.0,
        ...     "callbacks": [{"name": "EmbeddingProjector", "settings": {}}]}])
        >>> view = RunModel(run)
        >>> view.view()["status"]["embeddings"]
        'waiting for the first snapshot'
        >>> append_entries(run / RECORD_FILE, [{"kind": "end", "step": 8, "status": "finished"}])
        >>> view.view()["status"]["embeddings"]
        'EmbeddingProjector wrote no snapshot in this run'
    """

    def __init__(
        self,
        run_dir: str | Path | RunFolder,
        max_points: int = MAX_POINTS,
        sprites: bool = True,
        name: str | None = None,
        source: RecordSource | None = None,
    ) -> None:
        if max_points < 1:
            raise ValueError(f"max_points must be at least 1, got {max_points}")
        self.folder = run_folder(run_dir)
        self.name = name if name is not None else folder_name(self.folder)
        self.max_points = max_points
        self.sprites = sprites
        self.reader = RecordReader(source if source is not None else self.folder.record_source())
        self._record_time: float | None = None  # the record's time, until it changes
        self.entries_read = 0  # entries folded since the record was first read
        self.snapshots_encoded = 0  # snapshot coordinates encoded for the view (cost measure)
        self._sprite = KeptSprite()
        self._clear()

    def _clear(self) -> None:
        self._run = RunEntries()
        self._embeddings: dict[str, EmbeddingEvolution] = {}
        self._without_pca: dict[str, int] = {}  # key -> snapshots without aligned PCA
        self._autocorrelation: dict[str, AutocorrelationSeries] = {}
        self._findings: list[dict[str, Any]] | None = None
        self._damage = DamageLog()
        self._view: dict[str, Any] | None = None

    @property
    def started(self) -> float:
        """When the newest ``run`` entry began (Unix seconds), else the record's time.

        The record's time (a local file's modification time, an object store's first
        segment's) is asked once until the record changes: no request on an object store.
        """
        if self._run.started is not None:
            return self._run.started
        if self._record_time is None:
            try:
                head = self.folder.record_head(1)
            except OSError:
                head = None
            self._record_time = head[1] if head is not None else 0.0
        return self._record_time

    def refresh(self) -> bool:
        """Fold the entries added to the record since the last call; whether any came.

        Raises:
            OSError: When the record cannot be read (it is not a regular file, say).
        """
        skipped = self.reader.skipped
        entries = read_record(self.folder, self.reader)
        if self.reader.restarted:  # the file was replaced: another run in this directory
            self._clear()
        for entry in entries:
            self.entries_read += 1
            try:
                self._fold(entry)
            except (DamagedEntry, ValueError, TypeError, KeyError, IndexError) as error:
                self._damage.add(f"{describe_entry(entry)} skipped: {error}")
        changed = bool(entries) or self.reader.skipped != skipped or self.reader.restarted
        if changed:
            self._view = None
            self._record_time = None
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

    def _fold(self, entry: dict[str, Any]) -> None:
        kind = entry["kind"]
        if kind == "run":
            self._run.fold_run(entry)
        elif self._run.newer_format:
            return
        elif kind == "snapshot":
            key, xy, ids = snapshot_fields(entry)
            if xy is None:
                self._without_pca[key] = self._without_pca.get(key, 0) + 1
                return
            projections, problems = projection_views(entry, len(xy))
            embedding = self._embeddings.get(key)
            if embedding is None:
                embedding = EmbeddingEvolution(key)
            embedding.add(entry, xy, ids, projections)
            self._embeddings[key] = embedding
            for problem in problems:  # said once the rest of the snapshot is folded
                self._damage.add(f"{describe_entry(entry)}: {problem}; shown without it")
        elif kind == "autocorrelation":
            fold_autocorrelation(self._autocorrelation, entry)
        elif kind == "findings":
            self._findings = [finding_row(row) for row in list_field(entry, "rows")]
        elif kind == "end":
            self._run.fold_end(entry)
        # other kinds are from a newer learnscope: nothing to show of them

    def _build(self) -> dict[str, Any]:
        messages: list[str] = []
        embeddings = [self._embedding_view(e, messages) for e in self._embeddings.values()]
        for key, count in self._without_pca.items():
            if key not in self._embeddings:
                hint = pca_hint(self._run)
                messages.append(f"{key}: {count} snapshot(s) without aligned PCA; {hint}")
        charted = self._run.charted_lags()
        autocorrelation = [a.view(charted) for a in self._autocorrelation.values()]
        order = {"params": 0, "grads": 1}
        autocorrelation.sort(key=lambda k: (order.get(k["kind"], 2), k["kind"]))
        status, missing = section_status(
            self._run,
            bool(embeddings),
            bool(self._without_pca),
            bool(autocorrelation),
            self._findings,
        )
        messages.extend(missing)
        failure = self._run.failure()
        ending = failure if failure is not None else self._run.interruption()
        if ending is not None:
            messages.insert(0, ending)
        if self.reader.skipped:
            messages.append(f"{self.reader.skipped} damaged line(s) of the record skipped")
        messages.extend(self._damage.messages())
        return {
            "format": FORMAT,
            "run": self.name,
            "time": self.started,
            "attached": sorted(self._run.callbacks) if self._run.count > 0 else None,
            "ended": self._run.ended,
            "failed": error_text(self._run.ended or {}) if failure is not None else None,
            "has_data": bool(embeddings or autocorrelation or self._findings),
            "embeddings": embeddings,
            "autocorrelation": autocorrelation,
            "findings": findings_view(self._findings or []),
            "status": status,
            "messages": messages,
        }

    def _embedding_view(self, embedding: EmbeddingEvolution, messages: list[str]) -> dict[str, Any]:
        entry = embedding.last or {}
        sprite, notes = None, ()
        if self.sprites and entry.get("sprite") is not None:
            try:
                sprite = self._sprite.view(self.folder, entry["sprite"])
            except DamagedEntry as error:
                step = embedding.snapshots[-1].step
                notes = (f"step {step}: thumbnails not shown: {error}",)
        view, encoded = embedding.view(self.max_points, sprite, notes)
        self.snapshots_encoded += encoded
        messages.extend(f"{embedding.key}: {note}" for note in view["notes"])
        return view


def read_record(folder: RunFolder, reader: RecordReader) -> list[dict[str, Any]]:
    """The entries ``reader`` finds added to ``folder``'s record; a local link is refused.

    Raises:
        OSError: When the record cannot be read: a local record that is a symbolic link or
            not a regular file (said with the record's name, not its full path), or an object
            store that fails.

    Example:
        >>> import tempfile
        >>> from learnscope.run_directory.file_names import RECORD_FILE
        >>> folder = run_folder(tempfile.mkdtemp())
        >>> (Path(folder.location) / RECORD_FILE).symlink_to("/etc/passwd")
        >>> read_record(folder, RecordReader(folder.record_source()))
        Traceback (most recent call last):
        ...
        OSError: learnscope_record.jsonl is a symbolic link (links are not followed)
    """
    return reader.read()  # the folder's source says what is wrong, without full paths


def read_view(
    run_dir: str | Path | RunFolder, max_points: int = MAX_POINTS, sprites: bool = True
) -> dict[str, Any]:
    """The view model of one run directory (see :class:`RunModel`), read once.

    Args:
        run_dir: A folder with a run record: a local path, a URL or a run folder.
        max_points: The most points per key drawn.
        sprites: Include the thumbnails of each key's newest snapshot.

    Returns:
        A dict that ``json.dumps`` takes: ``format``, ``run``, ``time``, ``attached``,
        ``ended`` (the newest run's ``end`` entry: ``step``, ``status``, and a failed run's
        ``error``), ``failed`` (a failed run's ``type: message``, else ``None``),
        ``has_data`` (any snapshot, analysis or findings table shown), ``embeddings``,
        ``autocorrelation``, ``findings`` (each row with ``holds`` and ``life``:
        :func:`~learnscope.plugins.views.findings_fold.findings_view`), ``status``,
        ``messages``.

    Raises:
        OSError: When the record cannot be read.

    Example:
        >>> import tempfile
        >>> view = read_view(tempfile.mkdtemp())
        >>> view["embeddings"], view["status"]["embeddings"]
        ([], 'no embedding snapshots in this run')
    """
    return RunModel(run_dir, max_points, sprites).view()


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
        "failed": None,
        "has_data": False,
        "embeddings": [],
        "autocorrelation": [],
        "findings": [],
        "status": {"embeddings": text, "autocorrelation": text, "findings": text},
        "messages": [text],
    }
