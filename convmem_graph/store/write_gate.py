"""One writer at a time on a SQLite file, handed over at once (threads and processes).

SQLite lets one connection write at a time; a connection that finds the write lock taken sleeps
in its busy handler (1, 2, 5, 10 ... 100 ms steps) and retries. With several replay processes on
one file those sleeps outlast most transactions: measured on two workers, a fifth of each
worker's time went to over-sleeping. The gate queues writers instead: an in-process lock plus
``flock`` on a lock file beside the database, so a waiting writer wakes the moment the previous one
commits. Every writer of the project (store transactions, the checkpointer, pruning) passes it;
a writer that does not (another program) is still handled by SQLite's busy timeout.

SQLite's automatic WAL checkpoint runs inside the commit that crosses its threshold, which would
keep the gate closed while pages are copied; the project's connections turn it off and, every
:attr:`WriteGate.checkpoint_every` commits, run a passive checkpoint after leaving the gate.

Where ``fcntl`` is missing (Windows) only the in-process lock is used.

Bounded waits: a writer that must answer someone (a request of ``convmem serve``) runs inside
:func:`bounded_writes`; then each of its writes gives up after that many seconds with
:class:`WriteTimeout`, before anything was written, instead of queueing behind another process's
lock for as long as it holds it (this gate and SQLite's busy handler at ``BEGIN IMMEDIATE`` share
one bound; the per-memory lock of :mod:`convmem_graph.store.locks` has its own). Background
writers (the inbox worker, replays) keep waiting as long as it takes. Readers never pass the
gate: in WAL mode a reader does not wait for a writer.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["WriteGate", "WriteTimeout", "bounded_writes", "remaining_wait", "write_gate", "write_timeout"]

logger = logging.getLogger(__name__)

#: Seconds a bounded writer waits for each lock (None: unbounded). A context variable, not a
#: thread-local: Starlette copies the request's context into the threadpool thread running the
#: store call, so a value set around the request reaches it; the worker thread never sees it.
_WRITE_TIMEOUT: ContextVar[float | None] = ContextVar("convmem_write_timeout", default=None)
#: When the current bounded hold of the gate runs out (monotonic seconds): SQLite's busy wait at
#: ``BEGIN IMMEDIATE`` inside the hold gets what is left, so gate and busy handler together stay
#: within one bound.
_DEADLINE: ContextVar[float | None] = ContextVar("convmem_write_deadline", default=None)
#: Longest sleep between two non-blocking ``flock`` attempts of a bounded writer.
_POLL_MAX_S = 0.02


class WriteTimeout(RuntimeError):
    """A bounded write gave up waiting for a lock held by another writer; nothing was written.

    Not a ``TimeoutError``: that is an ``OSError``, which callers treat as an I/O failure.

    Attributes:
        timeout_s: The bound that was exceeded, in seconds.
    """

    def __init__(self, message: str, timeout_s: float) -> None:
        super().__init__(message)
        self.timeout_s = timeout_s


@contextmanager
def bounded_writes(timeout_s: float | None) -> Iterator[None]:
    """Bound every lock wait of the store writes made in this context to ``timeout_s`` seconds.

    ``None`` lifts the bound. It applies to each write on its own, not to the whole context: a
    request's turn recorded after a long stream is not already out of time.

    Example:
        >>> with bounded_writes(2.5):
        ...     write_timeout()
        2.5
        >>> write_timeout() is None
        True
    """
    token = _WRITE_TIMEOUT.set(timeout_s)
    try:
        yield
    finally:
        _WRITE_TIMEOUT.reset(token)


def write_timeout() -> float | None:
    """Return the bound of the current context's lock waits in seconds (``None``: unbounded)."""
    return _WRITE_TIMEOUT.get()


def remaining_wait() -> float | None:
    """Return how long a lock wait may still take here, in seconds (``None``: unbounded).

    Inside a bounded hold of a gate: what is left of that hold's bound; elsewhere the bound itself.
    """
    deadline = _DEADLINE.get()
    if deadline is not None:
        return max(0.0, deadline - time.monotonic())
    return _WRITE_TIMEOUT.get()


_GATES: dict[str, WriteGate] = {}
_GATES_GUARD = threading.Lock()


class WriteGate:
    """Serializes writers of one SQLite file; re-entrant within a thread.

    Args:
        lock_path: The lock file (created if missing; it holds no data).
    """

    #: Commits between two WAL checkpoints (a few hundred KB to a few MB of WAL).
    checkpoint_every = 64
    #: Bounded writers (requests) allowed to wait for the gate at once; more get WriteTimeout
    #: at once (a request burst behind a held lock must not take every server thread).
    max_bounded_waiters = 16

    def __init__(self, lock_path: str) -> None:
        self.lock_path = lock_path
        self._lock = threading.RLock()
        self._depth = 0
        # The thread holding the gate: a second write transaction of that thread, on another
        # connection, would wait for its own first one (see held_by_this_thread).
        self._owner: int | None = None
        self._fd: int | None = None
        self._unusable = False
        self._commits = 0
        self._count_lock = threading.Lock()
        self._bounded_waiters = 0

    def committed(self, conn: sqlite3.Connection) -> None:
        """Count a committed write and, every :attr:`checkpoint_every` commits, checkpoint the WAL.

        Call it after leaving the gate, with the connection that committed (not in a transaction):
        a passive checkpoint never waits for, nor blocks, writers.
        """
        with self._count_lock:
            self._commits += 1
            due = self._commits % self.checkpoint_every == 0
        if due:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the gate for the duration of the block.

        Raises:
            WriteTimeout: Inside :func:`bounded_writes`, the gate stayed taken (by a thread of
                this process or by another process) for the whole bound.
        """
        timeout = _WRITE_TIMEOUT.get()
        deadline = None if timeout is None else time.monotonic() + timeout
        if timeout is None:
            self._lock.acquire()
        elif not self._lock.acquire(blocking=False):
            self._wait_bounded(timeout)
        token = _DEADLINE.set(deadline) if deadline is not None and self._depth == 0 else None
        try:
            self._depth += 1
            try:
                if self._depth == 1:
                    self._acquire_file(deadline, timeout)
                    self._owner = threading.get_ident()
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._owner = None
                    self._release_file()
        finally:
            if token is not None:
                _DEADLINE.reset(token)
            self._lock.release()

    def held_by_this_thread(self) -> bool:
        """Whether the calling thread holds the gate (in a write transaction of the file)."""
        return self._owner == threading.get_ident()

    def _wait_bounded(self, timeout: float) -> None:
        """Wait at most ``timeout`` for the in-process lock, unless too many bounded writers wait.

        Each waiting request keeps a thread of the server's pool (40 by default) busy; past
        :attr:`max_bounded_waiters` a new one is refused at once, so reads keep threads to run on.
        """
        with self._count_lock:
            if self._bounded_waiters >= self.max_bounded_waiters:
                crowded = True
            else:
                crowded = False
                self._bounded_waiters += 1
        if crowded:
            raise WriteTimeout(
                f"the database is locked and {self.max_bounded_waiters} writers already wait", timeout
            )
        try:
            if not self._lock.acquire(timeout=timeout):
                raise self._timeout(timeout, "a writer of this process")
        finally:
            with self._count_lock:
                self._bounded_waiters -= 1

    def _timeout(self, timeout: float | None, holder: str) -> WriteTimeout:
        logger.warning(
            "write gate %s: gave up after %.1f s behind %s", self.lock_path, timeout or 0.0, holder
        )
        return WriteTimeout(
            f"the database is locked by {holder}; gave up after {timeout or 0.0:g} s", timeout or 0.0
        )

    def _acquire_file(self, deadline: float | None = None, timeout: float | None = None) -> None:
        if fcntl is None or self._unusable:
            return
        if self._fd is None:
            try:
                self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                # A read-only directory or another user's lock file: writers of other processes
                # are then left to SQLite's busy timeout, as without the gate.
                self._unusable = True
                logger.warning(
                    "write gate %s unusable (%s); relying on SQLite's busy timeout", self.lock_path, exc
                )
                return
        if deadline is None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocks without the GIL until the holder unlocks
            return
        # flock has no timeout: poll, with sleeps growing to a few ms (a bounded writer is a
        # request, rarely contended; the worker keeps the blocking hand-over above).
        pause = 0.001
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._timeout(timeout, "another process") from None
                time.sleep(min(pause, left))
                pause = min(pause * 2, _POLL_MAX_S)

    def _release_file(self) -> None:
        if fcntl is not None and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


def write_gate(db_path: str) -> WriteGate:
    """Return the process-wide gate of a SQLite database file (one per file, shared by its users).

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "x.db")
        >>> write_gate(path) is write_gate(path)
        True
    """
    real = os.path.realpath(db_path)
    with _GATES_GUARD:
        gate = _GATES.get(real)
        if gate is None:
            gate = _GATES[real] = WriteGate(real + "-convmem.lock")
        return gate


def _forget_inherited_gates() -> None:
    # A forked child shares the parent's open lock-file descriptions, and so its flock: it must
    # open its own.
    global _GATES_GUARD
    _GATES.clear()
    _GATES_GUARD = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_gates)
