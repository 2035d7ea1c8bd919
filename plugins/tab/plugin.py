"""learnscope's own TensorBoard tab: a dynamic plugin serving the training-dynamics view.

TensorBoard finds it through the ``tensorboard_plugins`` entry point (``pip install
learnscope[tensorboard]``) and shows a **learnscope** tab when a run under ``--logdir`` holds
a learnscope run record. The tab is a few plain ES modules (``static/*.js``,
:mod:`learnscope.plugins.views.view_modules`): TensorBoard loads ``index.js`` in an iframe, which
imports the others by relative URL and fetches, relative to ``data/plugin/learnscope/``:

* ``/index.js``, ``/model.js``, ...: the modules, each at its own route;
* ``/runs``: the runs with a record, ``[{"name", "time", "failed", "has_data", "ended"}]``
  sorted by name (names relative to the log directory; ``time`` is when the run started;
  ``failed`` the exception of a newest run that failed, else ``null``; ``has_data`` whether the
  record holds any data; ``ended`` the newest run's ``end`` entry, ``{"step", "status"}``, or
  ``null`` while it has none: :func:`learnscope.plugins.views.run_search.run_outcome`), so the
  tab opens the newest run that has data, marks the failed and interrupted ones, and lists them
  apart from the others;
* ``/table``: the runs table, ``{"runs": [row, ...]}``, one row per run the search found, by
  name (:mod:`learnscope.plugins.views.runs_table`: status, error, last step,
  hyper-parameters, the run summary's columns), each run's summary kept by the plugin and
  brought up to date from what its record added (on an object store only when the search saw
  it change);
* ``/view?run=NAME``: that run's view model (:class:`learnscope.plugins.views.run_view.RunModel`);
* ``/compare?a=RUN&b=RUN&key=KEY[&key_b=KEY][&at=STEP][&step_a=STEP&step_b=STEP]``: run A's
  ``key`` beside run B's ``key_b`` (``key`` by default; A and B may be one run on two keys) on
  the points they share (:func:`learnscope.plugins.views.compare_runs.compare_runs`): at the
  step cursor ``at``, each run's newest snapshot at or before it; each run's newest without
  it; a step given is that run's.

The log directory is a local path or any fsspec URL (``tensorboard --logdir
s3://bucket/runs``; ``gs://``, ``az://``, ...), read through a
:class:`~learnscope.storage.RunFolder`. It is searched on a background thread, as TensorBoard's
own projector plugin does: ``is_active`` and ``/runs`` answer from what the last search found,
never listing the log directory on a request. A search lists each folder once and stamps each
record (a ``stat``; on an object store one listing of its segments), reading a record's first
line and end again only when its stamp changed (16 runs at once: on a store each read waits on
the network); it runs every ``reload_interval`` seconds, or
ten times as long as the last search took, whichever is longer. Each run's view is kept and
brought up to date from the lines added to its record since the last request: on a local disk
at each request (a ``stat``), on an object store only when the last search saw the record
change (:class:`SearchedRecord`), so that a request there costs no request to the store while
nothing changed, and a new segment is read once, alone. A run that cannot be read answers with
a view that says why, never with a server error; a log directory that cannot be opened (its
file-system package missing: ``s3fs``, ``gcsfs``, ...) or listed shows the tab with one entry
that says why.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from learnscope.plugins.views import run_search, view_modules
from learnscope.plugins.views.compare_runs import Comparisons, comparison_error
from learnscope.plugins.views.run_search import RecordStamp, run_of
from learnscope.plugins.views.run_view import RunModel, error_view
from learnscope.plugins.views.runs_table import RunsTable
from learnscope.run_directory.summary_file import RecordGlance, read_glance
from learnscope.storage import MissingFileSystem, RecordSource, RunFolder, open_run_folder
from learnscope.storage.object_store import SearchedRecord  # noqa: F401 (its old place)

log = logging.getLogger("learnscope")
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]  # a WSGI application (PEP 3333)

PLUGIN_NAME = "learnscope"
DEFAULT_INTERVAL_S = 5.0  # between searches of the log directory (TensorBoard's reload_interval)
MAX_VIEWS = 32  # run views kept; the least recently used goes first
SEARCH_READERS = 16  # records a search stamps and reads at once (on a store each waits)


class _SeenRecord(NamedTuple):
    """A record as a search read it: its stamp (which record, what was written), what it said."""

    stamp: RecordStamp
    start: float  # when its run started (its first line)
    outcome: dict[str, Any]  # how it ended (run_search.run_outcome)
    glance: RecordGlance | None = None  # its summary file (current or behind), if it has one


class LearnscopePlugin(base_plugin.TBPlugin):
    """The learnscope tab: embedding evolution, autocorrelation and findings of each run.

    Args:
        context: TensorBoard's ``TBContext``: ``logdir`` (a path or a URL such as
            ``s3://bucket/runs``), and ``flags.reload_interval`` (how often the log directory
            is searched again; 0 searches it once).

    Example:
        >>> import tempfile
        >>> plugin = LearnscopePlugin(base_plugin.TBContext(logdir=tempfile.mkdtemp()))
        >>> plugin.wait_for_search(10.0), plugin.is_active()
        (True, False)
        >>> sorted(name for name in plugin.get_plugin_apps() if not name.endswith(".js"))
        ['/compare', '/runs', '/table', '/view']
    """

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        logdir = context.logdir
        self.location = str(logdir or "")  # the log directory as TensorBoard was given it
        self.folder: RunFolder | None = None  # the log directory
        self._cannot_open: str | None = None  # why it cannot be opened (a package missing)
        self._search_failed: str | None = None  # why the last search failed
        if logdir:
            try:
                self.folder = open_run_folder(logdir)
            except MissingFileSystem as error:
                self._cannot_open = str(error)
                log.warning("learnscope tab: %s", error)
        interval = getattr(getattr(context, "flags", None), "reload_interval", None)
        self.interval_s = float(interval) if interval is not None else DEFAULT_INTERVAL_S
        self.search_readers = SEARCH_READERS  # runs a search stamps and reads at once
        self._runs: dict[str, float] = {}  # name -> start time; replaced whole by each search
        self._outcomes: dict[str, dict[str, Any]] = {}  # name -> run_outcome, by search
        self._seen: dict[str, _SeenRecord] = {}  # name -> its record as the last search read it
        self._searched = threading.Event()
        self._lock = threading.Lock()
        self._views: OrderedDict[str, tuple[RunModel, threading.Lock]] = OrderedDict()
        self._answers: dict[str, tuple[dict, bytes]] = {}  # run -> (its view, as JSON)
        # every run's row, kept between requests, from the summary files the search read
        self._table = RunsTable(self._source, glance_of=self._glance)
        self._table_answer: tuple[list[dict[str, Any]], bytes] | None = None  # rows, as JSON
        self._comparisons = Comparisons()  # each under _comparing: one computed at a time
        self._comparing = threading.Lock()
        self._closed = threading.Event()  # set by close(): the search ends
        self._search_thread: threading.Thread | None = None
        if self.folder is None:
            self._searched.set()
        else:
            self._search_thread = threading.Thread(
                target=self._search_loop, name="LearnscopeRunSearch", daemon=True
            )
            self._search_thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """End the background search (TensorBoard calls no such hook: it ends with the server).

        Args:
            timeout_s: The longest wait for a search under way to end.
        """
        self._closed.set()
        thread = self._search_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def get_plugin_apps(self) -> dict[str, Any]:
        """The routes under ``data/plugin/learnscope/``: the modules, runs, view, compare.

        Every route answers through :func:`secured`: each response passes TensorBoard's
        security validator.
        """
        modules = {f"/{name}": self._serve_module for name in view_modules.module_sources()}
        routes = {"/runs": self._serve_runs, "/view": self._serve_view, "/table": self._serve_table}
        apps = {**modules, **routes, "/compare": self._serve_compare}
        return {route: secured(app) for route, app in apps.items()}

    def is_active(self) -> bool:
        """Whether the last search found a run record, or there is a problem to show.

        No search here; a problem is a log directory that cannot be opened or listed.
        """
        return bool(self._runs) or self.problem is not None

    @property
    def problem(self) -> str | None:
        """Why no run can be shown: the log directory cannot be opened, or its search failed.

        ``None`` once a search found runs (a later failure keeps what was found, logged).
        """
        if self._cannot_open is not None:
            return self._cannot_open
        return self._search_failed if not self._runs else None

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        """An ES module front end, in a tab named ``learnscope``."""
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="learnscope")

    def wait_for_search(self, timeout: float) -> bool:
        """Wait until the first search of the log directory is done; whether it is."""
        return self._searched.wait(timeout)

    def runs(self) -> list[dict[str, Any]]:
        """The runs with a record, ``{"name", "time", "failed", "has_data", "ended"}``, by name.

        As the last search found them (see the module's description).
        """
        runs, outcomes = self._runs, self._outcomes
        problem = self.problem
        if problem is not None:  # the one entry, whose view says why
            problem_run = {"name": self._problem_name, "time": 0.0, "failed": problem}
            return [{**problem_run, "has_data": False, "ended": None}]
        none = {"failed": None, "has_data": False, "ended": None}
        return [{"name": n, "time": runs[n], **outcomes.get(n, none)} for n in sorted(runs)]

    def table(self) -> list[dict[str, Any]]:
        """The runs table's rows: one per run of :meth:`runs`, by name, brought up to date.

        Each run's record is read from where the last request left it
        (:class:`~learnscope.plugins.views.runs_table.RunsTable`); none while the log
        directory cannot be searched.
        """
        if self.folder is None or self.problem is not None:
            return []
        return self._table.rows([(name, run_of(self.folder, name)) for name in sorted(self._runs)])

    @property
    def _problem_name(self) -> str:
        return self.location or "learnscope"

    def view(self, run: str) -> dict[str, Any] | None:
        """The view model of ``run``, or ``None`` when it is not one of :meth:`runs`."""
        problem = self.problem
        if problem is not None and run == self._problem_name:
            view = error_view(run, problem)
            status = dict.fromkeys(view["status"], problem)
            return {**view, "failed": problem, "status": status, "messages": [problem]}
        if run not in self._runs or self.folder is None:
            return None
        with self._lock:
            held = self._views.get(run)
            if held is None:
                folder = run_of(self.folder, run)
                view = RunModel(folder, name=run, source=self._source(run, folder))
                held = self._views[run] = (view, threading.Lock())
                while len(self._views) > MAX_VIEWS:
                    old, _ = self._views.popitem(last=False)
                    self._answers.pop(old, None)
            self._views.move_to_end(run)
        run_view, lock = held
        with lock:
            try:
                return run_view.view()
            except (OSError, ValueError) as error:
                return error_view(run, str(error))

    def compare(
        self,
        a: str,
        b: str,
        key: str,
        step_a: int | None = None,
        step_b: int | None = None,
        key_b: str | None = None,
        at: int | None = None,
    ) -> dict[str, Any] | None:
        """Run ``a``'s ``key`` beside run ``b``'s ``key_b`` (``key`` by default), or ``None``.

        At step cursor ``at``, each run's newest snapshot at or before it (see
        :meth:`~learnscope.plugins.views.compare_runs.Comparisons.compare`).

        ``None`` when ``a`` or ``b`` is not one of :meth:`runs` (as for :meth:`view`); a record
        that cannot be read answers with a comparison that says why.
        """
        if a not in self._runs or b not in self._runs or self.folder is None:
            return None
        folder_a, folder_b = run_of(self.folder, a), run_of(self.folder, b)
        with self._comparing:
            try:
                return self._comparisons.compare(
                    (folder_a, a, self._source(a, folder_a)),
                    (folder_b, b, self._source(b, folder_b)),
                    key,
                    step_a,
                    step_b,
                    key_b,
                    at,
                )
            except (OSError, ValueError) as error:
                return comparison_error(a, b, key, str(error), key_b)

    def _source(
        self, run: str, folder: RunFolder, after: tuple[int, str, str] | None = None
    ) -> RecordSource | None:
        """The record source of a run's views (``None``: the folder's own, read at each request).

        Read when the search saw it change where a read is a request to a store
        (:meth:`~learnscope.storage.RunFolder.searched_record_source`); from after the
        segments ``after`` (those a summary file covers) when given.
        """

        def written() -> object:
            seen = self._seen.get(run)
            return seen.stamp.written if seen is not None else None

        return folder.searched_record_source(written, after)

    def _glance(self, run: str, folder: RunFolder) -> RecordGlance | None:
        """The summary file the last search read of a run's record (the table reads on)."""
        seen = self._seen.get(run)
        return seen.glance if seen is not None else None

    def _search_loop(self) -> None:
        assert self.folder is not None
        while not self._closed.is_set():
            start = time.monotonic()
            try:
                runs, self._outcomes = self._search()
                self._runs = runs
                self._search_failed = None
            except Exception as error:  # a search must never end the thread; say it, try again
                problem = str(error)  # find_runs: "cannot list s3://...: why"
                if not isinstance(error, OSError):
                    where = self.folder.location
                    problem = f"searching {where} failed: {type(error).__name__}: {error}"
                if problem != self._search_failed:  # said once, not at every search
                    log.exception("learnscope tab: searching %s failed", self.folder.location)
                self._search_failed = problem
            self._searched.set()
            took = time.monotonic() - start
            if self.interval_s <= 0:
                return
            self._closed.wait(max(self.interval_s, 10 * took))

    def _search(self) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
        """Every run under the log directory: when it started, and how it ended.

        A record is read again only when its stamp changed since the last search
        (:func:`~learnscope.plugins.views.run_search.record_stamp`): its first line when it is
        another record, its end when it was written.
        """
        assert self.folder is not None
        names = run_search.find_runs(self.folder)
        # each run's stamp and reads wait on the store there: several runs at once
        with ThreadPoolExecutor(max(1, min(self.search_readers, len(names)))) as pool:
            found = list(pool.map(self._search_run, names))
        seen = {name: record for name, record in zip(names, found, strict=True) if record}
        self._seen = seen
        runs = {name: record.start for name, record in seen.items()}
        outcomes = {name: record.outcome for name, record in seen.items()}
        return runs, outcomes

    def _search_run(self, name: str) -> _SeenRecord | None:
        """One run as the search sees it: its stamp, start and outcome; ``None`` without one."""
        assert self.folder is not None
        folder = run_of(self.folder, name)
        try:
            stamp = run_search.record_stamp(folder)
        except OSError:
            stamp = None
        if stamp is None:
            return None
        known = self._seen.get(name)
        if known is not None and known.stamp.identity != stamp.identity:
            known = None  # another record under that name: read it afresh
        glance = known.glance if known is not None else None
        if known is None or known.stamp.written != stamp.written:
            glance = read_glance(folder)  # an object store's summary file: one request
        # behind the record (or another's): the record says how it stands (the table reads
        # the segments after those it covers)
        current = glance is not None and glance.current(stamp)
        # the same record: its first line has not changed, its end only if it was written
        if known is not None:
            start = known.start
        elif current and glance is not None and glance.first_time is not None:
            start = glance.first_time
        else:
            start = run_search.run_started(folder)
        if known is not None and known.stamp.written == stamp.written:
            outcome = known.outcome
        elif current and glance is not None:
            outcome = run_search.glance_outcome(glance)
        else:
            outcome = run_search.run_outcome(folder)
        held = self._views.get(name)
        if held is not None and held[0].started > start:
            start = held[0].started  # a later ``run`` entry the view has read
        return _SeenRecord(stamp, start, outcome, glance)

    @wrappers.Request.application
    def _serve_module(self, request: wrappers.Request) -> wrappers.Response:
        name = request.path.rsplit("/", 1)[-1]
        text = view_modules.module_sources().get(name)
        if text is None:
            return wrappers.Response(f"no module {name!r}", status=404, content_type="text/plain")
        return wrappers.Response(text, content_type="text/javascript")

    @wrappers.Request.application
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        return _json(json.dumps(self.runs()).encode("utf-8"))

    @wrappers.Request.application
    def _serve_table(self, request: wrappers.Request) -> wrappers.Response:
        try:
            rows = self.table()
        except Exception as error:  # never a server error: the tab shows what went wrong
            log.exception("learnscope tab: the runs table failed")
            why = f"the runs table failed: {type(error).__name__}: {error}"
            message = {"runs": [], "error": why}
            return _json(json.dumps(message).encode("utf-8"))
        answer = self._table_answer
        same = answer is not None and len(answer[0]) == len(rows)
        if not (same and all(a is b for a, b in zip(answer[0], rows, strict=True))):
            data = json.dumps({"runs": rows}, separators=(",", ":")).encode("utf-8")
            answer = self._table_answer = (rows, data)  # a row is the same dict until it changes
        return _json(answer[1])

    @wrappers.Request.application
    def _serve_view(self, request: wrappers.Request) -> wrappers.Response:
        run = request.args.get("run")
        try:
            view = self.view(run) if run else None
        except Exception as error:  # never a server error: the tab shows what went wrong
            log.exception("learnscope tab: the view of %r failed", run)
            view = error_view(str(run), f"{type(error).__name__}: {error}")
        if view is None:
            message = {"error": f"no learnscope run named {run!r}"}
            return _json(json.dumps(message).encode("utf-8"), status=404)
        answer = self._answers.get(run)  # type: ignore[arg-type]
        if answer is None or answer[0] is not view:  # the view is the same dict until it changes
            answer = (view, json.dumps(view, separators=(",", ":")).encode("utf-8"))
            self._answers[run] = answer  # type: ignore[index]
        return _json(answer[1])

    @wrappers.Request.application
    def _serve_compare(self, request: wrappers.Request) -> wrappers.Response:
        a, b, key = (request.args.get(name, "") for name in ("a", "b", "key"))
        key_b = request.args.get("key_b") or None  # absent or empty: A's key
        names = ("step_a", "step_b", "at")
        steps = [request.args.get(name) for name in names]
        if not all(s is None or s.lstrip("-").isdigit() for s in steps):
            given = ", ".join(f"{n}={s!r}" for n, s in zip(names, steps, strict=True) if s)
            message = {"error": f"steps are whole numbers, not {given}"}
            return _json(json.dumps(message).encode("utf-8"), status=400)
        step_a, step_b, at = (None if s is None else int(s) for s in steps)
        try:
            answer = self.compare(a, b, key, step_a, step_b, key_b, at)
        except Exception as error:  # never a server error: the tab shows what went wrong
            log.exception("learnscope tab: comparing %r and %r failed", a, b)
            answer = comparison_error(a, b, key, f"{type(error).__name__}: {error}", key_b)
        if answer is None:
            missing = a if a not in self._runs else b
            message = {"error": f"no learnscope run named {missing!r}"}
            return _json(json.dumps(message).encode("utf-8"), status=404)
        return _json(json.dumps(answer, separators=(",", ":")).encode("utf-8"))


def secured(app: WsgiApp) -> WsgiApp:
    """``app`` with the headers TensorBoard's security validator asks of every response.

    TensorBoard (``tensorboard/backend/security_validator.py``) warns, and from 3.0 refuses, a
    response without ``X-Content-Type-Options: nosniff``, and an HTML response without a
    ``Content-Security-Policy`` that has ``default-src``. The tab serves no HTML of its own (its
    modules are JavaScript, its data JSON), but an error werkzeug answers for it is a page: it
    gets ``default-src 'none'`` (it loads nothing). A header ``app`` set itself stays.

    Example:
        >>> from werkzeug.test import Client
        >>> page = wrappers.Response("<p>hi</p>", content_type="text/html")
        >>> headers = Client(secured(page)).get("/").headers
        >>> headers["X-Content-Type-Options"], headers["Content-Security-Policy"]
        ('nosniff', "default-src 'none'")
    """

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            names = {name.lower(): value for name, value in headers}
            added = []
            if names.get("x-content-type-options") != "nosniff":
                headers = [(n, v) for n, v in headers if n.lower() != "x-content-type-options"]
                added.append(("X-Content-Type-Options", "nosniff"))
            kind = names.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind == "text/html" and "content-security-policy" not in names:
                added.append(("Content-Security-Policy", "default-src 'none'"))
            return start_response(status, [*headers, *added], exc_info)

        return app(environ, start)

    return guarded


def _json(data: bytes, status: int = 200) -> wrappers.Response:
    return wrappers.Response(data, status=status, content_type="application/json")
