"""The command line as a user runs it: bad input gives one clear line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rollout.paths import PROJECT_ROOT


def rollout(*args: str, cwd: Path = PROJECT_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_missing_gateway_file(tmp_path):
    r = rollout(f"gateway_config_path={tmp_path / 'nope.json'}", f"output_dir={tmp_path / 'out'}")
    assert r.returncode == 2
    assert "gateway file not found" in r.stderr and "nope.json" in r.stderr and "rag_hybrid.json" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out" / "trajectory.jsonl").exists()


def test_unknown_tool_group(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"modules": [{"resource_type": "rag", "tool_groups": ["rag_query", "rag_serch"]}]}))
    r = rollout(f"gateway_config_path={bad}", f"output_dir={tmp_path / 'out'}")
    assert r.returncode == 2
    assert "'rag_serch'" in r.stderr and "rag_query_sparse" in r.stderr and "Traceback" not in r.stderr


def test_unknown_mode_lists_modes(tmp_path):
    r = rollout("mode=dense_plus", f"output_dir={tmp_path}")
    assert r.returncode != 0
    for mode in ("dense", "sparse", "hybrid", "no_tool"):
        assert mode in r.stderr


def test_missing_question_file(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "contents": "T\ntext"}) + "\n")
    r = rollout("dataset=files", f"dataset.corpus.path={corpus}", f"dataset.questions.path={tmp_path / 'q.jsonl'}",
                f"output_dir={tmp_path / 'out'}")
    assert r.returncode == 2 and "q.jsonl" in r.stderr and "Traceback" not in r.stderr


def test_dataset_paths_are_required(tmp_path):
    r = rollout("dataset=files", f"output_dir={tmp_path / 'out'}")
    assert r.returncode == 2 and "dataset.corpus.path" in r.stderr


def test_gateway_alone_rejects_missing_file(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "rollout.gateway", "--config", str(tmp_path / "x.json")],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 2 and "gateway file not found" in r.stderr


def test_multirun_leaves_one_folder_per_mode(tmp_path):
    # Run from an empty directory: the default results/ folder lands there, and the
    # mode presets' gateway files still resolve against the project.
    r = rollout("-m", "mode=dense,sparse", "dataset.n_passages=400", "dataset.n_questions=40", "dataset.limit=6",
                f"cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    for mode, tool in [("dense", "query_knowledge_base_dense"), ("sparse", "query_knowledge_base_sparse")]:
        folder = tmp_path / "results" / "demo" / mode
        summary = json.loads((folder / "evaluation_summary.json").read_text())
        assert summary["n"] == 6 and summary["mode"] == mode
        report = json.loads((folder / "tool_stats" / "report.json").read_text())
        assert [t["tool_name"] for t in report["tools"]] == [tool]
    assert "Results:" in r.stdout
