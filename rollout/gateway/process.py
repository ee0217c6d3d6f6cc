"""Start the gateway as a child process on a free loopback port, and always stop it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rollout.errors import GatewayError
from rollout.gateway.auth import TOKEN_ENV, auth_headers, resolve_token

logger = logging.getLogger(__name__)


class GatewayProcess:
    """`python -m rollout.gateway ARGS --port 0` as a context manager; `wait_ready()` gives its MCP URL.

    `auth_token` (default `$ROLLOUT_GATEWAY_TOKEN`) reaches the child through its environment, not
    its command line, and goes with the health checks.
    """

    def __init__(self, args: list[str], *, host: str = "127.0.0.1", ready_timeout_s: float = 900.0,
                 auth_token: str | None = None):
        self.args = list(args)
        self.host = host
        self.ready_timeout_s = ready_timeout_s
        self.auth_token = resolve_token(auth_token)
        self.url: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="rollout-gateway-")
        self._ready_file = Path(self._tmp.name) / "url"
        self._deadline = 0.0

    def __enter__(self) -> GatewayProcess:
        self.launch()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def launch(self) -> None:
        """Start the child and return at once; `wait_ready` blocks until it serves."""
        cmd = [sys.executable, "-m", "rollout.gateway", *self.args, "--host", self.host, "--port", "0",
               "--ready-file", str(self._ready_file)]
        logger.debug("starting gateway: %s", " ".join(cmd))
        # The child inherits stdout/stderr so its index-building progress shows in the run's console.
        env = {**os.environ, TOKEN_ENV: self.auth_token} if self.auth_token else None
        self._proc = subprocess.Popen(cmd, env=env)
        self._deadline = time.monotonic() + self.ready_timeout_s

    def wait_ready(self) -> str:
        """The gateway's MCP URL, once it answers its health check."""
        if self.url is not None:
            return self.url
        ready_file, deadline = self._ready_file, self._deadline
        while not ready_file.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise GatewayError(f"gateway did not bind a port within {self.ready_timeout_s:.0f} s")
            time.sleep(0.05)
        url = ready_file.read_text(encoding="utf-8").strip()
        self._wait_healthy(url, deadline)
        self.url = url
        return url

    def _check_alive(self) -> None:
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            raise GatewayError(f"gateway exited with code {code} before it was ready; its error is printed above")

    def _wait_healthy(self, url: str, deadline: float) -> None:
        health = url.rsplit("/", 1)[0] + "/healthz"
        headers = auth_headers(self.auth_token)
        while True:
            self._check_alive()
            try:
                response = httpx.get(health, headers=headers, timeout=5.0)
            except httpx.HTTPError:
                response = None
            if response is not None and response.status_code == 200:
                return
            if response is not None and response.status_code == 401:
                self.stop()
                raise GatewayError(f"gateway at {url} refused the health check (401): {response.text.strip()}")
            if time.monotonic() > deadline:
                self.stop()
                raise GatewayError(f"gateway at {url} did not answer {health}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Ask the gateway to shut down (it writes its report), then make sure it is gone."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                logger.warning("gateway did not stop within 15 s; killing it")
                proc.kill()
                proc.wait()
        self._tmp.cleanup()
