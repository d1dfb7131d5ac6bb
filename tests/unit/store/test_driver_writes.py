"""The live turn's statements on SQLite's driver give what SQLAlchemy's statements gave.

``select_rows`` (specs, values, summary, cursors) against ``conn.execute`` of the same select,
and the driver's fixed writes (the memory's row, ``touch``, the cursors) against the
``_queries`` statements they stand for, on one database each; a driver error is SQLAlchemy's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Connection, event, literal, select
from sqlalchemy.exc import IntegrityError

from convmem_graph.nodes._inference import _NEWEST_PAGE
from convmem_graph.store import MemoryStore
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _lang_counts as L
from convmem_graph.store import _queries as Q
from convmem_graph.store._driver import driver_execute, select_rows
from convmem_graph.store.engine import insert_ignore
from convmem_graph.store.schema import memories, snapshots
from convmem_graph.store.sqlite import SqliteBackend
from tests.unit.store.driver_fill import T0
from tests.unit.store.driver_fill import fill_memory as _fill


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStore:
    url = str(tmp_path / "d.db") if request.param == "file" else "sqlite://"
    s = MemoryStore.from_url(url)
    yield s  # type: ignore[misc]
    s.close()


#: The selects the turn reads through ``select_rows``, with the parameters beside the memory's id.
SELECTS = [
    (Q.SPECS, {}),
    (Q.VALUES, {}),
    (Q.SUMMARY, {}),
    (Q.CURSORS, {}),
    (Q.EXTRACTED_SEQ, {}),
    (Q.SUMMARIZED_SEQ, {}),
    (Q.MESSAGES_AFTER, {"after": 0, "limit": 10}),
    (Q.MESSAGES_AFTER, {"after": 1, "limit": 1}),
    (Q.MESSAGE_IDS_AFTER, {"after": 0, "limit": 10}),
    (Q.RECENT_MESSAGES, {"limit": 30}),
    (L._COUNTS, {}),
    (L._GAP, {"lo": 0, "hi": T0 * 2}),
    (L._GAP_CAPPED, {"lo": 0, "hi": T0 * 2, "cap": 3}),
    (FQ.ACTIVE_BY_CKEY, {"ckeys": ["allergy:mango", "like:围棋", "hobby:hiking", "nothing"]}),
    (FQ.ACTIVE_BY_CKEY, {"ckeys": []}),  # an empty IN: through SQLAlchemy
    (FQ.ACTIVE_BY_HASH, {"hashes": [1, 2]}),
    (FQ.RECENTLY_UPDATED, {"limit": 3}),
    (FQ.RECENTLY_UPDATED_IN_RANGE, {"lo": "a", "hi": "z", "limit": 5}),
    (FQ.ACTIVE_IN_RANGE, {"lo": "a", "hi": "z"}),
    (FQ.NEWEST_OF_LANGUAGE, {"now": T0, "cjk": True, "limit": 5}),
    (FQ.NEWEST_OF_LANGUAGE, {"now": T0, "cjk": False, "limit": 5}),
    (_NEWEST_PAGE, {"now": T0, "limit": 9}),
    (FQ.NEWEST_OF_KEY_FAMILY[0], {"now": T0, "family": "hobby:", "limit": 2}),
    (Q.MAX_SEQ, {}),
]


def test_fragments_by_id_through_the_driver(store: MemoryStore) -> None:
    _fill(store)
    ids = [f.id for f in store.list_fragments("m1")] + ["fr_absent"]
    with store.engine.connect() as conn:
        want = [tuple(r) for r in conn.execute(Q.FRAGMENTS_BY_ID, {"mid": "m1", "ids": ids})]
        got = [tuple(r) for r in select_rows(conn, Q.FRAGMENTS_BY_ID, {"mid": "m1", "ids": ids})]
    assert got == want and len(got) == len(ids) - 1


def test_the_facts_are_there(store: MemoryStore) -> None:
    _fill(store)
    assert len(store.list_fragments("m1")) >= 4  # the fact selects above read real rows


@pytest.mark.parametrize(("stmt", "more"), SELECTS)
@pytest.mark.parametrize("mid", ["m1", "m2", "absent"])
def test_select_rows_gives_sqlalchemys_rows(
    store: MemoryStore, stmt: object, more: dict[str, int], mid: str
) -> None:
    _fill(store)
    params = {"mid": mid, **more}
    with store.engine.connect() as conn:
        want = [tuple(r) for r in conn.execute(stmt, params)]  # type: ignore[call-overload]
        got = select_rows(conn, stmt, params)  # type: ignore[arg-type]
    assert [tuple(r) for r in got] == want
    # Same types too (JSON decoded, booleans as bool, not 0/1).
    assert [[type(c) for c in r] for r in got] == [[type(c) for c in r] for r in want]
    if got:
        names = [c.key for c in stmt.selected_columns]  # type: ignore[attr-defined]
        assert [getattr(got[0], n) for n in names if n] == [
            v for n, v in zip(names, want[0], strict=True) if n
        ]


def test_select_rows_reads_a_literal_in_list_and_refuses_literal_execute(store: MemoryStore) -> None:
    _fill(store)
    stmt = select(memories.c.memory_id).where(memories.c.memory_id.in_(["m1", "m2", "x"]))
    with store.engine.connect() as conn:
        assert sorted(r.memory_id for r in select_rows(conn, stmt, {})) == ["m1", "m2"]
        inline = select(memories.c.memory_id).where(
            memories.c.memory_id == literal("m1", literal_execute=True)
        )
        with pytest.raises(ValueError, match="plain binds"):
            select_rows(conn, inline, {})


def _row(conn: Connection, mid: str) -> tuple[object, ...]:
    return tuple(conn.execute(select(memories).where(memories.c.memory_id == mid)).one())


def test_driver_writes_equal_the_statements_they_stand_for(store: MemoryStore) -> None:
    backend = SqliteBackend
    with store.engine.begin() as conn:
        for mid in ("a", "b"):
            row = {
                "memory_id": mid,
                "description": "",
                "created_at": T0,
                "updated_at": T0,
                "extracted_seq": 0,
                "summarized_seq": 0,
            }
            if mid == "a":
                assert backend.ensure_memory_row(conn, row) is True
                assert backend.ensure_memory_row(conn, row) is False  # exists: ignored
            else:
                assert conn.execute(insert_ignore("sqlite", memories), row).rowcount == 1
        assert _row(conn, "a")[1:] == _row(conn, "b")[1:]
        for dirty in (None, 1, 0):
            for mid in ("a", "b"):
                conn.execute(snapshots.insert().values(memory_id=mid, data="{}", updated_at=T0))
            params = {"now": T0 + 5, "dirty": dirty}
            SqliteBackend(str(store.url), memory=True).touch(conn, {"mid": "a", **params})
            conn.execute(Q.DROP_SNAPSHOT, {"mid": "b"})
            conn.execute(
                Q.SET_UPDATED_AT if dirty is None else Q.SET_UPDATED_AT_DIRTY, {"mid": "b", **params}
            )
            assert _row(conn, "a")[1:] == _row(conn, "b")[1:]
            assert conn.execute(select(snapshots.c.memory_id)).all() == []
        for upto in (4, 2, 9):  # a lower cursor never moves it back
            driver_execute(
                conn,
                "UPDATE cm_memories SET extracted_seq = ? WHERE memory_id = ? AND extracted_seq < ?",
                (upto, "a", upto),
            )
            conn.execute(Q.ADVANCE_EXTRACTED, {"mid": "b", "upto": upto})
            assert _row(conn, "a")[1:] == _row(conn, "b")[1:]


def test_a_driver_error_is_sqlalchemys(store: MemoryStore) -> None:
    # A row missing its NOT NULL columns: the driver's IntegrityError comes as SQLAlchemy's.
    sql = "INSERT INTO cm_memories (memory_id) VALUES (?)"
    with store.engine.begin() as conn, pytest.raises(IntegrityError, match="NOT NULL"):
        driver_execute(conn, sql, ("x",))


def test_listeners_and_echo_see_the_driver_statements(store: MemoryStore) -> None:
    _fill(store)
    seen: list[str] = []

    def record(_c: object, _cur: object, sql: str, *_: object) -> None:
        seen.append(sql)

    with store.engine.connect() as conn:
        quiet = select_rows(conn, Q.SPECS, {"mid": "m1"})
    event.listen(store.engine, "before_cursor_execute", record)
    try:
        with store.engine.begin() as conn:
            heard = select_rows(conn, Q.SPECS, {"mid": "m1"})
            SqliteBackend(str(store.url), memory=True).touch(conn, {"mid": "m1", "now": T0, "dirty": None})
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert heard == quiet  # the same rows through SQLAlchemy's path
    assert [s.split()[0] for s in seen] == ["SELECT", "DELETE", "UPDATE"]


def _raw_rows(store: MemoryStore, table: str, mid: str) -> list[tuple[object, ...]]:
    """The stored cells of ``mid``'s rows, as SQLite holds them (JSON as its text), minus the memory id."""
    with store.engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        names = [r[1] for r in driver.execute(f"PRAGMA table_info({table})")]
        rows = driver.execute(f"SELECT * FROM {table} WHERE memory_id = ?", (mid,)).fetchall()
    # The audit's ids count both memories' rows; facts_cut is random(), snap_rev a clock of all memories.
    skip = {"memory_id", "id", "facts_cut", "snap_rev"}
    if table not in ("cm_audit", "cm_memories"):
        skip = {"memory_id"}
    keep = [i for i, n in enumerate(names) if n not in skip]
    return sorted(tuple(r[i] for i in keep) for r in rows)


def test_execute_rows_on_sqlites_driver_writes_what_sqlalchemy_writes(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's upserts, audit rows and fragment writes: the driver path's stored bytes are SQLAlchemy's."""
    from sqlalchemy.engine import Connection as SAConnection

    from convmem_graph.models import Fragment
    from convmem_graph.store._audit import audit_row
    from convmem_graph.store._driver import execute_rows
    from convmem_graph.store._fragments import _to_row, _update_statement
    from convmem_graph.store._queries import INSERT_AUDIT, INSERT_FRAGMENTS
    from convmem_graph.store.engine import execute_upsert, upsert
    from convmem_graph.store.schema import summaries, variables

    seen: list[str] = []
    original = SAConnection._execute_context

    def spy(
        self: SAConnection, dialect: object, constructor: object, statement: object, *a: object, **k: object
    ):  # type: ignore[no-untyped-def]
        seen.append(str(statement)[:40])
        return original(self, dialect, constructor, statement, *a, **k)  # type: ignore[arg-type]

    def writes(conn: Connection, mid: str, n: int) -> list[int]:
        counts = [execute_rows(conn, insert_ignore("sqlite", memories), _memory(mid)) for _ in range(2)]
        values = [
            {
                "memory_id": mid,
                "name": name,
                "origin": "inferred",
                "value": value,
                "fragment_ids": ids,
                "updated_at": T0 + n,
            }
            for name, value, ids in (
                ("hobbies", ["围棋", "jazz"], ["f1"]),
                ("city", "北京", None),
                ("age", 3, []),
            )
        ]
        stmt = upsert("sqlite", variables, ("memory_id", "name", "origin"), tuple(values[0]))
        counts.append(execute_rows(conn, stmt, values))
        summary = {
            "memory_id": mid,
            "text": f"用户画像：{n}",
            "tokens": 5,
            "covers_until_ms": T0,
            "version": n,
            "updated_at": T0,
            "origin": "extractive",
        }
        execute_upsert(conn, summaries, ("memory_id",), summary)
        execute_upsert(
            conn, snapshots, ("memory_id",), {"memory_id": mid, "data": '{"a":"二"}', "updated_at": T0 + n}
        )
        facts = [
            Fragment(id=f"f{i}-{n}", memory_id=mid, content=c, key=k, transient=i == 1, source_message_ids=s)
            for i, (c, k, s) in enumerate(
                (("用户喜欢围棋。", "hobby:围棋", ["u1"]), ("Off today.", "plan:off", []))
            )
        ]
        counts.append(execute_rows(conn, INSERT_FRAGMENTS, [_to_row(f) for f in facts]))
        change = {"w_memory_id": mid, "w_id": f"f0-{n}", "v_status": "superseded", "v_confidence": 0.5 + n}
        counts.append(execute_rows(conn, _update_statement(("status", "confidence")), [change]))
        entries = [
            audit_row(
                mid,
                T0 + i,
                "fact",
                f"f{i}",
                "add",
                before=None if i else {"x": "旧"},
                after={"i": [i, "二"]},
                cause="c",
            )
            for i in range(3)
        ]
        counts.append(execute_rows(conn, INSERT_AUDIT, entries))
        return counts

    monkeypatch.setattr(SAConnection, "_execute_context", spy)
    for n in (1, 2):  # the second round updates what the first inserted
        with store.engine.begin() as conn:
            seen.clear()
            driven = writes(conn, "a", n)
            assert seen == []  # every write on the sqlite3 connection
            through = writes(_SQLAlchemyOnly(conn), "b", n)  # type: ignore[arg-type]
            assert len(seen) >= 7
        assert driven == through == [1 if n == 1 else 0, 0, 3, 2, 1, 3]
    for table in ("cm_memories", "cm_variables", "cm_summaries", "cm_snapshots", "cm_fragments", "cm_audit"):
        assert _raw_rows(store, table, "a") == _raw_rows(store, table, "b"), table
        assert _raw_rows(store, table, "a"), table


class _SQLAlchemyOnly:
    """A ``Connection`` that sends every statement through SQLAlchemy (a listener-like fallback)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)

    def in_transaction(self) -> bool:
        return False  # execute_rows' SQLite driver path needs the Connection's transaction


def _memory(mid: str) -> dict[str, object]:
    return {"memory_id": mid, "description": "", "created_at": T0, "updated_at": T0}


def test_execute_rows_outside_a_transaction_goes_through_sqlalchemy(store: MemoryStore) -> None:
    from convmem_graph.store._driver import execute_rows

    with store.engine.connect() as conn:
        assert not conn.in_transaction()
        assert execute_rows(conn, insert_ignore("sqlite", memories), _memory("c")) == 1
        assert conn.in_transaction()  # SQLAlchemy's autobegin: the caller's commit ends it
        conn.commit()
    assert _raw_rows(store, "cm_memories", "c")
