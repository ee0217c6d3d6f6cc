"""The one log format, the verbosity scale behind -v/-q, and where libraries' progress bars draw."""

from __future__ import annotations

import argparse
import io
import logging
import os
import re
import sys

import pytest

import rollout.cli
from rollout.errors import ConfigError
from rollout.gateway.launch import build_parser as build_gateway_parser
from rollout.hydra_argv import verbosity_overrides
from rollout.logs import (
    Levels,
    add_verbosity_options,
    adopt_serve_logger,
    apply_verbosity,
    formatter,
    levels,
    library_progress_bars,
    library_progress_bars_on,
    parse_verbose,
    verbosity,
    verbosity_flags,
)
from rollout.run.config import compose_run_config
from rollout.run.gateway_kinds import gateway_args

LOG_LINE = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) +[\w.]+: \S")
"""A line in the one format; the gateway and whole-run tests read their output with it."""
BAR_ENV = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "RAY_COLOR_PREFIX")


@pytest.fixture
def logging_state(monkeypatch):
    """The environment and the warnings hook as they were before the test, after it (the loggers are put back by
    tests/conftest.py's `logging_as_it_was`, for every test)."""
    for name in BAR_ENV:
        monkeypatch.delenv(name, raising=False)
    yield
    logging.captureWarnings(False)


def test_a_line_reads_time_level_logger_message():
    record = logging.LogRecord("rollout.gateway", logging.INFO, __file__, 1, "Serving %d passages", (300,), None)
    line = formatter().format(record)
    assert LOG_LINE.match(line)
    assert re.fullmatch(r"\d\d:\d\d:\d\d INFO    rollout\.gateway: Serving 300 passages", line)
    warning = formatter().format(logging.LogRecord("bm25s", logging.WARNING, __file__, 1, "odd", (), None))
    assert warning.split(" ", 1)[1] == "WARNING bm25s: odd"  # levels padded to one width


@pytest.mark.parametrize(("verbose", "own", "libraries"), [
    (-3, logging.WARNING, logging.WARNING),
    (-1, logging.WARNING, logging.WARNING),
    (0, logging.INFO, logging.WARNING),
    (1, logging.DEBUG, logging.WARNING),
    (2, logging.DEBUG, logging.INFO),
    (3, logging.DEBUG, logging.DEBUG),
    (7, logging.DEBUG, logging.DEBUG),
])
def test_each_verbosity_sets_rollout_and_the_libraries_apart(verbose, own, libraries):
    assert levels(verbose) == Levels(own, libraries)


@pytest.mark.parametrize(("verbose", "terminal", "bars"), [
    (0, True, True), (1, True, True), (-1, True, False),
    (0, False, False), (1, False, False), (2, False, True), (3, False, True),
])
def test_library_progress_bars_draw_on_a_terminal_or_from_vv(verbose, terminal, bars):
    assert library_progress_bars(verbose, terminal=terminal) is bars


def test_applying_the_default_quiets_libraries_that_set_their_own_level(logging_state):
    import bm25s  # noqa: F401  (sets its logger to DEBUG when imported)

    apply_verbosity(0, terminal=False)
    assert logging.getLogger("bm25s").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("ray").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("some_new_library.sub").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("rollout.gateway").getEffectiveLevel() == logging.INFO
    apply_verbosity(1, terminal=False)
    assert logging.getLogger("rollout.gateway").getEffectiveLevel() == logging.DEBUG
    assert logging.getLogger("bm25s").getEffectiveLevel() == logging.WARNING
    apply_verbosity(2, terminal=False)
    assert logging.getLogger("bm25s").getEffectiveLevel() == logging.INFO
    apply_verbosity(-1, terminal=False)
    assert logging.getLogger("rollout").getEffectiveLevel() == logging.WARNING


def test_ray_serve_s_lines_take_the_one_format_and_ray_s_level(logging_state):
    import ray.serve  # noqa: F401  (gives "ray.serve" a handler, a format and INFO of its own)

    serve_logger = logging.getLogger("ray.serve")
    saved = serve_logger.handlers[:], serve_logger.propagate, serve_logger.level
    root = logging.getLogger()
    saved_root = root.handlers[:]
    written = io.StringIO()
    kept = logging.StreamHandler(written)
    kept.setFormatter(formatter())
    root.handlers[:] = [kept]  # the run's one handler, and no other test's
    try:
        apply_verbosity(0, terminal=False)
        adopt_serve_logger()
        serve_logger.info("Deleting app ['rollout-gateway-1']")  # as Serve logs it when a run's gateway goes
        serve_logger.warning("Deployment is unhealthy")
        apply_verbosity(2, terminal=False)
        serve_logger.info("Deleting app ['rollout-gateway-2']")
    finally:
        root.handlers[:] = saved_root
        serve_logger.handlers[:], serve_logger.propagate, serve_logger.level = saved
    lines = written.getvalue().splitlines()
    assert len(lines) == 2 and all(LOG_LINE.match(line) for line in lines), lines
    assert "Deployment is unhealthy" in lines[0] and "rollout-gateway-2" in lines[1]


def test_off_a_terminal_progress_bars_are_off_here_and_in_child_processes(logging_state):
    import huggingface_hub.utils

    assert library_progress_bars_on()
    try:
        apply_verbosity(0, terminal=False)
        assert not library_progress_bars_on()
        # Read by tqdm, huggingface_hub (so transformers) and datasets when a child process imports them.
        assert all(os.environ[name] == "1" for name in BAR_ENV[:3])
        assert os.environ["RAY_COLOR_PREFIX"] == "0"  # no escape codes around forwarded worker lines
        assert huggingface_hub.utils.are_progress_bars_disabled()  # already imported: switched off directly
    finally:
        huggingface_hub.utils.enable_progress_bars()


def test_on_a_terminal_progress_bars_stay_and_a_users_own_switch_is_kept(logging_state, monkeypatch):
    apply_verbosity(0, terminal=True)
    assert library_progress_bars_on() and "TQDM_DISABLE" not in os.environ
    monkeypatch.setenv("TQDM_DISABLE", "1")
    apply_verbosity(2, terminal=True)
    assert not library_progress_bars_on()


@pytest.mark.parametrize("verbose", [-2, -1, 0, 1, 2, 3])
def test_the_flags_a_run_gives_its_gateway_parse_back_to_the_same_verbosity(verbose):
    parser = argparse.ArgumentParser()
    add_verbosity_options(parser)
    assert verbosity(parser.parse_args(verbosity_flags(verbose))) == verbose


@pytest.mark.parametrize("verbose", [-1, 0, 2])
def test_a_run_hands_its_verbosity_to_the_gateway_it_starts(verbose, tmp_path):
    cfg = compose_run_config(f"verbose={verbose}")
    args = gateway_args(cfg.gateway_launch, tmp_path / "corpus.jsonl", tmp_path / "retriever.json")
    assert verbosity(build_gateway_parser().parse_args(args)) == verbose


@pytest.mark.parametrize(("argv", "expected"), [
    (["-v", "mode=sparse"], ["verbose=1", "mode=sparse"]),
    (["mode=sparse", "-vv", "seed=1"], ["verbose=2", "mode=sparse", "seed=1"]),
    (["--cfg", "job", "mode=sparse", "-q"], ["--cfg", "job", "verbose=-1", "mode=sparse"]),
    (["-q"], ["verbose=-1"]),
    (["--verbose", "-v", "-q"], ["verbose=1"]),
    (["-m", "mode=dense,sparse"], ["-m", "mode=dense,sparse"]),
    (["verbose=3"], ["verbose=3"]),
])
def test_v_and_q_become_one_verbose_override(argv, expected):
    assert verbosity_overrides(argv) == expected


def test_flags_and_a_verbose_override_together_are_refused():
    with pytest.raises(ConfigError, match="-v and verbose=2 both set the log detail"):
        verbosity_overrides(["-v", "verbose=2"])


def test_v_and_q_compose_into_the_run_config_and_reach_hydra(capsys, monkeypatch, tmp_path):
    assert compose_run_config(*verbosity_overrides(["-vv"])).verbose == 2
    assert compose_run_config(*verbosity_overrides(["-q"])).verbose == -1
    assert compose_run_config().verbose == 0
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rollout"])
    try:
        code = rollout.cli.main(["run", "-q", "mode=sparse", "--cfg", "job"])
    except SystemExit as e:
        code = int(e.code or 0)
    assert code == 0
    assert re.search(r"^verbose: -1$", capsys.readouterr().out, re.M)


@pytest.mark.parametrize("value", ["loud", True, 1.5, None])
def test_a_verbose_that_is_not_a_whole_number_is_refused_naming_the_choices(value):
    with pytest.raises(ConfigError, match=r"give -1 \(warnings only\), 0 \(default\), 1, 2 or 3"):
        parse_verbose(value)
