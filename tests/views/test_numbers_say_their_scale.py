"""Every number of the view says its scale (issue 37, item 7): the movers' factor says of what
and against what, a tau says what it counts and what below 1 means, the lag-1 hints give bands
that cover every value from -1 to 1 (the same as ``docs/reading.md``), and the view says how to
read the smoothed copies of its series in TensorBoard. Headless Chromium on exported pages."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.plugins.views.view_page import export_html
from tests.kit.browser import open_page, unavailable_reason
from tests.kit.record_entries import (
    ALL_CALLBACKS,
    autocorrelation_entry,
    drifting_points,
    run_entry,
    snapshot_entry,
    write,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

DOCS = Path(__file__).resolve().parents[2] / "docs"
STEPS = (10, 20, 30)
GROUPS = ["features", "classifier"]


def analysis(step: int, kind: str, taus: list[float | None] | None) -> dict[str, Any]:
    base = 0.95 if kind == "params" else 0.3
    acf = np.array([[1.0, base - 0.1 * g, 0.5 * base] for g in range(2)])
    entry = autocorrelation_entry(step, kind, GROUPS, acf, acf[:, 1])
    if taus is not None:
        entry["tau"] = taus
    return entry


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``tau``: gradients with a tau below 1 and one above; ``plain``: no tau at all."""
    root = tmp_path_factory.mktemp("scale")
    ids = [f"p{i}" for i in range(60)]
    views = drifting_points(60, len(STEPS))
    snapshots = [snapshot_entry("enc", s, views[i], ids) for i, s in enumerate(STEPS)]
    out = {}
    for name, taus in (("tau", [0.136, 2.5]), ("plain", None)):
        analyses = [
            analysis(s, k, taus if k == "grads" else None)
            for s in STEPS[1:]
            for k in ("params", "grads")
        ]
        write(root / "logs" / name, run_entry(*ALL_CALLBACKS), *snapshots, *analyses)
        out[name] = root / f"{name}.html"
        assert export_html(root / "logs" / name, out[name]).runs == [name]
    return out


_MOVERS = """
window.learnscopeView.findMovers();
const table = document.querySelector('.ls-movers table');
return {header: [...table.rows[0].cells].map((c) => [c.textContent, c.title]),
        first: [...table.rows[1].cells].map((c) => c.textContent),
        example: document.querySelector('[data-role="movers-example"]').textContent,
        movers: window.learnscopeView.state.movers};
"""


def test_the_movers_factor_says_of_what_and_against_what(
    pages: dict[str, Path], browser: Any
) -> None:
    open_page(browser, pages["plain"])
    shown = browser.execute_script(_MOVERS)
    header = dict(shown["header"])
    assert "old neighbours now" in header and "farther" not in header
    assert header["old neighbours now"] == (
        "At step 30: the mean distance from the point to its 10 neighbours of step 20, in "
        "multiples of its mean distance to its 10 nearest at step 30 (1× as far: they are as "
        "near as its nearest)"
    )
    top = shown["movers"][0]
    factor = f"{top['drift']:.1f}×"
    assert shown["first"][0] == top["id"] and shown["first"][-1] == f"{factor} as far"
    assert shown["example"] == (
        f"Point {top['id']}: at step 30, its 10 neighbours of step 20 lie on average {factor} "
        "as far from it as its 10 nearest do."
    )
    assert not any(cell.startswith("x") for cell in shown["first"][2:])  # no bare "x47.4"


_TAU = """
const out = {};
for (const box of document.querySelectorAll('[data-role^="lag1-values-"]')) {
  out[box.dataset.role.slice('lag1-values-'.length)] = [...box.querySelectorAll('[data-group]')]
    .map((g) => { const t = g.querySelector('[data-role="tau-value"]');
                  return [g.dataset.group, t ? t.textContent : null, t ? t.title : null]; });
}
const note = document.querySelector('[data-role="note-tau"]');
return {values: out, note: note ? note.textContent : null};
"""


def test_a_tau_is_explained_where_it_is_shown_below_one_too(
    pages: dict[str, Path], browser: Any
) -> None:
    open_page(browser, pages["tau"])
    shown = browser.execute_script(_TAU)
    assert shown["values"]["params"] == [["features", None, None], ["classifier", None, None]]
    (features, classifier) = shown["values"]["grads"]
    assert features[:2] == ["features", " τ 0.14"]
    assert (
        "below 1: successive values are anti-correlated, each step partly undoes the last"
        in (features[2])
    )
    assert classifier[:2] == ["classifier", " τ 2.5"]
    assert classifier[2] == "τ = 2.5: one independent value about every 2.5 steps"
    assert shown["note"].startswith("τ, the integrated autocorrelation time: about how many steps")
    assert (
        "Below 1, successive values are anti-correlated: each step partly undoes the last"
        in (shown["note"])
    )
    open_page(browser, pages["plain"])
    assert browser.execute_script(_TAU)["note"] is None  # no tau shown, none explained


_HINTS = """
const text = (role) => (document.querySelector(`[data-role="${role}"]`) || {}).textContent;
return {params: text('hint-acf-params'), grads: text('hint-acf-grads'),
        smoothing: text('note-smoothing')};
"""


def bands(hint: str) -> list[tuple[float, float]]:
    """The lag-1 intervals a hint names: "from A to B", "below C", "above D"."""

    def number(text: str) -> float:
        return float(text.replace("−", "-"))

    found = [(number(a), number(b)) for a, b in re.findall(r"from (\S+) to ([\d.]+)", hint)]
    found += [(-1.0, number(c)) for c in re.findall(r"below (\S+?) \(", hint)]
    found += [(number(d), 1.0) for d in re.findall(r"above (\S+?) \(", hint)]
    return sorted(found)


def test_the_lag_one_bands_cover_every_value_as_the_docs_give_them(
    pages: dict[str, Path], browser: Any
) -> None:
    open_page(browser, pages["plain"])
    hints = browser.execute_script(_HINTS)
    reading = " ".join((DOCS / "reading.md").read_text("utf-8").split())
    for kind in ("params", "grads"):
        found = bands(hints[kind])
        assert found[0][0] == -1.0 and found[-1][1] == 1.0, (kind, found)
        for (_, end), (start, _) in zip(found, found[1:], strict=False):
            assert start == end, (kind, found)  # no gap, no overlap: 0.3 has one band
        assert hints[kind] in reading, kind  # the same words in docs/reading.md
    assert bands(hints["grads"]) == [(-1.0, -0.3), (-0.3, 0.5), (0.5, 1.0)]
    assert "set Smoothing to 0 there" in hints["smoothing"]
    for page in ("reading.md", "demo.md"):
        assert "Smoothing to 0" in (DOCS / page).read_text("utf-8"), page
