"""The standalone view page: the runs table and the runs' view models inline, the front end too.

``learnscope export LOGDIR --html view.html`` writes it (``LOGDIR`` a local path or a URL
such as ``s3://bucket/runs``: the runs are read through their
:class:`~learnscope.storage.RunFolder`), and the W&B writer logs it as an HTML panel; it loads
nothing from the network and opens from ``file://``. The exported page holds the runs table
(one row per run: :mod:`learnscope.plugins.views.runs_table`) and the views of as many runs as
its byte budget allows, the newest first (:func:`held_views`); every other run keeps its row, and
its view says how to export it alone. Nothing here imports torch.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learnscope.plugins.views.compare_runs import RunSnapshots, missing_key
from learnscope.plugins.views.compare_steps import COMPARE_PAGE_BYTES, held_comparisons
from learnscope.plugins.views.run_search import find_runs, run_folder, run_of
from learnscope.plugins.views.run_view import RunModel
from learnscope.plugins.views.runs_table import RunsTable, not_held_view
from learnscope.plugins.views.view_modules import joined_source
from learnscope.run_directory.endings import ending_text
from learnscope.shell import shell_command
from learnscope.storage import RecordSource, RunFolder

# Points per key on an exported page: a page is a file to share, and 100,000 points x 50
# snapshots (the tab's most) would be 28 MB.
EXPORT_MAX_POINTS = 5_000
# Bytes of run views on an exported page (the runs table and the module besides): with the
# table of 200 runs (about 2 KB a row) and the module (about 0.2 MB) the page stays under 5 MB.
EXPORT_VIEW_BYTES = 4_000_000
# Bytes of records the export keeps from the table's read, so that a view reads them from memory
# (each record is read once); a record beyond that is read again for its view.
EXPORT_KEPT_BYTES = 256 * 1024 * 1024


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
        steps = {embedding["steps"][i] for i in keep}
        embeddings.append(
            {
                **_thinned(embedding, keep),
                "projections": [
                    _thinned(p, [i for i, s in enumerate(p["steps"]) if s in steps])
                    for p in embedding.get("projections", ())
                ],
                "notes": [*embedding["notes"], note],
            }
        )
    return {**view, "embeddings": embeddings, "messages": messages}


def _thinned(view: dict[str, Any], keep: list[int]) -> dict[str, Any]:
    """``view`` (a key's or a projection's) with its snapshots ``keep`` only."""
    per_snapshot = ("steps", "xy", "spreads", "fitted", "points")
    return {**view, **{f: [view[f][i] for i in keep] for f in per_snapshot if f in view}}


def module_source() -> str:
    """The view's front end as one script: the modules in ``static/`` joined (no imports).

    Example:
        >>> "export async function render()" in module_source()
        True
    """
    return joined_source()


def page_html(
    runs: Sequence[tuple[str, dict]],
    title: str = "learnscope: training dynamics",
    comparison: dict[str, Any] | None = None,
    table: list[dict[str, Any]] | None = None,
) -> str:
    """One self-contained HTML page: the views as inline JSON and the module inline.

    The page loads nothing from the network and opens from ``file://``; it shows the newest
    run first (the largest ``time`` of the views, passing over runs that failed without
    writing any data while another run is there), or run A beside run B when it holds a
    comparison. A failed or interrupted run is marked so in the run picker, listed apart from
    the others, and its first message says how it ended.

    Args:
        runs: ``(name, view)`` pairs, views as
            :func:`learnscope.plugins.views.run_view.read_view` returns them.
        title: The page title.
        comparison: ``{"a", "b", "keys": {key: held comparisons}, "messages"}`` (see
            :func:`compare_pages`), or ``None``.
        table: The runs table's rows (:class:`~learnscope.plugins.views.runs_table.RunsTable`),
            or ``None`` for a page without one.

    Returns:
        The HTML text.

    Example:
        >>> from learnscope.plugins.views.run_view import error_view
        >>> html = page_html([("run", error_view("run", "nothing"))])
        >>> html.count("<script"), html.count("</script")
        (2, 2)
    """
    page: dict[str, Any] = {"runs": [{"name": n, "view": v} for n, v in runs]}
    if comparison is not None:
        page["compare"] = comparison
    if table is not None:
        page["table"] = table
    data = json.dumps(page, separators=(",", ":"))
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
    """What :func:`export_html` wrote: the runs in the page, and those it could not read.

    ``failed_runs`` are the runs in the page whose training failed, each with how:
    ``(run, "failed at step S: type: message")``; ``interrupted_runs`` those stopped with
    Ctrl-C: ``(run, "interrupted by Ctrl-C at step S")``
    (:func:`~learnscope.run_directory.endings.ending_text`). ``not_held`` are the runs in the
    page's table whose view the page does not hold (beyond its byte budget).
    """

    runs: list[str]
    failed: list[tuple[str, str]]  # (run, why it could not be read)
    failed_runs: list[tuple[str, str]] = field(default_factory=list)  # (run, how it failed)
    interrupted_runs: list[tuple[str, str]] = field(default_factory=list)  # (run, where)
    not_held: list[str] = field(default_factory=list)  # runs in the table without their view


def export_html(
    logdir: str | Path | RunFolder,
    out: str | Path,
    max_points: int = EXPORT_MAX_POINTS,
    sprites: bool = True,
    compare: tuple[str, str] | None = None,
    tags: tuple[str, str] | None = None,
    compare_bytes: int = COMPARE_PAGE_BYTES,
    view_bytes: int = EXPORT_VIEW_BYTES,
) -> Export:
    """Write the runs table and the views of the learnscope runs under ``logdir`` as one page.

    A run whose record cannot be read is left out and listed in :attr:`Export.failed`; the
    other runs are written, and those whose newest run failed are listed in
    :attr:`Export.failed_runs`, those interrupted (Ctrl-C) in :attr:`Export.interrupted_runs`.
    The page holds every run's row of the runs table, and the views of as many runs as
    ``view_bytes`` allows (:func:`held_views`); the others are listed in
    :attr:`Export.not_held`. No file is written when no run could be read.

    Args:
        logdir: A log directory (or one run directory): a local path, a URL such as
            ``s3://bucket/runs``, or a run folder.
        out: The HTML file to write (a local path).
        max_points: The most points per key.
        sprites: Include thumbnails.
        compare: Runs ``(A, B)``, named as :attr:`Export.runs` names them: the page also
            holds their comparison on every key they share, and opens on it.
        tags: Keys ``(KEY_A, KEY_B)``: with ``compare``, A's ``KEY_A`` beside B's ``KEY_B``
            only (A and B may then be one run).
        compare_bytes: The most bytes of comparisons the page holds (see
            :func:`compare_pages`).
        view_bytes: The most bytes of run views (JSON) the page holds; the newest run's view
            and those of ``compare`` are held whatever their size.

    Returns:
        The runs written, the runs left out, the runs written that failed or were
        interrupted, and those whose view the page does not hold.

    Raises:
        ValueError: When a run to compare is not one of the runs written, or a tag is not one
            of its run's keys.
        MissingFileSystem: A URL whose file-system package is not installed.
        OSError: An object store's log directory that cannot be listed.

    Example:
        >>> import tempfile
        >>> export_html(tempfile.mkdtemp(), "never-written.html")
        Export(runs=[], failed=[], failed_runs=[], interrupted_runs=[], not_held=[])
    """
    root = run_folder(logdir)
    folders = {}
    for name in find_runs(root):
        folders[name if name != "." else _root_name(root)] = run_of(root, name)
    table = RunsTable(keep_bytes=EXPORT_KEPT_BYTES)
    rows = table.rows(list(folders.items()))
    failed = [(row["name"], row["problem"]) for row in rows if row["problem"]]
    rows = [row for row in rows if not row["problem"]]
    first = list(compare) if compare is not None else []
    views, unreadable = held_views(
        folders, rows, view_bytes, max_points, sprites, first, table.replay
    )
    failed += unreadable
    rows = [row for row in rows if row["name"] not in dict(unreadable)]
    not_held = [row["name"] for row in rows if row["name"] not in views]
    held = f"{len(views)} of {len(rows)} runs"
    runs = [
        (row["name"], views.get(row["name"]) or not_held_view(row, _export_one(root, row, held)))
        for row in rows
    ]
    comparison = None
    if compare is not None and runs:
        written = [name for name, _ in runs]
        comparison = compare_pages(folders, written, *compare, tags=tags, budget=compare_bytes)
    if runs:
        # the user's own file, named on the command line: not a run folder's
        text = page_html(runs, comparison=comparison, table=rows)
        Path(out).write_text(text, encoding="utf-8")
    ended = [(name, view["ended"], ending_text(view["ended"])) for name, view in runs]
    failed_runs = [(name, how) for name, end, how in ended if how and end["status"] == "failed"]
    interrupted = [(name, how) for name, end, how in ended if how and end["status"] != "failed"]
    return Export([name for name, _ in runs], failed, failed_runs, interrupted, not_held)


def held_views(
    folders: dict[str, RunFolder],
    rows: list[dict[str, Any]],
    budget: int,
    max_points: int = EXPORT_MAX_POINTS,
    sprites: bool = True,
    first: Sequence[str] = (),
    source_of: Callable[[str], RecordSource | None] = lambda name: None,
) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str]]]:
    """The views a page holds within ``budget`` bytes, and the runs whose view cannot be read.

    The runs ``first`` (a comparison's), then the others newest first (by the row's ``time``,
    when its newest run started), each view made and held while the views held stay within
    ``budget`` bytes of JSON; the first view that does not fit ends it (no later view is made),
    though the first run's view is always held. A run whose view cannot be made (its record
    unreadable) is named with why, and the next is tried. ``source_of(name)`` gives a run's
    record source (``None``: its folder's own).

    Example:
        >>> held_views({}, [], 1000)
        ({}, [])
    """
    names = {row["name"] for row in rows}
    by_time = sorted(rows, key=lambda row: row["time"], reverse=True)
    order = [n for n in first if n in names] + [
        r["name"] for r in by_time if r["name"] not in first
    ]
    views: dict[str, dict[str, Any]] = {}
    unreadable: list[tuple[str, str]] = []
    total = 0
    for name in order:
        try:
            view = RunModel(folders[name], max_points, sprites, name, source_of(name)).view()
        except (OSError, ValueError) as error:
            unreadable.append((name, str(error)))
            continue
        size = len(json.dumps(view, separators=(",", ":")))
        if views and name not in first and total + size > budget:
            break
        views[name] = view
        total += size
    return views, unreadable


def _export_one(root: RunFolder, row: dict[str, Any], held: str) -> str:
    """What a page says of a run whose view it does not hold: how to export that run alone."""
    location = f"{root.location.rstrip('/')}/{row['name']}"
    command = shell_command("learnscope", "export", location, "--html", "RUN.html")
    return (
        f"{row['name']}: this page holds its row of the runs table, not its view (it holds the "
        f"views of {held}, within its size budget); {command} writes a page of this run"
    )


def _root_name(root: RunFolder) -> str:
    """The name of a log directory that is itself a run: its directory's, or URL's."""
    return root.name


def compare_pages(
    folders: dict[str, Path] | dict[str, RunFolder],
    written: list[str],
    a: str,
    b: str,
    tags: tuple[str, str] | None = None,
    budget: int = COMPARE_PAGE_BYTES,
) -> dict[str, Any]:
    """``{"a", "b", "keys": {key: held comparisons}, "messages"}``: runs ``a`` and ``b`` compared.

    Every key the two runs share, or with ``tags`` only A's ``tags[0]`` beside B's ``tags[1]``
    (under the key ``tags[0]``; ``a`` and ``b`` may then be one run). Each key holds the
    comparison at every pair of snapshots the page's step cursor can show, within its share of
    ``budget`` bytes (:func:`~learnscope.plugins.views.compare_steps.held_comparisons`), so
    that the page's comparison follows the cursor as the tab's does.

    Args:
        folders: Each run's folder (a local path or a run folder), by the name the page shows.
        written: The runs the page holds.
        a: Run A.
        b: Run B.
        tags: A's key and B's key, or ``None`` for every shared key.
        budget: The most bytes of comparisons (JSON), shared evenly by the keys.

    Raises:
        ValueError: When ``a`` or ``b`` is not one of ``written``, when it is one run without
            two different ``tags``, or when a tag is not one of its run's keys.

    Example:
        >>> compare_pages({}, ["x"], "x", "y")
        Traceback (most recent call last):
        ...
        ValueError: no learnscope run named 'y' to compare (runs: x)
    """
    for name in (a, b):
        if name not in written:
            raise ValueError(
                f"no learnscope run named {name!r} to compare (runs: {', '.join(written)})"
            )
    if a == b and (tags is None or tags[0] == tags[1]):
        raise ValueError(f"{a} is compared with itself: pick another run or two tags (--tags)")
    runs = RunSnapshots(folders[a], a), RunSnapshots(folders[b], b)
    for run in runs:
        run.refresh()
    if tags is None:
        pairs = [(key, key) for key in runs[0].entries if key in runs[1].entries]
    else:
        for run, tag in zip(runs, tags, strict=True):
            if tag not in run.entries:
                raise ValueError(missing_key(run, tag))
        pairs = [tags]
    share = budget // max(1, len(pairs))
    keys = {key: held_comparisons(*runs, key, key_b, share) for key, key_b in pairs}
    messages = [] if keys else [f"runs {a} and {b} have no snapshot key in common"]
    return {"a": a, "b": b, "keys": keys, "messages": messages}
