"""Weights & Biases writer: embedding tables for the 2D-projection panel, and scalars.

The writer appends to the run record of the run's files folder, which the W&B dashboard's entry
makes (one per folder) and hands it. The view page made from that record is logged by its own
consumer of the records, :class:`~learnscope.plugins.wandb.page_writer.WandbPageWriter`, which a
W&B logger gets beside this one. After each snapshot, findings table, autocorrelation analysis
and the run's end, the record's summary goes into the run's summary (``learnscope/...``, the runs
table's columns) and each finding code seen becomes a tag of the run (``learnscope:<code>``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from learnscope import records
from learnscope.optional import import_optional
from learnscope.plugins.pipeline.base import FINDING_COLUMNS, Writer, finding_table
from learnscope.plugins.pipeline.disk_reserve import snapshot_bytes, writer_reserve
from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter, record_writer
from learnscope.plugins.wandb.scatter import scatter_chart
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.storage import open_run_folder
from learnscope.tags import EMBEDDINGS, FINDINGS, WANDB_STEP

STEP_KEY = WANDB_STEP  # the x axis Lightning's WandbLogger defines
TAG_PREFIX = "learnscope:"  # a run's tag per finding code: learnscope:<code>

log = logging.getLogger("learnscope")

MAX_TABLE_ROWS = 10_000  # wandb's cap for a table logged in a run
HISTOGRAM_BINS = 64  # wandb takes at most 512
# Columns write_embedding adds itself: metadata columns with these names are renamed.
RESERVED_COLUMNS = ("embedding", "step", "stage", "image")


class WandbWriter(Writer):
    """Write learnscope records into a wandb run.

    Every call logs on the same step axis as Lightning's ``WandbLogger``: the trainer step goes
    in the ``trainer/global_step`` key, never as ``step=``, which wandb drops ("Step must only
    increase") once the run's own step has moved past it.

    The writer keeps the run record, ``learnscope_record.jsonl``, in the run's own files
    folder (``run.dir``, uploaded with the run; see
    :class:`~learnscope.plugins.pipeline.run_record_writer.RunRecordWriter`); the training-dynamics
    view page made from that record (``~learnscope/view``) is logged by a
    :class:`~learnscope.plugins.wandb.page_writer.WandbPageWriter` placed after this writer.

    Args:
        run: The ``wandb`` run, such as ``WandbLogger.experiment`` or what ``wandb.init``
            returned.
        record: The run record of the run's files folder (the W&B dashboard's entry makes it:
            see :func:`~learnscope.plugins.pipeline.run_record_writer.record_writer`); its
            free-space reserve is this writer's too. By default the writer makes its own.
        limits: The free-space reserve to keep (``reserve_fraction``, ``reserve_min_bytes``);
            a ``record`` given has the same (see
            :func:`~learnscope.plugins.pipeline.disk_reserve.writer_reserve`).

    Example:
        >>> import os, tempfile, torch, wandb  # doctest: +SKIP
        >>> os.environ["WANDB_MODE"] = "offline"  # doctest: +SKIP
        >>> run = wandb.init(dir=tempfile.mkdtemp())  # doctest: +SKIP
        >>> labels = {"label": list("abcdabcd")}  # doctest: +SKIP
        >>> vectors = torch.randn(8, 3)  # doctest: +SKIP
        >>> snapshot = records.EmbeddingSnapshot("encoder", 0, vectors, labels)  # doctest: +SKIP
        >>> WandbWriter(run).write_embedding(snapshot)  # doctest: +SKIP
    """

    def __init__(
        self, run: Any, record: RunRecordWriter | None = None, limits: WriteLimits = WriteLimits()
    ) -> None:
        self.wandb = import_optional("wandb", "wandb")
        self.run = run
        self.folder = open_run_folder(run.dir)  # the run's files: gone, the writer is switched off
        self.record = record_writer(self.folder, limits) if record is None else record
        if not self.record.folder.same_as(self.folder):
            raise ValueError(
                f"the run record given is {self.record.location}'s, not the run's files folder "
                f"{self.folder.location}: the writer keeps the record of its run"
            )
        # large records leave the disk's last space
        self.reserve = writer_reserve(self.record.reserve, self.folder, limits)
        self._warned_renames: set[str] = set()  # keys whose renamed columns were said
        self._summary_names: set[str] = set()  # the names of the run summary it last set

    def write_embedding(self, snapshot: records.EmbeddingSnapshot) -> None:
        """Log a table with columns ``embedding``, ``step``, ``stage``, metadata, ``image``.

        More than 10,000 rows are subsampled deterministically, with a warning. A snapshot with
        ``pca_x``/``pca_y`` columns also gets a scatter chart
        ``~learnscope/embeddings/<key>/pca_scatter`` coloured by its first metadata column (see
        ``learnscope.plugins.wandb.scatter``), and one with an aligned UMAP view another,
        ``.../umap_scatter``.

        A metadata column named like one of the writer's own columns (``embedding``, ``step``,
        ``stage``, ``image``) would give the table two columns of one name; it is renamed
        ``metadata_<name>`` (see :func:`table_column_names`), with one warning per writer and
        embedding.

        The run record gets the whole snapshot, every row. A snapshot that would leave less
        than the free-space reserve (the writer's ``limits``) is skipped, raising
        :class:`~learnscope.plugins.pipeline.base.RecordSkipped`; the first one with a warning.
        """
        self.reserve.check(snapshot_bytes(snapshot), f"snapshot {snapshot.key}")
        whole = snapshot  # the run record keeps every row
        if snapshot.num_points > MAX_TABLE_ROWS:
            log.warning(
                "learnscope: %s has %d rows; a wandb table holds at most %d, keeping a fixed "
                "subsample",
                snapshot.key,
                snapshot.num_points,
                MAX_TABLE_ROWS,
            )
            snapshot = snapshot.subsample(MAX_TABLE_ROWS)
        given = snapshot.metadata_columns()  # the aligned view's columns too
        names = table_column_names(list(given))
        renamed = {old: new for old, new in names.items() if old != new}
        if renamed and snapshot.key not in self._warned_renames:
            self._warned_renames.add(snapshot.key)
            log.warning(
                "learnscope: metadata columns of %s clash with the wandb table's own columns "
                "and are renamed: %s",
                snapshot.key,
                ", ".join(f"{old!r} -> {new!r}" for old, new in renamed.items()),
            )
        metadata = {names[name]: col for name, col in given.items()}
        columns = ["embedding", "step", "stage", *metadata]
        data_columns: list[Any] = [
            # one numpy row per cell: wandb types the column once (ndarray of D numbers)
            # instead of checking D Python floats in every row
            list(snapshot.vectors_numpy()),
            [snapshot.step] * snapshot.num_points,
            [snapshot.stage or ""] * snapshot.num_points,
            *metadata.values(),
        ]
        images = snapshot.images_uint8()
        if images is not None:
            columns.append("image")
            data_columns.append([self.wandb.Image(_image_for_wandb(img)) for img in images])
        rows = [list(row) for row in zip(*data_columns, strict=True)]
        table = self.wandb.Table(columns=columns, data=rows)
        key = wandb_key(snapshot.key)
        logged: dict[str, Any] = {f"{EMBEDDINGS}/{key}": table, STEP_KEY: snapshot.step}
        projections = ("pca", *(view.projection for view in snapshot.projections))
        for projection in projections:  # each aligned view also gets a scatter chart
            chart = scatter_chart(self.wandb, metadata, key, snapshot.step, projection)
            if chart is not None:
                logged[f"{EMBEDDINGS}/{key}/{projection}_scatter"] = chart
        self.run.log(logged)
        self.record.write_embedding(whole)
        self._update_summary()

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Log ``scalars`` with ``trainer/global_step`` set to ``step``."""
        self.run.log({**scalars, STEP_KEY: step})

    def write_histogram(self, histogram: records.Histogram) -> None:
        """Log a ``wandb.Histogram`` of the finite values (nothing when there are none)."""
        values = histogram.finite_values()
        if values.size:
            counts, edges = np.histogram(values, bins=min(HISTOGRAM_BINS, max(values.size, 1)))
            hist = self.wandb.Histogram(np_histogram=(counts, edges))
            self.run.log({histogram.tag: hist, STEP_KEY: histogram.step})

    def write_autocorrelation(self, summary: records.AutocorrelationSummary) -> None:
        """Log the scalars and a line-series chart per kind (``wandb_autocorrelation``)."""
        from learnscope.plugins.wandb.autocorrelation import autocorrelation_log

        self.run.log(autocorrelation_log(self.wandb, summary, STEP_KEY))
        self.record.write_autocorrelation(summary)
        self._update_summary()

    def write_image(self, image: records.RenderedImage) -> None:
        """Log a ``wandb.Image``."""
        self.run.log({image.tag: self.wandb.Image(image.pixels), STEP_KEY: image.step})

    def write_findings(self, findings: Sequence[records.Finding], step: int) -> None:
        """Log the findings as a table (wandb tables cannot be appended to: the whole list).

        The table also goes into the run record.

        Each row says when the finding was seen, whether it still holds and what to try, those
        still holding first (:func:`~learnscope.plugins.pipeline.base.finding_table`). With no
        finding the table has one row saying so (``no-findings``), as TensorBoard's Text tab
        says "No findings", instead of an empty table.
        """
        rows = finding_table(findings)
        if not rows:
            nothing = "No findings: nothing looks wrong so far."
            rows = [[step, "info", "no-findings", "", False, "", nothing, "nothing"]]
        table = self.wandb.Table(columns=list(FINDING_COLUMNS), data=rows)
        self.run.log({FINDINGS: table, STEP_KEY: step})
        self.record.write_findings(findings, step)
        self._update_summary()

    def write_run_start(self, run: records.RunStart) -> None:
        """Start a run in the run record: the attached callbacks and their settings."""
        self.record.write_run_start(run)

    def write_run_end(self, end: records.RunEnd) -> None:
        """End the run in the run record, and put its final summary in the run's summary."""
        self.record.write_run_end(end)
        self._update_summary()

    def close(self) -> None:
        """End the run record (the wandb run stays open), updating the run's summary if it ends."""
        before = self.record.summary()
        self.record.close()
        if self.record.summary() != before:
            self._update_summary()

    def _update_summary(self) -> None:
        """Put the run record's summary in the run's summary and tag the run by finding code.

        The names are :meth:`~learnscope.run_directory.summary.RunSummary.flat`'s
        (``learnscope/...``, see ``docs/summary.md``); only those names are set, so nothing
        ``WandbLogger`` or the user put in the summary (or a ``define_metric``) is touched.
        A name this writer set that the summary no longer has (a tau that became ``null`` at
        the newest analysis) is removed, so the run's summary is the record's, no older value.
        Each finding code seen gets the tag ``learnscope:<code>``, added to the run's tags.
        """
        summary = self.record.summary()
        flat = summary.flat()
        for gone in self._summary_names - flat.keys():  # a value the record no longer has
            del self.run.summary[gone]
        self.run.summary.update(flat)
        self._summary_names = set(flat)
        tags = {f"{TAG_PREFIX}{count.code}" for count in summary.findings if count.seen}
        held = set(self.run.tags or ())
        if not tags <= held:
            self.run.tags = tuple(sorted(held | tags))

    def describe(self) -> str:
        """``WandbWriter(<run id>)``."""
        return f"WandbWriter({getattr(self.run, 'id', '?')})"

    def permanent_failure(self, error: Exception) -> str | None:
        """Its wandb run has finished, or its files folder (the run record's) is gone."""
        return run_finished(error) or self.record.permanent_failure(error)


def run_finished(error: Exception) -> str | None:
    """``"its wandb run has finished"`` for what a finished wandb run raises, else ``None``.

    Every method of a finished run raises ``wandb.errors.UsageError`` ("Run (<id>) is
    finished. The call to `log` will be ignored. ..."); wandb has no public attribute that
    says a run has finished.

    Example:
        >>> from wandb.errors import UsageError
        >>> run_finished(UsageError("Run (x1) is finished. The call to `log` will be ignored."))
        'its wandb run has finished'
        >>> run_finished(UsageError("wandb.init() has not been called")) is None
        True
    """
    from wandb.errors import UsageError

    if isinstance(error, UsageError) and "is finished" in str(error):
        return "its wandb run has finished"
    return None


def run_mode(run: Any) -> str:
    """``"disabled"``, ``"offline"`` or ``"online"``: the mode of a wandb run, from its settings.

    Never reads ``run.url``, which makes wandb print "URL not available in offline run".

    Example:
        >>> class OfflineRun:
        ...     disabled, offline = False, True
        >>> run_mode(OfflineRun()), run_mode(object())
        ('offline', 'online')
    """
    if getattr(run, "disabled", False) is True:  # WANDB_MODE=disabled: wandb's NoopRun
        return "disabled"
    if getattr(run, "offline", False) is True:
        return "offline"
    return "online"


def disabled_by(environ: Mapping[str, str] | None = None) -> str:
    """What disabled W&B, in the user's words: ``WANDB_MODE=disabled``, else the run's mode.

    Args:
        environ: Where to look for ``WANDB_MODE``; the process environment by default.

    Example:
        >>> disabled_by({"WANDB_MODE": "disabled"}), disabled_by({})
        ('WANDB_MODE=disabled', 'mode="disabled"')
    """
    mode = (os.environ if environ is None else environ).get("WANDB_MODE", "")
    return "WANDB_MODE=disabled" if mode.strip().lower() == "disabled" else 'mode="disabled"'


def wandb_key(tag: str) -> str:
    r"""``tag`` as a wandb key that is also a valid artifact path (wandb stores tables as files).

    Backslashes become ``/``; empty, ``.`` and ``..`` components become ``_``.

    Example:
        >>> wandb_key("../../escape/..\\enc/validate")
        '_/_/escape/_/enc/validate'
    """
    parts = tag.replace("\\", "/").split("/")
    return "/".join("_" if part in ("", ".", "..") else part for part in parts)


def table_column_names(metadata: Sequence[str]) -> dict[str, str]:
    """Metadata column name to its name in the embedding table, clear of the writer's own.

    A name in :data:`RESERVED_COLUMNS` gets the prefix ``metadata_`` (again, until it is
    unused by any other column).

    Example:
        >>> table_column_names(["label", "step", "metadata_step"])
        {'label': 'label', 'step': 'metadata_metadata_step', 'metadata_step': 'metadata_step'}
    """
    taken = set(RESERVED_COLUMNS) | {name for name in metadata if name not in RESERVED_COLUMNS}
    names = {}
    for name in metadata:
        new = name
        if name in RESERVED_COLUMNS:
            while new in taken:
                new = f"metadata_{new}"
            taken.add(new)
        names[name] = new
    return names


def _image_for_wandb(image: np.ndarray) -> np.ndarray:
    """``[H, W, C]`` uint8 to what ``wandb.Image`` takes: ``[H, W]`` for grey, else as is."""
    return image[:, :, 0] if image.shape[2] == 1 else image
