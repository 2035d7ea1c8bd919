"""The Images-tab pictures fit TensorBoard's image cards at common window widths.

Measured, not assumed: ``learnscope demo --epochs 2`` read by a real ``tensorboard --logdir``,
its Images tab opened in headless Chromium 1280, 1400 and 1920 pixels wide. TensorBoard 2.21
shows each picture 100% as wide as its card (``tf-image-loader``), with pixelated scaling: a
picture as wide as the card is shown pixel for pixel, one wider loses columns. A card with more
than one step also holds TensorBoard's own step slider, which TensorBoard makes 31 pixels wider
than the card (16 past its right edge) for any picture of any plugin: the only thing allowed
past a card's edge.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from learnscope.plugins.pipeline import figures
from tests.kit.browser import chromium, unavailable_reason, wait_for_text
from tests.kit.tb_server import tensorboard

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

WINDOWS = (1280, 1400, 1920)  # CSS pixels: common window widths
PICTURES = (
    "~learnscope/autocorrelation/params/acf",
    "~learnscope/autocorrelation/grads/acf",
    "~learnscope/embeddings/encoder/validate/pca",
)

# Every image card of a learnscope tag: the card's width and overflow, its picture's natural and
# shown width and place, and each element that reaches past the card's left or right edge
# (whether it is part of TensorBoard's step slider, ``#steps``).
_CARDS = """
const cards = [];
function walk(node) {
  if (node.tagName === 'TF-IMAGE-LOADER' && String(node.tag).startsWith('~learnscope/')) {
    cards.push(node);
  }
  if (node.shadowRoot) walk(node.shadowRoot);
  for (const child of node.children || []) walk(child);
}
walk(document.body);
return cards.map((card) => {
  const box = card.getBoundingClientRect(), root = card.shadowRoot;
  const img = root.querySelector('#main-image-container img');
  const slider = root.querySelector('#steps');
  const beyond = [];
  function inner(node, inSlider) {
    if (node.nodeType === 1) {
      const r = node.getBoundingClientRect();
      if (r.width > 0 && (r.right > box.right + 0.5 || r.left < box.left - 0.5)) {
        beyond.push({tag: node.tagName, id: node.id, slider: inSlider || node === slider});
      }
    }
    if (node.shadowRoot) inner(node.shadowRoot, inSlider || node === slider);
    for (const child of node.children || []) inner(child, inSlider || node === slider);
  }
  inner(root, false);
  const shown = img && img.getBoundingClientRect();
  return {
    tag: card.tag, width: card.clientWidth, scrollWidth: card.scrollWidth, slider: !!slider,
    loaded: !!(img && img.complete && img.naturalWidth > 0),
    natural: img ? img.naturalWidth : null, shown: shown ? shown.width : null,
    left: shown ? shown.left - box.left : null, right: shown ? shown.right - box.left : null,
    beyond,
  };
});
"""


@pytest.fixture(scope="module")
def demo_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``learnscope demo --epochs 2 --logdir DIR``, as a new user runs it."""
    logdir = tmp_path_factory.mktemp("cards") / "runs"
    result = subprocess.run(
        [sys.executable, "-m", "learnscope.lightning_glue.cli", "demo", "--epochs", "2"]
        + ["--logdir", str(logdir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return logdir


@pytest.fixture(scope="module")
def server(demo_logdir: Path) -> Iterator[Any]:
    with tensorboard(demo_logdir) as tb:
        tb.wait_for("/data/plugin/images/tags", lambda tags: len(tags) > 0)
        yield tb


def shown_cards(driver: Any, base: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The learnscope cards of the Images tab, once every picture of ``PICTURES`` has loaded."""
    driver.get(f"{base}/#images")
    wait_for_text(driver, lambda text: all(tag in text for tag in PICTURES))
    deadline = time.monotonic() + timeout
    while True:
        cards = driver.execute_script(_CARDS)
        if {c["tag"] for c in cards} >= set(PICTURES) and all(c["loaded"] for c in cards):
            return cards
        assert time.monotonic() < deadline, cards
        time.sleep(0.5)


def test_images_tab_pictures_are_shown_pixel_for_pixel_inside_their_cards(server: Any) -> None:
    measured = {}
    for window in WINDOWS:
        with chromium(width=window, height=900) as driver:
            cards = shown_cards(driver, server.base)
        measured[window] = sorted({c["width"] for c in cards})
        for card in cards:
            where = (window, card["tag"], card)
            # Shown at its own size (no pixelated shrinking), as wide as the card, inside it.
            assert card["natural"] == card["shown"] == card["width"], where
            assert card["left"] >= -0.5 and card["right"] <= card["width"] + 0.5, where
            # Nothing of the picture past the card's edges; only TensorBoard's own step slider.
            assert all(b["slider"] for b in card["beyond"]), where
            if not card["slider"]:  # one step: no sideways scrolling at all
                assert card["scrollWidth"] <= card["width"], where
    print(f"Images-tab card widths (CSS px) by window width: {measured}")
    assert all(widths == [figures.WIDTH] for widths in measured.values()), measured
