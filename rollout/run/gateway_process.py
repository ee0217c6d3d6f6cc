"""Start the gateway as a child process on a free port, watch its health, restart it on that port, always stop it."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from rollout.errors import GatewayError
from rollout.gateway.orphan import PARENT_PID_ENV, parent_death_hook
from rollout.wire import TOKEN_ENV, auth_headers, resolve_token

logger = logging.getLogger(__name__)

REBIND_TIMEOUT_S = 10.0
"""How long `restart` waits for the old port to become free (another process may hold it briefly)."""
HEALTH_INTERVAL_S = 10.0
"""How often a serving gateway's /healthz is asked..."""
HEALTH_TIMEOUT_S = 5.0
"""...how long an answer may take..."""
HEALTH_FAILURES = 3
"""...and how many unanswered checks in a row make a running gateway count as dead (`is_alive` False)."""


class _ExitedEarly(GatewayError):
    """The child exited before it served (a port it could not bind, a bad argument, ...)."""


class GatewayProcess:
    """`python -m rollout.gateway ARGS --port 0` as a context manager; `wait_ready()` gives its MCP URL.

    `restart()` relaunches a dead gateway on the same host and port, so clients holding the URL
    reconnect to it; the runs registered with `register_run` are registered with the new child as it starts,
    before it serves a call. `auth_token` (default `$ROLLOUT_GATEWAY_TOKEN`) reaches the child through its
    environment, not its command line, and goes with the health checks.
    """

    def __init__(self, args: list[str], *, host: str = "127.0.0.1", ready_timeout_s: float = 900.0,
                 auth_token: str | None = None, rebind_timeout_s: float = REBIND_TIMEOUT_S,
                 health_interval_s: float = HEALTH_INTERVAL_S, health_timeout_s: float = HEALTH_TIMEOUT_S):
        self.args = list(args)
        self.host = host
        self.ready_timeout_s = ready_timeout_s
        self.rebind_timeout_s = rebind_timeout_s
        self.auth_token = resolve_token(auth_token)
        self.url: str | None = None
        self.restarts = 0
        """Times `restart()` brought the gateway back."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._port = 0
        """Port of the last gateway that served; `restart()` binds it again."""
        self._tmp = tempfile.TemporaryDirectory(prefix="rollout-gateway-")
        self._lock = threading.Lock()
        self._stopped = False
        self._ready_file = Path(self._tmp.name) / "url"
        self._deadline = 0.0
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self._unresponsive = False
        """Set by the health monitor: the child runs but has not answered /healthz for HEALTH_FAILURES checks."""
        self._monitor: threading.Thread | None = None
        self._stop_monitor = threading.Event()
        self._runs: dict[str, Path] = {}
        """Run id → run folder of the runs registered with `register_run`, for a restarted child."""

    def __enter__(self) -> GatewayProcess:
        self.launch()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def launch(self, port: int = 0) -> None:
        """Start the child on `port` (0: a free one) and return at once; `wait_ready` blocks until it serves."""
        with self._lock:  # a restart on another thread must not start a child after `stop()`
            if self._stopped:
                raise GatewayError("the gateway was stopped; it is not started again")
            self._launch(port)

    def _launch(self, port: int) -> None:
        self._ready_file.unlink(missing_ok=True)
        runs = [arg for run_id, folder in self._runs.items() for arg in ("--run-ledger", run_id, str(folder))]
        cmd = [sys.executable, "-m", "rollout.gateway", *self.args, *runs, "--host", self.host, "--port", str(port),
               "--ready-file", str(self._ready_file)]
        logger.debug("starting gateway: %s", " ".join(cmd))
        # The child inherits stdout/stderr: its lines join the run's console in the run's format (rollout.logs), at
        # the verbosity its -v/-q arguments give, with progress bars only where the run's stderr is a terminal.
        # It ends with this process, even one killed with SIGKILL (rollout.gateway.orphan).
        env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
        if self.auth_token:
            env[TOKEN_ENV] = self.auth_token
        self._proc = subprocess.Popen(cmd, env=env, preexec_fn=parent_death_hook())  # noqa: PLW1509 - see the hook
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
        self._unresponsive = False
        self.url = url
        self._port = urlsplit(url).port or 0
        if self._monitor is None:
            self._monitor = threading.Thread(target=self._watch_health, name="gateway-health", daemon=True)
            self._monitor.start()
        return url

    def register_run(self, run_id: str, output_dir: Path) -> Path:
        """Have the serving gateway record the calls carrying `run_id` in `output_dir`'s own ledger (`POST /runs`,
        `rollout.gateway.runs_api`); the ledger's path. A `GatewayError` says why the gateway refused."""
        url = self.wait_ready()
        output_dir = Path(output_dir).resolve()
        try:
            response = httpx.post(runs_url(url), json={"run_id": run_id, "output_dir": str(output_dir)},
                                  headers=auth_headers(self.auth_token), timeout=30.0)
        except httpx.HTTPError as e:
            raise GatewayError(f"could not register the run with the gateway at {url}: {e}") from e
        if response.status_code != 200:
            raise GatewayError(f"the gateway at {url} refused to register the run ({response.status_code}): "
                               f"{response.text.strip()}")
        with self._lock:  # a restart on another thread reads them as it launches the new child
            self._runs[run_id] = output_dir
        return Path(response.json()["ledger"])

    def _watch_health(self) -> None:
        """A gateway that runs but stopped answering (a hung event loop) counts as dead, so the run restarts it."""
        failures = 0
        while not self._stop_monitor.wait(self.health_interval_s):
            url, proc = self.url, self._proc
            if url is None or proc is None or proc.poll() is not None or self._unresponsive:
                failures = 0  # not serving, already dead, or already reported: the restart path owns it
                continue
            failures = 0 if self._answers_health(url) else failures + 1
            if failures >= HEALTH_FAILURES:
                logger.warning("The gateway (pid %s) has not answered %s for %d checks of %.0f s; treating it as dead",
                               proc.pid, health_url(url), failures, self.health_timeout_s)
                self._unresponsive = True
                failures = 0

    def _answers_health(self, url: str) -> bool:
        response = self._ask_health(url, self.health_timeout_s)
        return response is not None and response.status_code == 200

    def _ask_health(self, url: str, timeout_s: float) -> httpx.Response | None:
        """The gateway's answer to GET /healthz; None when there was none."""
        try:
            return httpx.get(health_url(url), headers=auth_headers(self.auth_token), timeout=timeout_s)
        except httpx.HTTPError:
            return None

    @property
    def pid(self) -> int | None:
        """Process id of the current child; None before `launch` and after `stop`."""
        return self._proc.pid if self._proc is not None else None

    def is_alive(self) -> bool:
        """True while the child process runs (it may still be loading its indexes) and answers its health checks."""
        return self._proc is not None and self._proc.poll() is None and not self._unresponsive

    def restart(self) -> str:
        """Relaunch the gateway on the host and port it served on, wait until it is healthy, return its URL.

        A gateway still running is stopped first. Its indexes load from the cache the first launch
        filled, and it appends to the same `tool_stats/realtime_calls.jsonl`.
        """
        if not self._port:
            raise GatewayError("restart() needs a gateway that served once: call wait_ready() first")
        before, port = self.url, self._port
        proc, self._proc = self._proc, None
        pid = proc.pid if proc is not None else None
        was_alive = proc is not None and proc.poll() is None
        # A gateway that stopped answering cannot shut down cleanly either; its ledger is complete line by line.
        code = _end(proc, kill_now=self._unresponsive) if proc is not None else None
        self.url = None  # nothing serves it until the new child is healthy
        t0 = time.monotonic()
        rebind_deadline = t0 + self.rebind_timeout_s
        while True:
            _wait_port_free(self.host, port, rebind_deadline)
            self.launch(port)
            try:
                url = self.wait_ready()
                break
            except _ExitedEarly:
                # Most likely someone bound the port between our check and the child's bind: try again.
                if time.monotonic() > rebind_deadline or _port_free(self.host, port):
                    raise
                time.sleep(0.2)
        self.restarts += 1
        what = ("stopped answering and was killed" if was_alive and code == -signal.SIGKILL
                else "was stopped to be restarted" if was_alive else _describe_exit(code))
        logger.warning("The gateway (pid %s) %s; restarted it at %s in %.1f s", pid, what, url, time.monotonic() - t0)
        if url != before:
            logger.warning("The restarted gateway serves at %s, not at %s as before", url, before)
        return url

    def _check_alive(self) -> None:
        proc = self._proc
        if proc is None:
            raise GatewayError("the gateway was stopped")
        code = proc.poll()
        if code is not None:
            raise _ExitedEarly(f"gateway exited with code {code} before it was ready; its error is printed above")

    def _wait_healthy(self, url: str, deadline: float) -> None:
        while True:
            self._check_alive()
            response = self._ask_health(url, HEALTH_TIMEOUT_S)
            if response is not None and response.status_code == 200:
                return
            if response is not None and response.status_code == 401:
                self.stop()
                raise GatewayError(f"gateway at {url} refused the health check (401): {response.text.strip()}")
            if time.monotonic() > deadline:
                self.stop()
                raise GatewayError(f"gateway at {url} did not answer {health_url(url)}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Ask the gateway to shut down (it writes its report), then make sure it is gone."""
        self._stop_monitor.set()
        with self._lock:
            self._stopped = True
            proc, self._proc = self._proc, None
        if proc is not None:
            started = time.perf_counter()
            _end(proc)
            logger.debug("Stopped the gateway (pid %d) in %.1f s", proc.pid, time.perf_counter() - started)
        self._tmp.cleanup()


def health_url(mcp_url: str) -> str:
    """The gateway's /healthz beside its MCP endpoint (under the same route prefix, as on Ray Serve)."""
    return mcp_url.rsplit("/", 1)[0] + "/healthz"


def runs_url(mcp_url: str) -> str:
    """The gateway's `POST /runs` beside its MCP endpoint."""
    return mcp_url.rsplit("/", 1)[0] + "/runs"


def _end(proc: subprocess.Popen[bytes], *, kill_now: bool = False) -> int:
    """Terminate `proc` if it still runs (kill it after 15 s, or at once with `kill_now`); its exit code."""
    if proc.poll() is None and kill_now:
        proc.kill()
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            logger.warning("gateway did not stop within 15 s; killing it")
            proc.kill()
            proc.wait()
    return proc.returncode


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "was not running"
    if code < 0:
        try:
            return f"died (killed by {signal.Signals(-code).name}, exit code {code})"
        except ValueError:
            pass
    return f"died (exit code {code})"


def _port_free(host: str, port: int) -> bool:
    """True when a listening socket could bind `host:port` now (with SO_REUSEADDR, as the gateway binds)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _wait_port_free(host: str, port: int, deadline: float) -> None:
    while not _port_free(host, port):
        if time.monotonic() > deadline:
            raise GatewayError(
                f"cannot restart the gateway on {host}:{port}: the port is still in use by another process "
                f"(see `ss -ltnp 'sport = :{port}'`); clients hold this URL, so it cannot move to another port"
            )
        time.sleep(0.1)
