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
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["WriteGate", "write_gate"]

logger = logging.getLogger(__name__)

_GATES: dict[str, WriteGate] = {}
_GATES_GUARD = threading.Lock()


class WriteGate:
    """Serializes writers of one SQLite file; re-entrant within a thread.

    Args:
        lock_path: The lock file (created if missing; it holds no data).
    """

    #: Commits between two WAL checkpoints (a few hundred KB to a few MB of WAL).
    checkpoint_every = 64

    def __init__(self, lock_path: str) -> None:
        self.lock_path = lock_path
        self._lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._unusable = False
        self._commits = 0
        self._count_lock = threading.Lock()

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
        """Hold the gate for the duration of the block."""
        with self._lock:
            self._depth += 1
            try:
                if self._depth == 1:
                    self._acquire_file()
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._release_file()

    def _acquire_file(self) -> None:
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
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocks without the GIL until the holder unlocks

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
