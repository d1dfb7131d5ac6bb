"""The live turn's statements on psycopg's connection give what SQLAlchemy's statements gave.

Inside a run's transaction on PostgreSQL, ``select_rows`` and ``execute_rows`` send the store's
statements on the psycopg connection under the SQLAlchemy ``Connection`` (compiled once,
SQLAlchemy's bind and result processors applied). Here: their rows against ``conn.execute`` of
the same statements (plain, compound, ``text``, expanding ``IN``), the writes against the rows
SQLAlchemy's statements write (scalar column defaults, ``executemany``), a driver error raised as
SQLAlchemy's, the store's lock timeout still set before a write, and SQLAlchemy's path whenever
a listener, echo or no transaction is in the way.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, event, select
from sqlalchemy.engine import Connection as SAConnection
from sqlalchemy.exc import IntegrityError

from convmem_graph.store import MemoryStore
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _queries as Q
from convmem_graph.store._driver import execute_rows, select_rows
from convmem_graph.store._summary_facts import STRONGEST_BOTH
from convmem_graph.store.engine import insert_ignore
from convmem_graph.store.schema import audit, memories
from tests.unit.store.driver_fill import T0
from tests.unit.store.driver_fill import fill_memory as _fill

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def store(fresh_pg_store: MemoryStore) -> MemoryStore:
    """The module's store: on a schema of the test's own (``conftest.fresh_pg_store``)."""
    return fresh_pg_store


@pytest.fixture
def sqlalchemy_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Statements that went through SQLAlchemy's execution (``Connection._execute_context``)."""
    seen: list[str] = []
    original = SAConnection._execute_context

    def spy(self: SAConnection, dialect: Any, constructor: Any, statement: Any, *args: Any, **kw: Any) -> Any:
        seen.append(str(statement)[:60])
        return original(self, dialect, constructor, statement, *args, **kw)

    monkeypatch.setattr(SAConnection, "_execute_context", spy)
    return seen


def _facts(store: MemoryStore) -> list[str]:
    with store.read() as conn:
        return [
            str(r[0]) for r in conn.execute(select(FQ.fragments.c.id).where(FQ.fragments.c.memory_id == "m1"))
        ]


READS: list[tuple[str, Any, dict[str, Any]]] = [
    ("specs", Q.SPECS, {"mid": "m1"}),
    ("summary", Q.SUMMARY, {"mid": "m1"}),
    ("cursors", Q.CURSORS, {"mid": "m1"}),
    ("recent", Q.RECENT_MESSAGES, {"mid": "m1", "limit": 5}),
    (
        "strongest, text",
        STRONGEST_BOTH,
        {"mid": "m1", "limit": 10, "now": T0, "durable": False, "temporary": True},
    ),
]


@pytest.mark.parametrize(("name", "stmt", "params"), READS, ids=[r[0] for r in READS])
def test_reads_in_a_run_equal_sqlalchemy(
    store: MemoryStore, sqlalchemy_calls: list[str], name: str, stmt: Any, params: dict[str, Any]
) -> None:
    _fill(store)
    with store.run("m1") as run, run.read() as conn:
        expected = [tuple(r) for r in conn.execute(stmt, params)]
        sqlalchemy_calls.clear()
        got = select_rows(conn, stmt, params)
        assert sqlalchemy_calls == []  # on psycopg's connection
    assert expected, name
    assert [tuple(r) for r in got] == expected
    assert [[type(v) for v in r] for r in got] == [[type(v) for v in r] for r in expected]


def test_expanding_and_compound_reads_equal_sqlalchemy(
    store: MemoryStore, sqlalchemy_calls: list[str]
) -> None:
    _fill(store)
    ids = _facts(store)
    assert len(ids) >= 2
    with store.run("m1") as run, run.read() as conn:
        cases: list[tuple[Any, dict[str, Any]]] = [
            (Q.FRAGMENTS_BY_ID, {"mid": "m1", "ids": ids[:1]}),
            (Q.FRAGMENTS_BY_ID, {"mid": "m1", "ids": ids}),  # another length: its own rendering
            (FQ.PG_RELATED, {"mid": "m1", "ckeys": ["hobby:围棋", "nothing"], "hashes": [1, 2]}),
            (
                FQ.pg_context(True, (None,)),
                {"mid": "m1", "limit": 5, "per_prefix": 3, "lo1": "a", "hi1": "z"},
            ),
        ]
        for stmt, params in cases:
            expected = [tuple(r) for r in conn.execute(stmt, params)]
            sqlalchemy_calls.clear()
            assert [tuple(r) for r in select_rows(conn, stmt, params)] == expected
            assert sqlalchemy_calls == []
        # An empty expanding list is SQLAlchemy's to render (an empty set).
        assert select_rows(conn, Q.FRAGMENTS_BY_ID, {"mid": "m1", "ids": []}) == []
        assert sqlalchemy_calls != []
    # Attribute access as on SQLAlchemy's rows.
    with store.run("m1") as run, run.read() as conn:
        rows = select_rows(conn, Q.FRAGMENTS_BY_ID, {"mid": "m1", "ids": ids})
    assert sorted(r.id for r in rows) == sorted(ids)


def test_writes_fill_scalar_defaults_and_many_rows(store: MemoryStore, sqlalchemy_calls: list[str]) -> None:
    row = {"memory_id": "m2", "description": "", "created_at": T0, "updated_at": T0}
    entries = [
        {
            "memory_id": "m2",
            "at": T0 + i,
            "kind": "fact",
            "object_id": f"f{i}",
            "action": "add",
            "after": {"i": i},
        }
        for i in range(3)
    ]
    with store.run("m2") as run, run.transaction() as conn:
        sqlalchemy_calls.clear()
        assert execute_rows(conn, insert_ignore("postgresql", memories), row) == 1
        assert execute_rows(conn, insert_ignore("postgresql", memories), row) == 0  # ignored
        execute_rows(conn, Q.INSERT_AUDIT, entries)
        execute_rows(conn, Q.INSERT_AUDIT, entries[:1])
        assert sqlalchemy_calls == []
    with store.read() as conn:
        stored = conn.execute(select(memories).where(memories.c.memory_id == "m2")).one()._mapping
        rows = conn.execute(
            select(audit.c.object_id, audit.c.after, audit.c.before)
            .where(audit.c.memory_id == "m2")
            .order_by(audit.c.id)
        ).all()
    # The columns' Python-side defaults, as SQLAlchemy's insert fills them.
    assert (stored["extracted_seq"], stored["summarized_seq"], stored["facts_dirty"]) == (0, 0, 0)
    assert [tuple(r) for r in rows] == [
        ("f0", {"i": 0}, None),
        ("f1", {"i": 1}, None),
        ("f2", {"i": 2}, None),
        ("f0", {"i": 0}, None),
    ]


def test_driver_error_is_sqlalchemys_and_the_run_rolls_back(store: MemoryStore) -> None:
    store.ensure_memory("m3")
    bad = {"memory_id": "m3-new", "description": "", "created_at": T0, "updated_at": T0, "facts_dirty": None}
    with (
        pytest.raises(IntegrityError, match="facts_dirty"),
        store.run("m3") as run,
        run.transaction() as conn,
    ):
        execute_rows(
            conn,
            Q.INSERT_AUDIT,
            [{"memory_id": "m3", "at": T0, "kind": "fact", "object_id": "f", "action": "add"}],
        )
        execute_rows(conn, insert_ignore("postgresql", memories), bad)
    with store.read() as conn:
        assert conn.execute(select(audit.c.id).where(audit.c.memory_id == "m3")).all() == []
    assert store.ensure_memory("m3-new").memory_id == "m3-new"  # the pool's connection is usable again


def test_lock_timeout_is_set_before_a_driver_write(store: MemoryStore) -> None:
    """The store's bounded lock wait (a ``before_cursor_execute`` listener) runs on the driver path too."""
    from convmem_graph.store.engine import _LOCK_TIMEOUT_KEY

    store.ensure_memory("m4")
    with store.run("m4") as run, run.transaction() as conn:
        conn.info[_LOCK_TIMEOUT_KEY] = "1234ms"
        execute_rows(conn, Q.SET_FACTS_DIRTY, {"mid": "m4", "dirty": 0})
        assert conn.info[_LOCK_TIMEOUT_KEY] is None
        assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == "1234ms"


def test_sqlalchemy_path_with_listeners_or_outside_a_transaction(
    store: MemoryStore, sqlalchemy_calls: list[str]
) -> None:
    _fill(store)
    seen: list[str] = []

    def record(_c: Connection, _k: Any, sql: str, *_: Any) -> None:
        seen.append(sql)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        with store.run("m1") as run, run.read() as conn:
            assert select_rows(conn, Q.SPECS, {"mid": "m1"})
            execute_rows(conn, Q.SET_FACTS_DIRTY, {"mid": "m1", "dirty": 0})
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert any("cm_variable_specs" in s for s in seen)
    assert any("facts_dirty" in s for s in seen)
    # A read on the store itself has no run transaction: SQLAlchemy's statement, its read ended.
    sqlalchemy_calls.clear()
    with store.read() as conn:
        assert select_rows(conn, Q.SPECS, {"mid": "m1"})
    assert sqlalchemy_calls != []
