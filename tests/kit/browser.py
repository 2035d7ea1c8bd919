"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium, for tests.

The machine has no network: Chromium starts with background networking, component updates and
sync switched off, and a fresh user data directory. With no GPU, WebGL is SwiftShader's (software
GL through ANGLE), asked for explicitly (``--enable-unsafe-swiftshader``): Chromium no longer
falls back to it on its own.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

# Text of an element (``arguments[0]``, or the whole page without one) including shadow DOMs
# (TensorBoard is built of web components).
DEEP_TEXT = """
const out = [];
function walk(node) {
  if (node.nodeType === Node.TEXT_NODE) { out.push(node.textContent); return; }
  if (node.shadowRoot) walk(node.shadowRoot);
  for (const child of node.childNodes) walk(child);
}
walk(arguments[0] || document.body);
return out.join(' ').replace(/\\s+/g, ' ');
"""

# Every iframe of the page, including those inside shadow DOMs.
_DEEP_FRAMES = """
const out = [];
function walk(node) {
  if (node.tagName === 'IFRAME') out.push(node);
  if (node.shadowRoot) walk(node.shadowRoot);
  for (const child of node.children || []) walk(child);
}
walk(document.body);
return out;
"""


def unavailable_reason() -> str | None:
    """Why the browser tests cannot run here, or ``None`` when they can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'learnscope[dev]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            return f"{path} not found (apt-get install chromium chromium-driver)"
    return None


KEEP_VIEW = (
    "window.addEventListener('learnscope:mounted', (event) => "
    "{ window.learnscopeView = event.detail; });"
)


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 900, flags: tuple[str, ...] = ()) -> Iterator[Any]:
    """A headless Chromium WebDriver, started with ``flags`` besides ours; quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-unsafe-swiftshader",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        *flags,
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    # The tests reach the view through the event the page announces it with (every frame,
    # before the page's own scripts): window.learnscopeView exists in the tests' browser only.
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": KEEP_VIEW})
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def chromium_or_skip(*flags: str) -> Iterator[Any]:
    """For a fixture: a headless Chromium driver (``flags`` besides ours), or the test skipped."""
    import pytest

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with chromium(flags=flags) as driver:
        yield driver


def page_text(driver: Any, depth: int = 2) -> str:
    """All text of the page, through shadow roots and iframes (``depth`` levels of frames)."""
    driver.switch_to.default_content()
    return _frame_text(driver, [], depth)


def _frame_text(driver: Any, path: list[int], depth: int) -> str:
    parts = [driver.execute_script(DEEP_TEXT)]
    if depth > 0:
        for index in range(len(driver.execute_script(_DEEP_FRAMES))):
            frame = driver.execute_script(_DEEP_FRAMES)[index]
            driver.switch_to.frame(frame)
            parts.append(_frame_text(driver, [*path, index], depth - 1))
            driver.switch_to.default_content()
            for i in path:  # back to this frame
                driver.switch_to.frame(driver.execute_script(_DEEP_FRAMES)[i])
    return " ".join(parts)


def wait_for_text(driver: Any, ok: Callable[[str], bool], timeout: float = 90.0) -> str:
    """Poll the page text until ``ok(text)``; return it (raise ``TimeoutError`` with the last)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = page_text(driver)
        if ok(text):
            return text
        time.sleep(1.0)
    raise TimeoutError(f"page never showed what was expected; it showed: {text[:2000]}")


def open_page(driver: Any, page: Path | str) -> None:
    """Open an exported learnscope page (a path or a ``file://`` address) until it is ready."""
    driver.get(page.as_uri() if isinstance(page, Path) else page)
    wait_view_ready(driver)


def wait_view_ready(driver: Any, timeout: float = 60.0) -> None:
    """Wait until the learnscope view of the page (or frame) the driver is in is ready."""
    deadline = time.monotonic() + timeout
    while not driver.execute_script(
        "return !!(window.learnscopeView && learnscopeView.state.ready)"
    ):
        assert time.monotonic() < deadline, "the page never got ready"
        time.sleep(0.1)


def ready_view_state(driver: Any, timeout: float = 60.0) -> dict[str, Any]:
    """The view's state once it is ready; its error, raised, if it failed."""
    deadline = time.monotonic() + timeout
    while True:
        state = driver.execute_script(
            "const v = window.learnscopeView; return v ? JSON.parse(JSON.stringify(v.state)) : null"
        )
        if state and state.get("error"):
            raise AssertionError(state["error"])
        if state and state["ready"]:
            return state
        assert time.monotonic() < deadline, f"the view never got ready: {state}"
        time.sleep(0.2)


_PLAYING = (
    "const s = window.learnscopeView.state; "
    "return {frames: s.frames, position: s.position, playing: s.playing}"
)


def play_until_moved(driver: Any, frames: int = 2, timeout: float = 60.0) -> dict[str, Any]:
    """Press play until the view has drawn ``frames`` more frames and its position moved on.

    A progress check, not a rate: however slowly the machine draws, it waits (up to ``timeout``)
    for the animation to go on. Pauses afterwards.

    Returns:
        ``frames``, ``position`` and ``playing`` of the view's state once it had moved on.
    """
    driver.execute_script("window.learnscopeView.play()")
    before = driver.execute_script(_PLAYING)
    deadline = time.monotonic() + timeout
    try:
        while True:
            now = driver.execute_script(_PLAYING)
            drawn = now["frames"] - before["frames"]
            if drawn >= frames and now["position"] != before["position"]:
                return now
            assert time.monotonic() < deadline, f"playing drew {drawn} frames: {before} -> {now}"
            time.sleep(0.05)
    finally:
        driver.execute_script("window.learnscopeView.pause()")


def enter_learnscope_tab(driver: Any, base: str, timeout: float = 60.0) -> None:
    """Open TensorBoard at ``base`` on the learnscope tab; switch into the tab's iframe."""
    driver.get(f"{base}/#learnscope")
    deadline = time.monotonic() + timeout
    while not driver.execute_script(_DEEP_FRAMES):
        assert time.monotonic() < deadline, "the learnscope tab never made its iframe"
        time.sleep(0.5)
    driver.switch_to.frame(driver.execute_script(_DEEP_FRAMES)[0])
