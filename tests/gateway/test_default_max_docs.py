"""`gateway.default_max_docs`: the count the document tools return when a call leaves it out, stated in their
schemas, passed from the run to its gateway (`--default-max-docs`) and part of the run's identity."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp.client.client import Client

from rollout.errors import ConfigError
from rollout.gateway.cli import main
from rollout.gateway.launch import parse_args
from rollout.gateway.server import build_gateway
from rollout.gateway_file import GatewayFile
from rollout.records import Passage
from rollout.run.config import compose_run_config
from rollout.run.gateway_kinds import gateway_args
from rollout.run.identity import RunIdentity, identity_settings
from tests.gateway.loopback import kb_from_flags

# Eight documents share the query word and twelve do not: any count up to 8 returns exactly that many.
PASSAGES = [Passage(f"k{i}", f"Kelmor {i}", f"Kelmor district {i} grows barley.") for i in range(8)] + [
    Passage(f"o{i}", f"Other {i}", f"Dravia harbour {i} ships salt.") for i in range(12)
]
COUNTS = {"search_documents": "max_files", "retrieve_documents": "max_docs", "search_sources": "max_docs"}
"""Each document tool and the name of its count."""


async def test_the_flag_is_the_stated_default_of_every_document_tool_and_what_a_call_without_it_gets(tmp_path):
    kb = kb_from_flags(PASSAGES, tmp_path, "--default-max-docs", "3")
    gateway = GatewayFile.model_validate({"modules": [{"resource_type": "rag", "tool_groups": [
        "rag_search", "rag_retrieve_sparse", "rag_sources"]}]})
    async with Client(build_gateway(gateway, kb)) as client:
        schemas = {t.name: t.input_schema for t in (await client.list_tools()).tools}
        results = {name: await client.call_tool(name, {"query": "Kelmor"}) for name in COUNTS}
    for name, count in COUNTS.items():
        assert schemas[name]["properties"][count]["default"] == 3, name
        assert not results[name].is_error, results[name].content
        assert len(results[name].structured_content["results"]) == 3, name


def test_a_default_outside_what_one_call_may_return_is_refused(capsys):
    assert main(["--config", "unused.json", "--default-max-docs", "0"]) == 2
    assert "--default-max-docs must be between 1 and 50, got 0" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"gateway\.default_max_docs=51 must be between 1 and 50.*"
                                          r"gateway\.default_max_docs=10"):
        compose_run_config("gateway.default_max_docs=51")


def test_the_run_passes_it_to_its_gateway_and_it_is_part_of_the_run_s_identity(tmp_path):
    cfg = compose_run_config("gateway.default_max_docs=4")
    args = gateway_args(cfg.gateway_launch, tmp_path / "corpus.jsonl", tmp_path / "retriever.json")
    assert parse_args(args).default_max_docs == 4
    assert identity_settings(cfg)["gateway.default_max_docs"] == 4
    assert identity_settings(compose_run_config())["gateway.default_max_docs"] == 10
    assert Path(cfg.output_dir).name.endswith(",gateway.default_max_docs=4")


def test_a_folder_written_before_the_setting_existed_resumes_with_the_value_it_had_then():
    settings = identity_settings(compose_run_config())
    earlier = RunIdentity({k: v for k, v in settings.items() if k != "gateway.default_max_docs"}, "g", {}, {})
    assert RunIdentity(settings, "g", {}, {}).differences(earlier) == []
    changed = identity_settings(compose_run_config("gateway.default_max_docs=4"))
    assert RunIdentity(changed, "g", {}, {}).differences(earlier) == ["gateway.default_max_docs: 10 → 4"]
