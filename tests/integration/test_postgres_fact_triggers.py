"""Migration 18 on a real PostgreSQL: the facts' triggers move the memory row once per statement.

Two things are checked. (1) Under any sequence of statements on ``cm_fragments`` (multi-row
inserts into one or two memories, updates of counted and uncounted columns, moves to another
memory, deletes), the revisions stay exact for a reader (every row a statement wrote carries a
revision above the memory's revision before it and at most the one after; rows it did not write
keep theirs; a memory that lost a row has a new cut) and the language counts equal a full count.
(2) The store's bulk write of n facts updates the memory's row a fixed number of times, not 2n.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection

from convmem_graph.store import MemoryStore
from convmem_graph.store._lang_counts import move_expiry_mark
from tests.unit.nodes.test_summary_facts import NOW, _facts

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

MEMORIES = ("ta", "tb", "tc")
_MEMORY = st.sampled_from(MEMORIES)
#: Rows a statement picks: those whose number is ``k`` modulo ``m`` (m = 1: all of them).
_PICK = st.tuples(st.integers(1, 3), st.integers(0, 2)).map(lambda p: (p[0], p[1] % p[0]))
_ROW = st.tuples(
    st.booleans(), st.booleans(), st.sampled_from(["active", "superseded"]), st.sampled_from([None, 5, 50])
)
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.lists(st.tuples(_MEMORY, _ROW), min_size=1, max_size=6)),
        st.tuples(st.just("touch"), _MEMORY, _PICK),
        st.tuples(
            st.just("flip"), _MEMORY, _PICK, st.sampled_from(["cjk", "transient", "status", "expires_at"])
        ),
        st.tuples(st.just("move"), _MEMORY, _MEMORY, _PICK),
        st.tuples(st.just("delete"), _MEMORY, _PICK),
        st.tuples(st.just("mark"), _MEMORY, st.sampled_from([0, 10, 60])),
    ),
    min_size=1,
    max_size=12,
)

_FLIPS = {
    "cjk": "cjk = NOT COALESCE(cjk, false)",
    "transient": "transient = NOT transient",
    "status": "status = CASE WHEN status = 'active' THEN 'superseded' ELSE 'active' END",
    "expires_at": "expires_at = CASE WHEN expires_at IS NULL THEN 20 ELSE NULL END",
}
_PICKED = "memory_id = %(mid)s AND mod(abs(hashtext(id)), %(m)s) = %(k)s"


def _state(conn: Connection) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[str, int]]]:
    memories = {
        m: (int(r), int(c))
        for m, r, c in conn.exec_driver_sql(
            "SELECT memory_id, facts_rev, facts_cut FROM cm_memories WHERE memory_id = ANY(%(ids)s)",
            {"ids": list(MEMORIES)},
        )
    }
    rows = {
        i: (m, int(r))
        for i, m, r in conn.exec_driver_sql(
            "SELECT id, memory_id, rev FROM cm_fragments WHERE memory_id = ANY(%(ids)s)",
            {"ids": list(MEMORIES)},
        )
    }
    return memories, rows


def _run(conn: Connection, action: tuple[Any, ...], step: int) -> tuple[set[str], set[str]]:
    """One statement; the ids it wrote and the memories it took a row from."""
    kind = action[0]
    if kind == "insert":
        values, params = [], {}
        for n, (mid, (cjk, transient, status, expires)) in enumerate(action[1]):
            values.append(
                f"(%(m{n})s, %(i{n})s, 'c', 'preference', 'k', %(s{n})s, %(t{n})s, %(e{n})s, 'extracted',"
                f" 1.0, 1, 1, 0, %(z{n})s)"
            )
            params |= {f"m{n}": mid, f"i{n}": f"f{step}_{n}", f"s{n}": status, f"t{n}": transient}
            params |= {f"e{n}": expires, f"z{n}": cjk}
        found = conn.exec_driver_sql(
            "INSERT INTO cm_fragments (memory_id, id, content, category, key, status, transient, expires_at,"
            " origin, confidence, created_at, updated_at, observed_at, cjk) VALUES "
            + ", ".join(values)
            + " RETURNING id",
            params,
        )
        return {r[0] for r in found}, set()
    if kind == "mark":
        move_expiry_mark(conn, action[1], now_ms=action[2])
        return set(), set()
    pick = action[-1] if kind != "flip" else action[2]
    params = {"mid": action[1], "m": pick[0], "k": pick[1]}
    if kind == "touch":
        sql = f"UPDATE cm_fragments SET confidence = confidence / 2 WHERE {_PICKED} RETURNING id"
    elif kind == "flip":
        sql = f"UPDATE cm_fragments SET {_FLIPS[action[3]]} WHERE {_PICKED} RETURNING id"
    elif kind == "move":
        params["to"] = action[2]
        sql = f"UPDATE cm_fragments SET memory_id = %(to)s WHERE {_PICKED} RETURNING id"
    else:
        sql = f"DELETE FROM cm_fragments WHERE {_PICKED} RETURNING id"
    ids = {r[0] for r in conn.exec_driver_sql(sql, params)}
    left = {action[1]} if ids and (kind == "delete" or (kind == "move" and action[2] != action[1])) else set()
    return (set() if kind == "delete" else ids), left


def _check_counts(conn: Connection) -> None:
    kept = conn.exec_driver_sql(
        "SELECT memory_id, facts_zh, facts_other, expired_zh, expired_other FROM cm_memories"
        " WHERE memory_id = ANY(%(ids)s) ORDER BY memory_id",
        {"ids": list(MEMORIES)},
    ).all()
    counted = conn.exec_driver_sql(
        "SELECT m.memory_id,"
        " count(f.id) FILTER (WHERE COALESCE(f.cjk, false)),"
        " count(f.id) FILTER (WHERE NOT COALESCE(f.cjk, false)),"
        " count(f.id) FILTER (WHERE COALESCE(f.cjk, false) AND f.expires_at <= m.expired_through),"
        " count(f.id) FILTER (WHERE NOT COALESCE(f.cjk, false) AND f.expires_at <= m.expired_through)"
        " FROM cm_memories m LEFT JOIN cm_fragments f ON f.memory_id = m.memory_id"
        " AND f.status = 'active' AND NOT f.transient"
        " WHERE m.memory_id = ANY(%(ids)s) GROUP BY m.memory_id ORDER BY m.memory_id",
        {"ids": list(MEMORIES)},
    ).all()
    assert [tuple(r) for r in kept] == [tuple(r) for r in counted]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_revisions_and_counts_stay_exact_under_any_statements(
    pg_store: MemoryStore, actions: list[Any]
) -> None:
    for mid in MEMORIES:
        pg_store.delete_memory(mid)
        pg_store.ensure_memory(mid)
    with pg_store.transaction() as conn:
        before_memories, before_rows = _state(conn)
    for step, action in enumerate(actions):
        with pg_store.transaction() as conn:
            written, left = _run(conn, action, step)
        with pg_store.transaction() as conn:
            memories, rows = _state(conn)
            _check_counts(conn)
        for fid, (mid, rev) in rows.items():
            assert rev <= memories[mid][0], (action, fid)
            if fid in written:
                # Above what any reader of the memory before the statement can have kept.
                assert rev > before_memories[mid][0], (action, fid)
            else:
                assert (mid, rev) == before_rows[fid], (action, fid)
        for mid in MEMORIES:
            rev, cut = memories[mid]
            old_rev, old_cut = before_memories[mid]
            assert rev >= old_rev
            if mid in left:
                assert old_rev < cut <= rev, action
            else:
                assert cut == old_cut, action
        before_memories, before_rows = memories, rows


class _MemoryRowUpdates:
    """After each insert into ``cm_fragments``, the transaction's updates of ``cm_memories`` so far."""

    def __init__(self, monkeypatch: Any) -> None:
        self.seen: list[int] = []
        real_execute, real_many = psycopg.Cursor.execute, psycopg.Cursor.executemany

        def note(cursor: Any, query: Any) -> None:
            if str(query).startswith("INSERT INTO cm_fragments"):
                with cursor.connection.cursor() as probe:
                    found = real_execute(
                        probe, "SELECT pg_stat_get_xact_tuples_updated('cm_memories'::regclass)"
                    ).fetchone()
                    self.seen.append(int(found[0]))

        def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            out = real_execute(cursor, query, *args, **kwargs)
            note(cursor, query)
            return out

        def executemany(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            out = real_many(cursor, query, *args, **kwargs)
            note(cursor, query)
            return out

        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        monkeypatch.setattr(psycopg.Cursor, "executemany", executemany)


@pytest.mark.parametrize("facts", [1, 300])
def test_a_bulk_write_of_facts_updates_the_memory_row_once_per_trigger(
    fresh_pg_store: MemoryStore, monkeypatch: Any, facts: int
) -> None:
    """A new memory's first commit of n facts: the revision's bump and the counts' one update."""
    fresh_pg_store.ensure_memory("bulk")
    ops = _facts.generated_ops(3, facts, _facts.SHAPES["only-like"], now_ms=NOW)
    updates = _MemoryRowUpdates(monkeypatch)
    fresh_pg_store.commit_extraction("bulk", ops, upto_seq=0, now_ms=NOW)
    with fresh_pg_store.transaction() as conn:
        stored = conn.exec_driver_sql("SELECT count(*) FROM cm_fragments WHERE memory_id = 'bulk'").scalar()
        revs = conn.exec_driver_sql("SELECT DISTINCT rev FROM cm_fragments WHERE memory_id = 'bulk'").all()
    assert stored and stored >= facts * 0.9
    # The fact rows went in one statement: one revision, the memory row moved twice (revision, counts).
    assert len(revs) == 1
    assert updates.seen == [2]
