"""A store read on SQLite through the driver's own connection, with no SQLAlchemy ``Connection``.

A call start makes two reads (the snapshot's row, the episodic search), each a statement or
three; SQLAlchemy's checkout, statement compilation cache and result wrapping cost more than
SQLite's own work there. The connection is the store's own (its pool's, or the session's), in
the driver's autocommit mode as every store connection is: each statement is its own read.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple, cast

from sqlalchemy import Connection, Engine, Select
from sqlalchemy.exc import DBAPIError

from convmem_graph.store.session import RunScope

__all__ = ["DriverOpener", "ReadOpener", "driver_execute", "driver_of", "driver_read", "select_rows"]

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


def driver_execute(conn: Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """Run one statement on ``conn``'s ``sqlite3`` connection, in its open transaction if any.

    For the live turn's small statements (the memory's row, its ``updated_at``, the snapshot
    drop, the cursors, the reads of :func:`select_rows`): SQLAlchemy's work around such a
    statement (cache key, execution context, result wrapping, events) cost several times
    SQLite's own. A driver error is raised as SQLAlchemy raises it
    (``sqlalchemy.exc.OperationalError`` and its kin), so callers catch the same exceptions
    either way. While the engine echoes SQL or has cursor-execute listeners (statement counts in
    tests, tracing), the statement goes through SQLAlchemy's ``exec_driver_sql`` instead, so they
    see it. Returns a cursor: ``fetchall()`` and ``rowcount`` either way.
    """
    if conn._echo or conn.dispatch.before_cursor_execute or conn.dispatch.after_cursor_execute:
        return conn.exec_driver_sql(sql, tuple(params))
    try:
        return driver_of(conn).execute(sql, params)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc


class _Plan(NamedTuple):
    """A select compiled once for SQLite: its SQL, its binds in order, its row shape."""

    sql: str
    #: (name, the statement's own value when the caller gives none, bind processor or None)
    binds: tuple[tuple[str, Any, Callable[[Any], Any] | None], ...]
    #: Names of the expanding ``IN`` binds (rendered as ``__[POSTCOMPILE_<name>]`` in ``sql``).
    expanding: frozenset[str]
    row: Any  # a namedtuple class of the selected columns
    decode: tuple[tuple[int, Callable[[Any], Any]], ...]  # (column, result processor) where one applies


_plans: dict[Select[Any], _Plan] = {}
_expanded: dict[tuple[Select[Any], tuple[int, ...]], str] = {}
_plans_lock = threading.Lock()


def _plan(conn: Connection, stmt: Select[Any]) -> _Plan:
    with _plans_lock:
        plan = _plans.get(stmt)
        if plan is not None:
            return plan
        compiled = stmt.compile(dialect=conn.dialect)
        if compiled.positiontup is None or compiled.literal_execute_params:
            raise ValueError("select_rows takes selects of plain binds and expanding IN only")
        processors: dict[str, Any] = dict(compiled._bind_processors)
        binds = tuple(
            (name, compiled.binds[name].value, processors.get(name)) for name in compiled.positiontup
        )
        expanding = frozenset(compiled.bind_names[b] for b in compiled.post_compile_params)
        columns = list(stmt.selected_columns)
        row = namedtuple("Row", [c.key or f"c{i}" for i, c in enumerate(columns)], rename=True)  # type: ignore[misc]  # noqa: PYI024
        decode = []
        for i, col in enumerate(columns):
            # The dialect's own result processor of the column's type (JSON decoding, 0/1 to bool).
            processor = col.type.dialect_impl(conn.dialect).result_processor(conn.dialect, None)
            if processor is not None:
                decode.append((i, processor))
        plan = _plans[stmt] = _Plan(compiled.string, binds, expanding, row, tuple(decode))
        return plan


def _sql_for(stmt: Select[Any], plan: _Plan, params: Mapping[str, Any]) -> str:
    """The plan's SQL with each expanding bind rendered as one ``?`` per value given."""
    sizes = tuple(len(params.get(name, default)) for name, default, _ in plan.binds if name in plan.expanding)
    sql = _expanded.get((stmt, sizes))
    if sql is None:
        sql = plan.sql
        for name, size in zip((n for n, _, _ in plan.binds if n in plan.expanding), sizes, strict=True):
            sql = sql.replace(f"__[POSTCOMPILE_{name}]", ", ".join("?" * size))
        with _plans_lock:
            _expanded[(stmt, sizes)] = sql
    return sql


def select_rows(conn: Connection, stmt: Select[Any], params: Mapping[str, Any]) -> list[Any]:
    """The rows of a module-level select, read on SQLite's driver; on PostgreSQL through SQLAlchemy.

    For the live turn's small reads of one memory (its variable specs, values, summary,
    cursors, newest messages, the facts a turn touches): on SQLite SQLAlchemy's execution and
    result wrapping cost several times the read. Rows are named tuples with the columns' values
    as SQLAlchemy's result would give them (its bind and result processors applied: JSON
    decoded, booleans as ``bool``); read them by attribute or position. ``stmt`` must be
    long-lived (its compiled form is kept, keyed by the object); an expanding ``IN`` given an
    empty list goes through SQLAlchemy (which renders an empty set).
    """
    if conn.dialect.name != "sqlite":
        return list(conn.execute(stmt, dict(params)))
    plan = _plan(conn, stmt)
    sql = plan.sql
    values: list[Any] = []
    if plan.expanding:
        if any(not params.get(name, default) for name, default, _ in plan.binds if name in plan.expanding):
            return list(conn.execute(stmt, dict(params)))
        sql = _sql_for(stmt, plan, params)
    for name, default, processor in plan.binds:
        value = params[name] if name in params else default
        if name in plan.expanding:
            values.extend(value if processor is None else map(processor, value))
        else:
            values.append(value if processor is None else processor(value))
    rows = driver_execute(conn, sql, values).fetchall()
    if not plan.decode:
        return [plan.row._make(r) for r in rows]
    out = []
    for r in rows:
        cells = list(r)
        for i, processor in plan.decode:
            cells[i] = processor(cells[i])
        out.append(plan.row._make(cells))
    return out
