"""Small run folders for the judge's tests: answers whose exact match and scripted verdict are known by hand."""

from __future__ import annotations

import json
from pathlib import Path

from rollout.records import TaskResult

ANSWERS = [
    # id, gold answers, prediction, status: EM right / scripted judge right
    ("q1", ["Ann Lee"], "Ann Lee", "ok"),                       # EM right, judge right
    ("q2", ["Ann Lee", "A. Lee"], "It was Ann Lee, in 1950.", "ok"),  # EM wrong, judge right
    ("q3", ["Kelmor"], "Dravia", "ok"),                         # both wrong
    ("q4", ["1961"], "I don't know", "ok"),                    # both wrong (not attempted)
    ("q5", ["Velt"], "", "error"),                              # failed: left out unless score_failed
]


def task(task_id: str, gold: list[str], prediction: str, status: str = "ok", repeat: int = 0) -> TaskResult:
    return TaskResult(id=task_id, question=f"Question {task_id}?", golden_answers=gold, prediction=prediction,
                      tool_calls=[], turns=1, error=None if status == "ok" else "boom", worker_id="w0",
                      latency_s=0.1, status=status, repeat=repeat, usage={"prompt_tokens": 100,
                      "completion_tokens": 10, "total_tokens": 110})


def make_run(root: Path, name: str = "run", answers=ANSWERS, *, config: str = "") -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "trajectory.jsonl").write_text("".join(json.dumps(task(*a).to_json()) + "\n" for a in answers))
    (run / "config.yaml").write_text(f"mode_name: hybrid\n{config}", encoding="utf-8")
    return run


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
