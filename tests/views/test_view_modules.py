"""The view's front end as ES modules: the tab serves each file, the pages get them joined.

The joiner puts each module after those it imports and drops the ``import`` statements, so one
inline module script runs what the modules run; what it cannot join
faithfully (renamed or default imports, a name defined twice, an import cycle) it refuses.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.plugins.views import view_modules
from learnscope.plugins.views.view_page import export_html, page_html
from tests.kit.browser import chromium, open_page, unavailable_reason
from tests.kit.record_entries import (
    ALL_CALLBACKS,
    autocorrelation_entry,
    drifting_points,
    findings_entry,
    run_entry,
    snapshot_entry,
    write,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NODE = shutil.which("node")

SOURCES = {
    "index.js": (
        "import { twice } from './b.js';\n"
        "import {\n  one,\n} from './a.js';\n"
        "export function main() { return twice() + one(); }\n"
        "globalThis.result = main();\n"
    ),
    "a.js": "export function one() { return 1; }\n",
    "b.js": "import { one } from './a.js';\nexport const twice = () => one() * 2;\n",
}


def _run_in_node(script: str, tmp_path: Path) -> Any:
    path = tmp_path / "joined.mjs"
    path.write_text(script + "\nconsole.log(JSON.stringify(globalThis.result));\n", "utf-8")
    done = subprocess.run([NODE, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_modules_come_after_what_they_import() -> None:
    assert view_modules.dependency_order(SOURCES, "index.js") == ["a.js", "b.js", "index.js"]


def test_the_joined_script_has_no_import_and_runs(tmp_path: Path) -> None:
    joined = view_modules.join_modules(SOURCES, "index.js")
    assert not re.search(r"^\s*import\b", joined, re.M) and "'./" not in joined
    assert joined.index("function one()") < joined.index("const twice") < joined.index("main()")
    if NODE is None:
        pytest.skip("node is not installed: the joined script is not run")
    assert _run_in_node(joined, tmp_path) == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("b.js", "import { one as uno } from './a.js';\n"), "b.js: 'import { one as uno }"),
        (("b.js", "import one from './a.js';\n"), "b.js: 'import one from"),
        (("b.js", "import { two } from './a.js';\n"), "b.js imports 'two', which a.js does not"),
        (("b.js", "import { one } from './c.js';\n"), "b.js imports from c.js, which is not"),
        (("a.js", "import { twice } from './b.js';\nexport function one() {}\n"), "cycle"),
        (("a.js", "export function one() {}\nexport function main() {}\n"), "'main' is defined"),
        (("a.js", "export default function one() {}\n"), "a.js: 'export default"),
        (("a.js", "export function one() {}\nexport { one };\n"), "a.js: 'export { one }"),
    ],
)
def test_what_cannot_be_joined_faithfully_is_refused(change: tuple[str, str], message: str) -> None:
    name, text = change
    sources = {**SOURCES, name: text}
    with pytest.raises(ValueError, match=re.escape(message)):
        view_modules.join_modules(sources, "index.js")


def test_the_shipped_modules_join_into_the_pages_script() -> None:
    sources = view_modules.module_sources()
    assert "index.js" in sources and len(sources) >= 6  # the entry, the model, the panels ...
    order = view_modules.dependency_order(sources, view_modules.ENTRY)
    assert sorted(order) == sorted(sources)  # every shipped module is used
    assert order[-1] == "index.js"
    joined = view_modules.joined_source()
    assert not re.search(r"^\s*import\b", joined, re.M)
    assert "export async function render()" in joined
    page = page_html([("run", {"time": 0.0})])
    assert joined in page and page.count("<script") == 2


def test_the_tab_serves_every_module(tmp_path: Path) -> None:
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from learnscope.plugins.tab.plugin import LearnscopePlugin

    plugin = LearnscopePlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert plugin.frontend_metadata().es_module_path == "/index.js"
    apps = plugin.get_plugin_apps()
    sources = view_modules.module_sources()
    for name, text in sources.items():
        response = Client(apps[f"/{name}"]).get(f"/{name}")
        assert response.status_code == 200, name
        assert response.headers["Content-Type"].startswith("text/javascript"), name
        assert response.get_data(as_text=True) == text
    routes = ["/runs", "/view", "/compare", "/table"]
    assert sorted(apps) == sorted([*routes, *(f"/{n}" for n in sources)])


_IMPORT_ALL = """
const [names, done] = [arguments[0], arguments[arguments.length - 1]];
const failed = [];
(async () => {
  for (const name of names) {
    try { await import('/data/plugin/learnscope/' + name); }
    catch (error) { failed.push(name + ': ' + error); }
  }
  done(failed);
})();
"""


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_every_served_module_loads_in_the_browser_without_errors(tmp_path: Path) -> None:
    from tests.kit.tb_server import tensorboard

    ids = [f"p{i}" for i in range(30)]
    views = drifting_points(30, 2)
    write(
        tmp_path / "run",
        run_entry(*ALL_CALLBACKS),
        *[snapshot_entry("enc", s + 1, views[s], ids) for s in range(2)],
    )
    names = sorted(view_modules.module_sources())
    with tensorboard(tmp_path) as server, chromium() as driver:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 1)
        driver.get(f"{server.base}/data/plugin/learnscope/runs")  # a page of the server
        driver.get_log("browser")  # start afresh
        driver.set_script_timeout(60)
        assert driver.execute_async_script(_IMPORT_ALL, names) == []
        logged = driver.get_log("browser")  # the JSON page's favicon.ico is no module
        errors = [e for e in logged if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]]
        assert errors == []


_CLICK_FINDING = """
const row = [...document.querySelectorAll('tr.ls-click[title="show this step"]')]
  .find((r) => r.dataset.step === String(arguments[0]));
row.click();
const acf = document.querySelector('input[aria-label="analysis step"]');
return {position: window.learnscopeView.state.position, analysis: +acf.value};
"""


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_a_finding_moves_the_panels_through_the_step_cursor(tmp_path: Path) -> None:
    """A finding's row moves the step cursor to its step: each panel shows its newest snapshot
    or analysis at or before it (its first when it has none that early)."""
    ids = [f"p{i}" for i in range(30)]
    views = drifting_points(30, 3)
    acf = np.array([[1.0, 0.8, 0.5], [1.0, 0.2, 0.1]])
    analyses = [autocorrelation_entry(s, "params", ["a", "b"], acf, [0.8, 0.2]) for s in (15, 22)]
    found = findings_entry(25, ("x", "a", "at 12", 12, "info"), ("y", "b", "at 25", 25, "error"))
    snapshots = [snapshot_entry("enc", 10 * (s + 1), views[s], ids) for s in range(3)]
    write(tmp_path / "logs" / "full", run_entry(*ALL_CALLBACKS), *snapshots, *analyses, found)
    write(tmp_path / "logs" / "none", run_entry(*ALL_CALLBACKS), *analyses, found)
    pages = {}
    for run in ("full", "none"):
        pages[run] = tmp_path / f"{run}.html"
        assert export_html(tmp_path / "logs" / run, pages[run]).runs == [run]
    with chromium() as driver:
        open_page(driver, pages["full"])
        assert driver.execute_script(_CLICK_FINDING, 25) == {"position": 1, "analysis": 1}
        assert driver.execute_script(_CLICK_FINDING, 12) == {"position": 0, "analysis": 0}
        driver.execute_script(
            "document.querySelector('input[aria-label=\"step\"]').value = 2;"
            "document.querySelector('input[aria-label=\"step\"]')"
            ".dispatchEvent(new Event('input'))"
        )
        assert (
            driver.execute_script(
                "return +document.querySelector('input[aria-label=\"analysis step\"]').value"
            )
            == 1
        )  # the slider at step 30: the analysis at step 22
        open_page(driver, pages["none"])
        assert driver.execute_script(_CLICK_FINDING, 25)["analysis"] == 1
        assert driver.execute_script(_CLICK_FINDING, 12)["analysis"] == 0
