"""The Custom Scalars layout of a run, kept complete across writers and resumed runs.

TensorBoard shows the most recent layout summary of a run, so every time a chart is added the
complete layout is written again at a higher step. The charts are kept in a small JSON file in
the run directory (merged under a lock on a local disk), so a second writer or a resumed run adds
to the layout instead of replacing it. The writer's :class:`CustomScalarsLayout` reads the file
again only when another writer changed it (its stamp differs from the one its own last write
left), and writes it, like the layout summary, only when a chart is new or different: an
analysis that asks for the charts already there costs one ``stat`` (one ``HEAD`` on an object
store). The layout grows with the charts, not with the steps.

Categories and charts keep the order in which they were first added (for autocorrelation, the
module order of the groups). Charts that an older version of learnscope wrote and a newer one
replaces are named in :data:`RETIRED_CHARTS`; they leave the layout at the next merge (and a
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
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from learnscope.run_directory.file_names import LAYOUT_FILE
from learnscope.storage import RunFolder, UnreadableFile, open_run_folder

log = logging.getLogger("learnscope")

LAYOUT_TAG = "custom_scalars__config__"

Chart = list[Any]  # ["Multiline", [regex, ...]] or ["Margin", [value, lower, upper]]

# The charts earlier learnscope versions wrote (category, title), replaced by today's charts
# when such a run is resumed: they leave the layout at the next merge.
RETIRED_CHARTS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = (
    (
        re.compile(r"autocorrelation/[^/]+"),
        re.compile(
            r".+: ACF at lags .+|.+: lag-1 median and quartiles"
            r"|integrated autocorrelation time \(steps\)"
        ),
    ),
    (  # a group's tau chart, before its title said what tau counts (issue 37)
        re.compile(r"autocorrelation/[^/]+/[^/]+"),
        re.compile(r".+: integrated autocorrelation time tau \(steps\)"),
    ),
)
MAX_LAYOUT_BYTES = 16 << 20  # a larger layout file is damage, not a layout


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


class CustomScalarsLayout:
    """The Custom Scalars layout file of one run folder, owned by the writer that adds charts.

    The state is read once (and again only when another writer changed the file: its stamp
    differs from the one this owner's last write left), merged, and written whole when a
    chart is new or different; on a local disk under the file's lock.

    Args:
        folder: The run folder (see :mod:`learnscope.storage`).

    Example:
        >>> import tempfile
        >>> from learnscope.storage import open_run_folder
        >>> layout = CustomScalarsLayout(open_run_folder(tempfile.mkdtemp()))
        >>> layout.merge({"c": {"t": multiline(["x"])}})["version"]
        1
        >>> layout.merge({"c": {"t": multiline(["x"])}}) is None
        True
    """

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self._cached: tuple[tuple[object, ...] | None, dict[str, Any]] | None = None

    def merge(self, charts: dict[str, dict[str, Chart]]) -> dict[str, Any] | None:
        """Add ``charts`` (category -> title -> chart) to the layout.

        Returns:
            The complete layout (``{"version": n, "layout": {...}}``) when it changed, else
            ``None``.
        """
        with self.folder.locked(LAYOUT_FILE):
            stamp = self.folder.stamp(LAYOUT_FILE)
            cached, self._cached = self._cached, None  # dropped for good if anything fails
            if cached is not None and cached[0] == stamp:
                state = cached[1]
            else:
                state = self._read(cached) if stamp else {"version": 0, "layout": {}}
            layout = state["layout"]
            changed = _drop_retired(layout, charts)
            for category, titled in charts.items():
                for title, chart in titled.items():
                    if layout.get(category, {}).get(title) != chart:
                        layout.setdefault(category, {})[title] = copy.deepcopy(chart)
                        changed = True
            if changed:
                state["version"] += 1
                self.folder.write(LAYOUT_FILE, json.dumps(state, indent=1).encode())
                stamp = self.folder.stamp(LAYOUT_FILE)
            self._cached = (stamp, state)
            return state if changed else None

    def _read(self, cached: tuple[Any, dict[str, Any]] | None) -> dict[str, Any]:
        """The layout in the folder; a new one when it cannot be read, the old file set aside."""
        text = ""
        try:
            text = self.folder.read(LAYOUT_FILE, MAX_LAYOUT_BYTES).decode("utf-8")
            state = json.loads(text)
            layout = state.get("layout") if isinstance(state, dict) else None
            if not (
                isinstance(state.get("version"), int)
                and isinstance(layout, dict)
                and all(isinstance(charts, dict) for charts in layout.values())
            ):
                raise ValueError("not a learnscope layout (version and layout)")
            return state
        except (ValueError, AttributeError, UnreadableFile) as error:  # JSON, UTF-8, a FIFO
            found = re.match(r'\s*\{\s*"version"\s*:\s*(\d+)', text)
            version = max(int(found[1]) if found else 0, cached[1]["version"] if cached else 0)
            then = "a new layout is started"
            self.folder.set_aside(LAYOUT_FILE, error, "the Custom Scalars layout", then)
            return {"version": version, "layout": {}}


def merge_charts(
    run_dir: Path | RunFolder, charts: dict[str, dict[str, Chart]]
) -> dict[str, Any] | None:
    """Add ``charts`` to the layout of ``run_dir`` once (see :class:`CustomScalarsLayout`).

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> merge_charts(run, {"c": {"t": multiline(["x"])}})["version"]
        1
        >>> merge_charts(run, {"c": {"t": multiline(["x"])}}) is None
        True
    """
    folder = run_dir if isinstance(run_dir, RunFolder) else open_run_folder(run_dir)
    return CustomScalarsLayout(folder).merge(charts)


def _drop_retired(layout: dict[str, Any], charts: dict[str, dict[str, Chart]]) -> bool:
    """Remove retired charts (and categories they leave empty) from ``layout``; whether any."""
    dropped = False
    for category in list(layout):
        patterns = [title for cat, title in RETIRED_CHARTS if cat.fullmatch(category)]
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
