"""The scheduler restarts a dead gateway on a thread of its own: its loop never waits for it."""

from __future__ import annotations

import threading
import time

import pytest

from rollout.errors import GatewayError
from rollout.run.config import compose_run_config
from rollout.run.scheduler import Scheduler
from rollout.run.worker import EnvSpec

UNUSED_ENV = EnvSpec(url="http://127.0.0.1:1/mcp", gateway_config_path="unused.json")
"""No actor is started in these tests: nothing opens this environment."""


class SlowGateway:
    """Dead until restarted; a restart blocks until the test lets it finish (or fail)."""

    def __init__(self, fail: bool = False) -> None:
        self.alive = False
        self.release = threading.Event()
        self.fail = fail
        self.restarts = 0

    def is_alive(self) -> bool:
        return self.alive

    def restart(self) -> str:
        self.restarts += 1
        assert self.release.wait(30)
        if self.fail:
            raise GatewayError("port taken")
        self.alive = True
        return "http://127.0.0.1:1/mcp"


def wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_restart_in_progress_does_not_hold_the_loop():
    gateway = SlowGateway()
    scheduler = Scheduler(compose_run_config().worker_pool, UNUSED_ENV, on_result=lambda r: None, gateway=gateway)
    scheduler._watch_gateway()  # starts the restart and returns while it blocks
    wait_until(lambda: gateway.restarts == 1)
    for _ in range(3):
        scheduler._watch_gateway()  # the loop goes on: no second restart, no wait
    assert gateway.restarts == 1 and scheduler.gateway_restarts == 1 and not gateway.alive
    gateway.release.set()
    wait_until(lambda: gateway.alive)
    wait_until(lambda: not scheduler._restarting or not scheduler._restarting.is_alive())
    scheduler._watch_gateway()
    assert gateway.restarts == 1


def test_a_failed_restart_stops_the_run_with_its_reason():
    gateway = SlowGateway(fail=True)
    scheduler = Scheduler(compose_run_config().worker_pool, UNUSED_ENV, on_result=lambda r: None, gateway=gateway)
    scheduler._watch_gateway()
    gateway.release.set()
    wait_until(lambda: scheduler._restarting is not None and not scheduler._restarting.is_alive())
    with pytest.raises(GatewayError, match="could not be restarted: port taken.*resume"):
        scheduler._watch_gateway()
