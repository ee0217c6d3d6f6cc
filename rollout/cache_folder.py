"""Writing into the cache folder: temporaries that name their writer, the abandoned ones removed, and one line when
the folder cannot be written at all.

Every cache entry (a corpus store, an index, an encoder export, cut passages, a materialized corpus, the demo
knowledge base) is written into a temporary beside its final place and renamed when whole. The temporary's name says
who writes it:

    .tmp-<entry>.<pid>.<start>@<host>-<8 random characters>

`.broken-` instead of `.tmp-` for a damaged entry moved aside to be deleted. `<start>` is when the writing process
started (clock ticks since boot, /proc/<pid>/stat; 0 where the system does not say), so a pid the system has given to
another process since does not pass for the writer. A build killed halfway (SIGKILL, the out-of-memory killer, a
machine that went down) leaves its temporary behind: gigabytes for a wiki-scale index. Each start that writes the
cache first removes the temporaries whose writer is gone (`remove_abandoned`):

- named on this host: when no process has that pid, or the one that has it started at another time, or is a zombie;
- named on another host (a cache shared over the network), or by a version that did not name its writer: once
  nothing in it has changed for `ABANDONED_AFTER_S` (7 days). Its writer cannot be asked, and a live build may
  leave its folder untouched for hours (a dense index is written only once it is built).

Hosts are told apart by host name: processes that share a name but not a process table (containers given the host's
name) must not share a cache folder.
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from rollout.errors import ConfigError

logger = logging.getLogger(__name__)

ABANDONED_AFTER_S = 7 * 24 * 3600
"""Age (since anything in it last changed) at which a temporary whose writer cannot be asked is removed."""
_KINDS = ("tmp", "broken")
_NAMED = re.compile(r"^\.(?:tmp|broken)-.+\.(?P<pid>\d+)\.(?P<start>\d+)@(?P<host>[A-Za-z0-9._-]+)-[a-z0-9_]{8}$")
"""A temporary that names its writer; `tempfile` ends the name with 8 random characters of this alphabet."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


def temp_prefix(entry: str, kind: str = "tmp") -> str:
    """The start of the name of a temporary for the cache entry `entry`, naming this process as its writer; pass it
    to `tempfile.mkdtemp`/`mkstemp` (whose random characters end the name) in the entry's folder."""
    if kind not in _KINDS:
        raise ValueError(f"kind {kind!r}: use one of {_KINDS}")
    pid = os.getpid()
    return f".{kind}-{entry}.{pid}.{_start_ticks(pid) or 0}@{_host()}-"


def temp_dir_for(final: Path, kind: str = "tmp") -> Path:
    """A new temporary folder beside `final`, named for it and for this process (see the module's docstring)."""
    return Path(tempfile.mkdtemp(prefix=temp_prefix(final.name, kind), dir=final.parent))


def discard(final: Path) -> None:
    """Move the cache entry `final`, which cannot be used, out of the way, then delete it: renamed at once, so a
    process opening it meanwhile sees the whole old entry or none (one that maps it keeps its files until it closes
    them). Gone already (another process moved it first) is fine; an `OSError` that leaves it in place propagates."""
    trash = temp_dir_for(final, "broken")
    try:
        os.rename(final, trash / final.name)
    except OSError:
        if final.is_dir():
            shutil.rmtree(trash, ignore_errors=True)
            raise
    shutil.rmtree(trash, ignore_errors=True)


def remove_abandoned(cache_dir: Path) -> list[Path]:
    """Remove the temporaries in `cache_dir` whose writer is gone (the rules are the module's docstring); the ones
    removed. A temporary that cannot be removed (a read-only cache) is left, with a debug line."""
    try:
        entries = [e for e in os.scandir(cache_dir) if e.name.startswith(tuple(f".{k}-" for k in _KINDS))]
    except OSError:  # no cache folder yet, or one this process cannot list: nothing to clean
        return []
    removed = []
    for entry in entries:
        path = Path(entry.path)
        why = _abandoned(path)
        if why is None:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:  # another process cleaned it first
            continue
        except OSError as e:
            logger.debug("could not remove the abandoned temporary %s: %s", path, e)
            continue
        logger.info("Removed %s, left by a cache write that never finished (%s)", path, why)
        removed.append(path)
    return removed


def _abandoned(path: Path) -> str | None:
    """Why the temporary `path` is abandoned; None while its writer may still be writing it."""
    named = _NAMED.match(path.name)
    if named is not None and named["host"] == _host():
        pid, start = int(named["pid"]), int(named["start"])
        if not _alive(pid):
            return f"its writer, pid {pid}, is gone"
        now = _start_ticks(pid)
        if start and now and now != start:
            return f"pid {pid} is another process now"
        return None
    age = time.time() - _newest_mtime(path)
    if age < ABANDONED_AFTER_S:
        return None
    owner = f"written on {named['host']}" if named is not None else "its writer unnamed"
    return f"{owner}, unchanged for {age / 86400:.0f} days"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return _proc_stat(pid)[0:1] != ["Z"]  # a zombie writes nothing more; its parent has not reaped it yet


def _proc_stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first); empty where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat[stat.rfind(")") + 2:].split()  # the name, in parentheses, may hold spaces and parentheses


def _start_ticks(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[19]) if len(fields) > 19 else None  # field 22 of proc(5), the 20th after the name


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:64] or "unknown"


def _newest_mtime(path: Path) -> float:
    """When anything in `path` (a folder's whole tree) last changed: a writer that appends keeps it young."""
    try:
        newest = path.lstat().st_mtime
    except OSError:  # renamed or removed meanwhile: not for this pass to remove
        return time.time()
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue
    return newest


_WRITE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.ENOSPC,
                           errno.EDQUOT})


def unwritable_cache(cache_dir: Path, error: OSError) -> ConfigError | None:
    """The one-line error for `error` when it says the cache folder `cache_dir` cannot be written (no permission, a
    read-only or full disk, a file where a folder should be); None for any other error (a corpus file that cannot be
    read, say), which stays what it was."""
    if error.errno not in _WRITE_ERRNOS:
        return None
    folder = os.path.abspath(cache_dir)
    names = [os.path.abspath(os.fsdecode(n)) for n in (error.filename, error.filename2) if n is not None]
    # A file where the folder (or a folder above it) should be; inside the folder, such a clash is an entry's own.
    in_the_way = error.errno in (errno.EEXIST, errno.ENOTDIR)
    if not any(_within(folder, n) or (not in_the_way and _within(n, folder)) for n in names):
        # A full disk may fail a write into an open file, whose error names no path.
        if names or error.errno not in (errno.ENOSPC, errno.EDQUOT):
            return None
    where = f"{error.strerror}: {names[0]}" if names else error.strerror
    return ConfigError(f"cannot write in the cache folder {folder} ({where}); make it writable, or set "
                       "ROLLOUT_CACHE_DIR (cache_dir= of a run, --cache-dir of a gateway) to a folder that is")


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def writes_cache(fn: Callable[_P, _T]) -> Callable[_P, _T]:
    """Decorate a function that writes into the cache folder its `cache_dir` argument names: an `OSError` saying the
    folder cannot be written becomes `unwritable_cache`'s `ConfigError` (one line, exit 2, for every command)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return fn(*args, **kwargs)
        except OSError as e:
            cache_dir = signature.bind(*args, **kwargs).arguments.get("cache_dir")
            error = None if cache_dir is None else unwritable_cache(Path(cache_dir), e)
            if error is None:
                raise
            raise error from e

    return wrapper
