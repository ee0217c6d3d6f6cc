"""`rollout build-index` as a person types it: the command docs/scaling.md shows, run on a small corpus written here;
its console, every line in the one format of `rollout.logs` (Ray's own lines folded into it); and the progress line
of its encoding."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from rollout import ray_console
from rollout.logs import adopt_ray_data_logger, formatter
from rollout.paths import PROJECT_ROOT, bundled_model_path
from rollout.retrieval.encode_progress import EncodeProgress, time_left
from tests.conftest import with_session_encoder
from tests.test_documented_commands import page_commands

SCALING = PROJECT_ROOT / "docs" / "scaling.md"
ONE_FORMAT = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) +\S+: .*")
"""A console line as `rollout.logs.LOG_FORMAT` writes it."""
PROGRESS = re.compile(r"Encoded ([\d,]+) of ([\d,]+) passages \((\d+)%\): ([\d,.]+) passages/s, about (.+) left")
PLACEHOLDERS = {"/data/wiki18_100w.jsonl": "corpus", "/models/e5-base-v2": "encoder"}
"""The paths the page names, for the corpus and the encoder a person has."""


def build_index(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """`rollout build-index ARGS` in a process of its own, the rollout cache in `cache`."""
    env = {**os.environ, "ROLLOUT_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "rollout.cli", "build-index", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


def write_corpus(path: Path, n: int) -> Path:
    """A FlashRAG corpus of `n` passages, "Title"\\ntext each."""
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            words = " ".join(f"w{(i * 7 + j) % 97}" for j in range(12))
            f.write(json.dumps({"id": str(i), "contents": f'"Entry {i}"\nEntry {i} reads {words}.'}) + "\n")
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """One rollout cache for the module's builds, holding the session's ONNX export of the bundled encoder."""
    return with_session_encoder(cache_dir, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def gpu_node() -> Cluster:
    """A one-node Ray cluster that says it has a GPU: the documented command asks one per encoder (the encoder
    itself runs on the CPU, as ONNX)."""
    if ray.is_initialized():
        ray.shutdown()
    # On the node's own address, as conftest's two_nodes: a driver joins a cluster on the address it has itself
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 1, "include_dashboard": False})
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def documented_build(gpu_node, cache, tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The page's command run as a person types it, on a 300-passage corpus encoded in shards of 64 (so that its
    progress shows): one build for every check of its outcome and its console."""
    # The section's own command, the page's first build-index (a later one adds retriever.dense.shards).
    documented = next(d for d in page_commands(SCALING) if d.command == "build-index")
    folder = tmp_path_factory.mktemp("documented")
    corpus = write_corpus(folder / "wiki.jsonl", 300)
    paths = {"corpus": str(corpus), "encoder": bundled_model_path()}
    args = []
    for arg in documented.args:
        for placeholder, what in PLACEHOLDERS.items():
            arg = arg.replace(placeholder, paths[what])
        # `ray start --head` before it makes the cluster `auto` finds; here the test's cluster is named
        args.append(f"ray.address={gpu_node.address}" if arg == "ray.address=auto" else arg)
    assert "dataset=nq" in args and not any(a.startswith("dataset.questions") for a in args)
    return build_index([*args, "build.rows_per_shard=64"], folder, cache), folder


@pytest.mark.slow
def test_the_documented_command_builds_the_indexes_of_a_corpus_without_questions(documented_build, cache):
    done, folder = documented_build
    assert done.returncode == 0, done.stderr
    built = sorted(p.name.split("-")[0] for p in cache.iterdir() if p.name.startswith(("dense-", "sparse-")))
    assert built == ["dense", "sparse"], done.stderr
    assert re.search(r"building dense index \(300 passages\)", done.stderr), done.stderr
    assert (folder / "results" / "build_index" / "nq" / "build_index.log").is_file()


def test_a_build_without_its_corpus_path_is_one_line(cache, tmp_path):
    done = build_index(["dataset=nq"], tmp_path, cache)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: dataset.corpus.path is not set"), done.stderr
    assert "dataset.corpus.path=" in done.stderr  # the line names the fix


@pytest.mark.slow
def test_the_console_of_a_build_is_in_the_one_format(documented_build):
    build = documented_build[0]
    lines = build.stderr.splitlines()
    assert any("Encoding 300 passages on Ray" in line for line in lines), build.stderr
    # Ray's token notice, Ray Data's note that its bars are off, the core worker's note on an actor's arguments:
    # each in the one format, or left out
    assert [line for line in lines if not ONE_FORMAT.fullmatch(line)] == [], build.stderr
    assert not any("Token authentication is enabled" in line for line in lines)
    assert not any("Progress bars disabled" in line for line in lines)
    assert build.stdout == ""


@pytest.mark.slow
def test_the_encoding_says_how_far_it_is(documented_build):
    build = documented_build[0]
    lines = [line for line in build.stderr.splitlines() if "rollout.retrieval" in line and PROGRESS.search(line)]
    assert lines, build.stderr
    for line in lines:
        done, total, percent, rate, left = PROGRESS.search(line).groups()
        done, total = int(done.replace(",", "")), int(total.replace(",", ""))
        assert total == 300 and 0 < done < total and done % 64 == 0
        assert int(percent) == done * 100 // total
        assert float(rate.replace(",", "")) > 0
        assert re.fullmatch(r"\d+ s|\d+ min|\d+ h \d\d min", left), line


def test_native_lines_on_stderr_are_logged_in_the_one_format(capfd, caplog, monkeypatch):
    ray_logger = logging.getLogger("ray")  # through the root logger's handlers (caplog's), as the command has it
    monkeypatch.setattr(ray_logger, "handlers", [])
    monkeypatch.setattr(ray_logger, "propagate", True)
    with caplog.at_level(logging.DEBUG, logger="ray"), ray_console.native_lines_logged():
        os.write(2, b"[2026-11-29 06:23:10,931 E 14126 14126] core_worker.cc:2465: Actor with class name: "
                    b"'MapWorker(MapBatches(_ShardEncoder))' and ID: 'f1' has constructor arguments in the object "
                    b"store and max_restarts > 0. If the arguments in the object store go out of scope or are "
                    b"lost, the actor restart will fail.\n")
        os.write(2, b"[2026-11-29 06:23:11,002 E 14126 14190] gcs_client.cc:180: Failed to connect to GCS\n")
        os.write(2, b"a line in no format\n")
    records = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert len(records) == 2
    # Ray Data's own actors always have their arguments in the object store: routine detail
    assert records[0][:2] == ("ray", "INFO") and records[0][2].startswith("core_worker.cc:2465: Actor with class")
    assert records[1] == ("ray", "ERROR", "gcs_client.cc:180: Failed to connect to GCS")
    err = capfd.readouterr().err
    assert "a line in no format\n" in err and "core_worker.cc" not in err


class Clock:
    """Seconds that pass when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_lines_come_when_the_rate_is_known_then_at_most_one_a_minute(caplog):
    clock = Clock()
    progress = EncodeProgress(21_015_324, every_s=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="rollout.retrieval.encode_progress"):
        for _ in range(40):  # a shard of 65,536 passages every 20 s
            clock.now += 20
            progress.add(65_536)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 + (40 * 20 - 20) // 60  # the first shard's, then one each 60 s
    assert lines[0] == "Encoded 65,536 of 21,015,324 passages (0%): 3,277 passages/s, about 1 h 47 min left"
    assert lines[-1] == "Encoded 2,621,440 of 21,015,324 passages (12%): 3,277 passages/s, about 1 h 34 min left"
    progress.add(21_015_324 - progress.done)  # the end is the build's own line
    assert len(caplog.records) == len(lines)


def test_time_left_reads_at_the_precision_of_the_wait():
    assert [time_left(s) for s in (0.2, 45, 89.4, 600, 5000, 5400, 7500)] == [
        "1 s", "45 s", "89 s", "10 min", "83 min", "1 h 30 min", "2 h 05 min"]


def test_ray_datas_lines_go_to_the_root_handlers_at_rays_level(monkeypatch):
    import ray.data  # noqa: F401 - gives "ray.data" its console handler in Ray's format

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter())
    root, ray_data = logging.getLogger(), logging.getLogger("ray.data")
    monkeypatch.setattr(root, "handlers", [handler])
    monkeypatch.setattr(ray_data, "handlers", list(ray_data.handlers))
    monkeypatch.setattr(ray_data, "propagate", ray_data.propagate)
    monkeypatch.setattr(logging.getLogger("ray"), "level", logging.WARNING)
    adopt_ray_data_logger()
    adopt_ray_data_logger()  # idempotent: one line a record
    executor = logging.getLogger("ray.data._internal.execution")
    executor.warning("The Ray cluster currently does not have any available CPUs.")
    executor.info("Dataset execution finished")  # below the level of `ray`
    executor.error("Full stack trace:", extra={"hide": True})  # Ray Data keeps it off consoles
    assert ONE_FORMAT.fullmatch(out.getvalue().rstrip("\n")), out.getvalue()
    assert out.getvalue().endswith(
        " WARNING ray.data._internal.execution: The Ray cluster currently does not have any available CPUs.\n")
