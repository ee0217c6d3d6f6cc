"""A scripted OpenAI-compatible judge on 127.0.0.1: grades by reading the grader prompt it is sent.

It is a real HTTP server (starlette + uvicorn on a free loopback port), so the judge under test goes through the
`openai` SDK, httpx and a socket as it would against vLLM or OpenAI. Each request takes the next scripted
`Reply` (tests/agents/chat_server.py) when there is one; otherwise it reads the question's response and gold target
from the prompt (SimpleQA's `Gold target:` / `Predicted answer:` lines, or BrowseComp's `[response]:` and
`[correct_answer]:` fields), and grades CORRECT when the normalised response contains a normalised gold answer (the
target split at " | "), NOT_ATTEMPTED when the response is empty or "I don't know", INCORRECT otherwise, in the
format the prompt asks for. `delay_s` waits before every unscripted reply; `requests` counts what was asked.

`python -m tests.report.judge_server --delay-s 0.05` serves it in its own process (for bench/judge.py) and prints
its base URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from rollout.listen import bind_socket
from rollout.report.metrics import normalize_answer
from tests.agents.chat_server import Reply, answer, completion, error
from tests.gateway.loopback import serving

__all__ = ["JudgeServer", "Reply", "answer", "error", "grade", "judge_server", "said"]

_SIMPLEQA = re.compile(r"Gold target: (.*)\nPredicted answer: (.*)\n```\n\nGrade")
_BROWSECOMP = re.compile(r"\[response\]: (.*?)\n\n.*?\[correct_answer\]: (.*?)\n\n", re.DOTALL)
_LETTERS = {"CORRECT": "A", "INCORRECT": "B", "NOT_ATTEMPTED": "C"}


def grade(response: str, target: str) -> str:
    """CORRECT, INCORRECT or NOT_ATTEMPTED by the rule of the module docstring."""
    said = f" {normalize_answer(response)} "
    if not said.strip() or said.strip() in {"i dont know", "none"}:
        return "NOT_ATTEMPTED"
    golds = [g for g in map(normalize_answer, target.split(" | ")) if g]
    return "CORRECT" if any(f" {g} " in said for g in golds) else "INCORRECT"


def graded_reply(prompt: str) -> str:
    """The reply a judge following the prompt's format would write."""
    if m := _SIMPLEQA.search(prompt):
        target, response = m.group(1), m.group(2)
        return _LETTERS[grade(response, target)]
    if m := _BROWSECOMP.search(prompt):
        response, target = m.group(1), m.group(2)
        correct = "yes" if grade(response, target) == "CORRECT" else "no"
        return (f"extracted_final_answer: {response or 'None'}\n\nreasoning: compared with {target}.\n\n"
                f"correct: {correct}\n\nconfidence: 90%")
    return "I cannot tell which grader this is."


class JudgeServer:
    """The scripted judge's state: the script, the delay, and the requests received. Thread-safe."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""
        """`http://127.0.0.1:PORT/v1` once serving."""

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            scripted = self._script.popleft() if self._script else None
        if scripted is None:
            prompt = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
            scripted = answer(graded_reply(prompt), delay_s=self.delay_s)
        if scripted.delay_s:
            await asyncio.sleep(scripted.delay_s)
        if isinstance(scripted.body, str):
            return PlainTextResponse(scripted.body, scripted.status, headers=scripted.headers)
        return JSONResponse(scripted.body, scripted.status, headers=scripted.headers)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])


def said(text: str) -> Reply:
    """A scripted reply of the judge's own text (e.g. one no parser can read)."""
    return Reply(body=completion({"role": "assistant", "content": text}, "stop"))


@contextlib.contextmanager
def judge_server(delay_s: float = 0.0) -> Iterator[JudgeServer]:
    """Serve a `JudgeServer` on a free loopback port; its `base_url` ends in `/v1`."""
    state = JudgeServer(delay_s)
    uv = uvicorn.Server(uvicorn.Config(state.app(), log_level="warning", timeout_graceful_shutdown=1,
                                       backlog=4096))
    with serving(uv, bind_socket("127.0.0.1", 0)) as base:
        state.base_url = f"{base}/v1"
        yield state


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the scripted judge until stopped; print its base URL.")
    parser.add_argument("--delay-s", type=float, default=0.0, help="wait before each reply")
    args = parser.parse_args()
    with judge_server(args.delay_s) as server:
        print(server.base_url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
