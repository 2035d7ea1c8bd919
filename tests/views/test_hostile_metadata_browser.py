"""Hostile metadata, seen in a real browser: every point of the Projector keeps its own label.

A snapshot whose metadata holds what breaks the front end's parser (byte order marks, Unicode
line and paragraph separators, NEL, lone surrogates, tabs and newlines, empty values, a row of
blanks in every column, blank column names, very long values, right-to-left marks, emoji) is
written by the real ``TensorBoardWriter``, served by a real ``tensorboard`` and opened in
headless Chromium. In the page, the Projector's own data set must hold one metadata row per
point, row ``i`` on the point whose vector is row ``i``, each cell as the writer promises to show
it; and a search in the inspector panel must select the right point and show its label.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from selenium.webdriver.common.by import By

from learnscope import EmbeddingSnapshot
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from tests.kit.browser import chromium, unavailable_reason, wait_for_text
from tests.kit.tb_server import tensorboard

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EMPTY = "<empty>"
# (value given, text the Projector shows): line breaks, tabs and U+FEFF become a space, lone
# surrogates U+FFFD, a cell that JavaScript's trim() empties "<empty>"; the rest is kept.
HOSTILE = [
    ("\ufeff", EMPTY),
    ("\ufeffbom first", " bom first"),
    ("line\u2028separator", "line separator"),
    ("paragraph\u2029separator", "paragraph separator"),
    ("\u0085", "\u0085"),  # NEL: Python's strip() removes it, JavaScript's trim() does not
    ("next\u0085line", "next\u0085line"),
    ("lone \ud800 high", "lone \ufffd high"),
    ("lone \udfff low", "lone \ufffd low"),
    ("pair \ud83d\ude00 joined", "pair \U0001f600 joined"),
    ("tab\tinside", "tab inside"),
    ("new\nline", "new line"),
    ("crlf\r\nend", "crlf end"),
    ("", EMPTY),
    (" \t ", EMPTY),
    ("\u3000\xa0\u2007\u180e", EMPTY),
    ("\u200b", "\u200b"),  # zero-width space: not JavaScript whitespace
    ("\u200f\u05e9\u05dc\u05d5\u05dd", "\u200f\u05e9\u05dc\u05d5\u05dd"),  # RLM + Hebrew
    ("\u202eright to left\u202c", "\u202eright to left\u202c"),
    ("emoji \U0001f389 \U0001f469\u200d\U0001f469\u200d\U0001f467", None),
    ('<b>not html</b> & "quotes"', None),
    ("long " + "x" * 20_000, None),
]
POINTS = 70
BLANK_ROWS = (0, 31)  # every column blank
COLUMNS = ["label", "id", "", "\u2028"]  # the last two are blank names
SHOWN_COLUMNS = ["label", "id", "column 3", "column 4"]

# Runs in the Projector's own frame: ``deep`` finds an element through shadow roots.
DEEP = """
function deep(root, selector) {
  const hit = root.querySelector(selector);
  if (hit) return hit;
  for (const el of root.querySelectorAll('*')) {
    const found = el.shadowRoot && deep(el.shadowRoot, selector);
    if (found) return found;
  }
  return null;
}
"""
POINTS_JS = (
    DEEP
    + """
const points = deep(document, 'vz-projector').dataSet.points;
return points.map(p => [p.vector[0], Object.entries(p.metadata).map(([k, v]) => [k, String(v)])]);
"""
)
SEARCH_BOX_JS = (
    DEEP
    + """
const panel = deep(document, 'vz-projector-inspector-panel');
panel.selectedMetadataField = arguments[0];
return deep(panel.shadowRoot, '#search-box').shadowRoot.querySelector('paper-input')
  .inputElement.inputElement;
"""
)
SELECTED_JS = (
    DEEP
    + """
const card = deep(document, 'vz-projector-metadata-card').shadowRoot;
const label = card.querySelector('#metadata-label');
return [
  deep(document, 'vz-projector').selectedPointIndices,
  label ? label.textContent : null,
  [...card.querySelectorAll('.metadata-row')].map(row => [
    row.querySelector('.metadata-key').textContent,
    row.querySelector('.metadata-value').textContent,
  ]),
];
"""
)


def cell(column: int, point: int) -> tuple[str, str]:
    """(value given, text shown) of one metadata cell."""
    if point in BLANK_ROWS:
        return ("", "\t", " ", "\ufeff")[column], EMPTY
    if column == 1:
        return str(point), str(point)
    value, shown = HOSTILE[(point * (1 + 6 * column)) % len(HOSTILE)]
    return value, value if shown is None else shown


def hostile_snapshot() -> EmbeddingSnapshot:
    """``POINTS`` rows; the first component of row ``i`` is ``i``, so a point names its row."""
    vectors = torch.randn(POINTS, 5) + 2.0
    vectors[:, 0] = torch.arange(POINTS)
    metadata = {name: [cell(c, i)[0] for i in range(POINTS)] for c, name in enumerate(COLUMNS)}
    return EmbeddingSnapshot("encoder", 7, vectors, metadata)


def shown_row(point: int) -> list[list[str]]:
    return [[name, cell(c, point)[1]] for c, name in enumerate(SHOWN_COLUMNS)]


def projector_frame(driver: Any) -> None:
    """Switch into the Projector's document: TensorBoard's plugin frame, then the projector's."""
    driver.switch_to.default_content()
    for _ in range(2):
        driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))


def selected_after(driver: Any, timeout: float = 10.0) -> Any:
    """The selection and the metadata card once one point is selected."""
    deadline = time.monotonic() + timeout
    while True:
        selected = driver.execute_script(SELECTED_JS)
        if (len(selected[0]) == 1 and selected[2]) or time.monotonic() > deadline:
            return selected
        time.sleep(0.2)


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_projector_in_a_browser_shows_every_hostile_label_on_its_own_point(tmp_path: Path) -> None:
    with tensorboard(tmp_path) as server:
        writer = TensorBoardWriter(tmp_path / "hostile")
        writer.write_embedding(hostile_snapshot())
        writer.close()
        server.wait_for("/data/plugin/projector/runs", lambda runs: "hostile" in runs)
        with chromium(width=900, height=600) as driver:
            driver.get(f"{server.base}/#projector")
            text = wait_for_text(driver, lambda t: f"Points: {POINTS}" in t and "Dimension: 5" in t)
            assert "Number of tensors" not in text  # the front end's row-count mismatch error
            projector_frame(driver)

            points = driver.execute_script(POINTS_JS)
            assert len(points) == POINTS
            for i, (first, metadata) in enumerate(points):
                assert (first, metadata) == (i, shown_row(i)), f"point {i}"

            box = driver.execute_script(SEARCH_BOX_JS, "id")
            for hostile in ("\u0085", "lone \ud800 high", "\u202eright to left\u202c"):
                i = next(i for i in range(10, POINTS) if cell(0, i)[0] == hostile)
                box.clear()
                box.send_keys(str(i))
                assert selected_after(driver) == [[i], cell(0, i)[1], shown_row(i)], hostile
