"""Shared fixtures: a real gateway on loopback HTTP in a background thread; one local Ray, one cache and
the shared demo runs for whole runs.

Kept for the session on purpose: starting Ray, exporting the encoder and building indexes cost seconds each, and
every test that needs them gets the same ones (Ray until the modules that use it are done). Under pytest-xdist
(pyproject's addopts: `-n 3 --dist loadfile`) each worker is a session of its own with its own Ray; the cache
folder and the demo runs are shared by all workers of a session.
"""

from __future__ import annotations

import compileall
import contextlib
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import load_gateway_file
from rollout.logs import LIBRARY_LOGGERS
from rollout.paths import PROJECT_ROOT, bundled_model_path
from rollout.retrieval import DenseParams
from rollout.retrieval.encoder import TextEncoder, load_encoder
from rollout.retrieval.encoder_export import ensure_exported
from rollout.run.ray_start import lean_start
from tests.agents.chat_server import ChatServer, chat_server
from tests.demo_runs import DemoRuns
from tests.gateway.loopback import serving


PACKAGES = ("rollout", "envs", "tests", "bench")
"""The project's own packages, which the suite's processes import."""


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # once, in the process that starts the session (and its xdist workers)
        # The suite starts some 300 Python processes (gateways, Ray workers, runs) that import the project. Compiled
        # once here (well under a second), none compiles it again; where PYTHONDONTWRITEBYTECODE is set, as on CI
        # machines, every one of them would.
        for package in PACKAGES:
            compileall.compile_dir(PROJECT_ROOT / package, quiet=2)
    # pytest keeps a test module's assertion-rewritten code only where bytecode may be written: each worker would
    # rewrite every module again on every run (seconds each).
    sys.dont_write_bytecode = False
    # A Ray started without an address joins the cluster named in /tmp/ray/ray_current_cluster, which any
    # `ray.cluster_utils.Cluster` (the two-node test's, or another process's on this machine) writes while it
    # lives. "local" always starts a Ray of its own, here and in every run started as a subprocess.
    os.environ["RAY_ADDRESS"] = "local"
    if config.getoption("dist", "no") in ("loadfile", "loadscope", "loadgroup"):
        # xdist's scheduler (in the controlling process) would order the modules by their number of tests; keep
        # the heaviest-first order the workers collect (pytest_collection_modifyitems below).
        config.option.loadscopereorder = False


POSITION = pytest.StashKey[dict[str, int]]()
"""Under xdist, each module's place in the order the workers take them."""
RAY_AFTER = pytest.StashKey[int]()
"""Under xdist, the place in that order after which no module uses this process's local Ray."""

LONG_SHARE = 0.7
"""How far into the module order the long modules are spread; the short ones alone make the end."""


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def uses(item: pytest.Item, *fixtures: str) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in fixtures)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the long modules (whole runs, Ray, slow scenarios) are spread over the first part of the module
    order, the short ones between and after them.

    The workers take modules in this order as they finish one. A long module mostly waits (a gateway or Ray
    starting, a simulated LLM's latency): while some workers run long ones, the others run short, busy ones, and
    no long module is left to start when the rest is done. The order within a module is kept."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    modules = list(dict.fromkeys(module_of(i) for i in items))
    ray_modules = {module_of(i) for i in items if uses(i, "ray_local", "demo_runs")}
    demo = {module_of(i) for i in items if uses(i, "demo_runs")}
    slow = {module_of(i) for i in items if i.get_closest_marker("slow")}
    # The slow scenarios first (the longest), then the demo runs, then the other modules that use Ray.
    groups = (slow, demo, ray_modules)
    # In collection order within a group: every worker must find the same order (a set's order is per process).
    long = sorted((m for m in modules if m in ray_modules | slow),
                  key=lambda m: next(n for n, group in enumerate(groups) if m in group))
    short = [m for m in modules if m not in ray_modules | slow]
    between = max(1, int(LONG_SHARE * len(short) / max(1, len(long))))
    order = []
    for n, module in enumerate(long):
        order += [module, *short[n * between:(n + 1) * between]]
    order += short[len(long) * between:]
    position = config.stash[POSITION] = {module: n for n, module in enumerate(order)}
    items.sort(key=lambda i: position[module_of(i)])
    config.stash[RAY_AFTER] = max((position[m] for m in ray_modules), default=-1)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under xdist, a worker's local Ray is shut down once its modules are past the last that uses Ray: an idle Ray
    costs about 5% of a core. Workers take modules in order, so none of those comes to it later. (In one process the
    modules keep their order and the session's Ray stays up.)"""
    ray_after = item.config.stash.get(RAY_AFTER, None)
    if ray_after is not None and ray.is_initialized() and item.config.stash[POSITION][module_of(item)] > ray_after:
        ray.shutdown()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if ray.is_initialized():
        ray.shutdown()


def start_local_ray() -> None:
    """Start this process's local Ray unless a Ray is up (pytest_runtest_setup and the session's end stop it)."""
    if not ray.is_initialized():
        with lean_start():  # as a run starts its own Ray: without the head processes no test uses
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)


def shared_by_workers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary folder: under xdist, the one above each worker's own."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Cluster]:
    """A two-node Ray cluster on this machine (one CPU each), for the module; a local Ray of an earlier module makes
    way for it (start_local_ray starts one again where needed)."""
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


LOGGERS_A_COMMAND_SETS = ("rollout", "envs", *LIBRARY_LOGGERS, "ray.serve", "ray.data")
"""The loggers whose level, handlers or propagation a command's logging set-up changes (`rollout.logs`)."""


def _pytests(handler: logging.Handler) -> bool:
    return type(handler).__module__.startswith("_pytest.")


@pytest.fixture(autouse=True)
def logging_as_it_was() -> Iterator[None]:
    """A command's `main` run in a test's process sets up logging as its own process would: a handler on the root
    logger writing to the stderr of that moment (pytest's capture, closed after the test), levels, Ray's loggers
    sent through the root. Put back after each test, so that a later test's log lines neither go to a closed stream
    (a "--- Logging error ---" on its stderr) nor pass through another test's levels. pytest's own handlers, made
    for each phase of a test, are left to pytest."""
    root = logging.getLogger()
    handlers, level = [h for h in root.handlers if not _pytests(h)], root.level
    loggers = {name: (lg.level, lg.propagate, lg.handlers[:])
               for name in LOGGERS_A_COMMAND_SETS for lg in [logging.getLogger(name)]}
    yield
    root.handlers[:] = [*(h for h in root.handlers if _pytests(h)), *handlers]
    root.setLevel(level)
    for name, (was_level, was_propagating, had_handlers) in loggers.items():
        lg = logging.getLogger(name)
        lg.setLevel(was_level)
        lg.propagate = was_propagating
        lg.handlers[:] = had_handlers


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


def with_session_encoder(session_cache: Path, cache: Path) -> Path:
    """`cache`, made to hold a copy of the session cache's ONNX export of the bundled encoder: a build into it
    encodes without exporting the model again (loading torch and exporting cost about 10 CPU s)."""
    shared = ensure_exported(bundled_model_path(), "onnx", session_cache)
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copytree(shared, cache / shared.name, dirs_exist_ok=True)
    return cache


@pytest.fixture(scope="session")
def encoder(cache_dir: Path) -> TextEncoder:
    """The bundled all-MiniLM-L6-v2 on the default (ONNX) backend, as runs encode, for in-process retrievers: once
    per session, for the retrieval and the gateway tests alike. (Loading torch costs each worker seconds; the torch
    backend's own tests load it.)"""
    return load_encoder(DenseParams(), cache_dir=cache_dir)


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
