"""Fixtures of the views' tests: the one ``browser``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kit.browser import chromium, unavailable_reason


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
