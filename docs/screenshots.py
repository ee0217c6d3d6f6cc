"""Screenshots of the web viewer for the docs: docs/images/viewer-{run,task,compare,pair}.png.

From the project's folder:

    python -m docs.screenshots [--results results/demo]

It makes the demo sweep first when the folder holds no runs (`python -m rollout -m mode=dense,hybrid`, about a
minute), serves the folder with `rollout view RESULTS --serve --port 0`, and photographs each page in Debian's
Chromium through Playwright, launched as the browser tests launch it (tests/view/browser.py), 1280 px wide:
the dense run's page; the hybrid run's task page for a question only hybrid got right, its first tool card
open; the comparison of the two runs; and that question side by side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import Page, expect

from rollout.errors import NotARunFolderError
from rollout.paths import PROJECT_ROOT
from rollout.report.compare.run_folders import find_runs
from rollout.view.pages import grid, open_runs
from tests.view.browser import chromium, find_chromium, require_playwright, serving

IMAGES = PROJECT_ROOT / "docs" / "images"
VIEWPORT = {"width": 1280, "height": 900}


def demo_runs(results: Path) -> list[Path]:
    """The runs in `results`, made with the demo sweep when there are none."""
    try:
        return find_runs([results])
    except NotARunFolderError:
        pass
    print(f"no runs in {results}: making the demo sweep (python -m rollout -m mode=dense,hybrid)", flush=True)
    subprocess.run([sys.executable, "-m", "rollout", "-m", "mode=dense,hybrid", "progress=false",
                    f"hydra.sweep.dir={results}", f"output_dir={results}/${{mode_name}}"], cwd=PROJECT_ROOT, check=True)
    return find_runs([results])


def flipped_question(a: Path, b: Path) -> str:
    """A question `b` got right and `a` wrong: of those, the first where `b` made the most tool calls."""
    run_a, run_b = open_runs([a, b])
    only_b = grid(run_a.index, run_b.index).cells["only_b"]
    if not only_b:
        raise SystemExit(f"{b.name} gets no question right that {a.name} gets wrong: nothing to show side by side")

    def calls(qid: str) -> int:
        row = run_b.index.position(qid, 0)
        return -1 if row is None else len(run_b.index.read_task(row).tool_calls)

    return max(only_b, key=calls)


def shoot(page: Page, name: str) -> Path:
    path = IMAGES / f"viewer-{name}.png"
    page.screenshot(path=str(path))
    print(f"{path.relative_to(PROJECT_ROOT)}  {path.stat().st_size / 1e3:.0f} kB")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results/demo"),
                        help="a sweep's folder with the dense and hybrid runs (made when it holds none)")
    args = parser.parse_args(argv)
    results = args.results if args.results.is_absolute() else PROJECT_ROOT / args.results
    require_playwright()
    executable = find_chromium()
    runs = demo_runs(results)
    names = [r.name for r in runs]
    if not {"dense", "hybrid"} <= set(names):
        raise SystemExit(f"{results} holds {', '.join(names)}: the screenshots need its dense and hybrid runs")
    a, b = names.index("dense"), names.index("hybrid")
    qid = flipped_question(runs[a], runs[b])
    IMAGES.mkdir(parents=True, exist_ok=True)
    # Served by a path relative to the project's folder, as the pages then show it.
    shown = results.relative_to(PROJECT_ROOT) if results.is_relative_to(PROJECT_ROOT) else results
    with tempfile.TemporaryDirectory() as log_dir, \
            serving([shown], cwd=PROJECT_ROOT, log_path=Path(log_dir) / "serve.log") as url, chromium(executable) as browser:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{url}run/{a}")
        expect(page.locator("tbody[data-rows] tr").first).to_be_visible()
        shoot(page, "run")

        page.goto(f"{url}run/{b}/task?{urlencode({'id': qid})}")
        card = page.locator("details[data-card]").first
        card.locator(":scope > summary").click()
        expect(card.locator("pre.result").first).to_be_visible()
        shoot(page, "task")

        page.goto(f"{url}compare?a={a}&b={b}")
        expect(page.locator("img.plot").first).to_be_visible()
        shoot(page, "compare")

        page.goto(f"{url}compare/task?{urlencode({'a': a, 'b': b, 'id': qid})}")
        expect(page.locator(".side-by-side .side")).to_have_count(2)
        shoot(page, "pair")
    return 0


if __name__ == "__main__":
    sys.exit(main())
