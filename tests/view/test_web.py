"""The web viewer's routes and pages, through its ASGI app (no browser): what each page shows, its filters and
links, live polling, escaping, and what it refuses."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from rollout.report.rescore import rescore
from rollout.view.pages import open_runs
from rollout.view.web import Viewer, create_app
from tests.agents.chat_server import UNREADABLE_CALL_SAID
from tests.view.made_runs import DENSE, HOSTILE, SPARSE, ask_question_set, task, two_runs, write_run


def client(*folders: Path, token: str | None = None) -> TestClient:
    runs = open_runs(list(folders))
    return TestClient(create_app(Viewer(runs, folders[0].parent), token=token))


def row_ids(page: str) -> list[str]:
    """The task ids of a task table, in the order shown."""
    return re.findall(r'<tr data-row="\d+"[^>]*data-id="([^"]*)"', page)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return two_runs(tmp_path_factory.mktemp("sweep"))


def test_the_run_page_counts_filters_sorts_and_keeps_its_state_in_links(sweep: tuple[Path, Path]) -> None:
    dense, _ = sweep
    c = client(dense)
    page = c.get("/run/0").text
    assert row_ids(page) == ["q1", "q2", "q3", "q4", "q5", "q6"]
    assert "6 of 6 tasks" in page
    assert re.search(r'badge st-ok">ok</span> 5 .*badge st-error">error</span> 1', page, re.DOTALL)
    # EM over the five scored tasks (q1, q2, q4 right), with a CI over questions
    assert re.search(r"<td>EM</td><td class=\"n\"><b>0\.600</b></td>\s*<td class=\"muted\">\[", page)
    assert "<td>query_knowledge_base_dense</td>" in page  # the tool table, from tool_stats/report.json

    assert row_ids(c.get("/run/0?status=error").text) == ["q6"]
    assert row_ids(c.get("/run/0?right=wrong").text) == ["q3", "q5"]  # q6 failed: neither right nor wrong
    assert row_ids(c.get("/run/0?q=CAPITAL%20question%20q4").text) == ["q4"]
    assert row_ids(c.get("/run/0?sort=id&desc=1").text) == ["q6", "q5", "q4", "q3", "q2", "q1"]
    filtered = c.get("/run/0?right=wrong&sort=id&desc=1").text
    # a task's link carries the filter (for previous/next), and the sort links keep the filter
    assert 'href="/run/0/task?id=q5&amp;right=wrong&amp;sort=id&amp;desc=1"' in filtered
    assert 'href="/run/0?right=wrong&amp;sort=id&amp;page=1"' not in filtered
    assert 'data-sort="id" data-heading="id" href="/run/0?right=wrong&amp;sort=id"' in filtered


def test_the_tool_filter_and_pages_of_200(tmp_path: Path) -> None:
    tasks = [task(f"t{i:03d}", f"question {i}", "a", "a" if i % 3 else "b", tool=SPARSE if i % 2 else DENSE)
             for i in range(450)]
    c = client(write_run(tmp_path / "big", tasks))
    first, third = c.get("/run/0").text, c.get("/run/0?page=3").text
    assert len(row_ids(first)) == 200 and row_ids(first)[0] == "t000"
    assert row_ids(third) == [f"t{i:03d}" for i in range(400, 450)]
    assert "450 of 450 tasks · page 3 of 3" in third and 'rel="next"' not in third and 'rel="prev"' in third
    sparse = c.get(f"/run/0?tool={SPARSE}&right=wrong").text
    assert row_ids(sparse) == [f"t{i:03d}" for i in range(450) if i % 2 and not i % 3]


def test_the_stopped_filter_finds_the_tasks_an_agents_limits_ended_and_the_page_shows_the_warnings(
        tmp_path: Path) -> None:
    said = "This model's maximum context length is 1500 tokens. However, you requested 2647 tokens"
    tasks = [task("q1", "question 1", "a", "a"), replace(task("q2", "question 2", "a", ""), out_of_context=True,
                                                         stop_message=said),
             replace(task("q3", "question 3", "a", ""), out_of_turns=True),
             replace(task("q4", "question 4", "a", ""), unreadable_call=True, stop_message=UNREADABLE_CALL_SAID)]
    folder = write_run(tmp_path / "run", tasks)
    rescore(folder)  # the evaluation summary, with its warning
    c = client(folder)
    page = c.get("/run/0").text
    assert "4 scored · 1 out of turns · 1 out of context" in page
    assert "1 of 4 tasks ran out of the model&#39;s context window" in page
    assert "1 of 4 tasks ended on a tool call the model wrote that its server could not read" in page
    unread = c.get("/run/0/task?id=q4").text
    assert ">tool call the server could not read</span>" in unread and "Failed to parse tool call" in unread and said.replace("'", "&#39;") in page
    assert row_ids(c.get("/run/0?stop=out_of_context").text) == ["q2"]
    assert row_ids(c.get("/run/0?stop=out_of_turns").text) == ["q3"]
    assert 'title="' + said.replace("'", "&#39;") in c.get("/run/0/task?id=q2").text
    refused = c.get("/run/0?stop=tired")
    assert refused.status_code == 400 and "use one of: cut, out_of_turns, out_of_context" in refused.text


def test_bad_table_parameters_are_refused_by_name(sweep: tuple[Path, Path]) -> None:
    c = client(sweep[0])
    for url, says in [("/run/0?status=done", "status=&#39;done&#39; is not a task status; use one of: ok, error"),
                      ("/run/0?sort=colour", "sort by one of: order, id"), ("/run/0?page=two", "page=&#39;two&#39;"),
                      ("/run/0/task?id=nope", "has no task &#39;nope&#39;"), ("/run/5", "no run 5")]:
        response = c.get(url)
        assert response.status_code in (400, 404) and says in response.text, (url, response.text[-600:])


def test_a_task_page_shows_the_timeline_cards_gold_and_its_neighbours_within_the_filter(sweep: tuple[Path, Path]) -> None:
    dense, _ = sweep
    c = client(dense)
    page = c.get("/run/0/task?id=q4&right=right").text
    assert "capital question q4?" in page and "<b>Lima</b>" in page
    assert page.count('<details class="card') == 1 and "query_knowledge_base_dense" in page
    assert '<span class="doc gold">p2</span>' in page and '<span class="doc ">p1</span>' in page
    assert re.search(r'class="cell gold" title="rank 2: p2 \(gold\)"', page)  # the relevance chart
    # within right=right the tasks are q1, q2, q4: q4's neighbours are q2 and none
    assert 'data-nav="prev" href="/run/0/task?id=q2&amp;right=right"' in page
    assert re.search(r'data-nav="next" href=""\s+hidden', page)
    assert 'href="/run/0?right=right" data-back' in page
    record = json.loads(html.unescape(re.search(r'<pre id="json-task" hidden>(.*?)</pre>', page, re.DOTALL).group(1)))
    assert record["id"] == "q4" and record["prediction"] == "Lima"
    assert 'id="task-e0"' in page and 'href="#task-e0"' in page


def test_the_compare_page_pairs_questions_into_four_cells(sweep: tuple[Path, Path]) -> None:
    c = client(*sweep)
    page = c.get("/compare?a=0&b=1").text
    cells = dict(re.findall(r'data-cell="(\w+)"[^>]*>[^<]*<b>(\d+)</b>', page))
    assert cells == {"both_right": "2", "only_a": "1", "only_b": "1", "both_wrong": "1"}
    assert "1 only in B" in page and "data:image/png;base64," in page
    only_b = c.get("/compare?a=0&b=1&cell=only_b").text
    assert re.findall(r'<a href="/compare/task\?a=0&amp;b=1&amp;id=(\w+)">', only_b) == ["q3"]
    pair = c.get("/compare/task?a=0&b=1&id=q3").text
    assert "<b>Bergen</b>" in pair and "<b>Oslo</b>" in pair and SPARSE in pair and DENSE in pair


def test_polling_sends_the_tasks_appended_since_the_page_was_made(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "live", [task("a1", "first?", "x", "x")])
    c = client(folder)
    offset = int(re.search(r'data-offset="(\d+)"', c.get("/run/0").text).group(1))
    assert c.get(f"/run/0/poll?offset={offset}").json()["new"] == 0
    write_run(folder, [task("a2", "second?", "x", "y"), task("a3", "third?", "x", "x")])
    polled = c.get(f"/run/0/poll?offset={offset}&right=wrong").json()
    assert (polled["tasks"], polled["new"]) == (3, 1) and row_ids(polled["rows"]) == ["a2"]
    assert c.get(f"/run/0/poll?offset={polled['offset']}").json()["new"] == 0
    (folder / "trajectory.jsonl").write_text("")  # the run started over
    assert c.get(f"/run/0/poll?offset={polled['offset']}").json()["restarted"] is True


def test_model_output_is_escaped_on_every_page(tmp_path: Path) -> None:
    hostile = [task("h1", f"question {HOSTILE}", "gold", f"answer {HOSTILE}", result_text=f"passage {HOSTILE}",
                    thinking=HOSTILE)]
    a = write_run(tmp_path / "a", hostile, mode="dense")
    b = write_run(tmp_path / "b", hostile, mode="hybrid")
    c = client(a, b)
    for url in ["/run/0", "/run/0/task?id=h1", "/compare?a=0&b=1", "/compare?a=0&b=1&cell=both_wrong",
                "/compare/task?a=0&b=1&id=h1", "/run/0?q=%3C%2Fscript%3E"]:
        page = c.get(url).text
        assert "<img src=x" not in page and "<script>window.__pwned" not in page, url
        assert page.count("<script>") == 1, url  # the viewer's own script only
    assert "&lt;/script&gt;&lt;img src=x onerror=" in c.get("/run/0/task?id=h1").text


def test_no_url_reads_outside_the_served_run_folders(sweep: tuple[Path, Path], tmp_path: Path) -> None:
    c = client(sweep[0])
    secret = tmp_path / "secret.txt"
    secret.write_text("do not show")
    for url in ["/run/0/../../../etc/passwd", f"/run/0/task?id={secret}", "/static/../../etc/passwd",
                "/assets/viewer.js", f"/{secret}", "/run/0/task?id=..%2F..%2Fetc%2Fpasswd"]:
        response = c.get(url)
        assert response.status_code in (400, 404) and "do not show" not in response.text and "root:" not in response.text


def test_beyond_loopback_every_request_needs_the_token(sweep: tuple[Path, Path]) -> None:
    c = client(sweep[0], token="s3cret")
    assert c.get("/run/0").status_code == 403
    assert c.get("/run/0?token=wrong").status_code == 403
    assert c.get("/run/0?token=s3cret").status_code == 200
    assert c.get("/run/0").status_code == 200  # the cookie the first request set


def test_the_command_line_refuses_what_the_browser_views_would_ignore(sweep: tuple[Path, Path],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from rollout.view.cli import main

    for argv, says in [([str(sweep[0]), "--serve", "--status", "ok"], "--status filter the terminal table"),
                       ([str(sweep[0]), str(sweep[1])], "2 paths given: the terminal views show one run"),
                       ([str(sweep[0]), "--port", "9000"], "--port only apply with --serve"),
                       ([str(sweep[0]), "--html", "x.html", "--port", "1"], "apply to --serve, not --html")]:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2 and says in capsys.readouterr().err, argv
    assert main([str(sweep[0]), "--serve", "--host", "0.0.0.0"]) == 2
    assert "give a token (--token <secret> or export ROLLOUT_VIEW_TOKEN=<secret>)" in capsys.readouterr().err


def test_the_static_file_holds_every_page_of_the_runs(sweep: tuple[Path, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from rollout.view.cli import main

    out = tmp_path / "share" / "runs.html"
    assert main([str(sweep[0].parent), "--html", str(out)]) == 0
    assert f"wrote {out} (2 runs, 12 tasks" in capsys.readouterr().out
    page = out.read_text()
    routes = re.findall(r'data-route="([^"]*)"', page)
    assert routes[:2] == ["/", "/run/0"] and "/run/1/task/5" in routes and "/compare/0/1/only_b" in routes
    assert "/pair/0/1/q3/0" in routes and len(routes) == 1 + 2 * (1 + 6) + 1 + 4 + 5
    assert 'data-mode="static"' in page and "http://" not in page.replace("http://www.w3.org", "")


def test_a_cards_gold_count_is_the_passages_the_documents_table_marks_gold(tmp_path: Path) -> None:
    """Three passages of one gold document: the table marks three, so the card says 3 gold and marks them."""
    t = task("q1", "who?", "Ada", "Ada", result_ids=("p1", "p2", "p3", "p4"), gold_ids=("d1",))
    [call] = t.tool_calls
    chunked = replace(call, result_doc_ids=["d1", "d1", "d2", "d1"])
    page = client(write_run(tmp_path / "run", [replace(t, tool_calls=[chunked])])).get("/run/0/task?id=q1").text
    assert page.count('<td>✓</td>') == 3  # the documents table
    assert '<span class="gold">3 gold</span>' in page
    for p in ("p1", "p2", "p4"):
        assert f'<span class="doc gold">{p}</span>' in page
    assert '<span class="doc ">p3</span>' in page


def test_the_front_page_of_a_sweep_shows_each_runs_scores(sweep: tuple[Path, Path]) -> None:
    page = client(*sweep).get("/").text
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr><td><a href="/run/\d+">(\w+)</a>.*?</tr>', page)}
    assert set(rows) == {"dense", "hybrid"}
    cells = {label: re.findall(r'<td class="n">([^<]*)</td>', row) for label, row in rows.items()}
    # tasks, scored, EM, F1, retrieval recall: dense's failed task is not scored
    assert cells["dense"] == ["6", "5", "0.600", "0.600", "1.000"]
    assert cells["hybrid"] == ["6", "6", "0.667", "0.667", "1.000"]
    assert "<th>EM</th>" in page.replace(' class="n"', "")


def test_the_front_and_compare_pages_say_which_question_set_each_run_asked(tmp_path: Path) -> None:
    dense, hybrid = two_runs(tmp_path / "one")
    for run in (dense, hybrid):
        ask_question_set(run, "qa", "a" * 64)
    c = client(dense, hybrid)
    for url in ("/", "/compare?a=0&b=1"):
        page = c.get(url).text
        assert "question set: qa (6 questions, hash aaaaaaaa)" in page  # one set: said once
        assert "<th>question set</th>" not in page

    dense, hybrid = two_runs(tmp_path / "two")
    ask_question_set(dense, "qa", "a" * 64)
    ask_question_set(hybrid, "dev", "b" * 64)
    c = client(dense, hybrid)
    for url in ("/", "/compare?a=0&b=1"):
        page = c.get(url).text
        assert "question set: " not in page
        assert "<th>question set</th>" in page
        assert re.findall(r'<td class="question-set">([^<]*)</td>', page) == ["qa (aaaaaaaa)", "dev (bbbbbbbb)"]
    assert "These runs asked different question sets" in c.get("/compare?a=0&b=1").text
