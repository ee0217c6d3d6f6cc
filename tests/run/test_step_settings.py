"""The step tools' settings reach the gateway and the run's identity: tokenizer, offline steps, the LLM endpoint."""

import argparse
import json

import pytest

from rollout.errors import ConfigError
from rollout.gateway.launch import step_settings
from rollout.gateway_file import GATEWAYS_DIR
from rollout.run.config import compose_run_config
from rollout.run.gateway_kinds import gateway_args
from rollout.run.identity import identity_settings

PIPELINE = f"gateway_config_path={GATEWAYS_DIR / 'rag_pipeline.json'}"


def test_tokenizer_and_offline_steps_are_part_of_the_identity():
    settings = identity_settings(compose_run_config("mode=hybrid"))
    assert settings["tokenizer"] is None and settings["gateway.offline_steps"] is True
    changed = identity_settings(compose_run_config("mode=hybrid", "tokenizer=/models/llm", "gateway.offline_steps=false"))
    assert changed["tokenizer"] == "/models/llm" and changed["gateway.offline_steps"] is False


def test_the_llm_joins_the_identity_when_the_gateway_tools_ask_it():
    # The heuristic agent has no LLM; the pipeline's filter and answer tools ask the configured one.
    offline = identity_settings(compose_run_config("mode=hybrid", "llm.model=m1"))
    assert not any(k.startswith("llm.") for k in offline)
    asked = identity_settings(compose_run_config("mode=hybrid", PIPELINE, "llm.model=m1"))
    assert asked["llm.model"] == "m1" and "llm.api_key_env" not in asked  # names how to authenticate, not results
    assert compose_run_config("mode=hybrid", PIPELINE).step_llm() is None  # no model: the tools stay offline


def test_gateway_command_line_carries_the_step_settings(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Alpha.", encoding="utf-8")
    cfg = compose_run_config(
        "mode=hybrid", "dataset=files", f"dataset.corpus.path={docs}", f"dataset.questions.path={tmp_path / 'q.jsonl'}",
        "tokenizer=/models/llm", "gateway.offline_steps=false", PIPELINE, "llm.model=m1",
    )
    args = gateway_args(cfg.gateway_launch, tmp_path / "corpus.jsonl", tmp_path / "retriever.json")
    joined = " ".join(args)
    assert "--tokenizer /models/llm" in joined and "--no-offline-steps" in args and f"--sources-root {docs}" in joined
    block = json.loads(args[args.index("--llm-config") + 1])  # inline: a replica on another node reads no file
    assert block["model"] == "m1" and block["api_key_env"] == "OPENAI_API_KEY"
    plain = gateway_args(compose_run_config("mode=hybrid").gateway_launch, tmp_path / "c.jsonl", tmp_path / "r.json")
    assert not {"--tokenizer", "--no-offline-steps", "--llm-config", "--sources-root"} & set(plain)


def test_the_gateway_reads_the_llm_block_and_names_a_bad_one(tmp_path):
    block = json.dumps({"base_url": "http://127.0.0.1:9/v1", "model": "m1", "api_key_env": None})
    good = tmp_path / "llm.json"
    good.write_text(block)
    for given in (str(good), block):
        steps = step_settings(argparse.Namespace(llm_config=given, offline_steps=False, sources_root=None, corpus=None))
        assert steps.llm is not None and steps.llm.model == "m1" and steps.offline is False
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="--llm-config .*bad.json: not a readable JSON llm block"):
        step_settings(argparse.Namespace(llm_config=bad, offline_steps=True, sources_root=None, corpus=None))
    bad.write_text(json.dumps({"base_url": "http://x/v1"}))
    with pytest.raises(ConfigError, match="llm.model"):
        step_settings(argparse.Namespace(llm_config=bad, offline_steps=True, sources_root=None, corpus=None))
