"""rollout's tools and reward inside verl: the tool config `rollout gateway --verl-tools` writes, checked against the
tools a live gateway offers; then verl 0.9.1's own code, in its venv, loading that config with the overrides
docs/trainers.md shows, calling the tools on a live gateway as its tool agent loop does, and scoring exported rows
with rollout's reward and the judge's."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from envs.http_mcp_rag_env import HttpMCPRagEnv
from rollout.errors import ConfigError
from rollout.export.cli import main as export_main
from rollout.gateway.cli import main as gateway_main
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway_file import GATEWAYS_DIR
from rollout.paths import PROJECT_ROOT
from rollout.records import Passage
from rollout.run.gateway_process import GatewayProcess
from rollout.trainers.experiment import TrainingExperiment
from rollout.trainers.verl_config import TOOL_CLASS, GatewayToolConfig, verl_tool_schema
from tests.conftest import gateway_on_loopback
from tests.doc_pages import DOCS_DIR, split_page
from tests.report.judge_server import judge_server
from tests.trainers.trainer_venvs import PACKAGES, trainer_python

HYBRID = GATEWAYS_DIR / "rag_hybrid.json"
DENSE, SPARSE = "query_knowledge_base_dense", "query_knowledge_base_sparse"
REFUSED = {"rag_dynamic.json", "rag_no_tool.json"}
"""Gateway files --verl-tools refuses: tool sets activated per task, and no tool at all."""
TOKEN = "verl-test-token"


def write_tools(out: Path, gateway_file: Path, *options: str) -> dict:
    """`rollout gateway --config FILE OPTIONS --verl-tools OUT`, run here; the YAML it wrote."""
    assert gateway_main(["--config", str(gateway_file), *options, "--verl-tools", str(out)]) == 0
    return yaml.safe_load(out.read_text())


def verl_commands(heading: str = "## verl") -> list[list[str]]:
    """The `python -m verl.trainer.main_ppo` overrides of each command in the bash blocks under `heading` of
    docs/trainers.md, up to the next heading (a subsection's commands are its own), as the shell splits them."""
    prose, blocks = split_page((DOCS_DIR / "trainers.md").read_text(encoding="utf-8"))
    start = next(n for n, line in prose if line == heading)
    end = next((n for n, line in prose if n > start and line.startswith("#")), math.inf)
    commands = []
    for block in blocks:
        if block.info != "bash" or not start < block.start < end:
            continue
        joined = " ".join(line.strip().removesuffix("\\") if line.strip().endswith("\\") else line.strip() + "\n"
                          for _, line in block.lines)
        commands += [shlex.split(c)[3:] for c in joined.splitlines() if c.strip().startswith("python -m verl.")]
    return commands


def test_verl_tools_are_the_tools_a_gateway_offers_with_their_schemas(tmp_path, capsys):
    written = write_tools(tmp_path / "dense.yaml", GATEWAYS_DIR / "rag_dense_only.json", "--port", "9000",
                          "--default-top-k", "3")
    assert f"wrote 1 verl tools ({DENSE}) for the gateway at http://127.0.0.1:9000/mcp" in capsys.readouterr().out
    (tool,) = written["tools"]
    assert tool["class_name"] == TOOL_CLASS == "rollout.trainers.verl.GatewayTool"
    assert tool["config"] == {"type": "native", "url": "http://127.0.0.1:9000/mcp",
                              "gateway_file": str((GATEWAYS_DIR / "rag_dense_only.json").resolve()),
                              "token_env": "ROLLOUT_GATEWAY_TOKEN", "call_timeout_s": 60.0,
                              "reconnect_timeout_s": 120.0}
    # The schema is the one a gateway serving with the same option lists to the evaluation's environment over HTTP.
    kb = KnowledgeBase([Passage("d0", "Kelmor", "Kelmor is a city.")], {}, default_top_k=3)
    with gateway_on_loopback(GATEWAYS_DIR / "rag_dense_only.json", kb) as url:
        offered = listed(url, GATEWAYS_DIR / "rag_dense_only.json")
    assert tool["tool_schema"] == verl_tool_schema(offered[0])
    assert tool["tool_schema"]["function"]["parameters"]["properties"]["top_k"]["default"] == 3
    assert tool["tool_schema"]["function"]["description"].startswith("[Dense Search] Semantic vector search")

    hybrid = write_tools(tmp_path / "hybrid.yaml", HYBRID, "--port", "9001", "--transport", "sse")
    assert [t["tool_schema"]["function"]["name"] for t in hybrid["tools"]] == [DENSE, SPARSE]
    assert {t["config"]["url"] for t in hybrid["tools"]} == {"http://127.0.0.1:9001/sse"}
    # rag_mixed.json: its system and vm_pyautogui modules are not the RAG environment's, so their tools
    # (get_corpus_info, the gateway serves) are not offered, as in an evaluation.
    mixed = write_tools(tmp_path / "mixed.yaml", GATEWAYS_DIR / "rag_mixed.json")
    assert [t["tool_schema"]["function"]["name"] for t in mixed["tools"]] == [DENSE, SPARSE]
    # A tool with no required parameter (MCP leaves `required` out) or no schema at all, as verl's model takes it.
    bare = {"type": "function", "function": {"name": "list_toolsets", "description": "d",
                                              "parameters": {"type": "object", "properties": {}}}}
    assert verl_tool_schema(bare)["function"]["parameters"] == {"type": "object", "properties": {}, "required": []}
    assert "required" not in bare["function"]["parameters"]  # a copy, the spec is left as it is
    assert verl_tool_schema({"type": "function", "function": {"name": "n", "description": "d"}})["function"][
        "parameters"] == {"type": "object", "properties": {}, "required": []}


def listed(url: str, gateway_file: Path, token: str | None = None) -> list[dict]:
    """The function specs the evaluation's environment is offered at `url`."""
    async def listing() -> list[dict]:
        async with HttpMCPRagEnv(url, gateway_file, auth_token=token) as env:
            return env.tool_specs

    return asyncio.run(listing())


def without(value, *keys: str):
    """`value` with every mapping's `keys` removed, at any depth."""
    if isinstance(value, dict):
        return {k: without(v, *keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without(v, *keys) for v in value]
    return value


@pytest.mark.parametrize(("gateway_file", "options", "message"), [
    ("rag_dynamic.json", [], "activates tool sets per task (dynamic_toolsets)"),
    ("rag_no_tool.json", [], "offers no tool: train without a tool config"),
    ("rag_hybrid.json", ["--port", "0"], "give the --port the gateway will serve on"),
    ("missing.json", [], "missing.json"),
])
def test_verl_tools_refusals_are_one_line(tmp_path, capsys, gateway_file, options, message):
    out = tmp_path / "tools.yaml"
    code = gateway_main(["--config", str(GATEWAYS_DIR / gateway_file), *options, "--verl-tools", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_gateway_tool_config_is_checked_and_names_the_gateway_file():
    config = GatewayToolConfig.from_config({"type": "native", "url": "http://127.0.0.1:8080/mcp",
                                            "experiment": ["mode=dense"], "token_env": "MY_TOKEN"})
    assert config.resolved_gateway_file() == (GATEWAYS_DIR / "rag_dense_only.json").resolve()
    assert GatewayToolConfig.from_config(config.to_config()) == config
    for bad, message in [
        ({"url": "http://h:1/mcp", "gateway_file": "g.json", "token": "x"}, "unknown key token; a GatewayTool"),
        ({"gateway_file": "g.json"}, "url None is not the gateway's MCP URL"),
        ({"url": "http://h:1/mcp"}, "give the gateway file (gateway_file: PATH) or the experiment"),
        ({"url": "http://h:1/mcp", "gateway_file": "g.json", "experiment": ["mode=dense"]}, "one of the two"),
        ({"url": "http://h:1/mcp", "experiment": "mode=dense"}, "must be a list of Hydra overrides"),
        ({"url": "http://h:1/mcp", "gateway_file": "g.json", "call_timeout_s": "soon"}, "not a number of seconds"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            GatewayToolConfig.from_config(bad)


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed here")
def test_the_docs_export_the_token_verl_reads_and_install_rollout_into_verls_environment():
    """A token set for the gateway's command alone never reaches verl's workers (issue 34): each block that trains
    exports it once, before the gateway it starts; and the verl section installs rollout into verl's environment with
    what verl's agent loop imports beside it."""
    _, blocks = split_page((DOCS_DIR / "trainers.md").read_text(encoding="utf-8"))
    lines = [[line.strip() for _, line in block.lines] for block in blocks if block.info == "bash"]
    assert not [line for block in lines for line in block if line.startswith("ROLLOUT_GATEWAY_TOKEN=")]
    training = [block for block in lines if any(line.startswith("python -m verl.") for line in block)
                and any(line.startswith("rollout gateway") for line in block)]
    assert len(training) == 2
    for block in training:
        gateway = next(n for n, line in enumerate(block) if line.startswith("rollout gateway"))
        assert "export ROLLOUT_GATEWAY_TOKEN=$(openssl rand -hex 16)" in block[:gateway]
        assert block[gateway].endswith("&")  # in the background: the same shell trains, with the token
    installs = [shlex.split(line, comments=True) for block in lines for line in block if line.startswith("pip install")]
    assert ["pip", "install", "-e", ".", *PACKAGES["verl"][1:]] in installs


def test_the_verl_tool_without_verl_names_its_install_line():
    with pytest.raises(ImportError, match=r"needs verl: pip install verl==0\.9\.1"):
        import rollout.trainers.verl  # noqa: F401


@pytest.mark.slow
def test_verl_loads_calls_and_rewards_with_rollouts_tools(tmp_path):
    """One run of verl's code (its import takes seconds): everything verl does with rollout's files and functions."""
    python = trainer_python("verl")
    commands = verl_commands()
    assert len(commands) == 2, commands  # the tool and metric reward command, and the judge reward command
    experiment = TrainingExperiment.compose(["mode=sparse", "dataset.limit=5"])
    question = experiment.question(index=0)
    parquet = tmp_path / "rl.parquet"
    assert export_main(["--questions", "mode=sparse", "dataset.limit=5", "--format", "verl-rl",
                        "--out", str(parquet)]) == 0
    ledger_dir = tmp_path / "gateway"
    with GatewayProcess(["--config", str(HYBRID), "--output-dir", str(ledger_dir)], auth_token=TOKEN) as gateway, \
            judge_server() as judge:
        url = gateway.wait_ready()
        port = str(urlsplit(url).port)
        configs = {}
        for gateway_file in sorted(GATEWAYS_DIR.glob("*.json")):
            if gateway_file.name not in REFUSED:
                configs[gateway_file.stem] = tmp_path / f"{gateway_file.stem}.yaml"
                write_tools(configs[gateway_file.stem], gateway_file, "--port", port)
        write_tools(tmp_path / "dead.yaml", HYBRID, "--port", "1")
        changed = yaml.safe_load(configs["rag_hybrid"].read_text())  # as if the gateway's tools changed since
        changed["tools"][0]["tool_schema"]["function"]["description"] = "Search."
        (tmp_path / "changed.yaml").write_text(yaml.safe_dump(changed))

        def filled(overrides: list[str], **values: str) -> list[str]:
            """The documented overrides, with this test's files and judge in place of the page's."""
            out = []
            for o in overrides:
                key = o.partition("=")[0].lstrip("+")
                out.append(f"{o.partition('=')[0]}={values[key]}" if key in values else o)
            return out

        paths = {"actor_rollout_ref.rollout.multi_turn.tool_config_path": str(configs["rag_hybrid"]),
                 "reward.custom_reward_function.path": str(PROJECT_ROOT / "rollout" / "trainers" / "reward.py")}
        spec = {
            "configs": {k: str(v) for k, v in configs.items()},
            "dead": str(tmp_path / "dead.yaml"),
            "other": str(configs["rag_hybrid_fused"]),
            "changed": str(tmp_path / "changed.yaml"),
            "tool_overrides": filled(commands[0], **paths),
            "reward_overrides": filled(commands[0], **paths),
            "judge_overrides": filled(commands[1], **paths, **{
                "reward.custom_reward_function.reward_kwargs.judge.base_url": judge.base_url}),
            "question": question.question,
            "parquet": str(parquet),
            "result": str(tmp_path / "verl.json"),
        }
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "ROLLOUT_GATEWAY_TOKEN": TOKEN}
        run = subprocess.run([str(python), "-m", "tests.trainers.verl_checks", str(tmp_path / "spec.json")],
                             cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert run.returncode == 0, run.stderr[-3000:]
        seen = json.loads((tmp_path / "verl.json").read_text())

        # What the evaluated agent reads for the same calls, through the evaluation's environment.
        async def evaluated() -> list[str]:
            async with HttpMCPRagEnv(url, HYBRID, auth_token=TOKEN) as env:
                return [(await env.call(name, args, "evaluation"))[0].text
                        for name, args in [(DENSE, {"query": question.question}),
                                           (SPARSE, {"query": question.question, "top_k": 2}),
                                           (SPARSE, {"query": question.question, "top_k": 1000})]]

        eval_texts = asyncio.run(evaluated())
        offered = listed(url, HYBRID, TOKEN)

    # The documented overrides compose in verl's own config, and its dataset reads the same tool config.
    assert seen["tool_config_path"] == seen["dataset_tool_config_path"] == str(configs["rag_hybrid"])
    # Every gateway file's tools load, each a GatewayTool, and verl shows the policy the gateway's schema, less the
    # keys verl's schema model has no field for (a parameter's default, an array's items).
    hybrid = seen["loaded"]["rag_hybrid"]
    assert [(t["class"], t["name"]) for t in hybrid] == [(TOOL_CLASS, DENSE), (TOOL_CLASS, SPARSE)]
    assert [t["shown"] for t in hybrid] == [without(verl_tool_schema(s), "default", "items") for s in offered]
    assert {name: len(tools) for name, tools in seen["loaded"].items()} == {
        "bcp_bm25": 2, "bcp_both": 3, "bcp_dense": 2,
        "rag_dense_only": 1, "rag_hybrid": 2, "rag_hybrid_fused": 1, "rag_mixed": 2, "rag_pipeline": 4,
        "rag_pipeline_dense": 4, "rag_pipeline_sparse": 4, "rag_search_recall": 2, "rag_sparse_only": 1}

    calls = seen["calls"]
    dense_call, sparse_call, bad_call = calls["agent_loop"]
    # Through verl's own _call_tool: the text the evaluated agent reads, passages and errors alike.
    assert [dense_call["text"], sparse_call["text"], bad_call["text"]] == eval_texts
    assert json.loads(dense_call["text"])["results"][0]["text"]
    assert len(json.loads(sparse_call["text"])["results"]) == 2
    assert dense_call["reward"] == 0.0 and dense_call["metrics"]["ok"] is True
    # A tool's error is its text to the policy, not an exception.
    assert bad_call["text"].endswith("top_k must be between 1 and 50, got 1000")
    assert bad_call["metrics"] == {**bad_call["metrics"], "ok": False, "outcome": "tool_error"}
    assert calls["direct"]["instance_id"] == "direct-1" and json.loads(calls["direct"]["text"])["results"]
    for error, fix in [(calls["no_token"], "set $ROLLOUT_GATEWAY_TOKEN where verl runs"),
                       (calls["dead"], f"rollout gateway --config {HYBRID.resolve()} --port 1 --output-dir DIR"),
                       (calls["other"], (f"serves no tool query_knowledge_base_hybrid of "
                                         f"{(GATEWAYS_DIR / 'rag_hybrid_fused.json').resolve()} (of that file's "
                                         "tools it serves none): it serves another gateway file")),
                       (calls["changed"], f"offers {DENSE} with another schema than the tool config")]:
        assert error is not None and error.startswith("GatewayError: verl tool ") and fix in error, error

    # One ledger line per call, training traffic, filed under the trajectory (verl's request id, at the step its
    # rollout server reported) or the instance id the caller gave.
    lines = [json.loads(x) for x in (ledger_dir / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()]
    train = [(x["task_id"], x["tool_name"], x.get("step"), x["worker_id"], x["outcome"])
             for x in lines if x.get("traffic") == "train"]
    assert train == [("verl-trajectory-1", DENSE, 7, "verl", "ok"), ("verl-trajectory-1", SPARSE, 7, "verl", "ok"),
                     ("verl-trajectory-1", SPARSE, 7, "verl", "tool_error"), ("direct-1", SPARSE, None, "verl", "ok")]
    assert [x["task_id"] for x in lines if x.get("traffic") is None] == ["evaluation"] * 3

    # The reward verl loads from the documented overrides: 1 for the right answer in <answer>, 0 for a wrong one or
    # an untagged one, on every exported row, read as verl's dataset (datasets) and its evaluation (pandas) read it.
    rewards = seen["rewards"]
    assert rewards["pandas"] == rewards["datasets"] == [{"right": 1.0, "wrong": 0.0, "untagged": 0.0}] * 5
    assert rewards["judge"] == {"right": 1.0, "wrong": 0.0}
    assert len(judge.requests) == 2
