"""Finding the browser of the browser tests: ROLLOUT_CHROMIUM, Debian's path, PATH; and skipping or, where
ROLLOUT_REQUIRE_BROWSER=1 (CI), failing when there is none."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.view import browser
from tests.view.browser import (
    BrowserMissing,
    ChromiumSettingError,
    find_chromium,
    no_browser,
    require_playwright,
)


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def test_rollout_chromium_is_used_and_must_name_an_executable(tmp_path: Path):
    mine = executable(tmp_path / "my-chromium")
    assert find_chromium({"ROLLOUT_CHROMIUM": str(mine), "PATH": ""}) == mine
    with pytest.raises(ChromiumSettingError, match=r"ROLLOUT_CHROMIUM=.*missing is not an executable file"):
        find_chromium({"ROLLOUT_CHROMIUM": str(tmp_path / "missing"), "PATH": ""})


def test_without_debians_chromium_path_is_searched_and_then_the_install_line_given(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(browser, "DEBIAN_CHROMIUM", tmp_path / "usr" / "bin" / "chromium")
    on_path = executable(tmp_path / "bin" / "chromium-browser")
    assert find_chromium({"PATH": str(on_path.parent)}) == on_path
    with pytest.raises(BrowserMissing, match=r"no Chromium found: apt-get install chromium"):
        find_chromium({"PATH": str(tmp_path / "empty")})
    # Debian's path comes first when it is there.
    debian = executable(tmp_path / "usr" / "bin" / "chromium")
    assert find_chromium({"PATH": str(on_path.parent)}) == debian


def test_a_missing_playwright_is_a_missing_browser(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "playwright", None)  # as if it were not
    with pytest.raises(BrowserMissing, match=r"playwright module is missing: pip install -e '\.\[test\]'"):
        require_playwright()


def test_a_missing_browser_skips_unless_the_browser_tests_are_required():
    problem = BrowserMissing("no Chromium found: apt-get install chromium")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        no_browser(problem, {})
    with pytest.raises(pytest.fail.Exception, match=r"apt-get install chromium \(ROLLOUT_REQUIRE_BROWSER=1"):
        no_browser(problem, {"ROLLOUT_REQUIRE_BROWSER": "1"})
