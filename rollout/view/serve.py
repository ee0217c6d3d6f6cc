"""Start the web viewer (`--serve`) or write its static file (`--html`) for the runs named on the command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

import uvicorn

from rollout.errors import ViewError
from rollout.listen import bind_socket
from rollout.report.compare.run_folders import common_parent, find_runs
from rollout.run_folder import TRAJECTORY_FILE
from rollout.view.pages import open_runs
from rollout.view.web import Viewer, create_app

logger = logging.getLogger(__name__)


def run_folders(paths: list[str]) -> list[Path]:
    """Run folders named by the command line: a run folder, its trajectory.jsonl, or a folder of runs (a sweep)."""
    folders = [Path(p).parent if Path(p).name == TRAJECTORY_FILE and Path(p).is_file() else Path(p) for p in paths]
    return find_runs(folders)


def serve_or_write(args: argparse.Namespace) -> int:
    folders = run_folders(args.paths)
    runs = open_runs(folders)
    root = common_parent(folders)
    if args.html is not None:
        from rollout.view.static import write_static

        out = write_static(runs, root, Path(args.html))
        print(f"wrote {out} ({len(runs)} run{'s' if len(runs) > 1 else ''}, "
              f"{sum(len(r.index) for r in runs):,} tasks, {out.stat().st_size / 1e6:.1f} MB); open it in a browser")
        return 0
    token = args.token  # the command line's or $ROLLOUT_VIEW_TOKEN, checked by rollout.view.cli
    viewer = Viewer(runs, root)
    viewer.warm()  # before the address is printed, so the first page a browser asks for is not the slow one
    app = create_app(viewer, token=token)
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as e:
        raise ViewError(f"cannot listen on {args.host}:{args.port} ({e.strerror}); pick another with --port, "
                        "or --port 0 for a free one") from None
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    print(f"serving {len(runs)} run{'s' if len(runs) > 1 else ''} ({sum(len(r.index) for r in runs):,} tasks) "
          f"at {url} (Ctrl-C stops)", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass
    return 0
