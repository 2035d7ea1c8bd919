"""The training-dynamics view model, read from run records: the names the views have used.

The parts live in modules of their own, and every name is importable from here as before:

* :mod:`learnscope.plugins.run_search`: ``find_runs``, ``run_started`` (runs under a log
  directory, never through a link);
* :mod:`learnscope.plugins.sprite_files`: ``read_sprite`` (thumbnails, only from inside a run);
* :mod:`learnscope.plugins.record_checks`: ``DamagedEntry`` and the checks of entries;
* :mod:`learnscope.plugins.embedding_fold`, :mod:`learnscope.plugins.autocorrelation_fold`,
  :mod:`learnscope.plugins.run_status`: the fold of each kind of entry;
* :mod:`learnscope.plugins.run_view`: ``RunView``, ``read_view``, ``error_view`` (one run's
  view model, kept up to date from the lines added to its record);
* :mod:`learnscope.plugins.view_page`: ``page_html``, ``export_html``, ``thin_snapshots``,
  ``module_source`` (the standalone page);
* :mod:`learnscope.plugins.view_modules`: the front end's ES modules, served one by one or
  joined for a page.

Nothing here imports torch, Lightning or TensorBoard.

Example:
    >>> import tempfile
    >>> read_view(tempfile.mkdtemp())["status"]["embeddings"]
    'no embedding snapshots in this run'
"""

from __future__ import annotations

from learnscope.plugins.autocorrelation_fold import CHARTED_LAGS
from learnscope.plugins.embedding_fold import subsample_ids
from learnscope.plugins.record_checks import DamagedEntry
from learnscope.plugins.run_search import SKIPPED_FOLDERS, find_runs, run_started
from learnscope.plugins.run_status import AUTOCORRELATION, HELPER, PCA_HINT, PROJECTOR
from learnscope.plugins.run_view import (
    FORMAT,
    MAX_DAMAGE_MESSAGES,
    MAX_POINTS,
    RunView,
    error_view,
    read_view,
)
from learnscope.plugins.sprite_files import MAX_SPRITE_BYTES, read_sprite
from learnscope.plugins.view_page import (
    Export,
    export_html,
    module_source,
    page_html,
    thin_snapshots,
)

__all__ = [
    "AUTOCORRELATION",
    "CHARTED_LAGS",
    "FORMAT",
    "HELPER",
    "MAX_DAMAGE_MESSAGES",
    "MAX_POINTS",
    "MAX_SPRITE_BYTES",
    "PCA_HINT",
    "PROJECTOR",
    "SKIPPED_FOLDERS",
    "DamagedEntry",
    "Export",
    "RunView",
    "error_view",
    "export_html",
    "find_runs",
    "module_source",
    "page_html",
    "read_sprite",
    "read_view",
    "run_started",
    "subsample_ids",
    "thin_snapshots",
]
