"""The test suite. Its processes (pytest's workers, and the helpers tests start with `python -m tests...`) run
Python's garbage collector as the commands' processes do (`rollout.quick_start`): they import the project and its
libraries first, before conftest.py's imports."""

from rollout.quick_start import collect_less

collect_less()
