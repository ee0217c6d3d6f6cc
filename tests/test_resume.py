"""Resuming in an output folder: the fingerprint check and which tasks are kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout.errors import ConfigError
from rollout.run_folder import FINGERPRINT_FILE
from rollout.resume import Fingerprint, finished_tasks, read_fingerprint, start_fresh

GATEWAY = {"server_name": "t", "modules": [{"resource_type": "rag", "tool_groups": ["rag_query_sparse"]}]}


def spec(name: str, description: str = "search") -> dict:
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}


@pytest.fixture
def gateway_file(tmp_path: Path) -> Path:
    path = tmp_path / "gw.json"
    path.write_text(json.dumps(GATEWAY))
    return path


def write_lines(path: Path, rows: list[dict], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_fingerprint_names_what_differs(gateway_file, tmp_path):
    before = Fingerprint.of(gateway_file, [spec("sparse"), spec("dense")])
    assert before.differences(Fingerprint.of(gateway_file, [spec("dense"), spec("sparse")])) == []
    after = Fingerprint.of(gateway_file, [spec("sparse", "keyword search"), spec("hybrid")])
    diff = after.differences(before)
    assert "tools added: hybrid" in diff and "tools removed: dense" in diff and "tool schemas changed: sparse" in diff
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**GATEWAY, "server_name": "u"}))
    assert any("gateway file changed" in d for d in Fingerprint.of(other, [spec("sparse")]).differences(
        Fingerprint.of(gateway_file, [spec("sparse")])))


def test_resume_keeps_ok_tasks_and_never_rewrites_the_ledger(gateway_file, tmp_path):
    out = tmp_path / "run"
    fp = Fingerprint.of(gateway_file, [spec("sparse")])
    write_lines(out / "trajectory.jsonl", [
        {"id": "a", "status": "ok"}, {"id": "b", "status": "error"}, {"id": "c", "status": "timeout"},
        {"id": "d"},  # written before statuses existed: a finished task
        {"id": "f", "status": "infra_error"}, {"id": "a", "status": "ok", "repeat": 1},
    ], tail='{"id": "e", "stat')  # cut short by a kill
    ledger = [{"call_id": "1", "task_id": "a"}, {"call_id": "2", "task_id": "b"}, {"call_id": "3", "task_id": "e"}]
    write_lines(out / "tool_stats" / "realtime_calls.jsonl", ledger)
    before = (out / "tool_stats" / "realtime_calls.jsonl").read_bytes()
    finished = finished_tasks(out, fp)
    assert finished == {("a", 0), ("d", 0), ("a", 1)}  # errors, timeouts and infrastructure failures run again
    assert [json.loads(x)["id"] for x in (out / "trajectory.jsonl").read_text().splitlines()] == ["a", "d", "a"]
    # The report counts only the kept tasks' calls (joined on call id), so the ledger stays whole.
    assert (out / "tool_stats" / "realtime_calls.jsonl").read_bytes() == before
    assert read_fingerprint(out) == fp


def test_resume_with_other_tools_is_refused(gateway_file, tmp_path):
    out = tmp_path / "run"
    write_lines(out / "trajectory.jsonl", [{"id": "a", "status": "ok"}])
    finished_tasks(out, Fingerprint.of(gateway_file, [spec("sparse")]))
    with pytest.raises(ConfigError, match=r"tools added: dense.*resume=false"):
        finished_tasks(out, Fingerprint.of(gateway_file, [spec("sparse"), spec("dense")]))
    assert (out / "trajectory.jsonl").read_text().count("\n") == 1  # nothing was touched


def test_an_empty_folder_takes_any_fingerprint(gateway_file, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / FINGERPRINT_FILE).write_text(json.dumps({"gateway_file": "x", "gateway_file_sha256": "0",
                                                    "tool_schemas_sha256": "0", "tools": {}}))
    assert finished_tasks(out, Fingerprint.of(gateway_file, [spec("sparse")])) == set()


def test_start_fresh_forgets_the_earlier_run(gateway_file, tmp_path):
    out = tmp_path / "run"
    write_lines(out / "trajectory.jsonl", [{"id": "a", "status": "ok"}])
    finished_tasks(out, Fingerprint.of(gateway_file, [spec("sparse")]))
    start_fresh(out)
    assert not (out / "trajectory.jsonl").exists() and read_fingerprint(out) is None
