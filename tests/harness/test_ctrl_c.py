"""Ctrl-C during scheduling: noted by a handler, raised between loop steps; a second press stops at once."""

from __future__ import annotations

import os
import signal

import pytest

from rollout.run.scheduler import _ctrl_c_between_steps


def press_ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_a_press_is_raised_at_the_next_step_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGINT)
    with _ctrl_c_between_steps() as ctrl_c:
        ctrl_c.raise_if_pressed()  # nothing pressed yet
        press_ctrl_c()  # delivered to this (the main) thread, and only noted
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.raise_if_pressed()
    assert signal.getsignal(signal.SIGINT) is before


def test_a_second_press_interrupts_at_once() -> None:
    with _ctrl_c_between_steps(), pytest.raises(KeyboardInterrupt):  # noqa: PT012
        press_ctrl_c()
        press_ctrl_c()
