"""The web viewer on a generated run of 100,000 tasks: its index, first run page, filtered pages, task pages, polls.

    python bench/view_scale.py [--tasks 100000] [--out DIR] [--samples 50]

Targets (`rollout view RUN --serve`), on a 2-core machine: a 100,000-task run's first page in under 1 s
and a task page in under 200 ms, with the index built once and cached beside the run. Every figure
below is measured in this run, side by side, and printed beside its target as target / measured (above
1: within it). The filtered, sorted and paged run pages are held to the first page's 1 s.

The run folder (`bench/view_run.py`: ~17 KB lines of 1 to 4 tool calls, a ~90% ok mix, with its
evaluation summary and tool report) is generated into `--out` (by default a folder under the temp
dir named after the size) and reused when it already holds that run: generating 100,000 tasks takes
a minute or two.

Steps. (a) the index built from the trajectory with no cache (`TrajectoryIndex.load`, which writes the
cache); (b) the index loaded from that cache (median of 3). (c) the first page of a fresh process
(`view_first_page.py`): the server's imports, scipy.special (which the first run summary imports), the
runs opened from the cache with the `Viewer`, then GET /run/0 through the ASGI app, and the same GET
again; "first page" adds them up with and without the imports. Then in this process, through the same
app (starlette's test client, no sockets): (d) run pages filtered, searched, sorted and paged, each the
first GET of its view (the index keeps the rows of recent views, so paging on is faster); (e) task
pages of `--samples` random tasks, plain and with a filter and a sort in the URL (previous and next are
then found within that view), median and p95; (f) a poll with nothing new (median of 3), and one after
100 lines were appended (the index extends itself and rewrites its cache; the new rows are rendered).
The appended lines are cut off again at the end and the cache put back.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from retrieval_common import print_table
from starlette.testclient import TestClient
from view_run import TEMPLATES, Templates, append_tasks, holds_run, write_run

from rollout.run_folder import trajectory_path
from rollout.view.index import TrajectoryIndex
from rollout.view.pages import open_runs
from rollout.view.query import TableQuery
from rollout.view.web import Viewer, create_app

FIRST_PAGE_S = 1.0
TASK_PAGE_S = 0.2
APPENDED = 100
SEARCH = "founder"
"""The text searched on the run page (in some questions of the demo set)."""
TASK_FILTER = {"status": "ok", "right": "wrong", "sort": "tokens", "desc": "1"}
"""The view carried by the filtered task pages."""
COLUMNS = ("step", "measurement", "time", "target", "target/measured")


def _time(s: float) -> str:
    return f"{s:,.1f} s" if s >= 10 else f"{s * 1000:,.0f} ms" if s >= 0.1 else f"{s * 1000:,.1f} ms"


def _row(step: str, what: str, seconds: float, target: float | None = None) -> tuple[str, ...]:
    if target is None:
        return step, what, _time(seconds), "", ""
    return step, what, _time(seconds), _time(target), f"{target / seconds:.2f}" if seconds > 0 else "inf"


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


class Pages:
    """GETs through the app, each timed; every status is kept for the last line."""

    def __init__(self, client: TestClient):
        self.client = client
        self.statuses: Counter[int] = Counter()
        self.refused: list[str] = []

    def get(self, url: str) -> tuple[float, Any]:
        started = time.perf_counter()
        response = self.client.get(url)
        seconds = time.perf_counter() - started
        self.statuses[response.status_code] += 1
        if response.status_code != 200:
            self.refused.append(f"{url} -> {response.status_code}")
        return seconds, response

    def median(self, url: str, repeat: int = 3) -> float:
        return statistics.median(self.get(url)[0] for _ in range(repeat))


def ensure_run(folder: Path, tasks: int) -> tuple[str, Templates | None]:
    """The generated run in `folder` (reused when there): what was done, and the templates when built."""
    if holds_run(folder, tasks, seed=0):
        return "reused", None
    started = time.perf_counter()
    templates = Templates(min(TEMPLATES, tasks))
    write_run(folder, tasks, templates)
    return f"generated in {_time(time.perf_counter() - started)}", templates


def first_page(folder: Path) -> dict[str, Any]:
    """A fresh process's steps up to its first run page (`view_first_page.py`)."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("view_first_page.py")), str(folder)],
                          capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"view_first_page.py failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def task_urls(index: TrajectoryIndex, rows: list[int], extra: dict[str, str]) -> list[str]:
    cols = index.columns
    urls = []
    for i in rows:
        params = {"id": cols["id"][i], **({"repeat": str(cols["repeat"][i])} if cols["repeat"][i] else {}), **extra}
        urls.append("/run/0/task?" + "&".join(f"{k}={v}" for k, v in params.items()))
    return urls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--out", type=Path, default=None, help="run folder (default: <temp dir>/rollout-view-scale-<tasks>)")
    p.add_argument("--samples", type=int, default=50, help="random tasks whose page is fetched")
    args = p.parse_args(argv)
    folder = args.out or Path(tempfile.gettempdir()) / f"rollout-view-scale-{args.tasks}"
    print(f"/proc/loadavg before: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f}", flush=True)
    how, templates = ensure_run(folder, args.tasks)
    trajectory = trajectory_path(folder)
    size = trajectory.stat().st_size
    print(f"run folder {folder}: {args.tasks:,} tasks, trajectory {size / 1e6:,.0f} MB "
          f"({size / args.tasks / 1e3:.1f} KB a line), {how}", flush=True)
    cells: list[tuple[str, ...]] = []

    # (a), (b): the index.
    cache = TrajectoryIndex(file=trajectory).cache_path
    cache.unlink(missing_ok=True)
    started = time.perf_counter()
    TrajectoryIndex.load(trajectory)
    cells.append(_row("(a) index", "cold build (no cache), writes the cache", time.perf_counter() - started))
    loads = []
    for _ in range(3):
        started = time.perf_counter()
        TrajectoryIndex.load(trajectory)
        loads.append(time.perf_counter() - started)
    cells.append(_row("(b) index", f"load from the cache ({cache.stat().st_size / 1e6:,.1f} MB)", statistics.median(loads)))

    # (c): a fresh process's first page.
    child = first_page(folder)
    steps = child["steps"]
    cells += [
        _row("(c) first page", "fresh process: imports (rollout.view.serve)", steps["imports"]),
        _row("(c) first page", "fresh process: import scipy.special", steps["scipy"]),
        _row("(c) first page", "fresh process: open_runs (cache) + Viewer", steps["open"]),
        _row("(c) first page", "fresh process: first GET /run/0", steps["get"]),
        _row("(c) first page", "open + first GET (imports excluded)", steps["open"] + steps["get"], FIRST_PAGE_S),
        _row("(c) first page", "imports + open + first GET", sum(steps[k] for k in ("imports", "scipy", "open", "get")),
             FIRST_PAGE_S),
        _row("(c) run page", "GET /run/0 again, same process", steps["get_again"], FIRST_PAGE_S),
    ]

    # (d), (e), (f): in this process, through the app.
    runs = open_runs([folder])
    index = runs[0].index
    with TestClient(create_app(Viewer(runs, folder.parent))) as client:
        pages = Pages(client)
        pages.statuses.update(child["status"])
        pages.get("/run/0")
        for what, url in (("status=error", "/run/0?status=error"), (f"text search q={SEARCH}", f"/run/0?q={SEARCH}"),
                          ("sort by tokens, descending", "/run/0?sort=tokens&desc=1"), ("page 250", "/run/0?page=250"),
                          ("ok, wrong, one tool, by time", "/run/0?status=ok&right=wrong&tool=query_knowledge_base_dense&sort=latency_s")):
            cells.append(_row("(d) run page", what, pages.get(url)[0], FIRST_PAGE_S))

        rng = random.Random(0)
        plain = [pages.get(u)[0] for u in task_urls(index, rng.sample(range(len(index)), args.samples), {})]
        matching = TableQuery.from_params(TASK_FILTER).matches(index)
        sample = rng.sample(matching, min(args.samples, len(matching)))
        filtered = [pages.get(u)[0] for u in task_urls(index, sample, TASK_FILTER)]
        shown = "&".join(f"{k}={v}" for k, v in TASK_FILTER.items())
        cells += [
            _row("(e) task page", f"median of {len(plain)} random tasks", statistics.median(plain), TASK_PAGE_S),
            _row("(e) task page", f"p95 of {len(plain)} random tasks", _p95(plain), TASK_PAGE_S),
            _row("(e) task page", f"median, {shown} ({len(matching):,} tasks)", statistics.median(filtered), TASK_PAGE_S),
            _row("(e) task page", f"p95, {shown}", _p95(filtered), TASK_PAGE_S),
        ]

        cells.append(_row("(f) poll", "nothing new", pages.median(f"/run/0/poll?offset={index.size}")))
        templates = templates or Templates(min(TEMPLATES, args.tasks))
        cached = cache.read_bytes()
        try:
            append_tasks(folder, args.tasks, APPENDED, templates)
            seconds, response = pages.get(f"/run/0/poll?offset={size}")
            new = response.json().get("new") if response.status_code == 200 else None
            if new != APPENDED:
                pages.refused.append(f"the poll after {APPENDED} appended lines found {new} new tasks")
            cells.append(_row("(f) poll", f"after {APPENDED} lines appended (index extended, cache rewritten)", seconds))
        finally:
            os.truncate(trajectory, size)
            cache.write_bytes(cached)  # the folder as it was: the cache of the run without the appended lines

    print_table(f"rollout view on {args.tasks:,} tasks (target / measured above 1: within target)", COLUMNS, cells)
    fetched = sum(pages.statuses.values())
    print(f"responses: {fetched} fetched, " + ", ".join(f"{n} × HTTP {s}" for s, n in sorted(pages.statuses.items())))
    if pages.refused:
        print("not as expected: " + "; ".join(pages.refused))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
