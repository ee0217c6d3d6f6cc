"""Shared fixtures: a real gateway on loopback HTTP in a background thread; one local Ray, one cache and
the shared demo runs for whole runs.

Kept for the session on purpose: starting Ray, exporting the encoder and building indexes cost seconds each, and
every test that needs them gets the same ones (Ray until the modules that use it are done). Under pytest-xdist
(pyproject's addopts: `-n 3 --dist loadfile`) each worker is a session of its own with its own Ray; the cache
folder and the demo runs are shared by all workers of a session.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import load_gateway_file
from rollout.retrieval import Encoder
from tests.agents.chat_server import ChatServer, chat_server
from tests.demo_runs import DemoRuns
from tests.gateway.loopback import serving


def pytest_configure(config: pytest.Config) -> None:
    # A Ray started without an address joins the cluster named in /tmp/ray/ray_current_cluster, which any
    # `ray.cluster_utils.Cluster` (the two-node test's, or another process's on this machine) writes while it
    # lives. "local" always starts a Ray of its own, here and in every run started as a subprocess.
    os.environ["RAY_ADDRESS"] = "local"
    if config.getoption("dist", "no") in ("loadfile", "loadscope", "loadgroup"):
        # xdist's scheduler (in the controlling process) would order the modules by their number of tests; keep
        # the heaviest-first order the workers collect (pytest_collection_modifyitems below).
        config.option.loadscopereorder = False


RAY_MODULES = pytest.StashKey[set[str]]()
"""Modules with a test that runs in this process's local Ray (it asks for `ray_local` or `demo_runs`)."""


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def uses(item: pytest.Item, *fixtures: str) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in fixtures)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the modules that make or read whole runs go first, then the other modules that use Ray, then the
    slow ones: started last, a long module would keep one worker busy while the others have nothing left to do, and
    no module after the Ray ones needs Ray (see pytest_runtest_setup). The order within a module is kept."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    demo = {module_of(i) for i in items if uses(i, "demo_runs")}
    ray_modules = config.stash[RAY_MODULES] = {module_of(i) for i in items if uses(i, "ray_local", "demo_runs")}
    slow = {module_of(i) for i in items if i.get_closest_marker("slow")}
    groups = (demo, ray_modules, slow)
    items.sort(key=lambda i: next((n for n, group in enumerate(groups) if module_of(i) in group), len(groups)))


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under xdist, the local Ray is shut down in a module that has no use for it: an idle Ray costs about 5% of a
    core, and the modules that use it come first, so a worker starts it once and stops it for good. (In one process
    the modules keep their order and the session's Ray stays up.)"""
    ray_modules = item.config.stash.get(RAY_MODULES, None)
    if ray_modules is not None and ray.is_initialized() and module_of(item) not in ray_modules:
        ray.shutdown()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if ray.is_initialized():
        ray.shutdown()


def start_local_ray() -> None:
    """Start this process's local Ray unless a Ray is up (pytest_runtest_setup and the session's end stop it)."""
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)


def shared_by_workers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary folder: under xdist, the one above each worker's own."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture
def ray_local() -> None:
    """A local Ray for in-process runs (`run()` uses a Ray that is already up): started by the first test that asks,
    kept for the next ones (pytest_runtest_setup stops it in the modules that have no use for it)."""
    start_local_ray()


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated knowledge bases, indexes and encoder export of the session's runs and gateways.

    Shared by every xdist worker of the session: each cache entry is written aside and renamed into place,
    so a worker sees a finished entry or none, and two workers building the same entry keep one.
    """
    path = shared_by_workers(tmp_path_factory) / "cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    """The bundled all-MiniLM-L6-v2 on torch, for in-process retrievers: loading torch takes seconds, so once per
    session, for the retrieval and the gateway tests alike."""
    return Encoder()


@pytest.fixture(scope="session")
def demo_runs(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> DemoRuns:
    """Whole runs of the small demo knowledge base, each made once per session: read them, never write into them."""
    root = shared_by_workers(tmp_path_factory) / "demo-runs"
    root.mkdir(exist_ok=True)
    return DemoRuns(root, cache_dir, start_local_ray)


@contextlib.contextmanager
def gateway_on_loopback(gateway_file: Path, kb: KnowledgeBase, run_dir: Path | None = None) -> Iterator[str]:
    """Serve `gateway_file` over streamable HTTP on 127.0.0.1 and yield its MCP URL; stats go to run_dir/tool_stats."""
    collector = StatsCollector(run_dir / "tool_stats") if run_dir is not None else None
    uv = make_uvicorn(build_gateway(load_gateway_file(gateway_file), kb, collector))
    try:
        with serving(uv) as base:
            yield f"{base}/mcp"
    finally:
        if collector is not None:
            collector.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    """The scripted chat-completions server, one per test module."""
    with chat_server() as s:
        yield s
