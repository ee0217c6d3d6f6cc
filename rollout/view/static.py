"""`rollout view RUN [RUN ...] --html FILE`: the viewer's pages as one self-contained file.

The file holds every page the server would show, rendered by the same templates: each run page (with
all its tasks: the page's script filters, sorts and pages them in the browser), each task page, and,
with two runs or more, the comparison of every run against the first, its grid cells and the side-by-
side pages. Each page is a section; the URL's `#/route` says which one shows, so the file opens from
`file://` with no server, and a link to one of its views is the file's path plus that route.
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

from rollout.view.pages import CELLS, Run
from rollout.view.query import TableQuery
from rollout.view.web import Viewer

logger = logging.getLogger(__name__)


class StaticLinks:
    """Links between the sections of the static file: `#/run/0`, `#/run/0/task/17`, `#/compare/0/1`..."""

    def __init__(self, runs: list[Run]):
        self.runs = runs

    def home(self) -> str:
        return "#/"

    def run(self, n: int, query: TableQuery | None = None) -> str:
        return f"#/run/{n}" + (query.url() if query else "")

    def run_action(self, n: int) -> str:
        return f"#/run/{n}"

    def task(self, n: int, row: int, query: TableQuery | None) -> str:
        return f"#/run/{n}/task/{row}" + (query.but(page=1).url() if query else "")

    def anchor(self, n: int, row: int, anchor: str) -> str:
        return f"#r{n}-t{row}-{anchor}"

    def poll(self, n: int, query: TableQuery) -> str:
        return ""

    def compare(self, a: int, b: int) -> str:
        return f"#/compare/{a}/{b}"

    def compare_action(self) -> str:
        return "#/compare"

    def cell(self, a: int, b: int, cell: str, page: int = 1) -> str:
        return f"#/compare/{a}/{b}/{cell}"

    def pair(self, a: int, b: int, qid: str, repeat: int) -> str:
        return f"#/pair/{a}/{b}/{quote(qid, safe='')}/{repeat}"


def write_static(runs: list[Run], root: Path, out: Path) -> Path:
    """Write the pages of `runs` into the file `out`; returns it."""
    viewer = Viewer(runs, root, static=True, links=StaticLinks(runs))
    sections: list[str] = []
    if len(runs) > 1:
        sections.append(viewer.home_section(page_id="home", route="/"))
    for run in runs:
        n = run.number
        route = f"/run/{n}"
        sections.append(viewer.run_section(run, TableQuery(), page_id=f"r{n}", route=route, all_rows=True))
        for row in range(len(run.index)):
            sections.append(viewer.task_section(run, row, TableQuery(), page_id=f"r{n}-t{row}",
                                                route=f"{route}/task/{row}"))
    for b in range(1, len(runs)):
        sections.append(viewer.compare_section(0, b, page_id=f"c0-{b}", route=f"/compare/0/{b}"))
        paired: set[tuple[str, int]] = set()
        for cell in CELLS:
            questions = viewer.cell_questions(0, b, cell)
            sections.append(viewer.cell_section(0, b, cell, page_id=f"c0-{b}-{cell}", route=f"/compare/0/{b}/{cell}",
                                                all_rows=True, questions=questions))
            paired.update((q.id, q.repeat) for q in questions)
        for k, (qid, repeat) in enumerate(sorted(paired)):
            sections.append(viewer.pair_section(0, b, qid, repeat, page_id=f"p0-{b}-{k}",
                                                route=f"/pair/0/{b}/{quote(qid, safe='')}/{repeat}"))
    title = runs[0].label if len(runs) == 1 else f"{len(runs)} runs"
    html = viewer.page(title, "\n".join(sections))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    logger.info("wrote %s (%d pages, %.1f MB)", out, len(sections), out.stat().st_size / 1e6)
    return out
