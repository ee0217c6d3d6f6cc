"""Whole runs of dataset=browsecomp_plus on its miniature (tests/data/browsecomp_fixture.py), in the three modes, with
agent=openai against a stand-in model that searches and reads (tests/agents/browsecomp_agent.py): the tools each
mode offers, the docids each call records, the exact answer read out of BrowseComp-Plus' answer format, the judged
documents in each record, and the settings that make a run of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.run.config import compose_run_config
from rollout.run.driver import run
from rollout.run.identity import identity_settings
from tests.agents.browsecomp_agent import DeepResearchServer, deep_research_server
from tests.conftest import shared_by_workers
from tests.data.browsecomp_fixture import BrowseCompFixture, write_fixture


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> BrowseCompFixture:
    return write_fixture(shared_by_workers(tmp_path_factory) / "browsecomp-fixture")


@pytest.fixture(scope="module")
def model() -> Iterator[DeepResearchServer]:
    with deep_research_server() as server:
        yield server


def overrides(fixture: BrowseCompFixture, model: DeepResearchServer, mode: str, folder: Path, cache_dir: Path
              ) -> list[str]:
    return [*fixture.overrides(), f"mode={mode}", "agent=openai", "llm.model=test-model",
            f"llm.base_url={model.base_url}",
            "workers=1", "concurrency_per_worker=4", "progress=false", f"output_dir={folder}", f"cache_dir={cache_dir}"]


def records(folder: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, (folder / "trajectory.jsonl").read_text().splitlines())}


def test_a_run_searches_with_both_retrievers_reads_and_answers(ray_local, cache_dir, tmp_path, fixture, model):
    # mode=bcp_both offers every tool the three modes have (bcp_bm25's and bcp_dense's `search` are the same tool
    # over one index: tests/gateway/test_browsecomp_tools.py); one whole run is enough to see them reach the record.
    folder = tmp_path / "bcp_both"
    outcome = run(compose_run_config(*overrides(fixture, model, "bcp_both", folder, cache_dir)))
    assert outcome.failure is None
    tasks = records(folder)
    assert set(tasks) == set(fixture.answers)
    for qid, task in tasks.items():
        assert task["metadata"] == {"evidence_doc_ids": fixture.evidence[qid], "gold_doc_ids": fixture.gold[qid]}
        calls = task["tool_calls"]
        assert [c["name"] for c in calls[:2]] == ["search_bm25", "search_dense"] and all(c["ok"] for c in calls)
        seen = [m["content"] for m in task["messages"] if m["role"] == "tool"]  # one per call, in order
        for call, text in zip(calls[:2], seen, strict=False):  # the docids each search listed to the model, in order
            listed = [hit["docid"] for hit in json.loads(text)]
            assert call["result_doc_ids"] == call["result_ids"] == listed and 0 < len(listed) <= 5
        reads = calls[2:]
        assert reads and all(c["name"] == "get_document" for c in reads)
        assert all(c["result_doc_ids"] == [c["arguments"]["docid"]] for c in reads)
        # The exact answer, out of "Explanation: ... [docid]" / "Exact Answer: ..." / "Confidence: ...".
        assert task["prediction"] == fixture.answers[qid]
        assert f"[{fixture.gold[qid][0]}]" in task["messages"][-1]["content"]
    summary = json.loads((folder / "evaluation_summary.json").read_text())
    assert summary["n"] == len(fixture.answers) and summary["metrics"]["exact_match"] == 1.0
    assert summary["metrics"]["retrieval_recall"] == 1.0  # each gold page was among the docids returned


def test_the_documents_are_indexed_whole_and_the_snippet_and_passage_settings_make_runs_of_their_own(fixture):
    base = compose_run_config(*fixture.overrides(), "mode=bcp_dense")
    settings = identity_settings(base)
    assert settings["dataset.qrels.gold"] == str(fixture.qrel_gold)
    assert settings["retriever.snippet.max_tokens"] == 512 and settings["retriever.snippet.tokenizer"] is None
    assert settings["retriever.dense.passage_tokens"] is None  # BrowseComp-Plus encodes each document whole
    for override in ("retriever.snippet.max_tokens=256", "retriever.snippet.tokenizer=/models/qwen3",
                     "retriever.dense.passage_tokens=200"):
        other = compose_run_config(*fixture.overrides(), "mode=bcp_dense", override)
        assert identity_settings(other) != settings
        assert other.output_dir != base.output_dir  # the folder's name ends in a hash of the overrides past 160 chars
