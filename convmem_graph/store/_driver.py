"""Store statements on the driver's own connection, under SQLAlchemy's ``Connection``.

A call start makes two reads (the snapshot's row, the episodic search), each a statement or
three; SQLAlchemy's checkout, statement compilation cache and result wrapping cost more than
SQLite's own work there. The connection is the store's own (its pool's, or the session's), in
the driver's autocommit mode as every store connection is: each statement is its own read.

A live turn's small statements (:func:`select_rows`, :func:`driver_execute`,
:func:`execute_rows`) run on the driver's connection too: on SQLite's ``sqlite3`` connection,
and on PostgreSQL's psycopg connection inside the SQLAlchemy ``Connection``'s open transaction
(a run's), compiled once, prepared on the server as psycopg prepares every statement of the
store's connections. SQLAlchemy's work around such a statement (cache key, execution context,
result wrapping) cost more client CPU than psycopg's own.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple, TypeVar, cast

from sqlalchemy import CompoundSelect, Connection, Engine, Insert, Select, TextClause
from sqlalchemy.exc import DBAPIError

from convmem_graph.store.session import RunScope

__all__ = [
    "DriverOpener",
    "ReadOpener",
    "driver_execute",
    "driver_of",
    "driver_read",
    "driver_safe",
    "execute_rows",
    "select_rows",
]

_F = TypeVar("_F", bound=Callable[..., Any])

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


def driver_safe(fn: _F) -> _F:
    """Mark a ``before_cursor_execute`` listener (``retval=True``) the driver paths call themselves.

    Such a listener (the store's lock timeout on PostgreSQL) is called by :func:`driver_execute`
    with the driver's cursor before its statement, as SQLAlchemy would call it; any other
    listener sends the statement through SQLAlchemy, so statement counts and tracing see it.
    """
    fn.driver_safe = True  # type: ignore[attr-defined]
    return fn


def _on_driver(conn: Connection) -> bool:
    """Whether ``conn``'s statements may skip SQLAlchemy: no echo, no listeners but driver-safe ones.

    On PostgreSQL only inside the ``Connection``'s open transaction (a run's): a statement sent
    on the driver outside it would begin a transaction SQLAlchemy does not know to end.
    """
    if conn._echo or conn.dispatch.after_cursor_execute:
        return False
    before = conn.dispatch.before_cursor_execute
    if before and not all(getattr(fn, "driver_safe", False) for fn in before):
        return False
    return conn.dialect.name == "sqlite" or conn.in_transaction()


def _psycopg_of(conn: Connection) -> Any:
    """The psycopg connection under a SQLAlchemy ``Connection`` of a PostgreSQL store."""
    return conn.connection.driver_connection


def _pg_execute(conn: Connection, sql: str, params: Any) -> Any:
    """Run one statement on ``conn``'s psycopg connection, in its transaction; the open cursor.

    The driver-safe listeners run first on the same cursor; a driver error goes through
    SQLAlchemy's own handling (its error events, a lost connection invalidated) and is raised
    as SQLAlchemy raises it.
    """
    cursor = _psycopg_of(conn).cursor()
    try:
        for listener in conn.dispatch.before_cursor_execute:
            sql, params = listener(conn, cursor, sql, params, None, False)
        cursor.execute(sql, params)
    except conn.dialect.loaded_dbapi.Error as exc:
        conn._handle_dbapi_exception(exc, sql, params, cursor, None)
        raise  # not reached: the call above raises SQLAlchemy's exception
    return cursor


def driver_execute(conn: Connection, sql: str, params: Any = ()) -> Any:
    """Run one statement on ``conn``'s driver connection, in its open transaction if any.

    For the live turn's small statements (the memory's row, its ``updated_at``, the snapshot
    drop, the cursors, the reads of :func:`select_rows`): SQLAlchemy's work around such a
    statement (cache key, execution context, result wrapping, events) cost several times
    SQLite's own. ``sql`` is in the driver's parameter style (``?`` on SQLite, ``%s`` or
    ``%(name)s`` on PostgreSQL). A driver error is raised as SQLAlchemy raises it
    (``sqlalchemy.exc.OperationalError`` and its kin), so callers catch the same exceptions
    either way. While the engine echoes SQL or has cursor-execute listeners other than
    :func:`driver_safe` ones (statement counts in tests, tracing), and on PostgreSQL outside a
    transaction, the statement goes through SQLAlchemy's ``exec_driver_sql`` instead, so they
    see it. Returns a cursor: ``fetchall()`` and ``rowcount`` either way.
    """
    if not _on_driver(conn):
        return conn.exec_driver_sql(sql, params if isinstance(params, Mapping) else tuple(params))
    if conn.dialect.name != "sqlite":
        return _pg_execute(conn, sql, params)
    try:
        return driver_of(conn).execute(sql, params)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc


_Decode = tuple[tuple[int, Callable[[Any], Any]], ...]


class _Plan(NamedTuple):
    """A statement compiled once for a dialect: its SQL, its binds, its row shape."""

    sql: str
    #: (name, the statement's own value when the caller gives none, bind processor or None); on
    #: SQLite in the order of the ``?`` they fill.
    binds: tuple[tuple[str, Any, Callable[[Any], Any] | None], ...]
    #: Names of the expanding ``IN`` binds (rendered as ``__[POSTCOMPILE_<name>]`` in ``sql``).
    expanding: frozenset[str]
    row: Any  # a namedtuple class of the selected columns (None: a statement without rows)
    #: (column, result processor) where one applies; None until PostgreSQL's first read
    decode: _Decode | None
    compiled: Any  # SQLAlchemy's compiled form (PostgreSQL renders its expanding binds through it)


_PlanKey = tuple[str, Any, tuple[str, ...] | None]
_plans: dict[_PlanKey, _Plan] = {}
_expanded: dict[tuple[_PlanKey, tuple[int, ...]], str] = {}
_plans_lock = threading.Lock()


def _plan(conn: Connection, stmt: Any, keys: tuple[str, ...] | None = None) -> _Plan:
    """``stmt`` compiled for ``conn``'s dialect (for a DML statement: with the columns ``keys``)."""
    cache_key = (conn.dialect.name, stmt, keys)
    plan = _plans.get(cache_key)  # a dict read needs no lock; a miss compiles under it
    if plan is not None:
        return plan
    with _plans_lock:
        plan = _plans.get(cache_key)
        if plan is not None:
            return plan
        compiled = stmt.compile(dialect=conn.dialect, column_keys=list(keys) if keys is not None else None)
        sqlite = conn.dialect.name == "sqlite"
        if (sqlite and compiled.positiontup is None) or compiled.literal_execute_params:
            raise ValueError("the driver paths take statements of plain binds and expanding IN only")
        processors: dict[str, Any] = dict(compiled._bind_processors)
        names = compiled.positiontup if sqlite else list(dict.fromkeys(compiled.bind_names.values()))
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        defaults = {name: bind.value for name, bind in by_name.items()}
        # Columns whose Python-side default SQLAlchemy fills in at execution (``default=0``):
        # scalar ones are the bind's value here; any other kind leaves the statement to SQLAlchemy.
        for col, kind in [(c, "default") for c in getattr(compiled, "insert_prefetch", ())] + [
            (c, "onupdate") for c in getattr(compiled, "update_prefetch", ())
        ]:
            default = getattr(col, kind)
            if default is None or not default.is_scalar:
                raise ValueError(f"column {col.key} has a default the driver paths cannot fill")
            defaults[col.key] = default.arg
        binds = tuple((name, defaults[name], processors.get(name)) for name in names)
        expanding = frozenset(compiled.bind_names[b] for b in compiled.post_compile_params)
        shape: Any = None
        decode: _Decode | None = None
        if getattr(stmt, "is_select", False):
            columns = list(stmt.selected_columns)
            shape = _row_class([c.key or f"c{i}" for i, c in enumerate(columns)])
            # PostgreSQL's processors depend on the column's type code: taken at the first read.
            decode = _decoders(conn, stmt, None) if sqlite else None
        plan = _plans[cache_key] = _Plan(compiled.string, binds, expanding, shape, decode, compiled)
        return plan


def _row_class(names: Sequence[str]) -> Any:
    """A named tuple class of these column names (invalid or repeated names renamed)."""
    return namedtuple("Row", names, rename=True)  # noqa: PYI024


def _decoders(conn: Connection, stmt: Any, codes: Sequence[Any] | None) -> _Decode:
    """(column, the dialect's result processor of its type) where one applies: JSON, booleans."""
    decode = []
    for i, col in enumerate(stmt.selected_columns):
        code = None if codes is None else codes[i]
        processor = col.type.dialect_impl(conn.dialect).result_processor(conn.dialect, code)
        if processor is not None:
            decode.append((i, processor))
    return tuple(decode)


def _sql_for(key: _PlanKey, plan: _Plan, params: Mapping[str, Any], dialect: str) -> str:
    """The plan's SQL with each expanding bind rendered for as many values as given.

    SQLite: one ``?`` per value. PostgreSQL: SQLAlchemy's own rendering (``%(ids_1)s::VARCHAR,
    ...``, bind casts kept), so the server sees the statement ``conn.execute`` would send.
    """
    sizes = tuple(len(params.get(name, default)) for name, default, _ in plan.binds if name in plan.expanding)
    sql = _expanded.get((key, sizes))
    if sql is None:
        if dialect == "sqlite":
            sql = plan.sql
            for name, size in zip((n for n, _, _ in plan.binds if n in plan.expanding), sizes, strict=True):
                sql = sql.replace(f"__[POSTCOMPILE_{name}]", ", ".join("?" * size))
        else:
            names = (n for n, _, _ in plan.binds if n in plan.expanding)
            shape = {name: [None] * size for name, size in zip(names, sizes, strict=True)}
            sql = plan.compiled._process_parameters_for_postcompile(shape).statement
        with _plans_lock:
            _expanded[(key, sizes)] = sql
    return sql


def _sqlite_values(plan: _Plan, params: Mapping[str, Any]) -> list[Any]:
    values: list[Any] = []
    for name, default, processor in plan.binds:
        value = params[name] if name in params else default
        if name in plan.expanding:
            values.extend(value if processor is None else map(processor, value))
        else:
            values.append(value if processor is None else processor(value))
    return values


def _pg_values(plan: _Plan, params: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, default, processor in plan.binds:
        value = params[name] if name in params else default
        if name in plan.expanding:
            for i, item in enumerate(value, start=1):
                values[f"{name}_{i}"] = item if processor is None else processor(item)
        else:
            values[name] = value if processor is None else processor(value)
    return values


def _bound(conn: Connection, stmt: Any, params: Mapping[str, Any], keys: tuple[str, ...] | None) -> Any:
    """(plan, SQL, driver parameters) of ``stmt`` with ``params``; None where SQLAlchemy must run it."""
    dialect = conn.dialect.name
    try:
        plan = _plan(conn, stmt, keys)
    except ValueError:
        if keys is None and getattr(stmt, "is_select", False):
            raise  # a select the driver paths were written for: a bug to see, not to hide
        return None
    sql = plan.sql
    if plan.expanding:
        defaults = {name: default for name, default, _ in plan.binds}
        if any(not params.get(name, defaults[name]) for name in plan.expanding):
            return None  # SQLAlchemy renders an empty set
        sql = _sql_for((dialect, stmt, keys), plan, params, dialect)
    values = _sqlite_values(plan, params) if dialect == "sqlite" else _pg_values(plan, params)
    return plan, sql, values


def select_rows(
    conn: Connection, stmt: Select[Any] | CompoundSelect[Any] | TextClause, params: Mapping[str, Any]
) -> list[Any]:
    """The rows of a module-level select, read on the driver (SQLite's, or PostgreSQL's in a run).

    For the live turn's small reads of one memory (its variable specs, values, summary,
    cursors, newest messages, the facts a turn touches): SQLAlchemy's execution and result
    wrapping cost several times the read. Rows are named tuples with the columns' values as
    SQLAlchemy's result would give them (its bind and result processors applied: JSON decoded,
    booleans as ``bool``); read them by attribute or position. ``stmt`` must be long-lived (its
    compiled form is kept, keyed by the object); an expanding ``IN`` given an empty list goes
    through SQLAlchemy (which renders an empty set), and so does every statement where
    :func:`driver_execute` would (listeners, echo, PostgreSQL outside a transaction).
    """
    if not _on_driver(conn):
        return list(conn.execute(stmt, dict(params)))
    bound = _bound(conn, stmt, params, None)
    if bound is None:
        return list(conn.execute(stmt, dict(params)))
    plan, sql, values = bound
    if conn.dialect.name == "sqlite":
        try:
            rows = driver_of(conn).execute(sql, values).fetchall()
        except sqlite3.Error as exc:
            raise DBAPIError.instance(sql, values, exc, sqlite3.Error) from exc
    else:
        cursor = _pg_execute(conn, sql, values)
        try:
            rows = cursor.fetchall()
            if plan.decode is None:
                plan = _first_read(conn, stmt, plan, cursor.description)
        finally:
            cursor.close()
    if not plan.decode:
        return [plan.row._make(r) for r in rows]
    out = []
    for r in rows:
        cells = list(r)
        for i, processor in plan.decode:
            cells[i] = processor(cells[i])
        out.append(plan.row._make(cells))
    return out


def _first_read(conn: Connection, stmt: Any, plan: _Plan, description: Sequence[Any]) -> _Plan:
    """A PostgreSQL plan completed by its first read: result processors by the columns' type codes.

    A ``text`` select's rows are named by the cursor's columns, their values as the driver gives
    them (as SQLAlchemy gives a ``text`` statement's).
    """
    if plan.row is None:
        plan = plan._replace(row=_row_class([d.name for d in description]), decode=())
    else:
        plan = plan._replace(decode=_decoders(conn, stmt, [d.type_code for d in description]))
    with _plans_lock:
        _plans[(conn.dialect.name, stmt, None)] = plan
    return plan


def execute_rows(conn: Connection, stmt: Any, params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> int:
    """Run a module-level write (Core DML or ``text``) with one row of ``params`` or a list of rows.

    Inside the ``Connection``'s open transaction it goes on the driver's connection (psycopg's,
    or SQLite's ``sqlite3``: a live turn's upserts, audit rows and fragment writes), compiled
    once per set of parameter names, with the binds' processors and the columns' scalar defaults
    applied (JSON sent as SQLAlchemy sends it); a list of rows is the driver's ``executemany``
    (on psycopg one round trip, the statement prepared once). Anywhere else (listeners, echo,
    no transaction, a column default that is not a scalar) it is ``conn.execute``. The rows
    written are the same. Returns the rowcount (summed over a list's rows).
    """
    many = not isinstance(params, Mapping)
    sqlite = conn.dialect.name == "sqlite"
    # SQLite: only inside the Connection's transaction (a store write's). Outside one SQLAlchemy
    # autobegins and the caller's commit ends it; a driver write there would leave nothing to end.
    if not _on_driver(conn) or (many and not params) or (sqlite and not conn.in_transaction()):
        return int(conn.execute(stmt, params if many else dict(params)).rowcount)  # type: ignore[arg-type]
    rows: Sequence[Mapping[str, Any]] = params if many else [params]  # type: ignore[assignment, list-item]
    keys = None if _is_text(stmt) else tuple(rows[0])
    bound = [_bound(conn, stmt, row, keys) for row in rows]
    if any(b is None for b in bound) or len({b[1] for b in bound}) != 1:
        return int(conn.execute(stmt, params if many else dict(params)).rowcount)  # type: ignore[arg-type]
    sql = bound[0][1]
    if sqlite:
        return _sqlite_write(conn, sql, [b[2] for b in bound] if many else bound[0][2], many)
    if len(bound) == 1:
        cursor = _pg_execute(conn, sql, bound[0][2])
    else:
        values = [b[2] for b in bound]
        if _is_insert(stmt):
            written = _pg_insert_rows(conn, sql, values)
            if written is not None:
                return written
        cursor = _pg_execute_many(conn, sql, values)
    try:
        return int(cursor.rowcount)
    finally:
        cursor.close()


def _sqlite_write(conn: Connection, sql: str, values: Any, many: bool) -> int:
    """One write on ``conn``'s ``sqlite3`` connection (``executemany`` for a list); its rowcount.

    ``sqlite3`` sums an ``executemany``'s rowcount over its rows, as SQLAlchemy's result reports it.
    """
    driver = driver_of(conn)
    try:
        cursor = driver.executemany(sql, values) if many else driver.execute(sql, values)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, values, exc, sqlite3.Error) from exc
    try:
        return int(cursor.rowcount)
    finally:
        cursor.close()


def _pg_execute_many(conn: Connection, sql: str, seq: list[Any]) -> Any:
    """:func:`_pg_execute` of one statement for each parameter set (psycopg's ``executemany``)."""
    cursor = _psycopg_of(conn).cursor()
    try:
        for listener in conn.dispatch.before_cursor_execute:
            sql, _ = listener(conn, cursor, sql, seq[0], None, True)
        cursor.executemany(sql, seq)
    except conn.dialect.loaded_dbapi.Error as exc:
        conn._handle_dbapi_exception(exc, sql, seq, cursor, None)
        raise  # not reached: the call above raises SQLAlchemy's exception
    return cursor


_NAMED = re.compile(r"%\((\w+)\)s")
_INSERT_HEAD = re.compile(r"INSERT INTO (\w+) \(([\w, ]+)\)")
# One row of placeholders and nothing after it (no ``ON CONFLICT``, no ``RETURNING``).
_ONE_VALUE = r'%\(\w+\)s(?:::[\w ]+(?:\(\d+\))?)?(?: COLLATE "[\w.-]+")?'
_ONE_ROW = re.compile(rf"\({_ONE_VALUE}(?:, {_ONE_VALUE})*\)")
_JSON_SCALARS = (str, int, float, bool, type(None))


def _compact(value: Any, *, allow_nan: bool = True) -> str:
    """JSON compactly, non-ASCII text kept as is: the engines' ``json_serializer``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=allow_nan)


def _pg_insert_rows(conn: Connection, sql: str, seq: list[dict[str, Any]]) -> int | None:
    """A module-level plain ``INSERT`` of many rows as one statement; its rowcount.

    psycopg's ``executemany`` sends one statement per row (one round trip, but each row its own
    statement): a ``FOR EACH STATEMENT`` trigger fires once per row, and the facts' triggers
    (migration 18) move the memory row once per statement. Here the rows go as one JSON array
    read by ``json_populate_recordset`` with the table's row type: one parameter and one text
    whatever the number of rows, so psycopg parses and prepares it once (a multi-row
    ``VALUES`` of n rows is a new text for each n, and psycopg's Python parse of its
    placeholders cost more than the statements it saved). The rows are written in the same
    order with the same values: JSON columns carry the text the engine's serializer makes
    (:func:`~convmem_graph.store.engine.dumps`, compact, which is what a nested value in a
    compact document reads as), and every other value here is a string, number, boolean or
    NULL. None when the statement or a value is not of that kind: the caller runs it as before.
    """
    head, values = sql.rsplit(" VALUES ", 1)
    found = _INSERT_HEAD.fullmatch(head)
    if found is None or _ONE_ROW.fullmatch(values) is None:
        return None
    names = _NAMED.findall(values)
    table, columns = found.group(1), [c.strip() for c in found.group(2).split(",")]
    if len(columns) != len(names):
        return None
    from psycopg.adapt import PyFormat  # noqa: PLC0415 (PostgreSQL only: psycopg is optional)
    from psycopg.types.json import Json  # noqa: PLC0415

    # The connection's serializer of JSON values (SQLAlchemy sets the engine's on each one).
    serializer = getattr(_psycopg_of(conn).adapters.get_dumper(Json, PyFormat.AUTO), "_dumps", None)
    rows = []
    for row in seq:
        out = {}
        for column, name in zip(columns, names, strict=True):
            value = row[name]
            if type(value) is Json:
                if (value.dumps or serializer) is not _compact:
                    return None
                value = value.obj
            elif not isinstance(value, _JSON_SCALARS):
                return None
            out[column] = value
        rows.append(out)
    try:
        document = _compact(rows, allow_nan=False)
    except ValueError:
        return None  # NaN or infinity: JSON has no spelling for them
    listed = ", ".join(columns)
    statement = f"{head} SELECT {listed} FROM json_populate_recordset(NULL::{table}, %s::json)"
    cursor = _pg_execute(conn, statement, (document,))
    try:
        return int(cursor.rowcount)
    finally:
        cursor.close()


def _is_insert(stmt: Any) -> bool:
    return isinstance(stmt, Insert)


def _is_text(stmt: Any) -> bool:
    return isinstance(stmt, TextClause)
