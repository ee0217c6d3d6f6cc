"""The lines Ray forwards from workers, as the run's log records them (rollout.ray_console); a whole piped run
is read in tests/harness/test_faults.py's Ctrl-C test."""

from __future__ import annotations

import logging

from ray._private.ray_logging import global_worker_stdstream_dispatcher

from rollout.ray_console import (
    FORWARDER,
    RAY_PRINTER,
    TOKEN_LOGGER,
    TOKEN_NOTICE,
    forward_worker_logs,
    quiet_token_notice,
    records,
)


def batch(*lines: str, **fields: object) -> dict:
    return {"pid": 683, "actor_name": "worker-0", "is_err": True, "lines": list(lines), **fields}


def test_a_worker_s_line_keeps_its_level_and_logger_and_is_led_by_the_worker_s_name():
    line = "15:03:42 WARNING rollout.run.worker: task q-000004 failed: boom"
    assert list(records(batch(line))) == [
        ("rollout.run.worker", logging.WARNING, "[worker-0] task q-000004 failed: boom")]


def test_a_traceback_stays_with_the_line_it_follows():
    got = list(records(batch("15:03:42 ERROR   envs.mcp: call failed", "Traceback (most recent call last):",
                             "ValueError: x", "15:03:43 INFO    rollout.run.worker: next")))
    assert got == [("envs.mcp", logging.ERROR, "[worker-0] call failed\nTraceback (most recent call last):\nValueError: x"),
                   ("rollout.run.worker", logging.INFO, "[worker-0] next")]


def test_a_serve_controller_s_line_keeps_its_level_under_ray_serve_and_its_second_line():
    got = list(records(batch(
        "WARNING 2026-11-26 21:21:06,725 controller 17137 -- Deployment 'RolloutGateway' has 2 replicas that have "
        "taken more than 30s to initialize.", "This may be caused by a slow __init__ or reconfigure method.",
        "WARNING 2026-11-26 21:21:13,296 proxy 192.0.2.2 a865d3d5-9794 -- Failed to get queue length",
        actor_name="ServeController")))
    assert got == [
        ("ray.serve", logging.WARNING, "[ServeController] Deployment 'RolloutGateway' has 2 replicas that have taken "
                                       "more than 30s to initialize.\nThis may be caused by a slow __init__ or "
                                       "reconfigure method."),
        ("ray.serve", logging.WARNING, "[ServeController] Failed to get queue length")]


def test_a_line_in_no_format_is_the_worker_s_at_info_from_stdout_and_warning_from_stderr():
    assert list(records(batch("hello", "", is_err=False))) == [("rollout.run.worker", logging.INFO, "[worker-0] hello")]
    assert list(records(batch("oops", actor_name=None, task_name="f"))) == [
        ("rollout.run.worker", logging.WARNING, "[f] oops")]
    assert list(records(batch("out of memory", pid="raylet", actor_name=None))) == [
        ("ray", logging.WARNING, "[raylet] out of memory")]
    assert list(records(batch("Task f failed.", pid="raylet", actor_name=None, is_err=False))) == [
        ("ray", logging.WARNING, "[raylet] Task f failed.")]
    assert list(records(batch(":event_summary:Adding 1 node", pid="autoscaler"))) == []


def test_ray_s_printer_is_replaced_by_the_forwarder_once():
    saved = list(global_worker_stdstream_dispatcher.handlers)
    try:
        global_worker_stdstream_dispatcher.add_handler(RAY_PRINTER, print)
        forward_worker_logs()
        forward_worker_logs()
        names = [name for name, _ in global_worker_stdstream_dispatcher.handlers]
        assert RAY_PRINTER not in names and names.count(FORWARDER) == 1
    finally:
        global_worker_stdstream_dispatcher.handlers = saved


def test_an_error_ray_pushes_to_the_driver_is_logged_not_printed_to_stdout(capsys, caplog, monkeypatch):
    import ray._private.worker

    saved_printer, saved_handlers = ray._private.worker.print_to_stdstream, list(
        global_worker_stdstream_dispatcher.handlers)
    ray_logger = logging.getLogger("ray")  # Ray's own handler until a run adopts it: caplog's goes on it directly
    monkeypatch.setattr(ray_logger, "propagate", False)
    ray_logger.addHandler(caplog.handler)
    try:
        forward_worker_logs()
        with caplog.at_level(logging.WARNING, logger="ray"):
            # as Ray's thread that listens for the driver's errors calls it
            ray._private.worker.print_to_stdstream(
                {"lines": ["Task ServeController.graceful_shutdown failed."], "pid": "raylet", "is_err": False},
                ignore_prefix=False)
    finally:
        ray_logger.removeHandler(caplog.handler)
        ray._private.worker.print_to_stdstream = saved_printer
        global_worker_stdstream_dispatcher.handlers = saved_handlers
    assert capsys.readouterr().out == ""
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("ray", logging.WARNING, "[raylet] Task ServeController.graceful_shutdown failed.")]


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_ray_s_token_notice_is_kept_out_of_the_log():
    quiet_token_notice()
    quiet_token_notice()
    logger = logging.getLogger(TOKEN_LOGGER)
    assert len(logger.filters) == 1
    kept = Kept()
    logger.addHandler(kept)
    try:
        logger.warning(TOKEN_NOTICE + ". Set RAY_AUTH_MODE=disabled to opt out.")
        logger.warning("Token authentication is enabled but no token was found.")
    finally:
        logger.removeHandler(kept)
    assert kept.messages == ["Token authentication is enabled but no token was found."]
