"""The viewer marks a task's repeated calls and turns: `rollout view RUN --task ID` and the web task page mark each one
where it happens, and the run page counts them."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console
from starlette.testclient import TestClient

from rollout.report.rescore import rescore
from rollout.view import cli as view
from rollout.view.pages import open_runs
from rollout.view.web import Viewer, create_app
from tests.report.loops import SEARCH, clean, loops, write_run


def replay(folder: Path, task_id: str) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    assert view.main([str(folder), "--task", task_id], console=console) == 0
    return console.file.getvalue()


def lines_with(text: str, *words: str) -> list[str]:
    return [line for line in text.splitlines() if all(w in line for w in words)]


def test_the_terminal_replay_marks_each_repeated_call_and_turn(tmp_path):
    folder = write_run(tmp_path / "run", loops())
    out = replay(folder, "search_r1")
    assert "2 repeated calls, 2 repeated turns" in out
    calls = lines_with(out, " call ", SEARCH)
    assert len(calls) == 3 and "repeats" not in calls[0]
    assert ["(repeats call 1)" in line for line in calls] == [False, True, True]
    turns = [line for line in out.splitlines() if re.search(r" llm +turn \d", line)]
    assert len(turns) == 3
    assert ["same as turn" in line for line in turns] == [False, True, True]
    assert "(same as turn 1)" in turns[1] and "(same as turn 2)" in turns[2]
    native = replay(folder, "native")
    assert ["(repeats call 1)" in line for line in lines_with(native, " call ")] == [False, True, False, False]
    assert "same as turn" not in native
    plain = replay(folder, "clean")
    assert "repeat" not in plain and "same as turn" not in plain


def test_a_record_without_events_marks_its_repeated_calls_too(tmp_path):
    task = loops()[0]
    task.events = []  # as an older run recorded it
    out = replay(write_run(tmp_path / "run", [task]), "search_r1")
    assert ["(repeats call 1)" in line for line in lines_with(out, " call ", SEARCH)] == [False, True, True]


def test_the_web_task_page_marks_them_and_the_run_page_counts_them(tmp_path):
    folder = write_run(tmp_path / "run", [*loops(), clean("other")])
    rescore(folder)  # the evaluation summary the run page reads its count from
    c = TestClient(create_app(Viewer(open_runs([folder]), tmp_path)))
    page = c.get("/run/0/task?id=search_r1").text
    assert page.count('badge warn repeated">repeats call 1<') == 2
    assert re.findall(r'badge warn repeated">(same as turn \d)<', page) == ["same as turn 1", "same as turn 2"]
    assert "2 repeated calls, 2 repeated turns" in page
    clean_page = c.get("/run/0/task?id=clean").text
    assert "badge warn repeated" not in clean_page and "repeated calls" not in clean_page
    run_page = c.get("/run/0").text
    assert "3 repeated tool calls (33%) · 3 repeated turns · 3 tasks loop" in run_page
