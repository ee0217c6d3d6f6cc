"""One driver per run folder: an exclusive lock on `RUN/.rollout.lock`, held for the whole run.

Two drivers writing into one folder would interleave their trajectories, and the second one's
`resume=false` would unlink the first one's files while it runs. The lock is an `fcntl.flock`
on a file in the folder: the kernel drops it when its holder exits, however it exits, so a
crashed run never leaves the folder locked. The file itself stays (removing it would let a third
driver lock a new file while the second still holds the old one); it holds the holder's pid,
for the message the next driver prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from rollout.errors import RunFolderBusy
from rollout.run_folder import LOCK_FILE


@contextlib.contextmanager
def hold_run_lock(out_dir: Path) -> Iterator[Path]:
    """Create `out_dir` and hold its lock until the block ends; raise `RunFolderBusy` at once when another process holds it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise RunFolderBusy(
                f"{out_dir} is in use by another rollout run (pid {holder}); wait for it to end, "
                "or choose another output_dir="
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock
