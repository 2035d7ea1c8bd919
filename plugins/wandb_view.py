"""The training-dynamics view as a W&B HTML panel (``wandb.Html`` under ``~learnscope/view``).

The page is the same as ``learnscope export`` writes: the view model inline and the module
inline, loading nothing from the network. It is built from the run record the W&B writer
keeps in the wandb run's own files folder, so it needs no TensorBoard. Each W&B writer owns
one :class:`ViewPage`, which keeps the view of its record between calls and brings it up to
date from the lines added since, so making the page costs the same after ten snapshots as
after five hundred (but for the page itself); the view goes with the writer. W&B stores
each HTML file as a media file of the run and keeps every copy, so the W&B writer logs it at
most once a minute and once, final, at the end (see ``WandbWriter``), and the page is small:
at most ``max_points`` points per key, no thumbnails, and at most ``MAX_SNAPSHOTS`` snapshots
per key (evenly spaced, first and last kept), fewer when the page would pass 8 MB; so a page
costs the same after a hundred snapshots as after a thousand. What is left out is said on the
page; the TensorBoard tab and ``learnscope export`` show every snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from learnscope.plugins.run_view import RunView
from learnscope.plugins.view_page import page_html, thin_snapshots
from learnscope.tags import VIEW

VIEW_KEY = VIEW
MAX_POINTS = 2_000  # points per key in the W&B page
MAX_BYTES = 8_000_000  # a larger page shows fewer snapshots
MAX_SNAPSHOTS = 100  # per key in the W&B page: its cost and size stop growing with the run


class ViewPage:
    """The view page of one run record; its view is kept and read on from where it stopped.

    Args:
        record_dir: The folder of the record (the W&B writer's: the wandb run's files folder).
        max_points: The most points per key.

    Example:
        >>> import tempfile
        >>> page = ViewPage(tempfile.mkdtemp())
        >>> "learnscope-data" in page.html()
        True
    """

    def __init__(self, record_dir: str | Path, max_points: int = MAX_POINTS) -> None:
        self.record_dir = Path(record_dir)
        self.run_view = RunView(record_dir, max_points, sprites=False)  # no thumbnails

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
            folder = self.record_dir.resolve()
            name = folder.parent.name if folder.name == "files" else folder.name
        view = thin_snapshots({**self.run_view.view(), "run": name}, MAX_SNAPSHOTS)
        page = page_html([(name, view)])
        size = len(page.encode("utf-8"))
        most = max((len(e["steps"]) for e in view["embeddings"]), default=0)
        while size > MAX_BYTES and most > 2:
            most = max(2, int(most * MAX_BYTES / size * 0.9))
            page = page_html([(name, thin_snapshots(view, most))])
            size = len(page.encode("utf-8"))
        return page

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
    """The view page of the run record in ``record_dir``, read whole (see :meth:`ViewPage.html`).

    Example:
        >>> import tempfile
        >>> "learnscope-data" in wandb_view_html(tempfile.mkdtemp())
        True
    """
    return ViewPage(record_dir, max_points).html(name)
