"""Per-memory serialization: an in-process lock, plus whatever holds the memory across processes.

Work for one memory never interleaves; work for different memories never waits on each other. The
lock is re-entrant within a thread, so a node holding it may call code that takes it. On PostgreSQL
the store passes ``hold``: the outermost hold of a thread opens the run's transaction on its
pinned connection and takes ``pg_advisory_xact_lock`` there (see ``MemoryStore.memory_lock``), so
no session-level lock and no second connection exist, and the lock ends with the transaction.

Inside :func:`~convmem_graph.store.write_gate.bounded_writes` (a request of ``convmem serve``) the
in-process wait is bounded too: a request for a memory whose run waits behind another process's
write lock answers 503 instead of queueing behind that run.

On SQLite nothing in the database plays the advisory lock's part, so :func:`file_memory_lock`
holds the memory across processes with ``flock`` on a lock file beside the database (see there);
:class:`~convmem_graph.runner.Lifecycle` takes it inside :func:`memory_lock` for every run.
Without it two ``convmem replay`` processes ran one memory at once: a run summarized from the
variables it read while the other process's run was changing them, and the later run found the
summary cursor already past its messages, so the stale summary stayed (measured: 1-2 of 199
memories per run of two processes; 0 with the lock).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

from convmem_graph.store.write_gate import WriteTimeout, write_timeout

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_BUCKETS", "file_memory_lock", "held_here", "memory_lock"]

logger = logging.getLogger(__name__)

#: Lock files per database for :func:`file_memory_lock`. Memories hash into this many buckets,
#: so the lock directory holds at most this many empty files however many memories there are;
#: two memories of one bucket only take turns across processes (within a process they share the
#: bucket's hold), which at this size is rare and costs one run's wait.
LOCK_BUCKETS = 1024
#: Longest sleep between two non-blocking ``flock`` attempts of a bounded waiter.
_POLL_MAX_S = 0.02


class _Entry:
    __slots__ = ("depth", "held", "lock", "owner", "users")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0  # threads holding or waiting; the entry is dropped at zero
        self.depth = 0  # re-entry depth of the owning thread
        self.owner = 0  # thread ident of the holder (0: nobody), for held_here()
        self.held: Any = None  # what the outermost hold's context yielded; re-entries yield it too


_REGISTRY: dict[tuple[str, str], _Entry] = {}
_GUARD = threading.Lock()


@contextmanager
def memory_lock(
    scope: str,
    memory_id: str,
    *,
    hold: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> Iterator[Any]:
    """Serialize work on one memory.

    Args:
        scope: Identifies the database (locks of two databases never meet).
        memory_id: The memory to lock.
        hold: When given, entered with the memory id while the outermost in-process hold lasts
            (the cross-process part of the lock).

    Yields:
        What ``hold``'s context yielded (``None`` without one): a re-entrant hold of the same
        thread gets the outermost hold's value, so a nested run of a memory is the same run.
    """
    key = (scope, memory_id)
    with _GUARD:
        entry = _REGISTRY.get(key)
        if entry is None:
            entry = _REGISTRY[key] = _Entry()
        entry.users += 1
    timeout = write_timeout()
    try:
        if not entry.lock.acquire(timeout=-1 if timeout is None else timeout):
            raise WriteTimeout(
                f"memory {memory_id!r} is busy (a run of it is in progress); gave up after {timeout:g} s",
                timeout or 0.0,
            )
        try:
            with ExitStack() as stack:
                entry.depth += 1
                stack.callback(_leave, entry)
                if entry.depth == 1:
                    entry.owner = threading.get_ident()
                    if hold is not None:
                        entry.held = stack.enter_context(hold(memory_id))
                yield entry.held
        finally:
            entry.lock.release()
    finally:
        with _GUARD:
            entry.users -= 1
            if entry.users == 0:
                _REGISTRY.pop(key, None)


def _leave(entry: _Entry) -> None:
    entry.depth -= 1
    if entry.depth == 0:
        entry.owner, entry.held = 0, None


def held_here(scope: str, memory_id: str) -> bool:
    """Whether the calling thread holds ``memory_id``'s :func:`memory_lock` in ``scope``.

    Not a scope decision: the store asks it only to fail loudly where a call would otherwise
    wait for the calling thread's own run (see ``MemoryStore._write``).
    """
    entry = _REGISTRY.get((scope, memory_id))
    return entry is not None and entry.depth > 0 and entry.owner == threading.get_ident()


# -- across processes on SQLite -------------------------------------------------------------------
class _Bucket:
    """One lock file, held by this process while any of its threads holds a memory of the bucket.

    ``flock`` belongs to an open file description: a second ``open`` by another thread of this
    process would wait for the first, which deadlocks a thread that already holds one memory of
    the bucket and takes a second one (a re-entrant or nested hold). So the process opens each
    file once and counts its holders; only the first locks the file and only the last unlocks it.
    """

    __slots__ = ("acquiring", "cond", "fd", "holders", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.cond = threading.Condition(threading.Lock())
        self.fd: int | None = None
        self.holders = 0
        self.acquiring = False  # a thread of this process is waiting in flock for the file


_BUCKETS: dict[str, _Bucket] = {}
_BUCKETS_GUARD = threading.Lock()
#: Lock directories that could not be created or written: warned about once, then skipped.
_UNUSABLE: set[str] = set()


def _bucket_path(lock_dir: str, memory_id: str) -> str:
    digest = hashlib.sha256(memory_id.encode("utf-8", "surrogatepass")).digest()
    return os.path.join(lock_dir, f"{int.from_bytes(digest[:4], 'big') % LOCK_BUCKETS:04d}.lock")


def _bucket(path: str) -> _Bucket:
    with _BUCKETS_GUARD:
        bucket = _BUCKETS.get(path)
        if bucket is None:
            bucket = _BUCKETS[path] = _Bucket(path)
        return bucket


@contextmanager
def file_memory_lock(lock_dir: str, memory_id: str) -> Iterator[None]:
    """Hold ``memory_id`` against other processes using the same ``lock_dir`` (SQLite's advisory lock).

    Take it inside :func:`memory_lock`, which serializes the threads of this process first. The
    memory's bucket file in ``lock_dir`` (created with the directory when missing; it holds no
    data) is ``flock``-ed for as long as a thread of this process holds one of its memories. A
    background caller waits as long as it takes; inside
    :func:`~convmem_graph.store.write_gate.bounded_writes` the wait gives up after the bound with
    :class:`~convmem_graph.store.write_gate.WriteTimeout`. Where ``fcntl`` is missing (Windows) or
    the directory cannot be written (a read-only location) only the in-process lock remains.

    Args:
        lock_dir: The directory of the lock files, one per database file.
        memory_id: The memory to hold.

    Raises:
        WriteTimeout: In a bounded context, another process held the memory's bucket for the
            whole bound.

    Example:
        >>> import tempfile
        >>> with file_memory_lock(tempfile.mkdtemp(), "mem_1"):
        ...     pass
    """
    if fcntl is None or lock_dir in _UNUSABLE:
        yield
        return
    bucket = _bucket(_bucket_path(lock_dir, memory_id))
    timeout = write_timeout()
    deadline = None if timeout is None else time.monotonic() + timeout
    with bucket.cond:
        # Another thread of this process is taking the file: wait for it, then share its hold.
        while bucket.acquiring:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise _busy(memory_id, timeout)
            bucket.cond.wait(left)
        shared = bucket.holders > 0
        if shared:
            bucket.holders += 1
        else:
            bucket.acquiring = True
    if not shared:
        try:
            locked = _lock_file(bucket, lock_dir, memory_id, deadline, timeout)
        except BaseException:
            with bucket.cond:
                bucket.acquiring = False
                bucket.cond.notify_all()
            raise
        with bucket.cond:
            bucket.acquiring = False
            bucket.holders = 1 if locked else 0
            bucket.cond.notify_all()
        if not locked:  # no usable lock file: the in-process lock is all there is
            yield
            return
    try:
        yield
    finally:
        with bucket.cond:
            bucket.holders -= 1
            if bucket.holders == 0 and bucket.fd is not None:
                fcntl.flock(bucket.fd, fcntl.LOCK_UN)


def _lock_file(
    bucket: _Bucket, lock_dir: str, memory_id: str, deadline: float | None, timeout: float | None
) -> bool:
    """``flock`` the bucket's file (outside its condition: other threads must not wait on it)."""
    assert fcntl is not None
    if bucket.fd is None:
        try:
            os.makedirs(lock_dir, exist_ok=True)
            bucket.fd = os.open(bucket.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            _UNUSABLE.add(lock_dir)
            logger.warning(
                "memory lock file %s unusable (%s); runs of one memory in two processes may overlap",
                bucket.path,
                exc,
            )
            return False
    if deadline is None:
        fcntl.flock(bucket.fd, fcntl.LOCK_EX)  # blocks without the GIL until the holder unlocks
        return True
    # flock has no timeout: poll with short, growing sleeps (a bounded holder is a request).
    pause = 0.001
    while True:
        try:
            fcntl.flock(bucket.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _busy(memory_id, timeout) from None
            time.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_MAX_S)


def _busy(memory_id: str, timeout: float | None) -> WriteTimeout:
    return WriteTimeout(
        f"memory {memory_id!r} is busy (a run of it is in progress in another process); "
        f"gave up after {timeout or 0.0:g} s",
        timeout or 0.0,
    )


def _forget_inherited_buckets() -> None:
    # A forked child shares the parent's open file descriptions, and so their flocks: it must
    # open its own files and start with no holders.
    global _BUCKETS_GUARD
    _BUCKETS.clear()
    _UNUSABLE.clear()
    _BUCKETS_GUARD = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_buckets)
