"""The Custom Scalars layout of a run, kept complete across writers and resumed runs.

TensorBoard shows the most recent layout summary of a run, so every time a chart is added the
complete layout is written again at a higher step. The charts are kept in a small JSON file in
the run directory (merged under a lock), so a second writer or a resumed run adds to the layout
instead of replacing it. The file is read again only when another writer changed it (its inode,
size or times differ from this process's last write), and written, like the layout summary,
only when a chart is new or different: an analysis that asks for the charts already there costs
one ``stat``.

Categories and charts keep the order in which they were first added (for autocorrelation, the
module order of the groups). Charts that an older version of learnscope wrote and a newer one
replaces are named with :func:`retire_charts`; they leave the layout at the next merge (and a
category left empty goes too), so a run resumed with a newer version does not show both.

A file that cannot be read as a layout (cut short by a crash, edited by hand, not a regular
file) is moved aside to ``learnscope_custom_scalars.json.corrupt-<UTC time>`` with a warning
naming both files, and a new layout is started; its version goes on from the one the damaged
file (or this process) last had, so TensorBoard shows the new layout.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from learnscope.files import locked, move_aside, write_atomic
from learnscope.run_files import LAYOUT_FILE

log = logging.getLogger("learnscope")

LAYOUT_TAG = "custom_scalars__config__"

Chart = list[Any]  # ["Multiline", [regex, ...]] or ["Margin", [value, lower, upper]]

# Resolved layout file -> (its stamp right after this process's last read or write, the state).
_CACHE: dict[str, tuple[tuple[int, ...] | None, dict[str, Any]]] = {}
_CACHE_RUNS = 64  # the most recently used run directories kept
_RETIRED: list[tuple[re.Pattern[str], re.Pattern[str]]] = []  # (category, title) patterns


def multiline(tags: Sequence[str]) -> Chart:
    """A multiline chart of exactly these scalar tags (escaped and anchored).

    Example:
        >>> multiline(["a/lag_1"])
        ['Multiline', ['a/lag_1$']]
    """
    return ["Multiline", [re.escape(tag) + "$" for tag in tags]]


def margin(value: str, lower: str, upper: str) -> Chart:
    """A margin chart: ``value`` with a band from ``lower`` to ``upper``.

    Example:
        >>> margin("m", "lo", "hi")
        ['Margin', ['m', 'lo', 'hi']]
    """
    return ["Margin", [value, lower, upper]]


def retire_charts(category: str, title: str) -> None:
    """Drop charts whose category and title fully match these regexes when a layout is merged.

    A chart being added by the merge is never dropped; a category left empty is removed.

    Example:
        >>> retire_charts(r"doc-example", r"old .*")
    """
    _RETIRED.append((re.compile(category), re.compile(title)))


def merge_charts(run_dir: Path, charts: dict[str, dict[str, Chart]]) -> dict[str, Any] | None:
    """Add ``charts`` (category -> title -> chart) to the run's layout on disk.

    Args:
        run_dir: The TensorBoard run directory.
        charts: The charts to have in the layout.

    Returns:
        The complete layout (``{"version": n, "layout": {...}}``) when it changed, else ``None``.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> merge_charts(run, {"c": {"t": multiline(["x"])}})["version"]
        1
        >>> merge_charts(run, {"c": {"t": multiline(["x"])}}) is None
        True
    """
    path = run_dir / LAYOUT_FILE
    key = str(path.resolve())
    with locked(run_dir / f".{LAYOUT_FILE}.lock"):
        stamp = _stamp(path)
        cached = _CACHE.pop(key, None)  # dropped for good if anything below fails
        if cached is not None and cached[0] == stamp:
            state = cached[1]
        else:
            state = _read(path, cached) if stamp else {"version": 0, "layout": {}}
        layout = state["layout"]
        changed = _drop_retired(layout, charts)
        for category, titled in charts.items():
            for title, chart in titled.items():
                if layout.get(category, {}).get(title) != chart:
                    layout.setdefault(category, {})[title] = copy.deepcopy(chart)  # cached
                    changed = True
        if changed:
            state["version"] += 1
            write_atomic(path, json.dumps(state, indent=1).encode())
            stamp = _stamp(path)
        _CACHE[key] = (stamp, state)  # re-inserted last: least recently used first
        if len(_CACHE) > _CACHE_RUNS:
            del _CACHE[next(iter(_CACHE))]
        return state if changed else None


def _read(path: Path, cached: tuple[Any, dict[str, Any]] | None) -> dict[str, Any]:
    """The layout in ``path``; a new one when it cannot be read, the old file moved aside."""
    text = ""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the read
            raise ValueError("not a regular file")
        text = path.read_text(encoding="utf-8")
        state = json.loads(text)
        layout = state.get("layout") if isinstance(state, dict) else None
        if not (
            isinstance(state.get("version"), int)
            and isinstance(layout, dict)
            and all(isinstance(charts, dict) for charts in layout.values())
        ):
            raise ValueError("not a learnscope layout (version and layout)")
        return state
    except (ValueError, AttributeError) as error:  # JSONDecodeError, UnicodeDecodeError
        found = re.match(r'\s*\{\s*"version"\s*:\s*(\d+)', text)
        version = max(int(found[1]) if found else 0, cached[1]["version"] if cached else 0)
        move_aside(path, error, "the Custom Scalars layout", "a new layout is started")
        return {"version": version, "layout": {}}


def _drop_retired(layout: dict[str, Any], charts: dict[str, dict[str, Chart]]) -> bool:
    """Remove retired charts (and categories they leave empty) from ``layout``; whether any."""
    dropped = False
    for category in list(layout):
        patterns = [title for cat, title in _RETIRED if cat.fullmatch(category)]
        if not patterns:
            continue
        adding = charts.get(category, {})
        old = layout[category]
        for title in [t for t in old if t not in adding]:
            if any(pattern.fullmatch(title) for pattern in patterns):
                del old[title]
                dropped = True
        if not old:
            del layout[category]
    return dropped


def _stamp(path: Path) -> tuple[int, ...] | None:
    """The file's device, inode, size and change times; ``None`` when it is missing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
