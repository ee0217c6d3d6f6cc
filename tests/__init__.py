"""The test suite. Its processes (pytest's workers, and the helpers tests start with `python -m tests...`) run
Python's garbage collector as the commands' processes do (`rollout.quick_start`), from here: this package is imported
before conftest.py imports the project and its libraries."""

from rollout.quick_start import collect_less

collect_less()
