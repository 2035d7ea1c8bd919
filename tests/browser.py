"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium, for tests.

The machine has no network: Chromium starts with background networking, component updates and
sync switched off, and a fresh user data directory.
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


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A headless Chromium WebDriver; quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


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


def open_page(driver: Any, page: Path) -> None:
    """Open an exported learnscope page from ``file://`` and wait until its view is ready."""
    driver.get(page.as_uri())
    deadline = time.monotonic() + 60
    while not driver.execute_script(
        "return !!(window.learnscopeView && learnscopeView.state.ready)"
    ):
        assert time.monotonic() < deadline, "the page never got ready"
        time.sleep(0.1)
