"""Migration 13: the fact indexes read newest first are stored oldest first and read backwards.

Issue 24 (disk per message): facts arrive in time order, so in an index declared newest first
(``DESC``) each new entry lands before the first of its range, where SQLite's B-tree split leaves
pages about half full. The same indexes declared oldest first take about half the pages for the
same entries, and every statement reading them asks for the exact reverse of their order, which
both databases serve by a backward scan. These tests hold: an upgraded file keeps every row and
answers every read as before (facts in any arrival order, with ties), the plans still read the
indexes in order (no sort), and the pages are fewer.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, create_engine, event, text

from convmem_graph.models import FragmentCandidate, FragmentOp
from convmem_graph.store import MemoryStore
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _summary_facts as SF
from convmem_graph.store._stamp import SCHEMA_STAMP
from convmem_graph.store.migrations import MIGRATIONS, apply_migrations
from convmem_graph.store.schema import ASCENDING_INDEXES, fragments
from tests.unit.store.test_migrations import dump_tables

NOW = 1_767_000_000_000

#: The indexes as migrations 1-12 left them (``sqlite_master.sql`` of a file they set up).
_NEWEST_FIRST = "observed_at DESC, updated_at DESC, created_at DESC, id DESC"
_COLUMNS_BEFORE = {
    "ix_cm_fragments_rank": "memory_id, status, transient, confidence DESC, observed_at DESC, "
    "updated_at DESC, id",
    "ix_cm_fragments_newest": "memory_id, status, transient, observed_at DESC, cjk, expires_at",
    "ix_cm_fragments_recent": "memory_id, status, updated_at DESC",
    "ix_cm_fragments_recent_pet": "memory_id, status, updated_at DESC, created_at DESC, id DESC) "
    "WHERE substr(ckey, 1, 4) = 'pet:'",
    "ix_cm_fragments_recent_plan": "memory_id, status, updated_at DESC, created_at DESC, id DESC) "
    "WHERE substr(ckey, 1, 5) = 'plan:'",
    "ix_cm_fragments_family": "memory_id, status, transient, substr(ckey, 1, instr(ckey, ':')), "
    + _NEWEST_FIRST,
    "ix_cm_fragments_lang": f"memory_id, status, transient, cjk, {_NEWEST_FIRST}",
}
_DESC_DDL = {
    name: f"CREATE INDEX {name} ON cm_fragments ({cols}" + ("" if "WHERE" in cols else ")")
    for name, cols in _COLUMNS_BEFORE.items()
}

_FAMILIES = ("pref:", "habit:", "food:", "like:", "pet:", "plan:", "profile:")


def _before_migration_13(conn: Connection) -> None:
    """Give a store's database the indexes it had before migration 13, and forget 13."""
    for name, ddl in _DESC_DDL.items():
        conn.exec_driver_sql(f"DROP INDEX {name}")
        conn.exec_driver_sql(ddl)
    conn.exec_driver_sql("DELETE FROM cm_schema_migrations WHERE version = 13")
    conn.exec_driver_sql("PRAGMA user_version = 0")


def _fact(i: int, family: int, observed: int, confidence: int, transient: bool, cjk: bool) -> FragmentOp:
    return FragmentOp(
        op="add",
        candidate=FragmentCandidate(
            content=f"用户说过第{i}件事。" if cjk else f"User said thing {i}.",
            key=f"{_FAMILIES[family]}thing{i}",
            observed_at=NOW + observed * 1000,
            confidence=confidence / 4,
            transient=transient,
            expires_at=NOW + (observed + 5) * 1000 if transient else None,
        ),
    )


_FACTS = st.lists(
    st.tuples(
        st.integers(0, len(_FAMILIES) - 1),
        st.integers(0, 6),  # few distinct times: ties broken by the later columns
        st.integers(1, 4),
        st.booleans(),
        st.booleans(),
    ),
    min_size=1,
    max_size=40,
)


def _commit(store: MemoryStore, facts: list[tuple[int, int, int, bool, bool]], batches: list[int]) -> None:
    """Commit the facts in arrival order, in batches of the given sizes, at a few update times."""
    ops = [_fact(i, *f) for i, f in enumerate(facts)]
    start, k = 0, 0
    while start < len(ops):
        size = batches[k % len(batches)]
        store.commit_extraction("m", ops[start : start + size], upto_seq=0, now_ms=NOW + k % 3)
        start, k = start + size, k + 1


def _reads(conn: Connection) -> dict[str, list[Any]]:
    """Every read through the rebuilt indexes, with parameters that reach into each one."""
    base: dict[str, Any] = {"mid": "m", "now": NOW + 3000, "limit": 7}
    runs: dict[str, tuple[Any, dict[str, Any]]] = {
        "recent": (FQ.RECENTLY_UPDATED, base),
        "strongest": (FQ.STRONGEST, base),
        "durable": (FQ.STRONGEST_OF_KIND, {**base, "transient": False}),
        "temporary": (FQ.STRONGEST_OF_KIND, {**base, "transient": True}),
        "newest": (FQ.NEWEST_DURABLE, base),
        "zh": (FQ.NEWEST_OF_LANGUAGE, {**base, "cjk": True}),
        "other": (FQ.NEWEST_OF_LANGUAGE, {**base, "cjk": False}),
        "counts": (FQ.CJK_COUNTS, base),
        "two": (FQ.NEWEST_OF_TWO_FAMILIES[0], {**base, "fa": "pref:", "fb": "habit:"}),
        "summary durable": (text(SF.STRONGEST_DURABLE), {**base, "durable": False}),
        "summary temporary": (text(SF.STRONGEST_TEMPORARY), {**base, "temporary": True}),
        "summary both": (SF.STRONGEST_BOTH, {**base, "durable": False, "temporary": True}),
    }
    for prefix, stmt in FQ.RECENTLY_UPDATED_IN_FAMILY.items():
        runs[f"recent {prefix}"] = (stmt, base)
    for family in _FAMILIES:
        runs[f"family {family}"] = (FQ.NEWEST_OF_KEY_FAMILY[0], {**base, "family": family})
        # The page after a sort key in the middle of the times: the keyset bound, read backwards.
        after = {"o": NOW + 3000, "u": NOW + 1, "c": NOW + 1, "i": "fr_8"}
        runs[f"family {family} after"] = (FQ.NEWEST_OF_KEY_FAMILY[1], {**base, "family": family, **after})
        runs[f"two {family} after"] = (
            FQ.NEWEST_OF_TWO_FAMILIES[1],
            {**base, "fa": family, "fb": "food:", **after},
        )
    return {name: [tuple(r) for r in conn.execute(stmt, params)] for name, (stmt, params) in runs.items()}


def _index_sql(path: Path) -> dict[str, str]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'cm_fragments'"
        )
        return {str(name): str(sql) for name, sql in rows if name in ASCENDING_INDEXES}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(facts=_FACTS, batches=st.lists(st.integers(1, 8), min_size=1, max_size=3), order=st.randoms())
def test_an_upgraded_file_keeps_every_row_and_answers_every_read_as_before(
    tmp_path_factory: pytest.TempPathFactory, facts: list[Any], batches: list[int], order: Any
) -> None:
    path = tmp_path_factory.mktemp("upgrade") / "m.db"
    arrival = list(facts)
    order.shuffle(arrival)  # facts arrive in any order, not only in time order
    store = MemoryStore.from_url(str(path))
    try:
        with store.transaction() as conn:
            _before_migration_13(conn)
        _commit(store, arrival, batches)
        with store.read() as conn:
            before_reads = _reads(conn)
    finally:
        store.close()
    assert _index_sql(path) == _DESC_DDL
    before = dump_tables(path, skip={"cm_schema_migrations"})
    store = MemoryStore.from_url(str(path))  # the open runs migration 13
    try:
        with store.read() as conn:
            assert _reads(conn) == before_reads
            versions = [
                v for (v,) in conn.exec_driver_sql("SELECT version FROM cm_schema_migrations ORDER BY 1")
            ]
    finally:
        store.close()
    assert versions == [m.version for m in MIGRATIONS]
    assert dump_tables(path, skip={"cm_schema_migrations"}) == before  # nothing rewritten, nothing lost
    rebuilt = _index_sql(path)
    assert set(rebuilt) == set(ASCENDING_INDEXES)
    assert all(sql != _DESC_DDL[name] for name, sql in rebuilt.items())
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_STAMP
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_declared_indexes_have_no_newest_first_column_but_the_rank_s_reversed_ones() -> None:
    declared = {
        i.name: [str(e) for e in i.expressions] for i in fragments.indexes if i.name in ASCENDING_INDEXES
    }
    assert set(declared) == set(ASCENDING_INDEXES)
    descending = {name: [e for e in exprs if "DESC" in e] for name, exprs in declared.items()}
    # The rank order is durable first and ties by id ascending: reversed, those two descend.
    assert descending == {
        name: (["transient DESC", "id DESC"] if name == "ix_cm_fragments_rank" else []) for name in declared
    }


@pytest.fixture()
def store() -> Iterator[MemoryStore]:
    s = MemoryStore.from_url("sqlite://")
    yield s
    s.close()


def _plan(conn: Connection, stmt: Any, params: dict[str, Any]) -> str:
    def explain(
        _c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any, _many: bool
    ) -> tuple[str, Any]:
        return "EXPLAIN QUERY PLAN " + statement, parameters

    event.listen(conn, "before_cursor_execute", explain, retval=True)
    try:
        return " | ".join(str(r[-1]) for r in conn.execute(stmt, params))
    finally:
        event.remove(conn, "before_cursor_execute", explain)


_P: dict[str, Any] = {
    "mid": "m",
    "now": NOW,
    "limit": 10,
    "transient": False,
    "family": "like:",
    "fa": "pref:",
    "fb": "habit:",
    "o": 1,
    "u": 1,
    "c": 1,
    "i": "x",
    "cjk": True,
    "durable": False,
    "temporary": True,
}

#: Each statement, the index it reads, and whether its plan sorts part of the ORDER BY (the same
#: as with the ``DESC`` indexes: only the ones whose index covers a prefix of their order).
_PLANS: list[tuple[str, Any, str, bool]] = [
    ("strongest", FQ.STRONGEST, "ix_cm_fragments_rank", False),
    ("strongest of kind", FQ.STRONGEST_OF_KIND, "ix_cm_fragments_rank", False),
    ("summary durable", text(SF.STRONGEST_DURABLE), "ix_cm_fragments_rank", False),
    ("summary temporary", text(SF.STRONGEST_TEMPORARY), "ix_cm_fragments_rank", False),
    ("family", FQ.NEWEST_OF_KEY_FAMILY[0], "ix_cm_fragments_family", False),
    ("family after", FQ.NEWEST_OF_KEY_FAMILY[1], "ix_cm_fragments_family", False),
    ("language", FQ.NEWEST_OF_LANGUAGE, "ix_cm_fragments_lang", False),
    ("language counts", FQ.CJK_COUNTS, "COVERING INDEX ix_cm_fragments_newest", False),
    ("newest durable", FQ.NEWEST_DURABLE, "ix_cm_fragments_newest", True),
    ("recently updated", FQ.RECENTLY_UPDATED, "ix_cm_fragments_recent", True),
    *[
        (f"recent {p}", s, f"ix_cm_fragments_recent_{p[:-1]}", False)
        for p, s in FQ.RECENTLY_UPDATED_IN_FAMILY.items()
    ],
]


@pytest.mark.parametrize(("name", "stmt", "index", "sorts"), _PLANS, ids=[p[0] for p in _PLANS])
def test_each_read_walks_its_index_in_order(
    store: MemoryStore, name: str, stmt: Any, index: str, sorts: bool
) -> None:
    with store.read() as conn:
        plan = _plan(conn, stmt, _P)
    assert index in plan, plan
    assert ("TEMP B-TREE" in plan) == sorts, plan
    if "after" in name:  # the keyset bound is a range of the index, not a filter on every row
        assert "(observed_at,updated_at,created_at,id)<(?,?,?,?)" in plan, plan


def _pages(conn: Connection, names: tuple[str, ...]) -> int:
    marks = ", ".join("?" * len(names))
    return int(
        conn.exec_driver_sql(f"SELECT count(*) FROM dbstat WHERE name IN ({marks})", names).scalar() or 0
    )


def _write_in_time_order(conn: Connection, count: int) -> None:
    """``count`` durable facts of a few families, mixed languages, each written after the one before."""
    rng = random.Random(7)
    rows = []
    for i in range(count):
        family = rng.choice(("pref:", "food:", "habit:", "like:"))
        at = NOW + i * 1000
        rows.append(
            (f"fr_{rng.getrandbits(80):020x}", f"User said thing {i}.", f"{family}thing{i}", at, at, at)
            + (f"{family}thing{i}", rng.getrandbits(63), rng.random() < 0.5)
        )
    conn.exec_driver_sql(
        "INSERT INTO cm_fragments (memory_id, id, content, category, key, status, transient, origin, "
        "confidence, created_at, updated_at, observed_at, ckey, norm_hash, cjk) "
        "VALUES ('m', ?, ?, 'preference', ?, 'active', 0, 'extracted', 0.8, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def test_facts_written_in_time_order_fill_the_pages() -> None:
    pages = {}
    for layout in ("desc", "asc"):
        store = MemoryStore.from_url("sqlite://")
        try:
            store.commit_extraction("m", [_fact(0, 0, 0, 3, False, False)], upto_seq=0, now_ms=NOW)
            with store.transaction() as conn:
                if layout == "desc":
                    _before_migration_13(conn)
                _write_in_time_order(conn, 3000)
            with store.read() as conn:
                pages[layout] = _pages(conn, ASCENDING_INDEXES)
        finally:
            store.close()
    # Measured: 206 pages oldest first against 340 newest first (SQLite 3.40).
    assert pages["asc"] <= 0.7 * pages["desc"], pages


def test_a_new_database_keeps_the_indexes_migration_1_made() -> None:
    """Migration 1 already makes the declared indexes: 13 leaves them (a rebuild only frees pages)."""
    engine = create_engine("sqlite://")
    ran: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: ran.append(str(a[2])))
    try:
        with engine.begin() as conn:
            apply_migrations(conn)
    finally:
        engine.dispose()
    assert not [s for s in ran if s.lstrip().upper().startswith("DROP INDEX")]
    assert sum("CREATE INDEX ix_cm_fragments_family" in s for s in ran) == 1
