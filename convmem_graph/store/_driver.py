"""A store read on SQLite through the driver's own connection, with no SQLAlchemy ``Connection``.

A call start makes two reads (the snapshot's row, the episodic search), each a statement or
three; SQLAlchemy's checkout, statement compilation cache and result wrapping cost more than
SQLite's own work there. The connection is the store's own (its pool's, or the session's), in
the driver's autocommit mode as every store connection is: each statement is its own read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, cast

from sqlalchemy import Connection, Engine

from convmem_graph.store.session import RunScope

__all__ = ["DriverOpener", "ReadOpener", "driver_read"]

#: Opens a store read on a SQLAlchemy ``Connection`` (``StoreCore._read``).
ReadOpener = Callable[[], AbstractContextManager[Connection]]
#: Opens a store read on the ``sqlite3`` driver connection (``StoreCore._driver``; SQLite only).
DriverOpener = Callable[[], AbstractContextManager[sqlite3.Connection]]


@contextmanager
def driver_read(
    engine: Engine, scope: RunScope | None, serial: AbstractContextManager[Any]
) -> Iterator[sqlite3.Connection]:
    """The ``sqlite3`` connection a store read runs on, as ``StoreCore._read`` picks its connection.

    Without a session, one checked out of the store's pool for the read (``serial``: the lock an
    in-memory database's one connection is shared under); in a session, the session's, inside its
    open transaction when there is one.
    """
    if scope is None:
        with serial:
            pooled = engine.raw_connection()
            try:
                yield cast(sqlite3.Connection, pooled.driver_connection)
            finally:
                pooled.close()
        return
    driver = cast(sqlite3.Connection, scope.conn.connection.driver_connection)
    if scope.conn.in_transaction():
        yield driver  # a read inside a write of this session: it belongs to that transaction
        return
    with serial:
        yield driver
