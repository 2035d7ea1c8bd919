"""Every response of the learnscope tab passes TensorBoard's security validator (issue 37).

TensorBoard 2.21 checks every response (``tensorboard/backend/security_validator.py``): a
``Content-Type``, ``X-Content-Type-Options: nosniff``, and for HTML a Content-Security-Policy
with ``default-src``; what fails is logged as "In 3.0, this warning will become an error". The
tab's routes are checked through TensorBoard's own middleware, and a real server's log is read
after the tab was used in a browser and every route asked.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tensorboard.backend.security_validator import SecurityValidatorMiddleware
from tensorboard.plugins import base_plugin
from werkzeug import wrappers
from werkzeug.test import Client

from learnscope.plugins.tab.plugin import LearnscopePlugin, secured
from learnscope.plugins.views import view_modules
from tests.kit.browser import chromium, enter_learnscope_tab, ready_view_state, unavailable_reason
from tests.kit.record_entries import (
    ALL_CALLBACKS,
    autocorrelation_entry,
    drifting_points,
    findings_entry,
    run_entry,
    snapshot_entry,
    write,
)

WARNING = "In 3.0, this warning will become an error"


def _runs(root: Path) -> Path:
    """Two runs of one key, with analyses and findings: every route has something to say."""
    ids = [f"p{i}" for i in range(30)]
    for name, seed in (("a", 0), ("b", 1)):
        views = drifting_points(30, 2, seed)
        acf = np.array([[1.0, 0.8, 0.5], [1.0, 0.2, 0.1]])
        write(
            root / name,
            run_entry(*ALL_CALLBACKS),
            *[snapshot_entry("enc", 10 * (s + 1), views[s], ids) for s in range(2)],
            autocorrelation_entry(20, "params", ["x", "y"], acf, [0.8, 0.2]),
            findings_entry(20, ("dead-units", "x", "12 of 16 units", 20, "warning")),
        )
    return root


def _requests() -> list[str]:
    """A request to every route, answered well or not: modules, runs, views, comparisons."""
    modules = [f"/{name}" for name in view_modules.module_sources()]
    return [
        *modules,
        "/no_such_module.js",
        "/runs",
        "/view?run=a",
        "/view?run=missing",
        "/view",
        "/compare?a=a&b=b&key=enc",
        "/compare?a=a&b=b&key=enc&step_a=10&step_b=20",
        "/compare?a=a&b=missing&key=enc",
        "/compare?a=a&b=b&key=enc&step_a=x",
        "/compare?a=a&b=b&key=other",
    ]


def test_every_route_passes_tensorboard_s_security_validator(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = LearnscopePlugin(base_plugin.TBContext(logdir=str(_runs(tmp_path))))
    assert plugin.wait_for_search(30.0) and plugin.is_active()
    apps = plugin.get_plugin_apps()
    statuses = set()
    with caplog.at_level(logging.WARNING):
        for request in _requests():
            route = request.split("?", 1)[0]
            app = apps.get(route, apps["/index.js"])  # an unknown module: the module route
            response = Client(SecurityValidatorMiddleware(app)).get(request)
            statuses.add(response.status_code)
            assert response.headers["X-Content-Type-Options"] == "nosniff", request
            assert response.headers["Content-Type"], request
    assert statuses == {200, 400, 404}  # answers good and bad were all asked
    assert [r.getMessage() for r in caplog.records if WARNING in r.getMessage()] == []


def test_an_html_answer_gets_a_policy_the_validator_accepts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The tab serves no HTML, but an error page werkzeug makes for it would be HTML."""
    page = wrappers.Response("<p>not found</p>", status=404, content_type="text/html")
    bare = Client(SecurityValidatorMiddleware(page))
    with caplog.at_level(logging.WARNING):
        bare.get("/")
        assert sum(WARNING in r.getMessage() for r in caplog.records) == 2  # what it catches
        caplog.clear()
        headers = Client(SecurityValidatorMiddleware(secured(page))).get("/").headers
    assert [r.getMessage() for r in caplog.records if WARNING in r.getMessage()] == []
    assert headers["Content-Security-Policy"] == "default-src 'none'"
    policy = wrappers.Response(
        "x", content_type="text/html", headers={"X-Content-Type-Options": "x"}
    )
    policy.headers["Content-Security-Policy"] = "default-src 'self'"
    kept = Client(secured(policy)).get("/").headers  # a policy of its own stays
    assert kept.get_all("Content-Security-Policy") == ["default-src 'self'"]
    assert kept.get_all("X-Content-Type-Options") == ["nosniff"]


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_a_tensorboard_server_logs_no_security_warning_while_the_tab_is_used(
    tmp_path: Path,
) -> None:
    from tests.kit.tb_server import tensorboard

    logdir = _runs(tmp_path)
    with tensorboard(logdir) as server, chromium() as driver:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 2)
        enter_learnscope_tab(driver, server.base)
        try:
            assert ready_view_state(driver)["run"] in ("a", "b")
            driver.execute_script("window.learnscopeView.loadRun('a')")
            ready_view_state(driver)
            driver.execute_script("window.learnscopeView.openCompare('b', 'enc')")
            compared = "return !!(learnscopeView.compare && learnscopeView.compare.state.ready)"
            deadline = time.monotonic() + 60
            while not driver.execute_script(compared):
                assert time.monotonic() < deadline, "the comparison never showed"
                time.sleep(0.5)
        finally:
            driver.switch_to.default_content()
        answers = {}
        for request in _requests():
            answers[request] = _headers(f"{server.base}/data/plugin/learnscope{request}")
        log = server.log()
    assert "TensorBoard" in log  # the server's log was read
    assert WARNING not in log, log[-3000:]
    for request, (status, headers) in answers.items():
        assert status in (200, 400, 404), (request, status)
        assert headers.get("X-Content-Type-Options") == "nosniff", request


def _headers(url: str) -> tuple[int, Any]:
    """The status and headers of a GET of ``url``, an error answer's too."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()
            return response.status, response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.headers
