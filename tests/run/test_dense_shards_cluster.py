"""Dense shards on a two-node Ray cluster (one machine): a run with `retriever.dense.serve=true` searches each shard
through its own Ray Serve application (`rollout build-index` writing them: tests/retrieval/test_ray_build.py).

The Serve scenario is one test, since each run deploys gateway replicas and shard applications: the shards land on
both nodes; a shard replica killed mid-run fails the calls that needed it as `upstream_unavailable` (tasks recorded
as infrastructure failures, never answered from the other shard alone) while Serve restarts it; the run resumed
runs those tasks again, and every call of the finished run returned exactly what one flat index returns.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rollout.data import ensure_demo_kb, open_corpus
from rollout.errors import ConfigError
from rollout.retrieval import RetrievalParams, load_or_build_indexes
from rollout.retrieval.dense_serve import shard_app_name
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from rollout.jsonl import iter_jsonl
from rollout.run_folder import iter_trajectory, ledger_paths
from tests.demo_runs import SMALL_KB



def test_serving_shards_needs_gateway_replicas():
    with pytest.raises(ConfigError, match="retriever.dense.serve=true .* set gateway.replicas=2 or more"):
        compose_run_config("retriever.dense.shards=2", "retriever.dense.serve=true")
    with pytest.raises(Exception, match="retriever.dense.serve_replicas=0 must be a positive integer"):
        compose_run_config("retriever.dense.serve_replicas=0")


@pytest.mark.slow
def test_shards_on_serve_fail_as_infrastructure_when_down_and_answer_exactly(two_nodes, tmp_path, cache_dir,
                                                                             monkeypatch):
    from ray import serve

    monkeypatch.setenv("ROLLOUT_GATEWAY_TOKEN", "cluster-secret")  # the gateway binds the node address
    common = ["mode=dense", *SMALL_KB, f"ray.address={two_nodes.address}", f"cache_dir={cache_dir}", "progress=false",
              "gateway.replicas=2", "gateway.replica_cpus=0.25", "retriever.dense.shards=2",
              "retriever.dense.serve=true", "retriever.dense.serve_cpus=0.25", "retriever.dense.serve_timeout_s=2",
              "workers=1", "concurrency_per_worker=8", f"output_dir={tmp_path / 'run'}"]
    killed: dict[str, object] = {}

    def kill_a_shard(task_id: str, event: object) -> None:
        if killed:
            return
        apps = sorted(name for name in serve.status().applications if name.startswith("rollout-dense-flat-s2-"))
        (folder,) = {Path(cache_dir) / name[len("rollout-"):].rsplit("-", 1)[0] for name in apps}
        assert apps == [shard_app_name(folder, i) for i in (0, 1)] and folder.is_dir()
        where = [serve.get_app_handle(name).where.remote().result() for name in apps]
        killed["nodes"] = {w["node_id"] for w in where}
        os.kill(where[1]["pid"], signal.SIGKILL)
        killed["pid"] = where[1]["pid"]

    first = run(compose_run_config(*common), on_event=kill_a_shard)
    assert killed and len(killed["nodes"]) == 2, "SPREAD puts the two shards on the two nodes"
    tasks = list(iter_trajectory(first.output_dir))
    down = [t for t in tasks if any(c.outcome == "upstream_unavailable" for c in t.tool_calls)]
    assert down, "the calls made while the shard was down failed"
    assert all(t.status == "infra_error" for t in down)  # never scored as answered without that shard's passages
    assert all("did not answer" in c.error for t in down for c in t.tool_calls if c.outcome == "upstream_unavailable")
    ledger = [line for p in ledger_paths(first.output_dir) for line in iter_jsonl(p)]
    assert sum(line["outcome"] == "upstream_unavailable" for line in ledger) == sum(
        c.outcome == "upstream_unavailable" for t in tasks for c in t.tool_calls)

    resumed = run(compose_run_config(*common))  # the infra_error tasks run again, on the restarted replica
    final = {t.id: t for t in iter_trajectory(resumed.output_dir)}
    assert len(final) == 40 and all(t.status == "ok" for t in final.values())
    assert not [name for name in serve.status().applications if name.startswith("rollout-dense-")], \
        "the run deletes the shard applications it deployed"

    # Every call of the finished run returned what one flat index returns for its query.
    corpus = open_corpus(ensure_demo_kb(cache_dir, n_passages=400, n_questions=40).corpus_path, cache_dir)
    cfg = compose_run_config(*common)
    whole = load_or_build_indexes(corpus, cache_dir, which=["dense"], params=RetrievalParams())["dense"]
    calls = [c for t in final.values() for c in t.tool_calls]
    assert len(calls) >= 40
    for call in calls:
        hits = whole.search([call.arguments["query"]], int(call.arguments.get("top_k", cfg.gateway.default_top_k)))
        assert call.result_ids == [corpus[int(i)].id for i in hits.indices[0] if i >= 0], call.arguments
