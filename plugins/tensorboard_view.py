"""learnscope's own TensorBoard tab: a dynamic plugin serving the training-dynamics view.

TensorBoard finds it through the ``tensorboard_plugins`` entry point (``pip install
learnscope[tensorboard]``) and shows a **learnscope** tab when a run under ``--logdir`` holds
learnscope data. The tab is one ES module (``static/learnscope_view.js``) that TensorBoard loads
in an iframe and that fetches, relative to ``data/plugin/learnscope/``:

* ``/index.js``: the module;
* ``/runs``: the runs with learnscope data (JSON list of names relative to the log directory);
* ``/view?run=NAME``: that run's view model (:func:`learnscope.plugins.dynamics_data.read_view`).

Views are read from the files learnscope wrote, and read again only when a file of the run
changed (its projector config or an event file).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from learnscope.plugins import dynamics_data

PLUGIN_NAME = "learnscope"


class LearnscopePlugin(base_plugin.TBPlugin):
    """The learnscope tab: embedding evolution, autocorrelation and findings of each run.

    Args:
        context: TensorBoard's ``TBContext``; only ``logdir`` is used.

    Example:
        >>> import tempfile
        >>> plugin = LearnscopePlugin(base_plugin.TBContext(logdir=tempfile.mkdtemp()))
        >>> plugin.is_active(), sorted(plugin.get_plugin_apps())
        (False, ['/index.js', '/runs', '/view'])
    """

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self.logdir = Path(context.logdir) if context.logdir else None
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple, dict]] = {}

    def get_plugin_apps(self) -> dict[str, Any]:
        """The routes, under ``data/plugin/learnscope/``."""
        return {"/index.js": self._serve_js, "/runs": self._serve_runs, "/view": self._serve_view}

    def is_active(self) -> bool:
        """Whether some run under the log directory holds learnscope data."""
        return bool(self.runs())

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        """An ES module front end, in a tab named ``learnscope``."""
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="learnscope")

    def runs(self) -> list[str]:
        """The runs with learnscope data, relative to the log directory (``.`` for itself)."""
        if self.logdir is None or "://" in str(self.logdir):
            return []
        return dynamics_data.find_runs(self.logdir)

    def view(self, run: str) -> dict[str, Any] | None:
        """The view model of ``run``, or ``None`` when it is not one of :meth:`runs`."""
        if run not in self.runs():
            return None
        run_dir = self.logdir / run  # type: ignore[operator]
        stamp = _stamp(run_dir)
        with self._lock:
            cached = self._cache.get(run)
            if cached is not None and cached[0] == stamp:
                return cached[1]
        view = dynamics_data.read_view(run_dir)
        view["run"] = run
        with self._lock:
            self._cache[run] = (stamp, view)
        return view

    @wrappers.Request.application
    def _serve_js(self, request: wrappers.Request) -> wrappers.Response:
        return wrappers.Response(dynamics_data.module_source(), content_type="text/javascript")

    @wrappers.Request.application
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        return _json(self.runs())

    @wrappers.Request.application
    def _serve_view(self, request: wrappers.Request) -> wrappers.Response:
        run = request.args.get("run")
        view = self.view(run) if run else None
        if view is None:
            return _json({"error": f"no learnscope run named {run!r}"}, status=404)
        return _json(view)


def _json(value: Any, status: int = 200) -> wrappers.Response:
    return wrappers.Response(
        json.dumps(value, separators=(",", ":")), status=status, content_type="application/json"
    )


def _stamp(run_dir: Path) -> tuple:
    """Names, sizes and modification times of the files a view is read from."""
    files = [run_dir / dynamics_data.CONFIG_NAME, *sorted(run_dir.glob("*tfevents*"))]
    out = []
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((path.name, st.st_size, st.st_mtime_ns))
    return tuple(out)
