"""Checkpointer factories (SQLite by default, PostgreSQL with the ``postgres`` extra) and pruning.

Example:
    >>> saver, close = open_checkpointer(":memory:")
    >>> prune_checkpoints(saver, "mem_1", keep=3)
    0
    >>> close()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from sqlalchemy.engine import make_url

from convmem_graph.checkpoints.namespace import (
    THREAD_PREFIX,
    delete_memory_checkpoints,
    drop_legacy_checkpoints,
    memory_id_of,
    prune_memory_checkpoints,
    thread_id_for,
)
from convmem_graph.checkpoints.postgres import postgres_checkpointer
from convmem_graph.checkpoints.prune import prune_checkpoints, supports_pruning
from convmem_graph.checkpoints.sqlite import sqlite_checkpointer
from convmem_graph.store.engine import PoolSettings
from convmem_graph.store.urls import normalize_url

__all__ = [
    "THREAD_PREFIX",
    "delete_memory_checkpoints",
    "drop_legacy_checkpoints",
    "memory_id_of",
    "open_checkpointer",
    "postgres_checkpointer",
    "prune_checkpoints",
    "prune_memory_checkpoints",
    "sqlite_checkpointer",
    "supports_pruning",
    "thread_id_for",
]


def open_checkpointer(
    url: str | None = None, *, pools: PoolSettings | None = None
) -> tuple[BaseCheckpointSaver[Any], Callable[[], None]]:
    """Open the checkpointer for a database location, chosen by its URL.

    Args:
        url: As for :meth:`convmem_graph.store.MemoryStore.from_url`: ``None`` (the default
            ``convmem.db`` in the current directory, shared with the store), a path, ``:memory:``,
            a ``sqlite:///`` URL, or a ``postgresql://`` URL.
        pools: PostgreSQL pool settings (default :data:`~convmem_graph.store.engine.POOL_DEFAULTS`).

    Returns:
        The saver and a function that closes its connection or pool.

    Raises:
        ValueError: For an unsupported URL.
    """
    normalized = normalize_url(url)
    backend = make_url(normalized).get_backend_name()
    if backend == "postgresql":
        pg_saver = postgres_checkpointer(normalized, pools=pools)
        return pg_saver, pg_saver.conn.close
    lite_saver = sqlite_checkpointer(normalized)
    return lite_saver, lite_saver.conn.close
