"""Fixtures of the views' tests: the one ``browser``, and ``tab_plugin``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kit.browser import chromium, unavailable_reason
from tests.kit.record_sweep import start_tab_plugin


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A headless Chromium driver for a test module's tests, or the test skipped, saying why.

    The window is 1400 x 900 unless the module sets ``BROWSER_WINDOW = (width, height)``.
    """
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    width, height = getattr(request.module, "BROWSER_WINDOW", (1400, 900))
    with chromium(width, height) as driver:
        yield driver


@pytest.fixture
def tab_plugin() -> Iterator[Callable[..., Any]]:
    """Start learnscope's TensorBoard plugin on a log directory (``tab_plugin(logdir,
    interval=0.0)``: its first search done); every plugin started is closed after the test, so
    no search outlives it."""
    started: list[Any] = []

    def start(logdir: str | Path, interval: float = 0.0) -> Any:
        started.append(start_tab_plugin(logdir, interval))
        return started[-1]

    yield start
    for plugin in started:
        plugin.close()
