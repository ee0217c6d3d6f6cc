"""A cache folder that cannot be written: each command that writes it says so in one line naming the folder and
`ROLLOUT_CACHE_DIR`, and exits 2. A run whose gateway is the first to write adds the line saying the gateway exited.

Tests run as root, whom file modes do not stop: a folder under a regular file cannot be made by anyone, and a
read-only folder stops root once the process drops the capability to override file modes (`setpriv`)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from rollout.data.demo_kb import ensure_demo_kb
from rollout.paths import PROJECT_ROOT
from tests.test_rollout_command import rollout_command, rollout_command_env, rollout_command_line

SMALL = ("dataset.n_passages=300", "dataset.n_questions=5")
COMMANDS = {
    "eval-retrieval": ("eval-retrieval", "retriever=sparse", *SMALL, "output_dir={out}"),
    "gateway": ("gateway", "--config", str(PROJECT_ROOT / "conf/gateways/rag_sparse_only.json"), "--port", "0",
                "--demo-passages", "300", "--demo-questions", "5"),
    "run": ("run", "mode=sparse", *SMALL, "output_dir={out}"),
    "build-index": ("build-index", "dataset=files", "dataset.corpus.path={corpus}"),
}


def _command(name: str, out: Path) -> list[str]:
    corpus = out.parent / "corpus.jsonl"
    corpus.write_text('{"id": "a", "contents": "Alpha\\nAlpha Corp makes looms."}\n')
    return [a.format(out=out, corpus=corpus) for a in COMMANDS[name]]


def _one_line_naming(result, folder: Path) -> str:
    """The command's `error:` line naming the folder and the variable, checked to be its only one but for the run's
    line after its gateway's."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors and str(folder) in errors[0] and "ROLLOUT_CACHE_DIR" in errors[0], result.stderr
    assert errors[1:] in ([], ["error: gateway exited with code 2 before it was ready; its error is printed above"])
    return errors[0]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_cache_folder_under_a_regular_file_is_one_line_and_exit_2(name, tmp_path):
    (tmp_path / "a-file").write_text("")
    cache = tmp_path / "a-file" / "cache"
    result = rollout_command(*_command(name, tmp_path / "out"), cwd=tmp_path, env={"ROLLOUT_CACHE_DIR": str(cache)})
    line = _one_line_naming(result, cache)
    assert "Not a directory" in line


def _without_root_powers(argv: list[str]) -> list[str]:
    """`argv` run as root without the capabilities that let root write where file modes say no."""
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *argv]


needs_setpriv = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                   reason="drops root's file-mode override with setpriv")


@needs_setpriv
@pytest.mark.parametrize("name", ["eval-retrieval", "gateway", "run"])
def test_a_read_only_cache_holding_the_knowledge_base_is_one_line_and_exit_2(name, tmp_path):
    """The demo knowledge base is there; the corpus store is the first thing written, and cannot be."""
    cache = tmp_path / "cache"
    ensure_demo_kb(cache, n_passages=300, n_questions=5)
    cache.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    result = subprocess.run(_without_root_powers(rollout_command_line(*_command(name, tmp_path / "out"))),
                            cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
                            env=rollout_command_env({"ROLLOUT_CACHE_DIR": str(cache)}))
    line = _one_line_naming(result, cache)
    assert "Permission denied" in line
