"""verl 0.9.1's own rollout path running rollout's agent loop `rollout_text`; run by tests/trainers/
test_verl_text_loop.py with the python of verl's venv (`python -m tests.trainers.verl_text_loop_checks SPEC.json`),
as verl's import is too slow to pay twice.

What is verl's here: the trainer config composed from the documented overrides, its `AgentLoopWorker` (which loads
the agent loop config, makes a loop per trajectory with Hydra and pads, masks and rewards the outputs), its RL
dataset reading the exported rows, and its collation into the batch its trainer hands the worker. What stands in:
the model, a byte-level BPE tokenizer trained here on the demo corpus with a ChatML template (a Qwen2 config beside
it, as verl reads a model folder), and vLLM, a `ScriptedServer` generating scripted policy turns token by token as
vLLM does. The gateway is the test's, a real one; its URL arrives in SPEC's `url_file` once it serves, so verl's
import and the gateway's start overlap. What happened is written as JSON to SPEC's `result`; nothing is asserted.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import hydra
import numpy as np
import verl
import yaml
from hydra import compose, initialize_config_dir
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
)
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

from rollout.data.demo_kb import generate_demo_kb

VERL_CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LOGPROB = -0.25
"""The log-prob the scripted server reports for every token it samples."""
PAD = " la"
"""A turn's `{pad}` is this, repeated until the turn is as many tokens as SPEC asks."""


def build_model(folder: Path, texts: list[str]) -> None:
    """A tokenizer trained on `texts` (byte-level BPE, ChatML template, `<|im_end|>` its end of sequence) and the
    config of a tiny Qwen2 model, saved as a model folder verl reads."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=2000, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        chat_template=CHATML)
    tokenizer.save_pretrained(folder)
    Qwen2Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, architectures=["Qwen2ForCausalLM"],
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(folder)


class ScriptedServer:
    """verl's rollout server, token in and token out (`server_manager.generate`), writing each trajectory's scripted
    turns (by the question its prompt asks, in order) as vLLM generates: token by token, ending after the token that
    completes a stop string (vLLM's token ids keep it; only its text drops it), at the end-of-sequence token, or at
    `max_tokens`; `completed` for each, as verl's vLLM server reports them; the weights' step in `extra_fields`.
    `drop_stop`: the output is the tokens of the text before a matched stop string, as from a server dropping it."""

    def __init__(self, scripts: dict[str, list[str]], step: int, *, drop_stop: bool = False):
        self.scripts = scripts
        self.step = step
        self.drop_stop = drop_stop
        self.tokenizer: Any = None
        self.turn: Counter[str] = Counter()
        self.calls: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        tok = self.tokenizer
        prompt = tok.decode(prompt_ids, skip_special_tokens=False)
        question = next(q for q in self.scripts if f"Question: {q}\n" in prompt)
        index = self.turn[request_id]
        self.turn[request_id] += 1
        planned = tok.encode(self.scripts[question][index], add_special_tokens=False)
        stops, limit = list(sampling_params.get("stop") or []), int(sampling_params["max_tokens"])
        out: list[int] = []
        for token in planned:
            out.append(token)
            # Stop strings are a few tokens long: the text of the last few tokens holds any that just completed.
            if token == tok.eos_token_id or any(s in tok.decode(out[-16:], skip_special_tokens=True) for s in stops) \
                    or len(out) >= limit:
                break
        text = tok.decode(out, skip_special_tokens=True)
        if self.drop_stop and (found := [text.find(x) for x in stops if x in text]):
            out = tok.encode(text[:min(found)], add_special_tokens=False)
        self.calls.append({"request_id": request_id, "question": question, "turn": index, "stop": stops,
                           "max_tokens": limit, "prompt_tokens": len(prompt_ids), "tokens": len(out),
                           "temperature": sampling_params.get("temperature")})
        await asyncio.sleep(0)
        return TokenOutput(token_ids=out, log_probs=[LOGPROB] * len(out) if sampling_params.get("logprobs") else None,
                           stop_reason="completed", num_preempted=0, extra_fields={"global_steps": self.step})


def verl_config(overrides: list[str]) -> Any:
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def padded(scripts: dict[str, dict[str, Any]], tokenizer: Any, response_length: int) -> dict[str, list[str]]:
    """Each question's turns, a `{pad}` filled so that its turn is `response_length - pad_gap` tokens."""
    out = {}
    for question, script in scripts.items():
        turns = []
        for text in script["turns"]:
            if "{pad}" in text:
                def tokens(n: int, text: str = text) -> int:
                    return len(tokenizer.encode(text.replace("{pad}", PAD * n), add_special_tokens=False))

                target = response_length - script["pad_gap"]
                n = target - tokens(0)  # one token a pad, as a rule: counted from there
                while tokens(n) < target:
                    n += 1
                while tokens(n) > target:
                    n -= 1
                text = text.replace("{pad}", PAD * n)
                assert tokens(0, text) == target, question
            turns.append(text)
        out[question] = turns
    return out


def segments(tokenizer: Any, ids: list[int], mask: list[int]) -> list[dict[str, Any]]:
    """The response as runs of one mask value: each run's mask, token count and text."""
    runs: list[dict[str, Any]] = []
    for token, m in zip(ids, mask, strict=True):
        if runs and runs[-1]["mask"] == m:
            runs[-1]["ids"].append(token)
        else:
            runs.append({"mask": m, "ids": [token]})
    return [{"mask": r["mask"], "tokens": len(r["ids"]), "text": tokenizer.decode(r["ids"], skip_special_tokens=True)}
            for r in runs]


def plain(value: Any) -> Any:
    """numpy values as JSON takes them."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def trajectories(output: DataProto, tokenizer: Any) -> list[dict[str, Any]]:
    """Each trajectory of the worker's batch, unpadded."""
    batch = output.batch
    prompt_width = batch["prompts"].shape[1]
    out = []
    for i in range(len(output)):
        attention = batch["attention_mask"][i]
        prompt_ids = batch["prompts"][i][attention[:prompt_width].bool()].tolist()
        valid = int(attention[prompt_width:].sum())
        response_ids = batch["responses"][i][:valid].tolist()
        mask = batch["response_mask"][i][:valid].tolist()
        scores = batch["rm_scores"][i]
        nonzero = scores.nonzero().flatten().tolist()
        out.append({
            "question": output.non_tensor_batch["extra_info"][i]["question"],
            "prompt": tokenizer.decode(prompt_ids, skip_special_tokens=False),
            "response": tokenizer.decode(response_ids, skip_special_tokens=True),
            "response_tokens": valid, "mask_after_response": int(batch["response_mask"][i][valid:].sum()),
            "segments": segments(tokenizer, response_ids, mask),
            "logprobs": sorted(set(zip(mask, batch["rollout_log_probs"][i][:valid].tolist()))),
            "reward": float(scores.sum()), "reward_at": nonzero, "num_turns": int(output.non_tensor_batch["__num_turns__"][i]),
            "extra_fields": {k: plain(output.non_tensor_batch[k][i])
                             for k in ("turns", "tool_calls", "failed_tool_calls", "answered", "truncated",
                                       "request_id", "global_steps", "max_global_steps", "turn_scores")},
            "data_source": output.non_tensor_batch["data_source"][i],
            "ground_truth": plain(output.non_tensor_batch["reward_model"][i]["ground_truth"]),
        })
    return out


async def direct(entry: dict[str, Any], config: Any, worker: AgentLoopWorker, row: dict[str, Any],
                 server: ScriptedServer | None = None) -> dict[str, Any]:
    """One loop made from `entry` as verl's worker makes one (with `server` for the worker's), run on `row`: its
    reward, request id and response, or what it raised (type and message)."""
    try:
        loop = hydra.utils.instantiate(
            config=entry, trainer_config=DictConfigWrap(config=config), server_manager=server or worker.llm_client,
            tokenizer=worker.tokenizer, processor=None, hf_model_type=worker.hf_model_type,
            dataset_cls=worker.dataset_cls, data_config=DictConfigWrap(config.data), tools=ToolListWrap([]))
        out = await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}, **row)
    except Exception as e:  # noqa: BLE001 - what the loop raised is what the test reads
        cause = e.__cause__ if isinstance(e, hydra.errors.InstantiationException) and e.__cause__ else e
        return {"error": f"{type(cause).__name__}: {cause}"}
    return {"reward_score": out.reward_score, "request_id": out.extra_fields["request_id"],
            "response": worker.tokenizer.decode(out.response_ids, skip_special_tokens=True),
            "segments": segments(worker.tokenizer, out.response_ids, out.response_mask)}


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    model = Path(spec["model_dir"])
    passages, _ = generate_demo_kb()
    build_model(model, [f"{p.title}\n{p.text}" for p in passages] + spec["texts"])
    config = verl_config(spec["overrides"] + spec["test_overrides"])
    response_length = int(config.actor_rollout_ref.rollout.response_length)

    url_file = Path(spec["url_file"])
    deadline = time.monotonic() + 300
    while not url_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    url = url_file.read_text().strip()
    entries = [{**e, "gateway_url": url} if e.get("name") == "rollout_text" else e for e in spec["loop_config"]]
    Path(config.actor_rollout_ref.rollout.agent.agent_loop_config_path).write_text(yaml.safe_dump(entries))

    server = ScriptedServer({}, spec["step"])
    worker = AgentLoopWorker(config, server, None, None)
    server.tokenizer = worker.tokenizer
    server.scripts = padded(spec["scripts"], worker.tokenizer, response_length)
    # The batch verl's trainer hands the rollout: its dataset's rows of the parquet, collated, the generation's keys.
    dataset = RLHFDataset(data_files=config.data.train_files, tokenizer=worker.tokenizer, config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    gen_batch = RayPPOTrainer._get_gen_batch(SimpleNamespace(), batch)
    gen_batch.meta_info.update({"global_steps": spec["step"], "validate": False})
    output = asyncio.run(worker.generate_sequences(gen_batch))

    # Loops made from other entries, as verl makes them, on the first row.
    row = {k: v[0] for k, v in gen_batch.non_tensor_batch.items()}
    entry = next(e for e in entries if e.get("name") == "rollout_text")
    bare = {"name": entry["name"], "_target_": entry["_target_"]}
    cases = {"metric_null": {**entry, "metric": None}, "bare": bare, "unknown": {**entry, "metrik": "f1"},
             "bad_metric": {**entry, "metric": "bleu"}, "dead": {**entry, "gateway_url": "http://127.0.0.1:1/mcp"},
             "not_tagged": {**entry, "experiment": "mode=hybrid agent=openai"},
             "turn_cap": {**entry, "experiment": spec["turn_cap_experiment"]}}
    direct_runs = {name: asyncio.run(direct(e, config, worker, row)) for name, e in cases.items()}
    trimming = ScriptedServer(server.scripts, spec["step"], drop_stop=True)
    trimming.tokenizer = worker.tokenizer
    direct_runs["stop_dropped"] = asyncio.run(direct(entry, config, worker, row, trimming))

    result = {
        "response_length": response_length,
        "agent_loop": {"default": config.actor_rollout_ref.rollout.agent.default_agent_loop,
                       "config_path": config.actor_rollout_ref.rollout.agent.agent_loop_config_path},
        "scripts": server.scripts,
        "trajectories": trajectories(output, worker.tokenizer),
        "reward_extra_keys": output.meta_info.get("reward_extra_keys"),
        "calls": server.calls,
        "direct": direct_runs,
    }
    Path(spec["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
