"""The tagged agent's configuration: the presets, bad keys refused by name, tags checked against the offered
tools before a run's first task, the run's identity, and the chat template of the completions path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hydra.utils import instantiate

from envs import HttpMCPRagEnv
from rollout.agents.tagged import TaggedAgent
from rollout.errors import ConfigError
from rollout.gateway_file import GATEWAYS_DIR
from rollout.llm.chat_template import load_chat_template
from rollout.run.config import compose_run_config
from rollout.run.identity import identity_settings
from rollout.run.prepare import check_agent_tools
from tests.agents.conftest import CORPUS_INFO, SPARSE
from tests.agents.test_tagged_agent import CHATML, INVALID, PROTOCOL, SEARCH_R1_INSTRUCTION, make_agent
from tests.conftest import gateway_on_loopback
from tests.gateway.loopback import sparse_kb

URL = "http://127.0.0.1:8000/v1"
SPARSE_ONLY = GATEWAYS_DIR / "rag_sparse_only.json"


def test_search_r1_preset_is_the_published_protocol():
    cfg = compose_run_config("agent=search_r1", "llm.model=PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-em-ppo")
    agent = instantiate(cfg.agent)
    assert isinstance(agent, TaggedAgent) and (agent.wire, agent.top_k, agent.max_turns) == ("chat", 3, 5)
    p = agent.protocol
    assert p.instruction(question="Who wrote Dune?") == SEARCH_R1_INSTRUCTION.replace("{question}", "Who wrote Dune?")
    assert p.invalid == INVALID and p.stop == ("</search>", "</answer>") and p.strip_results
    assert (p.information.source, p.passage.source) == (PROTOCOL["information"], PROTOCOL["passage"])
    general = compose_run_config("agent=tagged", "llm.model=m").agent
    assert all(general[k] == cfg.agent[k] for k in ("instruction", "searches", "answer", "information", "invalid"))


def test_r1_searcher_preset_sends_its_base_prompt_to_completions():
    agent = instantiate(compose_run_config("agent=r1_searcher", "llm.model=m").agent)
    assert (agent.wire, agent.template, agent.top_k, agent.max_turns, agent.protocol.invalid) == (
        "completions", None, 5, 9, None)
    prompt = agent.prompt_head(agent.protocol.instruction(question="Who wrote Dune?"))
    assert prompt.startswith("The User asks a question, and the Assistant solves it.\nThe Assistant first thinks")
    assert '"<think> reasoning process here </think>\n\n<answer> final answer here </answer>".\n' in prompt
    assert prompt.endswith('<|end_of_documents|>".\n\nUser:Who wrote Dune?\nAssistant: <think>')


def test_llm_settings_join_the_identity_of_a_tagged_run(tmp_path):
    base = identity_settings(compose_run_config("mode=sparse", "agent=search_r1", "llm.model=a"))
    assert base["llm.model"] == "a" and base["agent.wire"] == "chat" and base["agent.searches"][0]["open"] == "<search>"
    cfg = compose_run_config("mode=sparse", "agent=search_r1", "llm.model=a", "agent.top_k=5")
    assert cfg.output_dir.name == "sparse,agent=search_r1,llm.model=a,agent.top_k=5"  # llm.* counts for this agent
    # The chat template's content, not only its path, decides the prompts.
    folder = tmp_path / "tok"
    folder.mkdir()
    config = json.loads((CHATML / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    overrides = ("mode=sparse", "agent=search_r1", "llm.model=a", "agent.wire=completions",
                 f"agent.chat_template={folder}")
    before = identity_settings(compose_run_config(*overrides))
    config["chat_template"] = config["chat_template"].replace("You are a helpful assistant.", "You are terse.")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    after = identity_settings(compose_run_config(*overrides))
    assert [k for k in before if before[k] != after[k]] == ["agent.chat_template_sha256"]


@pytest.mark.parametrize(("overrides", "match"), [
    ({"wire": "grpc"}, r"agent.wire='grpc' must be one of chat, completions"),
    ({"max_turns": 0}, "agent.max_turns"),
    ({"top_k": 0}, "agent.top_k"),
    ({"searches": []}, "agent.searches"),
    ({"searches": [{"open": "<search>"}]}, r"agent.searches\[0\].close"),
    ({"searches": [{"open": "<s>", "close": "</s>", "tools": "x"}]}, r"agent.searches\[0\] has unknown key"),
    ({"answer": {"open": "<search>", "close": "</answer>"}}, "must open with different strings"),
    ({"instruction": "Answer the question."}, r"agent.instruction must contain \{question\}"),
    ({"information": "<information></information>"}, r"agent.information must contain \{results\}"),
    ({"passage": "Doc {i}(Title: {titel}) {text}"}, r"agent.passage has unknown placeholder\(s\) \{titel\}"),
    ({"stop": "</search>"}, "agent.stop"),
    ({"strip_results": "yes"}, "agent.strip_results"),
    ({"invalid": 3}, "agent.invalid"),
    ({"chat_template": str(CHATML)}, "agent.chat_template is for agent.wire=completions"),
    ({"wire": "completions", "chat_template": "/nowhere/tok"}, "agent.chat_template='/nowhere/tok' does not exist"),
    ({"backoff_base_s": -1}, "agent.backoff_base_s"),
])
def test_bad_agent_config_is_a_config_error_naming_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        make_agent(URL, **overrides)


def test_bad_llm_block_names_the_tagged_agent():
    with pytest.raises(ConfigError, match="agent=tagged needs llm.model=NAME"):
        TaggedAgent({"base_url": URL, "model": None}, **PROTOCOL)


async def test_a_tag_the_gateway_cannot_serve_stops_the_run_before_its_first_task(tmp_path):
    with gateway_on_loopback(SPARSE_ONLY, sparse_kb(), tmp_path) as url:
        async with HttpMCPRagEnv(url, SPARSE_ONLY) as env:
            specs = list(env.tool_specs)
    check_agent_tools(make_agent(URL), specs)  # <search> → the first query tool: fine
    dense = [{"open": "<search_dense>", "close": "</search_dense>", "tool": "query_knowledge_base_dense"}]
    with pytest.raises(ConfigError) as info:
        check_agent_tools(make_agent(URL, searches=dense), specs)
    message = str(info.value)
    assert "agent.searches[0].tool=query_knowledge_base_dense" in message and f"search tools: {SPARSE}" in message


def test_a_mode_without_search_tools_or_top_k_is_refused(make_tools):
    with pytest.raises(ConfigError, match=f"offers none taking a string query \\(offered: {CORPUS_INFO}\\)"):
        make_agent(URL).check_tools(make_tools(CORPUS_INFO).tool_specs)
    no_top_k = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}}]
    with pytest.raises(ConfigError, match="lookup takes no top_k, so agent.top_k=3 cannot be honoured"):
        make_agent(URL).check_tools(no_top_k)
    assert make_agent(URL, top_k=None).check_tools(no_top_k)  # the tool's own default


def _messages(instruction: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": instruction}]


def test_the_chat_template_renders_as_transformers_renders_it():
    render_jinja_template = pytest.importorskip("transformers.utils.chat_template_utils").render_jinja_template
    template = load_chat_template(CHATML)
    config = json.loads((CHATML / "tokenizer_config.json").read_text())
    for messages in (_messages("Question: where?\n"), [{"role": "system", "content": "Be brief."},
                                                      *_messages("Q"), {"role": "assistant", "content": "A"}]):
        ours = template.render(messages, add_generation_prompt=True)
        [theirs], _ = render_jinja_template([messages], chat_template=config["chat_template"],
                                            add_generation_prompt=True, bos_token="<|startoftext|>",
                                            eos_token="<|im_end|>", pad_token="<|endoftext|>")
        assert ours == theirs and ours.startswith("<|startoftext|>")
    with pytest.raises(ConfigError, match="failed to render: Unknown role: tool"):
        template.render([{"role": "tool", "content": "x"}])


def test_a_jinja_file_and_a_folder_s_chat_template_jinja_are_read(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}>")
    assert load_chat_template(tmp_path).render(_messages("hi")) == "[hi]>"
    assert load_chat_template(tmp_path / "chat_template.jinja").render(_messages("hi")) == "[hi]>"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert load_chat_template(tmp_path).tokens == {"eos_token": "</s>"}


@pytest.mark.parametrize(("files", "match"), [
    ({}, "holds neither tokenizer_config.json nor chat_template.jinja"),
    ({"tokenizer_config.json": "{}"}, "holds no chat_template"),
    ({"tokenizer_config.json": "not json"}, "cannot read"),
    ({"chat_template.jinja": "{% for %}"}, "is not valid jinja"),
])
def test_a_bad_chat_template_is_a_config_error(tmp_path, files, match):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_chat_template(Path(tmp_path))


def _gguf_file(path: Path, template: str | None) -> Path:
    """A GGUF holding only tokenizer metadata (no tensors), as a model file's header holds it."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_token_list(["<s>", "</s>", "<|im_end|>", "hi"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(2)
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_model_s_chat_template_and_special_tokens_are_read(tmp_path):
    source = "{{ bos_token }}{% for m in messages %}[{{ m['content'] }}]{{ eos_token }}{% endfor %}>"
    template = load_chat_template(_gguf_file(tmp_path / "model.gguf", source))
    assert template.source == source and template.origin == str(tmp_path / "model.gguf")
    assert template.tokens == {"bos_token": "<s>", "eos_token": "<|im_end|>"}
    assert template.render(_messages("hi")) == "<s>[hi]<|im_end|>>"


def test_a_gguf_without_a_chat_template_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"holds no tokenizer\.chat_template"):
        load_chat_template(_gguf_file(tmp_path / "base.gguf", None))
    (tmp_path / "broken.gguf").write_bytes(b"not a gguf")
    with pytest.raises(ConfigError, match="cannot read .* as a GGUF file"):
        load_chat_template(tmp_path / "broken.gguf")
