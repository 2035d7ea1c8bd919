"""The standalone view page: every run's view model inline, with the front end joined inline.

``learnscope export LOGDIR --html view.html`` writes it, and the W&B writer logs it as an HTML
panel; it loads nothing from the network and opens from ``file://``. Nothing here imports
torch.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnscope.plugins.run_search import find_runs
from learnscope.plugins.run_view import MAX_POINTS, RunView
from learnscope.plugins.view_modules import joined_source


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
        embeddings.append(
            {
                **embedding,
                "steps": [embedding["steps"][i] for i in keep],
                "xy": [embedding["xy"][i] for i in keep],
                "spreads": [embedding["spreads"][i] for i in keep],
                "notes": [*embedding["notes"], note],
            }
        )
    return {**view, "embeddings": embeddings, "messages": messages}


def module_source() -> str:
    """The view's front end as one script: the modules in ``static/`` joined (no imports).

    Example:
        >>> "export async function render()" in module_source()
        True
    """
    return joined_source()


def page_html(
    runs: Sequence[tuple[str, dict]], title: str = "learnscope: training dynamics"
) -> str:
    """One self-contained HTML page: the views as inline JSON and the module inline.

    The page loads nothing from the network and opens from ``file://``; it shows the newest
    run first (the largest ``time`` of the views).

    Args:
        runs: ``(name, view)`` pairs, views as
            :func:`learnscope.plugins.run_view.read_view` returns them.
        title: The page title.

    Returns:
        The HTML text.

    Example:
        >>> from learnscope.plugins.run_view import error_view
        >>> html = page_html([("run", error_view("run", "nothing"))])
        >>> html.count("<script"), html.count("</script")
        (2, 2)
    """
    data = json.dumps({"runs": [{"name": n, "view": v} for n, v in runs]}, separators=(",", ":"))
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
    """What :func:`export_html` wrote: the runs in the page, and those it could not read."""

    runs: list[str]
    failed: list[tuple[str, str]]  # (run, why)


def export_html(
    logdir: str | Path, out: str | Path, max_points: int = MAX_POINTS, sprites: bool = True
) -> Export:
    """Write the view of every learnscope run under ``logdir`` as one page ``out``.

    A run whose record cannot be read is left out and listed in :attr:`Export.failed`; the
    other runs are written. No file is written when no run could be read.

    Args:
        logdir: A log directory (or one run directory).
        out: The HTML file to write.
        max_points: The most points per key.
        sprites: Include thumbnails.

    Returns:
        The runs written and the runs left out.

    Example:
        >>> import tempfile
        >>> export_html(tempfile.mkdtemp(), "never-written.html")
        Export(runs=[], failed=[])
    """
    root = Path(logdir)
    runs, failed = [], []
    for name in find_runs(root):
        shown = root.resolve().name if name == "." else name
        try:
            runs.append((shown, RunView(root / name, max_points, sprites, shown).view()))
        except (OSError, ValueError) as error:
            failed.append((shown, str(error)))
    if runs:
        Path(out).write_text(page_html(runs), encoding="utf-8")
    return Export([name for name, _ in runs], failed)
