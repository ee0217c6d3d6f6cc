"""Every command line the documentation (README.md, docs/*.md) and conf/ show works as written.

Collected from the fenced code blocks of README.md and docs/*.md (not the `text` blocks, which show
output) and from the comments of conf/**/*.yaml (and any string in conf/gateways/*.json) that start
with `python -m rollout` or `rollout `. Each is checked the way its command reads it: Hydra commands
(run, eval-retrieval) are composed against conf/ with Hydra's compose API, a `-m` sweep split into its
jobs first; argparse commands (gateway, report, view) are parsed by their own parser, and `env`'s experiment
composed as it composes it. The cheap ones, report and view, also run, against run folders
made here under the paths the documentation uses (`report judge` asks a scripted judge in place of the endpoint it
names). Runs, sweeps and gateways are not started:
whole runs are tested elsewhere, and the README's quickstart lines are run by CI.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

import rollout.cli
from rollout.export.cli import build_parser as export_parser
from rollout.gateway.launch import build_parser as gateway_parser
from rollout.paths import CONF_DIR, PROJECT_ROOT
from rollout.records import TaskResult
from rollout.report.cli import build_parser as report_parser
from rollout.run.app import token_on_command_line
from rollout.trainers.experiment import TrainingExperiment
from rollout.trainers.openenv.__main__ import build_parser as env_parser
from rollout.view.cli import build_parser as view_parser
from tests.doc_pages import OUTPUT_BLOCKS, doc_pages, split_page, where
from tests.report.browsecomp_runs import known_tasks
from tests.report.browsecomp_runs import write_run as write_browsecomp_run
from tests.report.judge_server import judge_server

PREFIXES = ("python -m rollout", "rollout ")
HYDRA_CONFIGS = {"run": "config", "eval-retrieval": "retrieval_eval", "build-index": "build_index"}
"""The config each Hydra command composes."""
PARSERS = {"gateway": gateway_parser, "report": report_parser, "view": view_parser, "export": export_parser}
BY_MODULE = {c.module: name for name, c in rollout.cli.SUBCOMMANDS.items()}
HYDRA_FLAGS = {"-m", "--multirun"}


@dataclass(frozen=True, slots=True)
class Documented:
    """One documented command line, as `rollout COMMAND ARGS`."""

    where: str
    """file:line it was read from."""
    text: str
    command: str
    args: list[str]

    @property
    def sweep(self) -> bool:
        return any(a in HYDRA_FLAGS for a in self.args)


def parse_command(where: str, text: str) -> Documented:
    """`python -m MODULE ARGS` or `rollout COMMAND ARGS`, as the shell splits it (comments and a trailing `&`, which
    puts it in the background, dropped)."""
    words = shlex.split(text, comments=True)
    words = words[:-1] if words[-1:] == ["&"] else words
    if words[:2] == ["python", "-m"]:
        command = BY_MODULE.get(words[2])
        assert command is not None, f"{where}: python -m {words[2]} has no rollout command: {text}"
        return Documented(where, text, command, words[3:])
    assert words[0] == "rollout" and len(words) > 1 and words[1] in rollout.cli.SUBCOMMANDS, \
        f"{where}: not a rollout command: {text}"
    return Documented(where, text, words[1], words[2:])


def _is_command(text: str) -> bool:
    return text.startswith(PREFIXES)


def page_commands(path: Path) -> Iterator[Documented]:
    """Lines of a page's fenced code blocks (output blocks aside), a trailing backslash joining the next
    line, `&&` splitting commands."""
    for block in split_page(path.read_text(encoding="utf-8"))[1]:
        if block.info in OUTPUT_BLOCKS:
            continue
        pending, start = "", 0
        for lineno, line in block.lines:
            if not pending:
                start = lineno
            text = pending + line.strip()
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending = ""
            for part in text.split("&&"):
                if _is_command(part.strip()):
                    yield parse_command(where(path, start), part.strip())


def conf_commands(conf: Path = CONF_DIR) -> Iterator[Documented]:
    """Comment lines of conf/**/*.yaml that are commands, and strings in conf/gateways/*.json that are."""
    for path in sorted(conf.rglob("*.yaml")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            comment = line.partition("#")[2].strip() if "#" in line else ""
            if _is_command(comment):
                yield parse_command(f"{path.relative_to(PROJECT_ROOT)}:{lineno}", comment)
    for path in sorted((conf / "gateways").glob("*.json")):
        for text in _strings(json.loads(path.read_text(encoding="utf-8"))):
            if _is_command(text.strip()):
                yield parse_command(str(path.relative_to(PROJECT_ROOT)), text.strip())


def conf_overrides(conf: Path = CONF_DIR) -> Iterator[Documented]:
    """Overrides a group option's comments show as "on the command line: 'key=value'", with the option selected."""
    for path in sorted(conf.glob("*/*.yaml")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if m := re.search(r"""#.*on the command line: ('[^']*'|"[^"]*"|[^\s.]+)""", line):
                where = f"{path.relative_to(PROJECT_ROOT)}:{lineno}"
                selection = f"{path.parent.name}={path.stem}"
                yield Documented(where, m.group(1), "run", [selection, *shlex.split(m.group(1))])


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


DOCUMENTED = [*(d for page in doc_pages() for d in page_commands(page)), *conf_commands(), *conf_overrides()]


def test_the_documentation_shows_every_command_and_the_column_mapping():
    # The extraction itself can fail: every command is documented somewhere, and the corpus column
    # mapping of conf/dataset/files.yaml is among the checked lines.
    assert {d.command for d in DOCUMENTED} == set(rollout.cli.SUBCOMMANDS)
    assert any("dataset.corpus.columns={id: doc_key, text: body}" in d.args for d in DOCUMENTED)
    assert any(d.sweep and d.command == "run" for d in DOCUMENTED)
    # Every page is read: the README and each docs/ page that shows a command is among the checked lines.
    pages_with_commands = {d.where.partition(":")[0] for d in DOCUMENTED}
    assert {"README.md", "docs/configuration.md", "docs/gateway.md", "docs/agents.md"} <= pages_with_commands


def hydra_jobs(d: Documented) -> list[list[str]]:
    """The override list of each job the command runs: one, or one per combination of a sweep."""
    overrides = [a for a in d.args if a not in HYDRA_FLAGS]
    assert not [a for a in overrides if a.startswith("-")], f"{d.where}: a flag Hydra would not take: {d.text}"
    if not d.sweep:
        return [overrides]
    parsed = OverridesParser.create().parse_overrides(overrides)
    (jobs,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return jobs


@pytest.mark.parametrize("d", [d for d in DOCUMENTED if d.command in HYDRA_CONFIGS], ids=lambda d: d.where)
def test_hydra_commands_compose(d: Documented):
    # Composed configs are in struct mode: an override of a key that does not exist fails here too.
    assert token_on_command_line(d.args) is None, f"{d.where}: the run would refuse this token"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        for job in hydra_jobs(d):
            compose(HYDRA_CONFIGS[d.command], overrides=job)


@pytest.mark.parametrize("d", [d for d in DOCUMENTED if d.command in PARSERS], ids=lambda d: d.where)
def test_argparse_commands_parse(d: Documented):
    try:
        PARSERS[d.command](f"rollout {d.command}").parse_args(d.args)
    except SystemExit as e:
        pytest.fail(f"{d.where}: `{d.text}` does not parse (exit {e.code})")


@pytest.mark.parametrize("d", [d for d in DOCUMENTED if d.command == "env"], ids=lambda d: d.where)
def test_env_commands_name_an_experiment(d: Documented):
    try:
        args = env_parser("rollout env").parse_intermixed_args(d.args)
    except SystemExit as e:
        pytest.fail(f"{d.where}: `{d.text}` does not parse (exit {e.code})")
    TrainingExperiment.compose(args.overrides)


# --- the cheap ones, run as written against run folders made where the documentation points ---------------


def task(i: int, mode: str) -> TaskResult:
    right = i % 2 == 0 or (mode == "hybrid" and i % 3 == 0)
    return TaskResult(id=f"q-{i:06d}", question=f"question {i}?", golden_answers=[f"a{i}"],
                      prediction=f"a{i}" if right else "wrong", tool_calls=[], turns=1, error=None, worker_id="w0",
                      latency_s=0.1)


@pytest.fixture
def documented_results(tmp_path, monkeypatch) -> Path:
    """results/demo/{dense,sparse,hybrid} in a fresh working directory, each with a trajectory of q-000000..q-000019
    (ids as the demo knowledge base writes them, so `--task q-000001` names one); results/train_tools, a training
    run's ledger; and results/browsecomp_plus/{bcp_bm25,bcp_dense,bcp_both}."""
    monkeypatch.chdir(tmp_path)
    for mode in ("dense", "sparse", "hybrid"):
        run = tmp_path / "results" / "demo" / mode
        (run / "tool_stats").mkdir(parents=True)
        (run / "trajectory.jsonl").write_text("".join(json.dumps(task(i, mode).to_json()) + "\n" for i in range(20)))
        (run / "config.yaml").write_text(f"mode_name: {mode}\n")
        (run / "tool_stats" / "realtime_calls.jsonl").write_text("")
    # A gateway's --output-dir after a training run: a ledger of a trainer's calls with their steps, no trajectory.
    train = tmp_path / "results" / "train_tools" / "tool_stats"
    train.mkdir(parents=True)
    (train / "realtime_calls.jsonl").write_text("".join(
        json.dumps({"call_id": f"c{i}", "tool_name": ("query_knowledge_base_dense", "query_knowledge_base_sparse")[i % 2],
                    "task_id": f"r{i}", "worker_id": None, "ok": True, "outcome": "ok", "error": None,
                    "duration_ms": 5.0, "timestamp": 1000.0 + 30 * i, "result_ids": ["d1", "d2"], "traffic": "train",
                    "step": 1 + i // 2}) + "\n" for i in range(6)))
    for mode in ("bcp_bm25", "bcp_dense", "bcp_both"):  # docs/browsecomp_plus.md's runs, of hand-made tasks
        write_browsecomp_run(tmp_path / "results" / "browsecomp_plus" / mode, known_tasks(), mode=mode)
    return tmp_path


def runs_cheaply(d: Documented) -> bool:
    # --follow and --serve run until Ctrl-C: a served command is checked by test_view_serve_commands_serve
    return d.command in ("report", "view") and "--follow" not in d.args and "--serve" not in d.args


def on_scripted_judge(args: list[str], base_url: str) -> list[str]:
    """A `report judge` command pointed at the scripted judge instead of the endpoint the page names."""
    if "--base-url" not in args:
        return [*args, "--base-url", base_url]
    i = args.index("--base-url") + 1
    return [*args[:i], base_url, *args[i + 1:]]


@pytest.mark.parametrize("d", [d for d in DOCUMENTED if runs_cheaply(d)], ids=lambda d: d.where)
def test_report_and_view_commands_run(d: Documented, documented_results, capsys):
    judging = d.args[:1] == ["judge"]
    with judge_server() if judging else contextlib.nullcontext() as judge:
        args = on_scripted_judge(d.args, judge.base_url) if judging else d.args
        assert rollout.cli.main([d.command, *args]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out


@pytest.mark.parametrize("d", [d for d in DOCUMENTED if d.command == "view" and "--serve" in d.args],
                         ids=lambda d: d.where)
def test_view_serve_commands_serve(d: Documented, documented_results, monkeypatch):
    """Run as written (on a free port, with a token where the page says to set one) until the first page answers."""
    monkeypatch.setenv("ROLLOUT_VIEW_TOKEN", "documented")
    argv = [sys.executable, "-m", "rollout.view", *d.args, "--port", "0"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as server:
        try:
            line = server.stdout.readline()
            assert line.startswith("serving "), f"{d.where}: {line}{server.stderr.read() if not line else ''}"
            url = line.split(" at ")[1].split(" ")[0]
            assert httpx.get(url, follow_redirects=True, timeout=30).status_code == 200, d.where
        finally:
            server.terminate()
