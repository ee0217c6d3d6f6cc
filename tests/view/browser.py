"""Debian's Chromium driven by Playwright, and `rollout view --serve` for it to open.

Playwright cannot download its own browser here, so the system's Chromium is launched by its path. The
viewer's browser tests (tests/view/conftest.py, test_browser.py) and the docs' screenshots
(docs/screenshots.py) launch it through `chromium()`, with the same flags, and start the viewer through
`serving()`, as its command line starts it.

On a machine without Chromium or Playwright the browser tests are skipped with the line that installs
them; with ROLLOUT_REQUIRE_BROWSER=1 (.ci/run sets it) they fail instead, so a CI that lost its browser
cannot pass without having run them.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM_ENV = "ROLLOUT_CHROMIUM"
"""The Chromium executable to use, when it is not Debian's /usr/bin/chromium or on PATH."""
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]
"""No sandbox (containers and root lack its namespaces), no GPU, no calls home, /tmp instead of a small /dev/shm."""
REQUIRE_ENV = "ROLLOUT_REQUIRE_BROWSER"
"""Set to 1 where the browser tests must run (CI): a missing browser fails them instead of skipping them."""
INSTALL = "apt-get install chromium (Debian's package), or point ROLLOUT_CHROMIUM at a Chromium executable"


class BrowserMissing(Exception):
    """No browser to drive; the message says how to get one."""


class ChromiumSettingError(Exception):
    """ROLLOUT_CHROMIUM names no executable: an error whatever the environment, since it was asked for."""


def find_chromium(environ: Mapping[str, str] = os.environ) -> Path:
    """The Chromium to launch: $ROLLOUT_CHROMIUM, else /usr/bin/chromium, else `chromium` or `chromium-browser`
    on PATH. A ROLLOUT_CHROMIUM that names no executable raises ChromiumSettingError: it is not a reason to look
    elsewhere, nor to skip."""
    named = environ.get(CHROMIUM_ENV)
    if named:
        if not os.access(named, os.X_OK) or not Path(named).is_file():
            raise ChromiumSettingError(f"{CHROMIUM_ENV}={named} is not an executable file; point it at Chromium, or unset it")
        return Path(named)
    if os.access(DEBIAN_CHROMIUM, os.X_OK):
        return DEBIAN_CHROMIUM
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name, path=environ.get("PATH"))
        if found:
            return Path(found)
    raise BrowserMissing(f"no Chromium found: {INSTALL}")


def require_playwright() -> None:
    """Raise BrowserMissing when Playwright for Python is not installed."""
    try:
        import playwright.sync_api  # noqa: F401 - only whether it imports
    except ImportError:
        raise BrowserMissing("the playwright module is missing: pip install -e '.[test]' (or pip install playwright)") from None


def no_browser(problem: BrowserMissing, environ: Mapping[str, str] = os.environ) -> NoReturn:
    """Skip the calling test for want of a browser, or fail it where the environment requires the browser tests."""
    import pytest

    if environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{problem} ({REQUIRE_ENV}=1: the browser tests must run)", pytrace=False)
    pytest.skip(str(problem))


@contextmanager
def chromium(executable: Path) -> Iterator[Browser]:
    """A headless Chromium, closed (with Playwright's driver) on leaving."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(executable), headless=True, args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def serving(paths: Sequence[Path | str], *, cwd: Path, env: Mapping[str, str] | None = None,
            log_path: Path | None = None) -> Iterator[str]:
    """`python -m rollout.view PATHS --serve --port 0` while inside: the URL its first line names. Its log goes to
    `log_path` (default cwd/serve.log: a pipe nobody reads could fill and stall it); it is stopped on leaving."""
    log_path = log_path or cwd / "serve.log"
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen([sys.executable, "-m", "rollout.view", *map(str, paths), "--serve", "--port", "0"],
                                cwd=cwd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        assert proc.stdout is not None
        line, deadline = "", time.monotonic() + 120  # a limit on waiting, not a claim about speed
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while not line and proc.poll() is None and time.monotonic() < deadline:
                if sel.select(timeout=0.5):
                    line = proc.stdout.readline()
        found = re.search(r"at (http://\S+/) \(Ctrl-C stops\)", line)
        if not found:
            raise RuntimeError(f"rollout view did not start: {line!r} {log_path.read_text(encoding='utf-8')}")
        yield found.group(1)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
