import json

from rollout.gateway.stats import CallStat, StatsCollector
from rollout.run_folder import CALLS_FILE


def _stat(call_id: str) -> CallStat:
    return CallStat(call_id=call_id, tool_name="query_knowledge_base_sparse", task_id="t1", worker_id="w0",
                    ok=True, outcome="success", error=None, duration_ms=1.0, timestamp=0.0, result_ids=[])


def test_a_restarted_collector_appends_and_ends_a_line_cut_by_a_kill(tmp_path):
    first = StatsCollector(tmp_path)
    first.record(_stat("c1"))
    first.close()
    with (tmp_path / CALLS_FILE).open("a") as f:
        f.write('{"call_id": "c2", "tool_na')  # the gateway was killed mid-write
    second = StatsCollector(tmp_path)
    second.record(_stat("c3"))
    second.close()
    lines = (tmp_path / CALLS_FILE).read_text().splitlines()
    assert len(lines) == 3
    assert json.loads(lines[0])["call_id"] == "c1" and json.loads(lines[2])["call_id"] == "c3"
