"""`POST /runs`: a run tells the gateway where its calls go.

    POST /runs
    Content-Type: application/json

    {"run_id": "4f1c...", "output_dir": "/abs/path/results/demo/sparse"}

From then on every tools/call whose `_meta` carries that run id (`rollout.wire.META_RUN_ID`, which every call of a
run's environments does; the proxy's `X-Run-Id` header) is recorded in `output_dir/tool_stats/realtime_calls.jsonl`,
and `degraded_tools.json` is kept there too (`rollout.gateway.stats.RunLedgers`); calls of no registered run go to
the gateway's own `--output-dir` (nowhere without one). This is how the jobs of a sweep share one gateway and
still each count their own calls (`rollout.run.sweep_gateway`); a run's driver registers before its tasks start
(`GatewayProcess.register_run`). Registering a run id again moves its later calls to the new folder.

The route gets the proxy's Host/Origin checks and the gateway's bearer token, as every route does: it makes the
gateway write files, so only a client that may call its tools may ask.

| status | when |
|---|---|
| 200 | `{"run_id": ..., "ledger": "<the ledger file>"}` |
| 400 | the body is not a JSON object of a non-empty `run_id` and an absolute `output_dir`; the folder is unwritable |
| 403 / 421 | the Origin / Host header is not one this gateway serves |
| 413 | the body is over `MAX_BODY_BYTES` |
| 415 | the Content-Type is not JSON |
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse

from rollout.gateway.retrieve_api import json_request_problem
from rollout.gateway.stats import RunLedgers

RUNS_ROUTE = "/runs"
MAX_BODY_BYTES = 64 * 1024
"""A run id and a path."""
_EXAMPLE = 'send {"run_id": "<the id its calls carry>", "output_dir": "<the run folder, an absolute path>"}'


class RunsApi:
    """The `/runs` route of one gateway, registering runs with its `RunLedgers`."""

    def __init__(self, ledgers: RunLedgers):
        self.ledgers = ledgers
        self._security = TransportSecurityMiddleware(None)

    def protect(self, security: TransportSecuritySettings | None) -> None:
        """Check Host/Origin as the app's MCP transport does."""
        self._security = TransportSecurityMiddleware(security)

    async def handle(self, request: Request) -> JSONResponse:
        if (problem := await json_request_problem(self._security, request)) is not None:
            return _error(*problem)
        raw = bytearray()
        async for chunk in request.stream():
            raw.extend(chunk)
            if len(raw) > MAX_BODY_BYTES:
                return _error(413, f"the body is over {MAX_BODY_BYTES} bytes: {_EXAMPLE}")
        registration = _registration(bytes(raw))
        if isinstance(registration, str):
            return _error(400, registration)
        run_id, output_dir = registration
        try:
            collector = self.ledgers.register(run_id, output_dir)
        except OSError as e:
            return _error(400, f"cannot write the ledger in {output_dir}: {e}")
        return JSONResponse({"run_id": run_id, "ledger": str(collector.path)})


def _registration(raw: bytes) -> tuple[str, Path] | str:
    """(run id, run folder) of a body, or what is wrong with it."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return f"the body is not JSON ({e}): {_EXAMPLE}"
    if not isinstance(body, dict) or set(body) != {"run_id", "output_dir"}:
        return f"the body must be a JSON object with run_id and output_dir alone: {_EXAMPLE}"
    run_id, output_dir = body["run_id"], body["output_dir"]
    if not isinstance(run_id, str) or not run_id.strip():
        return f"run_id must be a non-empty string: {_EXAMPLE}"
    if not isinstance(output_dir, str) or not Path(output_dir).is_absolute():
        return f"output_dir must be an absolute path (the gateway's working directory is not the run's): {_EXAMPLE}"
    return run_id, Path(output_dir)


def _error(status: int, error: str) -> JSONResponse:
    return JSONResponse({"error": error}, status_code=status)
