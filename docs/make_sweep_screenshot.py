"""Make the README's picture of a sweep: the runs table and the small multiples of three runs.

Usage (after ``learnscope demo --sweep``, which fills ``runs/sweep/version_<n>``)::

    python docs/make_sweep_screenshot.py runs/sweep/version_0 --out docs

It exports the sweep as one page (``learnscope export``), opens it in headless Chromium
(Debian's ``chromium`` and ``chromium-driver``, as the tests use), opens the demo's own setting
from the runs table, chooses it beside a slow learner and the run that collapses, and saves
``runs_table.png``: the table and, under it, the three runs' embeddings at one step cursor.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first
sys.path.append(str(Path(__file__).resolve().parents[1]))

from learnscope.plugins.views.view_page import export_html  # noqa: E402
from tests.kit.browser import chromium  # noqa: E402

OPENED = "lr0.02_wd0.01"  # the demo's own setting: the view under the table, at its last step
CHOSEN = ("lr0.002_wd0.01", OPENED, "lr0.02_wd30")  # learns slowly, healthy, collapses


def shoot(sweep: Path, out: Path) -> Path:
    """Export ``sweep``, choose :data:`CHOSEN` in its runs table, save ``runs_table.png``."""
    from selenium.webdriver.common.by import By

    page = Path(tempfile.mkdtemp()) / "sweep.html"
    export_html(sweep, page)
    with chromium(1400, 1100) as driver:
        driver.get(page.as_uri())
        deadline = time.monotonic() + 60
        while not driver.execute_script("return !!(window.learnscopeView?.table?.state?.open)"):
            if time.monotonic() > deadline:
                raise SystemExit("the runs table never showed")
            time.sleep(0.2)
        row = f'tr[data-run="{OPENED}"] td[data-column="name"]'
        driver.find_element(By.CSS_SELECTOR, row).click()
        opened = "return learnscopeView.state.ready && learnscopeView.state.run"
        while driver.execute_script(opened) != OPENED:
            if time.monotonic() > deadline:
                raise SystemExit(f"{OPENED} never opened")
            time.sleep(0.2)
        for name in CHOSEN:
            driver.find_element(By.CSS_SELECTOR, f'input[aria-label="choose {name}"]').click()
        ready = "const m = window.learnscopeView.table.multiples; return m.state.ready"
        while not driver.execute_script(ready):
            if time.monotonic() > deadline:
                raise SystemExit("the small multiples never showed")
            time.sleep(0.2)
        time.sleep(1.0)  # the panels' last frame
        shot = out / "runs_table.png"
        driver.save_screenshot(str(shot))
    return shot


def main(argv: list[str] | None = None) -> int:
    """Make ``runs_table.png``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="the sweep's folder (runs/sweep/version_0)")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where the PNG goes")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"saved {shoot(args.sweep, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
