"""Per-memory serialization: an in-process lock, plus a PostgreSQL advisory lock across processes.

Work for one memory never interleaves; work for different memories never waits on each other
(apart from the rare 64-bit hash collision of two memory ids on PostgreSQL, which only serializes
them). The lock is re-entrant within a thread, so a node holding it may call code that takes it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from sqlalchemy import Engine, text

from convmem_graph.store.engine import advisory_key

__all__ = ["memory_lock", "pg_session_lock"]

logger = logging.getLogger(__name__)


class _Entry:
    __slots__ = ("depth", "lock", "users")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0  # threads holding or waiting; the entry is dropped at zero
        self.depth = 0  # re-entry depth of the owning thread


_REGISTRY: dict[tuple[str, str], _Entry] = {}
_GUARD = threading.Lock()


@contextmanager
def pg_session_lock(engine: Engine, memory_id: str) -> Iterator[None]:
    """Hold ``pg_advisory_lock`` for a memory on a dedicated connection of ``engine``.

    The connection runs in autocommit (no transaction stays open while the lock is held) and is
    closed afterwards; closing a session releases its advisory locks even if the unlock failed.
    """
    key = advisory_key(memory_id)
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
        try:
            yield
        finally:
            try:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
            except Exception:  # the session is going away anyway: closing it frees the lock
                logger.warning(
                    "advisory unlock failed; closing the lock connection releases it", exc_info=True
                )
                conn.invalidate()
    finally:
        conn.close()


@contextmanager
def memory_lock(scope: str, memory_id: str, *, pg_engine: Engine | None = None) -> Iterator[None]:
    """Serialize work on one memory.

    Args:
        scope: Identifies the database (locks of two databases never meet).
        memory_id: The memory to lock.
        pg_engine: When given, also hold a PostgreSQL advisory lock (cross-process) while the
            outermost in-process hold lasts.
    """
    key = (scope, memory_id)
    with _GUARD:
        entry = _REGISTRY.get(key)
        if entry is None:
            entry = _REGISTRY[key] = _Entry()
        entry.users += 1
    try:
        with entry.lock, ExitStack() as stack:
            entry.depth += 1
            stack.callback(_leave, entry)
            if entry.depth == 1 and pg_engine is not None:
                stack.enter_context(pg_session_lock(pg_engine, memory_id))
            yield
    finally:
        with _GUARD:
            entry.users -= 1
            if entry.users == 0:
                _REGISTRY.pop(key, None)


def _leave(entry: _Entry) -> None:
    entry.depth -= 1
