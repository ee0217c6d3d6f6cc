"""The web viewer in a real browser: Debian's Chromium driven by Playwright, against `rollout view --serve`
started as the command line starts it, and the file `rollout view --html` writes, opened from file://.

The runs are small folders written from the real records (tests/view/made_runs.py). Served, they are run 0
(dense) and 1 (hybrid) of a sweep, 2 (model output that is HTML and script) and 3 (a run still being
written). Every wait is on a selector or a URL through Playwright's `expect`; none is a sleep.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rollout.jsonl import read_jsonl
from rollout.records import TaskResult
from rollout.report.scoring import score_task
from rollout.run_folder import TRAJECTORY_FILE
from rollout.view.query import PAGE_SIZE
from tests.test_rollout_command import rollout_command_env
from tests.view.browser import serving
from tests.view.made_runs import HOSTILE, task, two_runs, write_run

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips these tests (or fails them in CI) with the line that installs it
    expect = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

LIVE_WAIT_MS = 30_000
"""How long a live row may take to show: the page polls every 2 s, and this machine is shared (a limit on
waiting, not a claim about speed)."""
DENSE, HYBRID, HOSTILE_RUN, LIVE = 0, 1, 2, 3


@dataclass
class Runs:
    """The run folders on show and the tasks written into them."""

    root: Path
    folders: list[Path]

    def tasks(self, n: int) -> list[TaskResult]:
        return [TaskResult.from_json(d) for d in read_jsonl(self.folders[n] / TRAJECTORY_FILE)]

    def ids(self, n: int, *, right: bool | None = None) -> list[str]:
        """Ids of run `n`'s tasks, in file order; with `right`, only the scored ones whose EM says so."""
        scores = [score_task(t) for t in self.tasks(n)]
        return [s["id"] for s in scores if right is None or (s["exact_match"] is not None and (s["exact_match"] == 1.0) == right)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("browser")
    dense, hybrid = two_runs(root / "sweep")
    hostile = write_run(root / "hostile", [
        task("h1", HOSTILE, "Paris", HOSTILE, result_text=HOSTILE, thinking=HOSTILE),
        task("h2", HOSTILE, "Paris", HOSTILE, status="error"),
    ], mode="hostile")
    # One task more than a page holds: page 1 is full, page 2 (the last) has one row.
    live = write_run(root / "live", [task(f"l{i:03d}", f"question {i}?", "a", "a") for i in range(PAGE_SIZE + 1)], mode="live")
    return Runs(root, [dense, hybrid, hostile, live])


@pytest.fixture(scope="module")
def html_job(runs: Runs) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """`rollout view --html` over the sweep and the hostile run, started at once so that it writes while the
    served tests run (`static_file` waits for it)."""
    out = runs.root / "view.html"
    proc = subprocess.Popen([sys.executable, "-m", "rollout.view", str(runs.root / "sweep"), str(runs.folders[HOSTILE_RUN]),
                             "--html", str(out)], cwd=runs.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=rollout_command_env())
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def served(runs: Runs, html_job: tuple[subprocess.Popen[str], Path]) -> Iterator[str]:
    """The base URL of `rollout view` serving the four runs (the static file is started first, to be written
    meanwhile)."""
    with serving([runs.root / "sweep", runs.folders[HOSTILE_RUN], runs.folders[LIVE]], cwd=runs.root,
                 env=rollout_command_env()) as url:
        yield url


@pytest.fixture(scope="module")
def static_file(html_job: tuple[subprocess.Popen[str], Path]) -> str:
    """The file:// URL of the file `rollout view --html` wrote."""
    proc, out = html_job
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return out.as_uri()


@dataclass
class Tab:
    """A page, with the dialogs it opened and the script errors it raised."""

    page: Page
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def pwned(self) -> Any:
        return self.page.evaluate("window.__pwned")


def watch(page: Page) -> Tab:
    """`page`, its dialogs dismissed and recorded, its script errors recorded."""
    t = Tab(page)
    page.on("dialog", lambda d: (t.dialogs.append(f"{d.type}: {d.message}"), d.dismiss()))
    page.on("pageerror", lambda e: t.errors.append(str(e)))
    return t


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield watch(context.new_page())
    context.close()


def shown_ids(page: Page) -> list[str]:
    """Ids of the task rows the table shows, top to bottom."""
    return page.locator("tbody[data-rows] tr:visible").evaluate_all("rows => rows.map(r => r.dataset.id)")


# --- the tests ------------------------------------------------------------------------------------


def test_filtering_the_task_table_shows_the_tasks_the_data_says(tab: Tab, served: str, runs: Runs):
    page = tab.page
    page.goto(f"{served}run/{HYBRID}")
    all_ids, wrong = runs.ids(HYBRID), runs.ids(HYBRID, right=False)
    assert 0 < len(wrong) < len(all_ids)  # the filter has something to leave out
    expect(page.locator("tbody[data-rows] tr")).to_have_count(len(all_ids))

    page.select_option("select[name=right]", "wrong")
    page.get_by_role("button", name="filter").click()
    page.wait_for_url(re.compile(r"right=wrong"))
    expect(page.locator("tbody[data-rows] tr")).to_have_count(len(wrong))
    assert shown_ids(page) == wrong
    expect(page.locator("[data-matched]")).to_have_text(f"{len(wrong)} of {len(all_ids)} tasks")
    assert page.url.endswith(f"run/{HYBRID}?right=wrong")  # the filters left at "any" stay out of the link

    # The text search narrows the filtered view further (both kept in the URL).
    page.fill("input[name=q]", wrong[-1])
    page.get_by_role("button", name="filter").click()
    page.wait_for_url(re.compile(rf"q={wrong[-1]}"))
    expect(page.locator("tbody[data-rows] tr")).to_have_count(1)
    assert shown_ids(page) == [wrong[-1]]
    assert not tab.errors


def test_a_task_page_opens_from_the_table_and_its_tool_card_expands(tab: Tab, served: str, runs: Runs):
    page = tab.page
    first = runs.tasks(DENSE)[0]
    page.goto(f"{served}run/{DENSE}")
    page.locator("tbody[data-rows] td.id a", has_text=re.compile(rf"^{first.id}$")).click()
    expect(page.locator("h1")).to_have_text(f"task {first.id}")

    card = page.locator("details[data-card]").first
    result = card.locator("pre.result").first
    expect(result).to_be_hidden()
    card.locator(":scope > summary").click()
    expect(card).to_have_attribute("open", "")
    expect(result).to_be_visible()
    expect(result).to_contain_text(f"[p1] passage p1 about {first.question}")
    expect(card.locator(":scope > summary")).to_contain_text(first.tool_calls[0].name)

    page.get_by_role("link", name="next →").click()
    expect(page.locator("h1")).to_have_text(f"task {runs.ids(DENSE)[1]}")
    assert not tab.errors


def test_a_compare_cell_lists_its_questions_and_opens_them_side_by_side(tab: Tab, served: str, runs: Runs):
    page = tab.page
    dense_right, hybrid_right = set(runs.ids(DENSE, right=True)), set(runs.ids(HYBRID, right=True))
    only_b = sorted(set(runs.ids(DENSE, right=False)) & hybrid_right)
    assert only_b and not hybrid_right >= dense_right  # both flips happen in these runs
    page.goto(f"{served}compare?a={DENSE}&b={HYBRID}")
    expect(page.locator("a[data-cell=only_b] b")).to_have_text(str(len(only_b)))
    # Its tables fit a 1280 px window: nothing is cut off at the right edge.
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]

    page.locator("a[data-cell=only_b]").click()
    page.wait_for_url(re.compile(r"cell=only_b"))
    links = page.locator("tbody[data-rows] td.id a")
    expect(links).to_have_count(len(only_b))
    assert sorted(links.all_inner_texts()) == only_b

    qid = only_b[0]
    links.first.click()
    expect(page.locator("h1")).to_have_text(f"task {qid}")
    sides = page.locator(".side-by-side .side")
    expect(sides).to_have_count(2)
    predictions = {t.id: t.prediction for t in runs.tasks(DENSE)}, {t.id: t.prediction for t in runs.tasks(HYBRID)}
    for side, prediction in zip(sides.all(), (p[qid] for p in predictions), strict=True):
        expect(side.locator("p b").first).to_have_text(prediction)
    expect(sides.nth(0).locator(".wrong")).to_have_text("wrong")
    expect(sides.nth(1).locator(".right")).to_have_text("right")
    assert not tab.errors


def test_the_static_file_opens_from_file_and_filters_links_and_compares_in_the_browser(tab: Tab, static_file: str,
                                                                                          runs: Runs):
    page = tab.page
    wrong, all_ids = runs.ids(HYBRID, right=False), runs.ids(HYBRID)
    page.goto(f"{static_file}#/run/{HYBRID}")
    shown = page.locator("section.page.shown")
    expect(shown).to_have_attribute("data-route", f"/run/{HYBRID}")
    expect(shown.locator("tbody[data-rows] tr:visible")).to_have_count(len(all_ids))

    shown.locator("select[name=right]").select_option("wrong")
    shown.get_by_role("button", name="filter").click()
    page.wait_for_url(re.compile(rf"#/run/{HYBRID}\?right=wrong$"))
    expect(shown.locator("tbody[data-rows] tr:visible")).to_have_count(len(wrong))
    assert shown_ids(page) == wrong
    expect(shown.locator("[data-matched]")).to_have_text(f"{len(wrong)} of {len(all_ids)} tasks")

    # Sorting by id, twice: the rows reverse and the heading's arrow follows.
    shown.locator("a[data-sort=id]").click()
    shown.locator("a[data-sort=id]").click()
    page.wait_for_url(re.compile(r"sort=id&desc=1$"))
    expect(shown.locator("a[data-sort=id]")).to_have_text("id ▼")
    assert shown_ids(page) == sorted(wrong, reverse=True)
    page.goto(f"{static_file}#/run/{HYBRID}?right=wrong")
    expect(shown.locator("a[data-sort=id]")).to_have_text("id")

    # A task of the filtered table, its card, and back to the same filtered table.
    shown.locator("tbody[data-rows] tr:visible td.id a").first.click()
    expect(shown.locator("h1")).to_have_text(f"task {wrong[0]}")
    shown.locator("details[data-card] summary").first.click()
    expect(shown.locator("details[data-card] pre.result").first).to_be_visible()
    shown.locator("[data-back]").click()
    expect(shown).to_have_attribute("data-route", f"/run/{HYBRID}")
    expect(shown.locator("tbody[data-rows] tr:visible")).to_have_count(len(wrong))

    # A link to a moment of a transcript (a timeline anchor) opens its task, whose neighbours work.
    moment = page.locator(f"#r{HYBRID}-t0 a.anchor").nth(1).get_attribute("href")
    page.goto("about:blank")
    page.goto(f"{static_file}{moment}")
    expect(shown).to_have_attribute("data-route", f"/run/{HYBRID}/task/0")
    expect(shown.locator("[data-nav=prev]")).to_be_hidden()
    shown.locator("[data-nav=next]").click()
    expect(shown.locator("h1")).to_have_text(f"task {all_ids[1]}")

    # The comparison: its cell lists the flip, and the flip opens side by side.
    only_b = sorted(set(runs.ids(DENSE, right=False)) & set(runs.ids(HYBRID, right=True)))
    page.goto(f"{static_file}#/compare/{DENSE}/{HYBRID}")
    shown.locator("a[data-cell=only_b]").click()
    expect(shown).to_have_attribute("data-route", f"/compare/{DENSE}/{HYBRID}/only_b")
    assert sorted(shown.locator("tbody[data-rows] td.id a").all_inner_texts()) == only_b
    shown.locator("tbody[data-rows] td.id a").first.click()
    expect(shown.locator(".side-by-side .side")).to_have_count(2)
    expect(shown.locator("h1")).to_have_text(f"task {only_b[0]}")

    # With three runs, the form pairs the first run with another: the comparisons the file holds.
    page.goto(f"{static_file}#/compare/{DENSE}/{HYBRID}")
    form = shown.locator("form.filters")
    assert form.locator("select[name=a] option").all_inner_texts() == ["dense"]
    assert form.locator("select[name=b] option").all_inner_texts() == ["hybrid", "hostile"]
    form.locator("select[name=b]").select_option(label="hostile")
    form.get_by_role("button", name="pair").click()
    expect(shown).to_have_attribute("data-route", f"/compare/{DENSE}/{HOSTILE_RUN}")

    # A link cut inside an escape (a truncated paste) opens the file's first page, not a blank one.
    page.goto("about:blank")
    page.goto(f"{static_file}#r0-t%E2%80")
    expect(shown).to_have_attribute("id", "home")
    assert not tab.errors


def test_a_running_run_gets_its_new_tasks_without_a_reload(tab: Tab, served: str, runs: Runs):
    before = runs.ids(LIVE)
    other = watch(tab.page.context.new_page())
    last, first = tab.page, other.page
    last.goto(f"{served}run/{LIVE}?page=2")
    first.goto(f"{served}run/{LIVE}")
    expect(last.locator("tbody[data-rows] tr")).to_have_count(1)
    expect(first.locator("tbody[data-rows] tr")).to_have_count(PAGE_SIZE)
    last.evaluate("window.__loaded = true")  # gone if the page reloads instead of appending

    write_run(runs.folders[LIVE], [task("new", "third?", "gold", HOSTILE)], mode="live")
    n = len(before) + 1
    # The last page, in file order, shows the new task at its end, and counts it.
    new_row = last.locator("tbody[data-rows] tr[data-id=new]")
    expect(new_row).to_be_visible(timeout=LIVE_WAIT_MS)
    assert shown_ids(last) == [before[-1], "new"]
    expect(new_row.locator("td.text").nth(1)).to_have_text(HOSTILE)  # shown as text, as the served rows are
    expect(last.locator("[data-count=tasks]")).to_have_text(str(n))
    expect(last.locator("[data-matched]")).to_have_text(f"{n} of {n} tasks · page 2 of 2")
    assert last.evaluate("window.__loaded") is True
    # The first page keeps its rows (the new task is not the 201st of the file) and says where it went.
    expect(first.locator("[data-live]")).to_have_text(re.compile(r"^1 new matching task since .*after this page"),
                                                      timeout=LIVE_WAIT_MS)
    expect(first.locator("[data-matched]")).to_have_text(f"{n} of {n} tasks · page 1 of 2")
    assert shown_ids(first) == before[:PAGE_SIZE]
    for t in (tab, other):
        assert t.pwned() is None and not t.dialogs and not t.errors


def test_model_output_runs_no_script_and_opens_no_dialog(tab: Tab, served: str, static_file: str):
    page = tab.page
    # The check can fail: the same string, put into a page as HTML, does run and does open a dialog.
    page.set_content(f"<p>{HOSTILE}</p>")
    expect(page.locator("img")).to_have_count(1)
    page.wait_for_function("window.__pwned === 1")
    assert tab.dialogs == ["alert: 1"]
    tab.dialogs.clear()

    for url in (f"{served}run/{HOSTILE_RUN}", f"{served}run/{HOSTILE_RUN}/task?id=h1", f"{served}run/{HOSTILE_RUN}/task?id=h2",
                f"{static_file}#/run/{HOSTILE_RUN}", f"{static_file}#/run/{HOSTILE_RUN}/task/0"):
        page.goto(url)
        view = page.locator("section.page.shown") if url.startswith("file:") else page.locator("main")
        if "task" in url:
            for summary in view.locator("details > summary").all():
                summary.click()
        texts = view.locator("td.text, pre")
        expect(texts.filter(has_text=HOSTILE).first).to_be_visible()
        if url.endswith(("id=h1", "task/0")):
            expect(view.locator("td.text").first).to_have_text(HOSTILE)  # the question
            expect(view.locator("pre.result").first).to_have_text(HOSTILE)  # the tool's result
            expect(view.locator("pre.answer")).to_have_text(HOSTILE)  # the prediction
        assert view.locator("img").count() == 0, url
        assert tab.pwned() is None, url
        assert not tab.dialogs, url
    assert not tab.errors
