"""Importing the environments stays light: no MCP SDK, no web server, no retrieval or data-frame stack."""

import os
import subprocess
import sys

from rollout.paths import PROJECT_ROOT

HEAVY_AFTER_RAG_ENV = (
    "import envs.http_mcp_rag_env, sys; "
    "print(sorted(m for m in sys.modules if m.split('.')[0] in {'uvicorn','faiss','bm25s','torch','pandas'}))"
)
SDK_AFTER_RAG_ENV = "import envs.http_mcp_rag_env, sys; print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp'))"


def run_python(code: str) -> str:
    # A fresh interpreter (this test process has long imported all of these), on this checkout of the package.
    path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT,
                          env={**os.environ, "PYTHONPATH": path}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_importing_the_rag_env_pulls_no_web_server_and_no_retrieval_stack():
    assert run_python(HEAVY_AFTER_RAG_ENV) == "[]"


def test_importing_the_rag_env_does_not_import_the_mcp_sdk():
    # `import mcp` pulls the SDK's server side and uvicorn (~1 s); envs/ imports the SDK when a session opens.
    assert run_python(SDK_AFTER_RAG_ENV) == "[]"


def test_a_run_starts_ray_before_importing_the_mcp_sdk_or_the_report_stack():
    # What `python -m rollout` imports before Ray starts, Hydra's sweep callback included: the MCP SDK (the tool plan,
    # the tool listing), pandas and matplotlib (a sweep's comparison, the tool report) come later, and would each
    # delay every run's Ray start.
    code = ("import rollout.run.app, rollout.run.multirun, sys; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'mcp_types', 'pandas', 'matplotlib'}))")
    assert run_python(code) == "[]"
