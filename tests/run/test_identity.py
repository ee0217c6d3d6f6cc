"""A run's identity: which settings change it (and the default output folder), and which do not."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rollout.data import load_corpus
from rollout.data.dataset import prepare_data
from rollout.identity_keys import identity_overrides, run_suffix
from rollout.run.config import compose_run_config
from rollout.run.identity import RunIdentity, identity_settings

SMALL_KB = ("dataset.n_passages=300", "dataset.n_questions=30")

AXES = [
    ((), "agent.top_k=1", "agent.top_k"),
    ((), "retriever.sparse.k1=1.2", "retriever.sparse.k1"),
    ((), "retriever.sparse.method=lucene", "retriever.sparse.method"),
    ((), "dataset.n_passages=500", "dataset.n_passages"),
    ((), "system_prompt=Answer in one word.", "system_prompt"),
    ((), "repeats=3", "repeats"),
    ((), "seed=7", "seed"),
    ((), "score_failed=true", "score_failed"),
    (("agent=openai", "llm.model=model-a"), "llm.model=model-b", "llm.model"),
    (("agent=openai", "llm.model=model-a"), "llm.sampling.temperature=0.7", "llm.sampling.temperature"),
    (("agent=openai", "llm.model=model-a"), "llm.context_window=4096", "llm.context_window"),
    (("agent=openai", "llm.model=model-a"), "agent.text_tool_calls=parse", "agent.text_tool_calls"),
    (("agent=openai", "llm.model=model-a"), "agent.tokenizer=/models/qwen", "agent.tokenizer"),
    (("agent=openai", "llm.model=model-a"), "agent.answer_tag=answer", "agent.answer_tag"),
]


@pytest.mark.parametrize(("base", "change", "key"), AXES, ids=[a[2] for a in AXES])
def test_a_changed_setting_changes_the_identity_and_the_default_folder(base, change, key):
    before, after = compose_run_config("mode=sparse", *base), compose_run_config("mode=sparse", *base, change)
    old, new = identity_settings(before), identity_settings(after)
    assert [k for k in old.keys() | new.keys() if old.get(k) != new.get(k)] == [key]
    assert after.output_dir != before.output_dir
    assert after.output_dir.parent == before.output_dir.parent == Path("results/demo")  # one path component
    assert after.output_dir.name.startswith("sparse,") and key in after.output_dir.name


def test_a_sweep_over_one_axis_gives_one_folder_per_value():
    dirs = {compose_run_config("mode=sparse", f"agent.top_k={k}").output_dir for k in (1, 5)}
    assert dirs == {Path("results/demo/sparse,agent.top_k=1"), Path("results/demo/sparse,agent.top_k=5")}
    assert compose_run_config("mode=sparse").output_dir == Path("results/demo/sparse")


@pytest.mark.parametrize("change", [
    "dataset.limit=3", "workers=1", "concurrency_per_worker=1", "progress=false", "watch=true", "resume=false",
    "task_timeout_s=5", "gateway.call_timeout_s=3", "gateway.ready_timeout_s=5", "gateway.url=http://h:1/mcp",
    "ray.num_cpus=1", "retriever.dense.batch_size=8", "llm.model=unused-by-this-agent", "verbose=2", "verbose=-1",
])
def test_speed_and_visibility_settings_leave_the_identity_and_folder_alone(change):
    base = compose_run_config("mode=sparse")
    changed = compose_run_config("mode=sparse", change)
    assert identity_settings(changed) == identity_settings(base)
    assert changed.output_dir == base.output_dir and changed.overrides == ()


def test_a_run_recorded_before_the_context_window_and_text_tool_call_settings_still_resumes():
    # Those runs sent whatever fit and took a tool call written as text for text: the settings' defaults now.
    cfg = compose_run_config("mode=sparse", "agent=openai", "llm.model=model-a")
    now = RunIdentity(settings=identity_settings(cfg), gateway_file_sha256="g", tools={}, dataset={})
    new_keys = ("llm.context_window", "agent.text_tool_calls", "agent.tokenizer")
    then = RunIdentity(settings={k: v for k, v in now.settings.items() if k not in new_keys},
                       gateway_file_sha256="g", tools={}, dataset={})
    assert now.differences(then) == []
    parsing = compose_run_config("mode=sparse", "agent=openai", "llm.model=model-a", "agent.text_tool_calls=parse")
    assert RunIdentity(settings=identity_settings(parsing), gateway_file_sha256="g", tools={},
                       dataset={}).differences(then) == ['agent.text_tool_calls: "refuse" → "parse"']


def test_a_run_recorded_before_the_bm25_idf_setting_still_resumes():
    # Those runs scored with Robertson's idf: retriever.sparse.method=robertson now.
    now = RunIdentity(settings=identity_settings(compose_run_config("mode=sparse")), gateway_file_sha256="g",
                      tools={}, dataset={})
    assert now.settings["retriever.sparse.method"] == "robertson"
    then = RunIdentity(settings={k: v for k, v in now.settings.items() if k != "retriever.sparse.method"},
                       gateway_file_sha256="g", tools={}, dataset={})
    assert now.differences(then) == []
    lucene = compose_run_config("mode=sparse", "retriever.sparse.method=lucene")
    assert RunIdentity(settings=identity_settings(lucene), gateway_file_sha256="g", tools={},
                       dataset={}).differences(then) == ['retriever.sparse.method: "robertson" → "lucene"']


@pytest.mark.parametrize("agent", [("agent=openai", "llm.model=model-a"), (), ("agent=search_r1", "llm.model=m")],
                         ids=["openai", "heuristic", "search_r1"])
def test_a_run_recorded_before_answer_tags_still_resumes(agent):
    # Those runs read the final message whole (agent=openai) or had no such setting: agent.answer_tag=null now.
    cfg = compose_run_config("mode=sparse", *agent)
    now = RunIdentity(settings=identity_settings(cfg), gateway_file_sha256="g", tools={}, dataset={})
    assert now.settings["agent.answer_tag"] is None
    then = RunIdentity(settings={k: v for k, v in now.settings.items() if k != "agent.answer_tag"},
                       gateway_file_sha256="g", tools={}, dataset={})
    assert now.differences(then) == []
    # The same run asked to read tags is another experiment, named as such.
    if agent and agent[0] == "agent=openai":
        tagged = compose_run_config("mode=sparse", *agent, "agent.answer_tag=answer")
        assert RunIdentity(settings=identity_settings(tagged), gateway_file_sha256="g", tools={},
                           dataset={}).differences(then) == ['agent.answer_tag: null → "answer"']


def test_scoring_settings_leave_the_identity_and_folder_alone():
    base = compose_run_config("mode=sparse")
    scored = compose_run_config("mode=sparse", "scoring.scorers=[rollout.report.example_scorers:gold_share]")
    assert identity_settings(scored) == identity_settings(base) and scored.output_dir == base.output_dir


def test_an_explicit_output_dir_stays_as_given(tmp_path):
    cfg = compose_run_config("agent.top_k=2", f"output_dir={tmp_path / 'mine'}")
    assert cfg.output_dir == tmp_path / "mine" and cfg.overrides == ("agent.top_k=2",)


def test_folder_names_are_safe_and_long_values_are_shortened():
    parts = identity_overrides(["llm.model=Qwen/Qwen2.5-7B", "system_prompt=" + "x" * 300, "+seed=3"], uses_llm=True)
    assert parts[0] == "llm.model=Qwen_Qwen2.5-7B" and parts[2] == "seed=3"
    assert len(parts[1]) < 40 and "/" not in run_suffix(parts)
    other = identity_overrides(["system_prompt=" + "x" * 299 + "y"], uses_llm=True)
    assert other[0] != parts[1]  # the hash tells long values apart
    assert len(run_suffix([f"agent.p{i}={'v' * 20}" for i in range(40)])) <= 160


def test_identity_hashes_the_dataset_content_but_not_its_limit(tmp_path):
    def identity(*overrides: str) -> RunIdentity:
        cfg = compose_run_config("mode=sparse", *SMALL_KB, f"cache_dir={tmp_path}", *overrides)
        return RunIdentity.of(cfg, [{"type": "function", "function": {"name": "search"}}], prepare_data(cfg.dataset, cfg.cache_dir))

    base = identity()
    assert identity("dataset.limit=4") == base
    diff = identity("dataset.n_passages=400", "agent.top_k=2").differences(base)
    assert "agent.top_k: 5 → 2" in diff and "dataset.n_passages: 300 → 400" in diff
    assert any(d.startswith("dataset.corpus_sha256: ") for d in diff)
    assert any(d.startswith("dataset.questions_sha256: ") for d in diff)
    assert RunIdentity.from_json(base.to_json()) == base


def test_a_folder_corpus_is_prepared_and_its_edits_change_the_identity(tmp_path):
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "setup.md").write_text("Install the harness.", encoding="utf-8")
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"id": "q1", "question": "How?", "golden_answers": ["install"]}\n', encoding="utf-8")

    def identity() -> tuple[RunIdentity, list[str]]:
        cfg = compose_run_config("mode=sparse", "dataset=files", f"dataset.corpus.path={docs}/",
                                 f"dataset.questions.path={qa}", f"cache_dir={tmp_path / 'cache'}")
        data = prepare_data(cfg.dataset, cfg.cache_dir)
        assert data.corpus_path.parent == tmp_path / "cache"
        ids = [p.doc_id for p in load_corpus(data.corpus_path)]
        return RunIdentity.of(cfg, [{"type": "function", "function": {"name": "search"}}], data), ids

    base, doc_ids = identity()
    assert doc_ids == ["guides/setup.md"] and identity()[0] == base
    (docs / "faq.txt").write_text("Ask here.", encoding="utf-8")
    changed, doc_ids = identity()
    assert doc_ids == ["faq.txt", "guides/setup.md"]
    assert [d.split(":")[0] for d in changed.differences(base)] == ["dataset.corpus_sha256"]


def test_two_runs_hashing_the_same_corpus_at_once_both_get_its_hash(tmp_path, monkeypatch):
    """Runs sharing a cache (a parallel sweep, test workers) may remember the same corpus hash at the same moment."""
    from rollout.run import identity

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "d1", "contents": "T\\ntext"}\n')
    cache = tmp_path / "cache"
    expected = hashlib.sha256(corpus.read_bytes()).hexdigest()
    rename = Path.replace
    raced: list[str] = []

    def another_run_finishes_first(self: Path, target: Path) -> Path:
        if not raced:  # between this run's write and its rename, another run hashes and renames
            raced.append("started")
            raced.append(identity._file_sha256(corpus, cache))
        return rename(self, target)

    monkeypatch.setattr(Path, "replace", another_run_finishes_first)
    assert identity._file_sha256(corpus, cache) == expected
    assert raced == ["started", expected]
    monkeypatch.undo()
    assert identity._file_sha256(corpus, cache) == expected  # remembered
    assert [p.name for p in (cache / "content-sha256").iterdir() if p.suffix == ".tmp"] == []
