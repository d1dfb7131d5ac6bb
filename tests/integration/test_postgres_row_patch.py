"""A PostgreSQL run's changes of its memory's row, held back and sent as one statement, are exact.

``convmem_graph.store._row_patch`` folds the run's ``PG_EXTRACTED`` / ``PG_TOUCH`` /
``SET_FACTS_DIRTY`` steps into one ``PG_ROW_PATCH`` (or into the summary's ``PG_SUMMARIZED``).
The stored-rows golden leaves clock columns out, so these tests compare ``updated_at`` too: from
any starting row, any sequence of steps sent one by one and folded leave the same row and the same
snapshot table; and a lifecycle run with the fold leaves every row equal to the same run without
it, while sending none of the three statements.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, event, text

from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.store import _queries as Q
from convmem_graph.store._row_patch import PG_ROW_PATCH, RowPatch
from convmem_graph.store.core import StoreCore
from convmem_graph.store.postgres import PostgresBackend
from tests.backends import fresh_schema

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

_MID = "patched"

_extracted = st.tuples(
    st.just("extracted"),
    st.integers(0, 8),  # upto
    st.integers(100, 120),  # now
    st.booleans(),  # changed
    st.sampled_from([None, 1]),  # dirty (set only with changed facts)
)
_touched = st.tuples(st.just("touched"), st.integers(100, 120), st.sampled_from([None, 0, 1]))
_dirty = st.tuples(st.just("dirty"), st.sampled_from([0, 1]))
_steps = st.lists(st.one_of(_extracted, _touched, _dirty), max_size=6)
_start = st.tuples(st.integers(0, 6), st.integers(0, 99), st.sampled_from([0, 1]), st.booleans())


@pytest.fixture
def store(fresh_pg_store: MemoryStore) -> MemoryStore:
    """The module's store: on a schema of the test's own (``conftest.fresh_pg_store``)."""
    return fresh_pg_store


def _seed(conn: Connection, start: tuple[int, int, int, bool]) -> None:
    extracted, updated, dirty, snapshot = start
    # The store's own insert (its defaults for the other columns), then the starting values.
    row = {"memory_id": _MID, "description": "", "created_at": 0, "updated_at": updated}
    PostgresBackend.ensure_memory_row(conn, row | {"extracted_seq": extracted, "summarized_seq": 0})
    conn.execute(
        text("UPDATE cm_memories SET facts_dirty = :d WHERE memory_id = :mid"), {"mid": _MID, "d": dirty}
    )
    if snapshot:
        conn.execute(
            text("INSERT INTO cm_snapshots (memory_id, data, updated_at) VALUES (:mid, '{}', 0)"),
            {"mid": _MID},
        )


def _state(conn: Connection) -> tuple[Any, ...]:
    row = conn.execute(
        text(
            "SELECT extracted_seq, summarized_seq, updated_at, facts_dirty FROM cm_memories "
            "WHERE memory_id = :mid"
        ),
        {"mid": _MID},
    ).one()
    snapshots = conn.execute(text("SELECT count(*) FROM cm_snapshots WHERE memory_id = :mid"), {"mid": _MID})
    return (*row, snapshots.scalar())


def _one_by_one(conn: Connection, steps: list[tuple[Any, ...]]) -> None:
    for step in steps:
        if step[0] == "extracted":
            _, upto, now, changed, dirty = step
            params = {"mid": _MID, "upto": upto, "now": now, "changed": changed, "dirty": dirty}
            conn.execute(Q.PG_EXTRACTED, params)
        elif step[0] == "touched":
            conn.execute(Q.PG_TOUCH, {"mid": _MID, "now": step[1], "dirty": step[2]})
        else:
            conn.execute(Q.SET_FACTS_DIRTY, {"mid": _MID, "dirty": step[1]})


def _folded(steps: list[tuple[Any, ...]]) -> RowPatch:
    patch = RowPatch()
    for step in steps:
        if step[0] == "extracted":
            _, upto, now, changed, dirty = step
            patch.extracted(upto, now, changed=changed, dirty=dirty)
        elif step[0] == "touched":
            patch.touched(step[1], dirty=step[2])
        else:
            patch.set_dirty(step[1])
    return patch


def _summarized(conn: Connection, held: RowPatch | None) -> None:
    params = {
        "mid": _MID,
        "text": "s",
        "tokens": 1,
        "covers_until_ms": 0,
        "version": 1,
        "updated_at": 130,
        "origin": "extractive",
        "upto": 3,
        "held_upto": held.upto if held is not None else None,
        "held_dirty": held.dirty if held is not None else None,
    }
    conn.execute(Q.PG_SUMMARIZED, params)


def _in_rolled_back(store: MemoryStore, start: tuple[int, int, int, bool], body: Any) -> tuple[Any, ...]:
    with store.engine.connect() as conn:
        txn = conn.begin()
        try:
            _seed(conn, start)
            body(conn)
            return _state(conn)
        finally:
            txn.rollback()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=_start, steps=_steps, summary=st.booleans())
def test_folded_steps_leave_the_row_the_steps_leave(
    store: MemoryStore, start: tuple[int, int, int, bool], steps: list[tuple[Any, ...]], summary: bool
) -> None:
    def one_by_one(conn: Connection) -> None:
        _one_by_one(conn, steps)
        if summary:
            _summarized(conn, None)

    def folded(conn: Connection) -> None:
        patch = _folded(steps)
        if summary:
            _summarized(conn, patch)  # the summary carries the patch: no statement of its own
        else:
            conn.execute(PG_ROW_PATCH, patch.params(_MID))

    assert _in_rolled_back(store, start, folded) == _in_rolled_back(store, start, one_by_one)


#: The statements the fold replaces (a piece of each one's text, found in no other statement).
_FOLDED = (
    "CAST(%(changed)s AS BOOLEAN)",  # PG_EXTRACTED
    "WHERE memory_id = %(mid)s) UPDATE cm_memories SET updated_at",  # PG_TOUCH
    "UPDATE cm_memories SET facts_dirty",  # SET_FACTS_DIRTY
)


def _folded_kinds(sent: list[str]) -> list[str]:
    return [s for s in sent if any(piece in s for piece in _FOLDED)]


@pytest.fixture
def statements(store: MemoryStore) -> Iterator[list[str]]:
    """Every statement sent through the store's engine while the test runs."""
    seen: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", on_execute)
    yield seen
    event.remove(store.engine, "before_cursor_execute", on_execute)


_TURNS = [
    "I like green tea. My name is Ann.",
    "I live in Oslo and I have a dog named Rex.",
    "Actually I moved to Bergen. I am vegetarian.",
    "My sister is called Eva. I play chess on Sundays.",
]


def _replay(store: MemoryStore, memory_id: str) -> None:
    # Live-sized runs (one turn: no summary, the patch is its own statement), then replay-sized
    # ones (a summary: the patch goes inside its statement).
    clock = itertools.count(1_000, 7)
    lifecycle = Lifecycle(store, clock=lambda: next(clock))
    for k, turn in enumerate(_TURNS):
        raw = [{"role": "user", "content": turn, "timestamp": 1_000 * (k + 1)}]
        lifecycle.run(memory_id, [RawInput(raw)])
    for batch in range(2):
        raw = [
            {"role": "user", "content": f"{turn} (day {day})", "timestamp": 10_000 * (batch * 100 + day + 1)}
            for day in range(40)
            for turn in _TURNS
        ]
        lifecycle.run(memory_id, [RawInput(raw)])


def _rows(store: MemoryStore, memory_id: str) -> dict[str, list[tuple[Any, ...]]]:
    # Every column but the wall-clock ``created_at`` of the memory's row (the lifecycle's clock
    # is the test's; that one is not) and its ``facts_cut``, random for every new memory row
    # (store/_fact_revisions.py).
    tables = ("cm_memories", "cm_fragments", "cm_variables", "cm_summaries", "cm_snapshots", "cm_audit")
    got = {}
    with store.read() as conn:
        for table in tables:
            rows = conn.execute(text(f"SELECT * FROM {table} WHERE memory_id = :mid"), {"mid": memory_id})
            keys = list(rows.keys())
            got[table] = sorted(
                (
                    tuple(
                        v
                        for k, v in zip(keys, row, strict=True)
                        if (table, k) not in (("cm_memories", "created_at"), ("cm_memories", "facts_cut"))
                    )
                )
                for row in rows
            )
    return got


def test_lifecycle_runs_send_no_row_step_and_store_what_they_stored(
    store: MemoryStore, pg_base_url: str, statements: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _replay(store, "m")
    assert _folded_kinds(statements) == []
    # Without the fold (every step its own statement, as before) the same runs, on a schema of
    # their own (seqs are the database's), store the same rows.
    with fresh_schema(pg_base_url, "cm_fresh") as url, monkeypatch.context() as patched:
        patched.setattr(StoreCore, "_held_row", lambda self, memory_id: None)
        before = MemoryStore.from_url(url)
        try:
            sent: list[str] = []
            event.listen(before.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
            _replay(before, "m")
            unfolded = _rows(before, "m")
        finally:
            before.close()
    assert len(_folded_kinds(sent)) >= len(_TURNS)
    folded = _rows(store, "m")
    assert folded == unfolded
    assert folded["cm_fragments"] and folded["cm_summaries"] and folded["cm_snapshots"]
