"""The first run page of a fresh process, for bench/view_scale.py: what `rollout view RUN --serve` pays before it.

    python bench/view_first_page.py RUN_FOLDER

Prints one JSON object: seconds of each step, in order, and the page's HTTP status and size. The
imports are done inside `main` so that they are timed: a fresh server pays them before its first page.
Steps: the server's imports (`rollout.view.serve`: uvicorn, starlette, jinja2, the viewer); scipy.special,
which the first run summary imports lazily (`rollout.report.scoring.t_interval`), timed apart so the
GET below does not hide it; `open_runs` (the index from its cache) and the `Viewer`; the first
GET /run/0 through the ASGI app. The test client (httpx) is imported after the imports are timed: the
server does not need it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> None:
    folder = Path(sys.argv[1])
    steps: dict[str, float] = {}
    started = time.perf_counter()
    import rollout.view.serve  # noqa: F401 - timed: everything the serve command imports
    from rollout.view.pages import open_runs
    from rollout.view.web import Viewer, create_app

    steps["imports"] = time.perf_counter() - started
    from starlette.testclient import TestClient

    started = time.perf_counter()
    import scipy.special  # noqa: F401 - timed apart: the first run summary would import it

    steps["scipy"] = time.perf_counter() - started
    started = time.perf_counter()
    runs = open_runs([folder])
    viewer = Viewer(runs, folder.parent)
    app = create_app(viewer)
    steps["open"] = time.perf_counter() - started
    with TestClient(app) as client:
        started = time.perf_counter()
        response = client.get("/run/0")
        steps["get"] = time.perf_counter() - started
        started = time.perf_counter()
        again = client.get("/run/0")
        steps["get_again"] = time.perf_counter() - started
    print(json.dumps({"steps": steps, "status": [response.status_code, again.status_code], "bytes": len(response.content),
                      "tasks": len(runs[0].index)}))


if __name__ == "__main__":
    main()
