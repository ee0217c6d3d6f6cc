"""`rollout report judge`: verdicts from a scripted judge, kept per judge identity, never asked twice, never rerunning
the agent; unreadable replies flagged, the judge's usage counted apart, bad settings one line naming the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from rollout.cli import main
from rollout.report.cli import build_parser
from rollout.report.judge.command import judge_run, print_judging, settings_for
from rollout.report.judge.store import read_verdicts, scores_path, verdicts_path
from rollout.run_folder import TRAJECTORY_FILE
from tests.report.judge_runs import make_run, read_lines, task
from tests.report.judge_server import JudgeServer, error, judge_server, said

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    with judge_server() as s:
        yield s


def judge_args(options: list[str]):
    return build_parser().parse_args(["judge", "RUN", *options])


def settings(server: JudgeServer, run: Path, *options: str):
    return settings_for(run, judge_args(["--model", "judge-m", "--base-url", server.base_url, *options]))


def scores(run: Path) -> dict[str, dict]:
    return {row["id"]: row["metrics"] for row in read_lines(scores_path(run))}


def test_simpleqa_verdicts_become_scores_and_verdict_files(server, tmp_path):
    run = make_run(tmp_path)
    trajectory = (run / TRAJECTORY_FILE).read_text()
    judging = judge_run(run, settings(server, run))
    assert scores(run) == {  # q5 failed and the run does not score failed tasks
        "q1": {"judge_correct": 1.0, "not_attempted": 0.0}, "q2": {"judge_correct": 1.0, "not_attempted": 0.0},
        "q3": {"judge_correct": 0.0, "not_attempted": 0.0}, "q4": {"judge_correct": 0.0, "not_attempted": 1.0}}
    assert judging.means == {"judge_correct": 0.5, "not_attempted": 0.25}
    meta = json.loads((run / "scores" / "judge.meta.json").read_text())
    assert meta == {"source": "judge", "judge_key": judging.settings.key, "preset": "simpleqa", "model": "judge-m"}
    verdicts = read_verdicts(verdicts_path(run, judging.settings.key))
    assert verdicts["q1", 0].reply == "A" and verdicts["q4", 0].label == "NOT_ATTEMPTED"
    description = json.loads((run / "judgements" / f"{judging.settings.key}.json").read_text())
    assert description["model"] == "judge-m" and description["preset"] == "simpleqa"
    assert len(description["template_sha256"]) == 64 and description["sampling"]["temperature"] == 0.0
    assert (run / TRAJECTORY_FILE).read_text() == trajectory  # the agent's record is never touched


def test_browsecomp_verdicts_carry_the_confidence(server, tmp_path):
    run = make_run(tmp_path)
    judge_run(run, settings(server, run, "--preset", "browsecomp"))
    assert scores(run)["q2"] == {"judge_correct": 1.0, "confidence": 0.9}
    assert scores(run)["q3"] == {"judge_correct": 0.0, "confidence": 0.9}


def test_browsecomp_reads_the_whole_final_response_simpleqa_the_short_answer(server, tmp_path):
    # The agent answered in BrowseComp's format; EM (and SimpleQA's grader) read the exact answer line, BrowseComp's
    # grader the whole response, whose stated confidence is what it extracts.
    response = "Explanation: the registry names her.\nExact Answer: Ann Lee\nConfidence: 80%"
    record = task("q1", ["Ann Lee"], "Ann Lee")
    record.messages = [{"role": "user", "content": "Question q1?"}, {"role": "assistant", "content": response}]
    run = tmp_path / "run"
    run.mkdir()
    (run / TRAJECTORY_FILE).write_text(json.dumps(record.to_json()) + "\n")
    (run / "config.yaml").write_text("mode_name: hybrid\n")
    for preset, judged in (("browsecomp", response), ("simpleqa", "Ann Lee")):
        server.requests.clear()
        judge_run(run, settings(server, run, "--preset", preset))
        [request] = server.requests
        prompt = request["messages"][-1]["content"]
        assert judged in prompt and (preset == "browsecomp") == ("Confidence: 80%" in prompt)


def test_a_second_judging_by_the_same_judge_asks_nothing(server, tmp_path):
    run = make_run(tmp_path)
    judge_run(run, settings(server, run))
    before = server.count
    judging = judge_run(run, settings(server, run))
    assert server.count == before and judging.asked == 0
    assert judging.means["judge_correct"] == 0.5


def test_a_changed_prediction_is_judged_again(server, tmp_path):
    run = make_run(tmp_path)
    judge_run(run, settings(server, run))
    (run / TRAJECTORY_FILE).write_text((run / TRAJECTORY_FILE).read_text().replace('"Dravia"', '"Kelmor"'))
    before = server.count
    judging = judge_run(run, settings(server, run))
    assert server.count == before + 1 and scores(run)["q3"]["judge_correct"] == 1.0 and judging.asked == 1


def browsecomp_run(root: Path) -> Path:
    """A run of one task whose final response (what BrowseComp's grader reads) is not its short prediction."""
    record = task("q1", ["Ann Lee"], "Ann Lee")
    record.messages = [{"role": "user", "content": "Question q1?"},
                       {"role": "assistant", "content": "Explanation: the registry names her.\nExact Answer: Ann Lee\n"
                                                        "Confidence: 80%"}]
    run = root / "run"
    run.mkdir()
    (run / TRAJECTORY_FILE).write_text(json.dumps(record.to_json()) + "\n")
    (run / "config.yaml").write_text("mode_name: hybrid\n")
    return run


def test_a_second_browsecomp_judging_asks_nothing_though_the_judged_response_is_not_the_prediction(server, tmp_path):
    # The cache is keyed on the text judged (the whole response), not on the prediction: 1 request in all, not 2.
    run = browsecomp_run(tmp_path)
    before = server.count
    first = judge_run(run, settings(server, run, "--preset", "browsecomp"))
    second = judge_run(run, settings(server, run, "--preset", "browsecomp"))
    assert server.count - before == 1
    assert (first.asked, second.asked) == (1, 0) and second.means["judge_correct"] == 1.0


def test_judges_at_two_temperatures_keep_their_own_verdicts(server, tmp_path):
    # The sampling is part of the judge's identity: a verdict at one temperature is not reused at another.
    run = make_run(tmp_path)
    cold = judge_run(run, settings(server, run, "--temperature", "0"))
    before = server.count
    warm = judge_run(run, settings(server, run, "--temperature", "0.7"))
    assert cold.settings.key != warm.settings.key
    assert server.count - before == 4 and warm.asked == 4
    assert all(len(read_verdicts(verdicts_path(run, j.settings.key))) == 4 for j in (cold, warm))
    again = judge_run(run, settings(server, run, "--temperature", "0"))
    assert again.settings.key == cold.settings.key and again.asked == 0


def test_another_judge_is_kept_beside_the_first_and_the_latest_writes_the_scores(server, tmp_path):
    run = make_run(tmp_path)
    first = judge_run(run, settings(server, run)).settings.key
    second = judge_run(run, settings(server, run, "--preset", "browsecomp")).settings.key
    third = judge_run(run, settings(server, run, "--model", "other-judge")).settings.key
    assert len({first, second, third}) == 3
    assert sorted(p.name for p in (run / "judgements").glob("*.jsonl")) == sorted(f"{k}.jsonl" for k in
                                                                                 (first, second, third))
    assert all(len(read_verdicts(verdicts_path(run, k))) == 4 for k in (first, second, third))
    assert json.loads((run / "scores" / "judge.meta.json").read_text())["judge_key"] == third


def test_an_unparseable_reply_is_flagged_with_none_metrics_and_its_reply_kept(server, tmp_path):
    run = make_run(tmp_path, answers=[("q1", ["Ann"], "Ann", "ok")])
    server.push(said("I would rather not say."))
    judging = judge_run(run, settings(server, run))
    assert scores(run) == {"q1": {"judge_correct": None, "not_attempted": None}}
    assert judging.unparsed == 1 and judging.means["judge_correct"] is None
    assert judging.agreement.no_verdict == 1 and judging.agreement.judged == 0  # not counted as the judge's "wrong"
    record = read_verdicts(verdicts_path(run, judging.settings.key))["q1", 0]
    assert record.unparsed and record.reply == "I would rather not say."


def test_an_echoed_grade_list_is_unparsed_in_the_summary_also_when_kept_from_an_older_parser(server, tmp_path,
                                                                                          capsys):
    run = make_run(tmp_path, answers=[("q1", ["Ann"], "Bob", "ok")])
    server.push(said("A: CORRECT | B: INCORRECT"))
    judging = judge_run(run, settings(server, run))
    assert judging.unparsed == 1 and scores(run)["q1"]["judge_correct"] is None
    path = verdicts_path(run, judging.settings.key)  # as a parser that took the first grade kept it
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "label": "CORRECT", "metrics": {"judge_correct": 1.0,
                                                                          "not_attempted": 0.0}}) + "\n")
    again = judge_run(run, settings(server, run))
    assert again.asked == 0 and again.unparsed == 1 and scores(run)["q1"]["judge_correct"] is None
    print_judging(Console(width=200), again)
    assert "no verdict: 1 replies could not be parsed" in capsys.readouterr().out


def test_a_server_error_is_retried(server, tmp_path):
    run = make_run(tmp_path, answers=[("q1", ["Ann"], "Ann", "ok")])
    server.push(error(500))
    judging = judge_run(run, settings(server, run))
    assert scores(run)["q1"]["judge_correct"] == 1.0
    assert judging.usage.requests == 2 and judging.request_errors == 0


def test_a_request_that_keeps_failing_is_asked_again_next_time(server, tmp_path):
    run = make_run(tmp_path, answers=[("q1", ["Ann"], "Ann", "ok"), ("q2", ["Bo"], "Bo", "ok")])
    server.push(said("A"), error(500), error(500))  # q1 answers; q2 fails with no retry left
    judging = judge_run(run, settings(server, run, "--max-retries", "1"))
    assert judging.request_errors == 1 and scores(run)["q2"]["judge_correct"] is None
    judging = judge_run(run, settings(server, run, "--max-retries", "1"))
    assert judging.asked == 1 and judging.request_errors == 0 and scores(run)["q2"]["judge_correct"] == 1.0


def test_failed_tasks_the_run_scores_are_wrong_without_asking(server, tmp_path):
    run = make_run(tmp_path, config="score_failed: true\n")
    judging = judge_run(run, settings(server, run))
    assert scores(run)["q5"] == {"judge_correct": 0.0, "not_attempted": None}
    assert judging.asked == 4 and judging.failed_tasks == 1 and judging.means["judge_correct"] == 0.4


def test_the_judges_usage_is_counted_apart_from_the_agents(server, tmp_path):
    run = make_run(tmp_path)
    judging = judge_run(run, settings(server, run, "--price-prompt", "1", "--price-completion", "2"))
    usage = json.loads((run / "judgements" / f"{judging.settings.key}.json").read_text())["usage"]
    # the scripted server bills 20 prompt and 5 completion tokens per reply
    assert usage["verdicts"] == 4 and usage["prompt_tokens"] == 80 and usage["completion_tokens"] == 20
    assert usage["cost_usd"] == pytest.approx((80 * 1 + 20 * 2) / 1e6)
    agent = [json.loads(line)["usage"] for line in (run / TRAJECTORY_FILE).read_text().splitlines()]
    assert all(u == {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110} for u in agent)


def test_the_disagreement_table_crosses_exact_match_with_the_judge(server, tmp_path):
    run = make_run(tmp_path)
    table = judge_run(run, settings(server, run)).agreement
    assert (table.both_right, table.both_wrong, table.judged, table.rate) == (1, 2, 4, 0.75)
    assert table.em_only == []
    (only,) = table.judge_only
    assert (only.id, only.prediction, only.golden_answers, only.label) == (
        "q2", "It was Ann Lee, in 1950.", ["Ann Lee", "A. Lee"], "CORRECT")


def test_the_command_prints_metrics_usage_and_the_disagreements(server, tmp_path, capsys):
    run = make_run(tmp_path)
    assert main(["report", "judge", str(run), "--model", "judge-m", "--base-url", server.base_url]) == 0
    out = capsys.readouterr().out
    assert "judge_correct 50.0%" in out and "not_attempted 25.0%" in out
    assert "judge usage (apart from the agent's): 4 verdicts" in out
    assert "judge right, EM wrong: 1" in out and "q2 · said 'It was Ann Lee, in 1950.'" in out


def test_the_run_config_names_the_judge_when_no_option_does(server, tmp_path):
    run = make_run(tmp_path, config=f"judge:\n  model: cfg-judge\n  base_url: {server.base_url}\n  preset: browsecomp\n")
    judging = judge_run(run, settings_for(run, judge_args([])))
    assert judging.settings.llm.model == "cfg-judge" and judging.settings.preset.name == "browsecomp"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rollout.report", *map(str, args)], check=False, capture_output=True,
                          text=True, cwd=PROJECT, env={**os.environ, "COLUMNS": "200"}, timeout=120)


@pytest.mark.parametrize("options, fix", [
    ([], "--model NAME"),
    (["--model", "m", "--base-url", "localhost:8000"], "--base-url URL"),
    (["--model", "m", "--concurrency", "0"], "--concurrency N"),
    (["--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--max-retries", "0"], "Start the judge's server"),
])
def test_bad_settings_are_one_line_naming_the_fix(tmp_path, options, fix):
    run = make_run(tmp_path)
    result = cli("judge", run, *options)
    assert result.returncode == 2, result.stdout
    assert fix in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


DEAD = "http://127.0.0.1:9/v1"
"""The discard port, where no judge listens: the connection is refused at once."""


def test_a_dead_judge_is_told_the_option_of_the_command_and_leaves_no_verdicts_file(tmp_path, capsys):
    run = make_run(tmp_path)
    assert main(["report", "judge", str(run), "--model", "m", "--base-url", DEAD, "--max-retries", "0"]) == 2
    err = capsys.readouterr().err
    assert "could not connect" in err and "set --base-url URL" in err and "Start the judge's server" in err
    assert "llm.base_url" not in err and "judge.base_url" not in err
    assert not (run / "judgements").exists()  # nothing was judged: no empty file says otherwise


def test_a_dead_judge_at_the_end_of_a_run_is_told_the_runs_setting_and_leaves_no_verdicts_file(tmp_path, caplog):
    from rollout.report.judge.command import judge_finished_run
    from rollout.run.config import compose_run_config

    run = make_run(tmp_path)
    judge = compose_run_config("judge.model=m", f"judge.base_url={DEAD}", "judge.max_retries=0").judge_settings()
    assert judge is not None and judge_finished_run(run, judge, Console(width=200)) is None
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Judging") and " failed: " in
              r.getMessage()]
    assert "set judge.base_url=URL" in line and "rollout report judge" in line
    assert "llm.base_url" not in line and "--base-url" not in line
    assert not (run / "judgements").exists()


async def test_a_dead_judge_of_a_training_reward_is_told_the_rewards_setting():
    from rollout.report.judge.grader import JudgeError
    from rollout.trainers.reward import compute_judge_score

    with pytest.raises(JudgeError) as raised:
        await compute_judge_score("demo", "<answer>Ann Lee</answer>", {"target": ["Ann Lee"]}, {"question": "Who?"},
                                  judge={"model": "m", "base_url": DEAD, "max_retries": 0})
    message = str(raised.value)
    assert "set reward_kwargs.judge.base_url=URL" in message and "reward_kwargs.judge.model=NAME" in message
    assert "llm.base_url" not in message and "--base-url" not in message


@pytest.mark.parametrize("refusal", ["llama_cpp", "vllm_new", "vllm"])
def test_a_judge_prompt_too_long_for_its_server_is_named_so_not_a_dead_server(server, tmp_path, refusal):
    from rollout.report.judge.grader import JudgeError
    from tests.agents.chat_server import overflow

    run = make_run(tmp_path)
    server.push(overflow(refusal))  # the server answers, refusing the prompt as longer than its context
    with pytest.raises(JudgeError) as raised:
        judge_run(run, settings(server, run))
    message = str(raised.value)
    assert "the judge prompt is too long for the context of the judge model judge-m" in message
    assert "--model NAME" in message and "-c N" in message and "--max-model-len N" in message
    assert "Start the judge's server" not in message and "llm." not in message
    # vLLM's old body says the reply's budget took part of the window: the judge's own --max-tokens is named too.
    assert ("--max-tokens" in message) == (refusal == "vllm")
    assert not (run / "judgements").exists()


def test_a_judging_that_fails_leaves_no_empty_verdicts_file(tmp_path):
    from rollout.report.judge.grader import JudgeError

    run = make_run(tmp_path)
    with pytest.raises(JudgeError):
        judge_run(run, settings_for(run, judge_args(["--model", "m", "--base-url", DEAD, "--max-retries", "0"])))
    assert not (run / "judgements").exists() and not scores_path(run).exists()


def test_a_judging_whose_later_requests_fail_keeps_the_verdicts_it_got(server, tmp_path):
    # The answer after the first fails for good (asked again next time): the first verdict is real and stays.
    run = make_run(tmp_path, answers=[("q1", ["Ann"], "Ann", "ok"), ("q2", ["Bo"], "Bo", "ok")])
    server.push(said("A"), error(400, "bad request"))
    judging = judge_run(run, settings(server, run))
    verdicts = read_verdicts(verdicts_path(run, judging.settings.key))
    assert verdicts["q1", 0].label == "CORRECT" and verdicts["q2", 0].error is not None


def test_a_verdict_line_of_another_shape_is_skipped_with_a_warning(tmp_path, caplog):
    path = tmp_path / "verdicts.jsonl"
    good = {"id": "q1", "repeat": 0, "label": "A", "metrics": {"judge_correct": 1.0}, "reply": "A",
            "prediction_sha256": "0" * 64}
    lines = [{"id": "q0", "repeat": 0}, {**good, "id": "q2", "metrics": "correct"}, good]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with caplog.at_level("WARNING", logger="rollout.report.judge.store"):
        verdicts = read_verdicts(path)
    assert [key[0] for key in verdicts] == ["q1"] and verdicts[("q1", 0)].metrics == {"judge_correct": 1.0}
    assert sum("a verdict line of another shape skipped" in r.message for r in caplog.records) == 2
