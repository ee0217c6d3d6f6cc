"""Without llama-cpp-python the tests against a real server are skipped with the install line, unless
ROLLOUT_REQUIRE_LLAMA=1 (CI) makes them fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llm_server.server import LlamaMissing, no_llama, require_llama, server_command
from tests.llm_server.sources import INSTALL, LLAMA_CPP_VERSION


def test_a_missing_module_is_named_with_the_install_line():
    with pytest.raises(LlamaMissing, match=r"not_a_llama_module not installed: pip install "
                                           r"\"llama-cpp-python\[server\]==0\.3\.36\" gguf"):
        require_llama(("json", "not_a_llama_module"))
    require_llama(("json",))


def test_a_missing_server_skips_unless_the_server_tests_are_required():
    problem = LlamaMissing(f"llama_cpp not installed: {INSTALL}")
    with pytest.raises(pytest.skip.Exception, match="llama_cpp not installed: pip install"):
        no_llama(problem, {})
    with pytest.raises(pytest.fail.Exception, match=r"pip install .*\(ROLLOUT_REQUIRE_LLAMA=1"):
        no_llama(problem, {"ROLLOUT_REQUIRE_LLAMA": "1"})


def test_ci_installs_the_release_the_tests_name():
    from rollout.paths import PROJECT_ROOT

    ci = (PROJECT_ROOT / ".ci" / "run").read_text()
    assert INSTALL.removeprefix("pip install ") in ci and LLAMA_CPP_VERSION in INSTALL
    assert "export ROLLOUT_REQUIRE_LLAMA=1" in ci


def test_the_server_serves_on_loopback_under_the_alias_runs_name():
    command = server_command(Path("tiny.gguf"), 512, 8123)
    assert command[1:3] == ["-m", "llama_cpp.server"]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8123" and flags["--n_ctx"] == "512"
    assert flags["--model_alias"] == "tiny" and flags["--chat_format"] == "chatml-function-calling"
