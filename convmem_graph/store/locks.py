"""Per-memory serialization: an in-process lock, plus whatever holds the memory across processes.

Work for one memory never interleaves; work for different memories never waits on each other. The
lock is re-entrant within a thread, so a node holding it may call code that takes it. On PostgreSQL
the store passes ``hold``: the outermost hold of a thread opens the run's transaction on its
pinned connection and takes ``pg_advisory_xact_lock`` there (see ``MemoryStore.memory_lock``), so
no session-level lock and no second connection exist, and the lock ends with the transaction.

Inside :func:`~convmem_graph.store.write_gate.bounded_writes` (a request of ``convmem serve``) the
in-process wait is bounded too: a request for a memory whose run waits behind another process's
write lock answers 503 instead of queueing behind that run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager

from convmem_graph.store.write_gate import WriteTimeout, write_timeout

__all__ = ["memory_lock"]


class _Entry:
    __slots__ = ("depth", "lock", "users")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0  # threads holding or waiting; the entry is dropped at zero
        self.depth = 0  # re-entry depth of the owning thread


_REGISTRY: dict[tuple[str, str], _Entry] = {}
_GUARD = threading.Lock()


@contextmanager
def memory_lock(
    scope: str,
    memory_id: str,
    *,
    hold: Callable[[str], AbstractContextManager[None]] | None = None,
) -> Iterator[None]:
    """Serialize work on one memory.

    Args:
        scope: Identifies the database (locks of two databases never meet).
        memory_id: The memory to lock.
        hold: When given, entered with the memory id while the outermost in-process hold lasts
            (the cross-process part of the lock).
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
                if entry.depth == 1 and hold is not None:
                    stack.enter_context(hold(memory_id))
                yield
        finally:
            entry.lock.release()
    finally:
        with _GUARD:
            entry.users -= 1
            if entry.users == 0:
                _REGISTRY.pop(key, None)


def _leave(entry: _Entry) -> None:
    entry.depth -= 1
