"""verl 0.9.1's own code on rollout's tool configs, tools and reward; run by tests/trainers/test_verl.py with the python
of verl's venv (`python -m tests.trainers.verl_checks SPEC.json`), as verl's import is too slow to pay twice.

SPEC names the tool configs, the verl overrides, the question, the parquet file and the judge; what verl did is
written as JSON to SPEC's `result` file (verl's BaseTool prints every schema it loads to stdout), and the test checks
it. Nothing is asserted here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import pandas as pd
import verl
from hydra import compose, initialize_config_dir
from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.tool_registry import initialize_tools_from_config, load_all_tools
from verl.trainer.ppo.reward import get_custom_reward_fn

VERL_CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"


def verl_config(overrides: list[str]) -> Any:
    """verl's trainer config (`ppo_trainer`, as `python -m verl.trainer.main_ppo` composes it) with `overrides`."""
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def loaded(path: str) -> list[dict[str, Any]]:
    """Each tool verl makes of a tool config: its class, name, and the schema it shows the policy."""
    return [{"class": f"{type(t).__module__}.{type(t).__qualname__}", "name": t.name,
             "shown": t.tool_schema.model_dump(exclude_unset=True, exclude_none=True)}
            for t in initialize_tools_from_config(path)]


async def create_error(tool: Any) -> str | None:
    """What `create` raised (type and message), or None when it opened an instance."""
    try:
        instance_id, _ = await tool.create()
    except Exception as e:  # noqa: BLE001 - any failure is what the test reads
        return f"{type(e).__name__}: {e}"
    await tool.release(instance_id)
    return None


async def calls(tools: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    question = spec["question"]
    dense, sparse = tools["query_knowledge_base_dense"], tools["query_knowledge_base_sparse"]
    # As verl's tool agent loop calls a tool: its own _call_tool (create, execute with agent_data, release), on the
    # attributes it reads of a loop, with a real AgentData whose rollout server reported step 7's weights.
    loop = SimpleNamespace(tools=tools, max_tool_response_length=100_000, tool_response_truncate_side="middle")
    agent_data = AgentData(messages=[], image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None,
                           metrics={}, request_id="verl-trajectory-1", tools_kwargs={})
    agent_data.extra_fields.update({"global_steps": 7, "min_global_steps": 7, "max_global_steps": 7})
    agent_loop = []
    for name, arguments in [(dense.name, {"query": question}), (sparse.name, {"query": question, "top_k": 2}),
                            (sparse.name, {"query": question, "top_k": 1000})]:
        call = FunctionCall(name=name, arguments=json.dumps(arguments))
        response, reward, metrics = await ToolAgentLoop._call_tool(loop, call, {}, agent_data)
        agent_loop.append({"text": response.text, "reward": reward, "metrics": metrics})
    # Called directly, with an instance id of the caller's: the ledger files the call under it.
    instance_id, _ = await sparse.create("direct-1")
    response, reward, metrics = await sparse.execute(instance_id, {"query": question})
    await sparse.release(instance_id)
    direct = {"instance_id": instance_id, "text": response.text, "reward": reward, "metrics": metrics}
    token = os.environ.pop("ROLLOUT_GATEWAY_TOKEN")
    no_token = await create_error(dense)
    os.environ["ROLLOUT_GATEWAY_TOKEN"] = token
    return {"agent_loop": agent_loop, "direct": direct, "no_token": no_token,
            "dead": await create_error(initialize_tools_from_config(spec["dead"])[0]),
            "other": await create_error(initialize_tools_from_config(spec["other"])[0]),
            "changed": await create_error(initialize_tools_from_config(spec["changed"])[0])}


def rewards(spec: dict[str, Any]) -> dict[str, Any]:
    """Rows of the exported parquet, read as verl's RL dataset reads them (datasets) and as its offline evaluation
    does (pandas), scored by the reward verl loads from the documented overrides, and by the judge's reward."""
    score = get_custom_reward_fn(verl_config(spec["reward_overrides"]))
    judge = get_custom_reward_fn(verl_config(spec["judge_overrides"]))
    out: dict[str, Any] = {}
    for reader, rows in [("pandas", pd.read_parquet(spec["parquet"]).to_dict("records")),
                         ("datasets", list(datasets.load_dataset("parquet", data_files=spec["parquet"])["train"]))]:
        out[reader] = []
        for row in rows:
            truth = row["reward_model"]["ground_truth"]
            golden = list(truth["target"])
            texts = {"right": f"<think>found it</think> <answer> {golden[0]} </answer>",
                     "wrong": "<answer> not the answer at all </answer>", "untagged": golden[0]}
            out[reader].append({k: score(data_source=row["data_source"], solution_str=t, ground_truth=truth,
                                         extra_info=row["extra_info"]) for k, t in texts.items()})
    row = pd.read_parquet(spec["parquet"]).to_dict("records")[0]
    truth = row["reward_model"]["ground_truth"]
    out["judge"] = {k: asyncio.run(judge(data_source=row["data_source"], solution_str=f"<answer>{t}</answer>",
                                         ground_truth=truth, extra_info=row["extra_info"]))
                    for k, t in [("right", next(iter(truth["target"]))), ("wrong", "not the answer at all")]}
    return out


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    config = verl_config(spec["tool_overrides"])
    tool_config_path = config.actor_rollout_ref.rollout.multi_turn.tool_config_path
    tools = {t.name: t for t in load_all_tools(tool_config_path=tool_config_path, function_tool_path=None)}
    result = {
        "tool_config_path": tool_config_path,
        "dataset_tool_config_path": config.data.tool_config_path,
        "loaded": {name: loaded(path) for name, path in spec["configs"].items()},
        "calls": asyncio.run(calls(tools, spec)),
        "rewards": rewards(spec),
    }
    Path(spec["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
