"""Without llama-cpp-python the tests against a real server are skipped with the install line, unless
ROLLOUT_REQUIRE_LLAMA=1 (CI) makes them fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llm_server.jinja_server import BUILD, llama_server_binary
from tests.llm_server.jinja_server import server_command as jinja_command
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


def test_an_unbuilt_llama_server_names_its_build_and_ci_builds_it_before_the_tests(tmp_path):
    from rollout.paths import PROJECT_ROOT

    with pytest.raises(LlamaMissing, match=r"llama-server is not built: python -m tests\.llm_server\.jinja_server"):
        llama_server_binary(tmp_path, "0.0.0", build=False)
    assert not (tmp_path / "llama-server-0.0.0").exists()
    ci = (PROJECT_ROOT / ".ci" / "run").read_text()
    assert ci.index(BUILD) < ci.index("export ROLLOUT_REQUIRE_LLAMA=1") < ci.index("python -m pytest")


def test_llama_server_serves_on_loopback_with_tools_in_the_given_template():
    command = jinja_command(Path("bin/llama-server"), Path("smol.gguf"), "smollm2", 2048, 8124, Path("qwen.jinja"))
    assert command[0] == "bin/llama-server" and "--jinja" in command and "--no-repack" in command
    flags = {flag: command[command.index(flag) + 1] for flag in
             ("--host", "--port", "--ctx-size", "--alias", "--chat-template-file")}
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8124" and flags["--ctx-size"] == "2048"
    assert flags["--alias"] == "smollm2" and flags["--chat-template-file"] == "qwen.jinja"
