"""The browser of the viewer's browser tests: Debian's Chromium through Playwright, one per test module
(skipped, or failed under ROLLOUT_REQUIRE_BROWSER=1, where there is none: see tests/view/browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.view.browser import (
    BrowserMissing,
    chromium,
    find_chromium,
    no_browser,
    require_playwright,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless Chromium for the module's tests (each test opens its own page)."""
    try:
        require_playwright()
        executable = find_chromium()
    except BrowserMissing as e:
        no_browser(e)
    with chromium(executable) as b:
        yield b
