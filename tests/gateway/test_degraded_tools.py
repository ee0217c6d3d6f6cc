"""A degraded tool is visible: the gateway marks it in tools/list, keeps it beside its ledger, and the tool report
lists it; a gateway without one lists none."""

from __future__ import annotations

import json

import uvicorn
from mcp.client.client import Client

from rollout.gateway.server import build_gateway
from rollout.gateway.stats import RunLedgers, StatsCollector
from rollout.report import build_tool_report
from rollout.report.cli import main as report_main
from rollout.wire import META_DEGRADED
from tests.gateway.loopback import SPARSE_MODULE, gateway_file, serving, sparse_kb
from tests.gateway.test_upstream import broken_schema_upstream, calc_module


async def test_a_degraded_upstream_tool_is_marked_and_the_tool_report_lists_it(tmp_path, capsys):
    uv = uvicorn.Server(uvicorn.Config(broken_schema_upstream().streamable_http_app(), log_level="warning"))
    collector = StatsCollector(tmp_path / "tool_stats")
    with serving(uv) as base:
        server = build_gateway(gateway_file(SPARSE_MODULE, calc_module(f"{base}/mcp", name="odd")), sparse_kb(),
                               collector)
        async with server.running(), Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            called = await client.call_tool("lookup", {"key": {"a": 1}})
    collector.close()
    assert not called.is_error
    reason = tools["lookup"].meta[META_DEGRADED]
    assert "https://schemas.example/key.json" in reason and 'served as {"type": "object"}' in reason
    assert META_DEGRADED not in tools["query_knowledge_base_sparse"].meta
    assert json.loads((tmp_path / "tool_stats" / "degraded_tools.json").read_text()) == {"lookup": reason}

    assert report_main(["tool-stats", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "tool_stats" / "report.json").read_text())
    assert report["summary"]["degraded_tools"] == {"lookup": reason}
    assert f"Degraded tool lookup: {reason}" in printed


async def test_a_gateway_without_degraded_tools_lists_none_and_clears_an_earlier_list(tmp_path, capsys):
    stale = tmp_path / "tool_stats" / "degraded_tools.json"
    stale.parent.mkdir()
    stale.write_text(json.dumps({"lookup": "listed by an earlier gateway into this folder"}))
    collector = StatsCollector(tmp_path / "tool_stats")
    async with Client(build_gateway(gateway_file(SPARSE_MODULE), sparse_kb(), collector)) as client:
        await client.list_tools()
        await client.call_tool("query_knowledge_base_sparse", {"query": "Kelmor"})
    collector.close()
    assert not stale.exists()
    assert build_tool_report(tmp_path)["summary"]["degraded_tools"] == {}
    assert report_main(["tool-stats", str(tmp_path)]) == 0
    assert "Degraded" not in capsys.readouterr().out


async def test_every_registered_run_gets_the_degraded_list_whether_it_registered_before_or_after_the_listing(tmp_path):
    uv = uvicorn.Server(uvicorn.Config(broken_schema_upstream().streamable_http_app(), log_level="warning"))
    own, early, late = tmp_path / "own", tmp_path / "early", tmp_path / "late"
    ledgers = RunLedgers(StatsCollector(own / "tool_stats"))
    with serving(uv) as base:
        server = build_gateway(gateway_file(SPARSE_MODULE, calc_module(f"{base}/mcp", name="odd")), sparse_kb(),
                               ledgers)
        ledgers.register("early", early)
        async with server.running(), Client(server) as client:
            await client.list_tools()
            ledgers.register("late", late)
    ledgers.close()
    listed = json.loads((own / "tool_stats" / "degraded_tools.json").read_text())
    assert list(listed) == ["lookup"]
    for run_dir in (early, late):
        assert json.loads((run_dir / "tool_stats" / "degraded_tools.json").read_text()) == listed
