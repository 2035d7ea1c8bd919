"""Findings with a life (issue 37): when each was first and last seen, whether it still holds,
and what to try, in every view.

The records are written by hand as ``docs/run_record.md`` describes a findings row
(``first_step``, ``step``, ``resolved_step``, ``advice``), and as rows written before them (none
of the three). The export page and the W&B page share the view modules; both are opened in
headless Chromium.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from learnscope.plugins.views.findings_fold import findings_view, life
from learnscope.plugins.views.record_checks import DamagedEntry, finding_row
from learnscope.plugins.views.run_view import read_view
from learnscope.plugins.views.view_page import export_html
from tests.kit.browser import open_page, unavailable_reason
from tests.kit.record_entries import (
    ALL_CALLBACKS,
    drifting_points,
    run_entry,
    snapshot_entry,
    write,
)

COLLAPSE = {  # seen once, before training, and healthy at every check since
    "code": "embedding-collapse",
    "subject": "features",
    "message": "cosine_spread 0.00454 < 0.01: the embeddings all point the same way",
    "severity": "warning",
    "first_step": 0,
    "step": 0,
    "resolved_step": 50,
    "advice": "check the loss for a trivial solution, the learning rate, normalisation",
}
DEAD = {  # found at every check from step 50
    "code": "zero-gradient",
    "subject": "branch",
    "message": "its gradient is exactly zero",
    "severity": "error",
    "first_step": 50,
    "step": 300,
    "resolved_step": None,
    "advice": "check that the branch reaches the loss",
}
TINY = {  # found at one check, still holding
    "code": "tiny-gradient",
    "subject": "encoder.0",
    "message": "1e-9 times the median gradient",
    "severity": "warning",
    "first_step": 300,
    "step": 300,
    "resolved_step": None,
    "advice": "check the initialisation, normalisation and depth of that module",
}
SPIKE = {  # seen over a few checks, then gone
    "code": "non-finite-gradient",
    "subject": "head",
    "message": "3 NaN gradients",
    "severity": "error",
    "first_step": 50,
    "step": 120,
    "resolved_step": 150,
    "advice": "lower the learning rate, clip gradients, check the data",
}
OLD = {"code": "dead-units", "subject": "encoder.0", "message": "12 of 16", "step": 25}


def findings(step: int, *rows: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "findings", "step": step, "rows": list(rows)}


def test_a_row_of_before_issue_37_was_first_seen_at_its_step_still_holds_and_has_no_advice() -> (
    None
):
    row = finding_row({**OLD, "severity": "warning"})
    assert row == {
        **OLD,
        "severity": "warning",
        "first_step": 25,
        "resolved_step": None,
        "advice": "",
    }
    assert finding_row(DEAD) == DEAD and finding_row(COLLAPSE) == COLLAPSE


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"first_step": 301}, "first_step 301, after its step 300"),
        ({"first_step": "50"}, "first_step '50', not a whole number"),
        ({"resolved_step": 300}, "resolved_step 300, not after its step 300"),
        ({"resolved_step": 1.5}, "resolved_step 1.5, not a whole number"),
        ({"advice": ["lower it"]}, "advice ['lower it'], not text"),
    ],
)
def test_a_row_whose_life_does_not_add_up_is_damage(change: dict, message: str) -> None:
    with pytest.raises(DamagedEntry, match=re.escape(message)):
        finding_row({**DEAD, **change})


def test_each_finding_s_life_in_words() -> None:
    assert life(TINY) == "found at step 300; still holds"
    assert life(DEAD) == "found at steps 50-300; still holds"
    assert life(COLLAPSE) == "seen at step 0 only; healthy at every check since step 50"
    assert life(SPIKE) == "seen at steps 50-120; healthy at every check since step 150"


def test_the_view_lists_the_findings_that_still_hold_first(tmp_path: Path) -> None:
    write(
        tmp_path,
        run_entry(*ALL_CALLBACKS),
        findings(300, COLLAPSE, DEAD, SPIKE, TINY),
        {"kind": "findings", "step": 320, "rows": [{**DEAD, "resolved_step": 10}]},  # damaged
    )
    view = read_view(tmp_path)
    assert [(f["code"], f["holds"]) for f in view["findings"]] == [
        ("zero-gradient", True),
        ("tiny-gradient", True),
        ("embedding-collapse", False),
        ("non-finite-gradient", False),
    ]
    assert view["findings"] == findings_view([COLLAPSE, DEAD, SPIKE, TINY])
    assert view["messages"] == [
        "findings at step 320 skipped: a row of its table has resolved_step 10, not after its "
        "step 300"
    ]


# ------------------------------------------------------------------------------ in the browser

needs_browser = pytest.mark.skipif(
    unavailable_reason() is not None, reason=str(unavailable_reason())
)

_PANEL = """
const q = (s) => document.querySelector(s);
const rows = [...document.querySelectorAll('section table tr')].filter(
  (r) => r.closest('section').contains(q('[data-role="findings-count"]')));
return {
  count: q('[data-role="findings-count"]').textContent,
  hint: q('[data-role="hint-findings"]').textContent,
  status: (q('[data-role="status-findings"]') || {}).textContent || null,
  rows: rows.map((r) => ({cells: [...r.cells].map((c) => c.textContent),
                          resolved: r.classList.contains('ls-resolved'),
                          current: r.classList.contains('ls-current'),
                          colour: getComputedStyle(r).color})),
};
"""

_CURSOR = """
const slide = document.querySelector('input[aria-label="step"]');
slide.value = arguments[0]; slide.dispatchEvent(new Event('input'));
"""

HEADER = ["when", "severity", "code", "subject", "message"]


def _row(f: dict[str, Any], advice: bool = True) -> list[str]:
    cells = [life(f), f["severity"], f["code"], f["subject"], f["message"]]
    return cells + ([f["advice"]] if advice else [])


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``life``: findings with their life and advice; ``old``: rows of before issue 37;
    ``gone``: only findings no longer seen. Snapshots at steps 20, 100 and 300."""
    root = tmp_path_factory.mktemp("life")
    ids = [f"p{i}" for i in range(30)]
    views = drifting_points(30, 3)
    snapshots = [snapshot_entry("enc", s, views[i], ids) for i, s in enumerate((20, 100, 300))]
    tables = {
        "life": findings(300, COLLAPSE, DEAD, SPIKE, TINY),
        "old": findings(25, {**OLD, "severity": "warning"}),
        "gone": findings(300, COLLAPSE),
    }
    out = {}
    for name, table in tables.items():
        write(root / "logs" / name, run_entry(*ALL_CALLBACKS), *snapshots, table)
        out[name] = root / f"{name}.html"
        assert export_html(root / "logs" / name, out[name]).runs == [name]
    out["record"] = root / "logs" / "life"
    return out


def _check_life_panel(browser: Any) -> None:
    """The findings panel of the ``life`` run, as every view shows it."""
    shown = browser.execute_script(_PANEL)
    assert shown["count"] == "Findings (2)"  # only those that still hold
    assert "'what to try' says what to do" in shown["hint"]
    assert [r["cells"] for r in shown["rows"]] == [
        [*HEADER, "what to try"],
        _row(DEAD),
        _row(TINY),
        ["No longer seen (2): found before, healthy at every check since"],
        _row(COLLAPSE),
        _row(SPIKE),
    ]
    assert [r["resolved"] for r in shown["rows"]] == [False, False, False, False, True, True]
    assert shown["rows"][4]["colour"] == "rgb(158, 158, 158)"  # greyed
    assert shown["rows"][1]["colour"] != shown["rows"][4]["colour"]
    # The cursor marks the findings that held at its step: at 300 those that still hold, at 100
    # the zero gradient and the NaNs (50-120, healthy from 150), at 20 the collapse (0, to 50).
    marked = {}
    for position, step in enumerate((20, 100, 300)):
        browser.execute_script(_CURSOR, position)
        rows = browser.execute_script(_PANEL)["rows"]
        marked[step] = [r["cells"][2] for r in rows if r["current"]]
    assert marked == {
        20: ["embedding-collapse"],
        100: ["zero-gradient", "non-finite-gradient"],
        300: ["zero-gradient", "tiny-gradient"],
    }


@needs_browser
def test_the_exported_page_counts_the_findings_that_hold_and_greys_the_others(
    pages: dict[str, Path], browser: Any
) -> None:
    open_page(browser, pages["life"])
    _check_life_panel(browser)
    browser.execute_script(
        "[...document.querySelectorAll('tr.ls-click')].find("
        "(r) => r.cells[2].textContent === 'non-finite-gradient').click()"
    )  # a row moves the cursor to the step its finding was last seen
    cursor = browser.execute_script(
        "return document.querySelector('[data-role=\"cursor-step\"]').textContent"
    )
    assert cursor == "step 120"


@needs_browser
def test_older_rows_still_hold_and_the_hint_promises_no_advice(
    pages: dict[str, Path], browser: Any
) -> None:
    open_page(browser, pages["old"])
    shown = browser.execute_script(_PANEL)
    assert shown["count"] == "Findings (1)"
    assert [r["cells"] for r in shown["rows"]] == [
        HEADER,
        ["found at step 25; still holds", "warning", "dead-units", "encoder.0", "12 of 16"],
    ]
    assert "what to try" not in shown["hint"] and "says what to" not in shown["hint"]
    open_page(browser, pages["gone"])
    shown = browser.execute_script(_PANEL)
    assert shown["count"] == "Findings (0)"
    assert (
        shown["status"] == "None still holds: each finding below was healthy at every check since."
    )
    assert [r["cells"] for r in shown["rows"]][2:] == [_row(COLLAPSE)]


@needs_browser
def test_the_wandb_page_shows_the_same_findings(
    pages: dict[str, Path], browser: Any, tmp_path: Path
) -> None:
    from learnscope.plugins.wandb.page_writer import wandb_view_html

    page = tmp_path / "wandb.html"
    page.write_text(wandb_view_html(pages["record"]), "utf-8")
    data = re.search(r'id="learnscope-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    assert data is not None
    (run,) = json.loads(data[1])["runs"]
    assert [f["life"] for f in run["view"]["findings"]] == [
        life(f) for f in (DEAD, TINY, COLLAPSE, SPIKE)
    ]
    open_page(browser, page)
    _check_life_panel(browser)
