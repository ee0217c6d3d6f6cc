"""`rollout gateway --corpus` takes what a run's `dataset.corpus.path` takes: a corpus file or a folder of documents."""

from __future__ import annotations

from rollout.gateway.launch import build_parser, load_knowledge_base, parse_args
from rollout.gateway_file import GATEWAYS_DIR


def test_the_corpus_option_says_it_takes_a_folder():
    corpus_help = next(a.help for a in build_parser()._actions if "--corpus" in a.option_strings)
    assert "folder" in corpus_help and "jsonl" in corpus_help


def test_a_folder_corpus_serves_its_files_with_search_sources_scoped_to_it(tmp_path):
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "setup.md").write_text("# Setup\nInstall the package with pip.\n")
    (docs / "notes.txt").write_text("Alpha is a village by the river.\n")
    args = parse_args(["--config", str(GATEWAYS_DIR / "rag_pipeline.json"), "--corpus", str(docs)])
    kb = load_knowledge_base(args, requires=[])
    assert sorted(p.id for p in kb.passages) == ["guides/setup.md", "notes.txt"]
    assert kb.steps.sources_root == docs  # search_sources paths are relative to the folder, as in a run
