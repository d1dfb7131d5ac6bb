"""PostgreSQL checkpointer factory (needs the ``postgres`` extra)."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from convmem_graph.store.engine import advisory_key
from convmem_graph.store.urls import libpq_url, mask_url

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver

__all__ = ["postgres_checkpointer"]

logger = logging.getLogger(__name__)

_INSTALL_HINT = (
    "PostgreSQL checkpoints need the postgres extra: pip install 'convmem-graph[postgres]' "
    "(langgraph-checkpoint-postgres, psycopg, psycopg-pool)"
)
# Two processes running the saver's migrations at once would both insert the same version row.
_SETUP_LOCK_KEY = advisory_key("convmem_graph:checkpoint-setup")
_setup_done: set[str] = set()
_setup_guard = threading.Lock()


def _try_lock(conn: Any) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (_SETUP_LOCK_KEY,)).fetchone()
    return bool(row and row["ok"])


def postgres_checkpointer(url: str, *, max_size: int = 10) -> PostgresSaver:
    """Return a :class:`PostgresSaver` on a connection pool, with its tables set up.

    The pool's connections use autocommit, ``prepare_threshold=0`` and ``dict_row``, as the saver
    requires. ``setup()`` runs once per database URL and process, under an advisory lock so that
    concurrent workers do not race on the migrations.

    Args:
        url: ``postgresql://`` (or ``postgresql+psycopg://``) URL.
        max_size: Most connections in the pool.

    Returns:
        The saver; close its pool with ``saver.conn.close()``.

    Raises:
        ImportError: If the ``postgres`` extra is not installed.
    """
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(_INSTALL_HINT) from exc

    conninfo = libpq_url(url)
    pool: ConnectionPool = ConnectionPool(
        conninfo,
        min_size=1,
        max_size=max(2, max_size),
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=True,
        name="convmem-checkpoints",
    )
    saver = PostgresSaver(pool)  # type: ignore[arg-type]
    try:
        with _setup_guard:
            if conninfo not in _setup_done:
                with pool.connection() as lock_conn:
                    # Poll instead of a blocking pg_advisory_lock: setup() runs CREATE INDEX
                    # CONCURRENTLY, which waits for every open transaction, including a second
                    # process's blocked lock request (a deadlock nobody detects).
                    while not _try_lock(lock_conn):
                        time.sleep(0.05)
                    try:
                        saver.setup()
                    finally:
                        lock_conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
                _setup_done.add(conninfo)
    except BaseException:
        logger.error("checkpoint setup failed at %s", mask_url(conninfo))
        pool.close()
        raise
    return saver
