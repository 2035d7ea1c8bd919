"""The training-dynamics view as a W&B HTML panel (``wandb.Html`` under ``learnscope/view``).

The page is the same as ``learnscope export`` writes: the view model inline and the module
inline, loading nothing from the network. W&B stores each HTML file as a media file of the run,
so the page is kept small: at most ``max_points`` points per tag and no thumbnails; when a run
has more points, the page says that a fixed subsample is shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from learnscope.plugins import dynamics_data

VIEW_KEY = "learnscope/view"
MAX_POINTS = 2_000  # points per tag in the W&B page
MAX_BYTES = 8_000_000  # a page larger than this is made again with fewer points


def wandb_view_html(run_dir: str | Path, max_points: int = MAX_POINTS) -> str:
    """The self-contained view page of one TensorBoard run directory, within W&B's limits.

    Args:
        run_dir: The run directory learnscope's TensorBoard writer filled.
        max_points: The most points per tag (fewer when the page would pass 8 MB).

    Returns:
        The HTML text.

    Example:
        >>> import tempfile
        >>> "learnscope-data" in wandb_view_html(tempfile.mkdtemp())
        True
    """
    run_dir = Path(run_dir)
    while True:
        view = dynamics_data.read_view(run_dir, max_points=max_points, sprites=False)
        page = dynamics_data.page_html([(run_dir.name, view)])
        if len(page.encode("utf-8")) <= MAX_BYTES or max_points <= 100:
            return page
        max_points //= 2


def log_view(run: Any, run_dir: str | Path, step: int, step_key: str) -> None:
    """Log the view page of ``run_dir`` to the wandb ``run`` as ``wandb.Html``.

    Args:
        run: A ``wandb`` run (``wandb.init()``'s result).
        run_dir: The TensorBoard run directory to show.
        step: The trainer step, logged under ``step_key`` (never as wandb's own ``step=``,
            which wandb drops once its step has passed it).
        step_key: The step axis key, ``trainer/global_step``.
    """
    import wandb

    html = wandb.Html(wandb_view_html(run_dir), inject=False)
    run.log({VIEW_KEY: html, step_key: step})
