"""The training-dynamics view as a W&B HTML panel (``wandb.Html`` under ``~learnscope/view``).

The page is the same as ``learnscope export`` writes: the view model inline and the module
inline, loading nothing from the network. It is built from the run record the W&B writer
keeps in the wandb run's own files folder, so it needs no TensorBoard, by its own consumer of
the records: :class:`WandbPageWriter`, a writer placed after the W&B writer, which owns one
:class:`RecordPage`. The page keeps the view of its record between calls and brings it up to
date from the lines added since, so making the page costs the same after ten snapshots as
after five hundred (but for the page itself). W&B stores each HTML file as a media file of the
run and keeps every copy, so the page is logged at most once a minute and once, final, at the
end, and it is small:
at most ``max_points`` points per key, no thumbnails, and at most ``MAX_SNAPSHOTS`` snapshots
per key (evenly spaced, first and last kept), fewer when the page would pass 8 MB; so a page
costs the same after a hundred snapshots as after a thousand (a page too large is made once more
with the snapshots that fit). What is left out is said on the
page; the TensorBoard tab and ``learnscope export`` show every snapshot.

**Why from the record, not from the records this writer is handed**: the page shows the run's
whole record (a resumed run's snapshots and analyses from before the resume, the ``run`` and
``end`` entries, the findings of every callback), much of which this writer is never handed,
and it must be the page ``learnscope export`` makes of the same record. Folding the records in
memory would be a second view model to keep equal to the first; the page reads the lines added
since its last copy instead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from learnscope import records
from learnscope.plugins.pipeline.base import Writer
from learnscope.plugins.views.run_view import RunModel
from learnscope.plugins.views.view_page import page_html, thin_snapshots
from learnscope.plugins.wandb.writer import run_finished
from learnscope.tags import VIEW, WANDB_STEP

VIEW_KEY = VIEW
MAX_POINTS = 2_000  # points per key in the W&B page
MAX_BYTES = 8_000_000  # a larger page shows fewer snapshots
MAX_SNAPSHOTS = 100  # per key in the W&B page: its cost and size stop growing with the run
VIEW_EVERY_S = 60.0  # while the run goes on, the view page is logged at most once a minute
STEP_KEY = WANDB_STEP  # the x axis Lightning's WandbLogger defines


class WandbPageWriter(Writer):
    """Logs the view page of a wandb run's learnscope record as ``~learnscope/view``.

    It writes no record itself: placed after the
    :class:`~learnscope.plugins.wandb.writer.WandbWriter` of the same run (which appends each
    record to the run record first), it notes which step a snapshot or an analysis brought, and
    logs the page made from the record (its :class:`RecordPage`) after the first one, then at most
    once every ``view_every_s`` seconds while new ones come (at a flush, so that one page follows a
    snapshot and its picture), and once more, final, when it closes: that copy holds the run's end.

    Args:
        run: The ``wandb`` run (its files folder ``run.dir`` holds the record).
        view_every_s: The least time between two copies of the page while the run goes on.
        clock: Seconds from any fixed origin (``time.monotonic`` by default).

    Example:
        >>> import os, tempfile, wandb  # doctest: +SKIP
        >>> from learnscope.plugins import Writers  # doctest: +SKIP
        >>> from learnscope.plugins.wandb.writer import WandbWriter  # doctest: +SKIP
        >>> run = wandb.init(mode="offline", dir=tempfile.mkdtemp())  # doctest: +SKIP
        >>> writers = Writers([WandbWriter(run), WandbPageWriter(run)])  # doctest: +SKIP
    """

    def __init__(
        self,
        run: Any,
        view_every_s: float = VIEW_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run = run
        self.page = RecordPage(Path(run.dir))
        self.view_every_s = view_every_s
        self.clock = clock
        self._due: int | None = None  # step of a snapshot or analysis not yet in the page
        self._logged: float | None = None  # when the page was last logged (``clock``)
        self._step = 0  # the newest step written: the final page's
        self._closed = False

    def write_embedding(self, snapshot: records.EmbeddingSnapshot) -> None:
        """A snapshot of ``snapshot.step`` is in the record: the page is due."""
        self._note(snapshot.step, due=True)

    def write_autocorrelation(self, summary: records.AutocorrelationSummary) -> None:
        """An analysis of ``summary.step`` is in the record: the page is due."""
        self._note(summary.step, due=True)

    def write_findings(self, findings: Sequence[records.Finding], step: int) -> None:
        """The findings table of ``step`` is in the record (shown by the next page)."""
        self._note(step, due=False)

    def write_run_end(self, end: records.RunEnd) -> None:
        """The run's end is in the record (shown by the final page)."""
        self._note(end.step, due=False)

    def flush(self) -> None:
        """Log the page when it is due and its last copy is ``view_every_s`` old (or none)."""
        last = self._logged
        if self._due is not None and (last is None or self.clock() - last >= self.view_every_s):
            self._log(self._due)

    def close(self) -> None:
        """Log the final page (the wandb run stays open)."""
        if not self._closed:
            self._closed = True
            self._log(self._step)

    def describe(self) -> str:
        """``WandbPageWriter(<run id>)``."""
        return f"WandbPageWriter({getattr(self.run, 'id', '?')})"

    def permanent_failure(self, error: Exception) -> str | None:
        """Its wandb run has finished (or the base's reasons)."""
        return run_finished(error) or super().permanent_failure(error)

    def _note(self, step: int, due: bool) -> None:
        self._step = max(self._step, step)
        if due:
            self._due = step

    def _log(self, step: int) -> None:
        self._due = None
        self._logged = self.clock()
        self.page.log(self.run, step, STEP_KEY)


class RecordPage:
    """The view page of one run record; its view is kept and read on from where it stopped.

    Args:
        record_dir: The folder of the record (the W&B writer's: the wandb run's files folder).
        max_points: The most points per key.

    Example:
        >>> import tempfile
        >>> page = RecordPage(tempfile.mkdtemp())
        >>> "learnscope-data" in page.html()
        True
    """

    def __init__(self, record_dir: str | Path, max_points: int = MAX_POINTS) -> None:
        self.record_dir = Path(os.path.abspath(record_dir))  # no file touched: a name
        self.run_view = RunModel(record_dir, max_points, sprites=False)  # no thumbnails

    def html(self, name: str | None = None) -> str:
        """The self-contained view page of the record, within W&B's limits.

        Args:
            name: The run's name on the page; by default the folder's (its parent's for a
                wandb ``files`` folder).

        Returns:
            The HTML text.

        Raises:
            OSError: When the record cannot be read.
        """
        if name is None:
            folder = self.record_dir
            name = folder.parent.name if folder.name == "files" else folder.name
        view = thin_snapshots({**self.run_view.view(), "run": name}, MAX_SNAPSHOTS)
        page = page_html([(name, view)])
        size = len(page.encode("utf-8"))
        most = max((len(e["steps"]) for e in view["embeddings"]), default=0)
        if size <= MAX_BYTES or most <= 2:
            return page
        # One more page at most: the snapshots' coordinates are what grows with them, so the
        # rest of the page stays and the snapshots kept share the room left.
        coordinates = sum(
            len(xy)
            for e in view["embeddings"]
            for shown in (e, *e.get("projections", ()))
            for xy in shown["xy"]
        )
        room = max(MAX_BYTES - (size - coordinates), 0) * 0.95
        most = max(2, int(most * room / coordinates)) if coordinates else 2
        return page_html([(name, thin_snapshots(view, most))])

    def log(self, run: Any, step: int, step_key: str) -> None:
        """Log the page to the wandb ``run`` as ``wandb.Html`` under ``~learnscope/view``.

        Args:
            run: A ``wandb`` run (``wandb.init()``'s result).
            step: The trainer step, logged under ``step_key`` (never as wandb's own ``step=``,
                which wandb drops once its step has passed it).
            step_key: The step axis key, ``trainer/global_step``.

        Raises:
            OSError: When the record cannot be read.
        """
        import wandb

        name = getattr(run, "name", None) or getattr(run, "id", None)
        html = wandb.Html(self.html(name), inject=False)
        run.log({VIEW_KEY: html, step_key: step})


def wandb_view_html(
    record_dir: str | Path, max_points: int = MAX_POINTS, name: str | None = None
) -> str:
    """The view page of the run record in ``record_dir``, read whole (see :meth:`RecordPage.html`).

    Example:
        >>> import tempfile
        >>> "learnscope-data" in wandb_view_html(tempfile.mkdtemp())
        True
    """
    return RecordPage(record_dir, max_points).html(name)
