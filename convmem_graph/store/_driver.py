"""A store read on SQLite through the driver's own connection, with no SQLAlchemy ``Connection``.

A call start makes two reads (the snapshot's row, the episodic search), each a statement or
three; SQLAlchemy's checkout, statement compilation cache and result wrapping cost more than
SQLite's own work there. The connection is the store's own (its pool's, or the session's), in
the driver's autocommit mode as every store connection is: each statement is its own read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from convmem_graph.store.session import RunScope

__all__ = ["DriverOpener", "ReadOpener", "driver_execute", "driver_of", "driver_read"]

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


def driver_of(conn: Connection) -> sqlite3.Connection:
    """The ``sqlite3`` connection under a SQLAlchemy ``Connection`` of a SQLite store."""
    return cast(sqlite3.Connection, conn.connection.driver_connection)


def driver_execute(conn: Connection, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
    """Run one statement on ``conn``'s ``sqlite3`` connection, in its open transaction if any.

    For the live turn's small fixed writes (the memory's row, its ``updated_at``, the snapshot
    drop, the cursors): SQLAlchemy's work around such a statement (cache key, execution context,
    result wrapping, events) cost several times SQLite's own. A driver error is raised as
    SQLAlchemy raises it (``sqlalchemy.exc.OperationalError`` and its kin), so callers catch the
    same exceptions either way.
    """
    try:
        return driver_of(conn).execute(sql, params)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc
