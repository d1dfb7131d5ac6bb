"""The trigger-kept language counts equal a count of every usable durable fact, whatever was written.

``language`` used to count every durable fact per turn; the counts now live on the memory's row,
kept by triggers on ``cm_fragments`` (``store/_lang_counts.py``), with the facts expired at or
before the memory's expiry mark counted there too. Hypothesis drives sequences of writes through
every path (extraction adds and supersedes, hand edits and deletes, durable facts added with an
expiry, raw SQL status, flag and expiry changes, moves of the mark forwards and backwards) and
checks the counts against the full count after each one, at times before, exactly at and after
the expiries, with the bounded read at several caps; and the inferred ``language`` (with its
supporting facts, read by index) against the reference rules, on SQLite and on PostgreSQL's
plpgsql trigger (``backend_store``). A last test holds SQLite's work for
the count flat from 1k to 10k expired facts (it grew with them: the old code fails it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, infer_variables
from convmem_graph.models import FragmentCandidate, FragmentOp
from convmem_graph.nodes import _inference
from convmem_graph.nodes._inference import infer_from_store
from convmem_graph.store import MemoryStore
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store._lang_counts import (
    LANGUAGE_TRIGGERS,
    bounded_language_counts,
    language_counts,
    move_expiry_mark,
)

NOW = 1_767_000_000_000
DAY = 86_400_000
LANGUAGE = [s for s in DEFAULT_VARIABLE_SPECS if s.name == "language"]
WORDS = {
    True: ("用户喜欢{}。", ["芒果", "围棋", "成都"]),
    False: ("User likes {}.", ["tea", "chess", "jazz"]),
}


def full_count(store: MemoryStore, memory_id: str, now_ms: int) -> tuple[int, int]:
    """The reference: every usable durable fact counted (the statement the turn used to run)."""
    with store._read() as conn:
        total, zh = conn.execute(FQ.CJK_COUNTS, {"mid": memory_id, "now": now_ms}).one()
    return int(zh), int(total) - int(zh)


def _candidate(n: int, zh: bool, transient: bool, expiry: int | None) -> FragmentCandidate:
    wording, subjects = WORDS[zh]
    subject = f"{subjects[n % 3]}{n}"
    return FragmentCandidate(
        content=wording.format(subject),
        category="preference",
        key=f"pref:{subject}",
        transient=transient,
        expires_at=None if expiry is None else NOW + expiry,
        observed_at=NOW - (n % 7) * 1000,  # ties across facts: the index order breaks them
    )


#: Expiries relative to NOW; the checks run at NOW - 2 days, NOW - 1 day, NOW and NOW + 1 day, so
#: some facts expire exactly at a check's ``now`` (expired then: ``expires_at <= now``).
EXPIRIES = [None, -DAY, 0, DAY]
CHECKS = (NOW - 2 * DAY, NOW - DAY, NOW, NOW + DAY)
_ADD = st.tuples(
    st.sampled_from(["add", "api_add"]),
    st.integers(0, 40),
    st.booleans(),
    st.booleans(),
    st.sampled_from(EXPIRIES),
)
_OTHER = st.tuples(
    st.sampled_from(["supersede", "edit", "delete", "sql_status", "sql_transient", "sql_expiry", "mark"]),
    st.integers(0, 40),
)
ACTIONS = st.lists(st.one_of(_ADD, _OTHER), min_size=1, max_size=25)


def apply(store: MemoryStore, memory_id: str, action: tuple[object, ...], step: int) -> None:
    """One write through one of the store's paths (or raw SQL, which the triggers see too)."""
    ids = [f.id for f in store.list_fragments(memory_id)]
    kind, n = action[0], int(action[1])  # type: ignore[call-overload]
    now = NOW - DAY + step
    if kind == "add":
        zh, transient, expiry = bool(action[2]), bool(action[3]), action[4]
        op = FragmentOp(op="add", candidate=_candidate(n, zh, transient, expiry))  # type: ignore[arg-type]
        store.commit_extraction(memory_id, [op], upto_seq=0, now_ms=now)
        return
    if kind == "api_add":  # a durable fact with an expiry (the case the expired counts are for)
        zh, expiry = bool(action[2]), action[4]
        wording, subjects = WORDS[zh]
        store.add_fragment(
            memory_id,
            wording.format(f"{subjects[n % 3]}api{n}"),
            key=f"pref:api{n}",
            origin="api",
            transient=bool(action[3]) and expiry is not None,
            expires_at=None if expiry is None else NOW + int(expiry),  # type: ignore[call-overload]
            now_ms=now,
        )
        return
    if kind == "mark":  # the expiry mark moves to one of the check times, forwards or back
        with store._write(memory_id) as conn:
            move_expiry_mark(conn, memory_id, now_ms=CHECKS[n % len(CHECKS)] + (n % 2))
        return
    if not ids:
        return
    target = ids[n % len(ids)]
    if kind == "supersede":
        op = FragmentOp(
            op="supersede", candidate=_candidate(n + 100, n % 2 == 0, False, None), target_id=target
        )
        store.commit_extraction(memory_id, [op], upto_seq=0, now_ms=now)
    elif kind == "edit":  # the content's language flips
        zh = store.get_fragment(memory_id, target).content.isascii()
        store.update_fragment(memory_id, target, content=WORDS[zh][0].format(f"x{n}"), now_ms=now)
    elif kind == "delete":
        store.delete_fragment(memory_id, target, now_ms=now)
    elif kind == "sql_expiry":
        expiry = EXPIRIES[n % len(EXPIRIES)]
        with store._write(memory_id) as conn:
            conn.execute(
                text("UPDATE cm_fragments SET expires_at = :v WHERE id = :i"),
                {"v": None if expiry is None else NOW + expiry, "i": target},
            )
    else:
        column = "status" if kind == "sql_status" else "transient"
        value: object = ("active" if n % 2 else "superseded") if column == "status" else bool(n % 2)
        with store._write(memory_id) as conn:
            conn.execute(
                text(f"UPDATE cm_fragments SET {column} = :v WHERE id = :i"), {"v": value, "i": target}
            )


@pytest.fixture()
def store() -> Iterator[MemoryStore]:
    s = MemoryStore.from_url("sqlite://")
    yield s
    s.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Facts changing on either side of the mark (each broke a deliberately wrong trigger).
@example(actions=[("add", 1, True, False, None), ("sql_expiry", 1)], mark=NOW)
@example(actions=[("api_add", 2, False, False, -DAY), ("sql_expiry", 0)], mark=NOW)
@example(actions=[("api_add", 1, True, False, -DAY), ("delete", 0)], mark=NOW)
@example(actions=[("api_add", 1, False, False, 0), ("sql_status", 0)], mark=NOW)
@example(actions=[("api_add", 1, True, False, 0), ("edit", 0)], mark=NOW)
@example(actions=[("api_add", 1, True, False, DAY), ("mark", 3), ("mark", 0)], mark=0)
@given(actions=ACTIONS, mark=st.sampled_from([0, *CHECKS]))
def test_counts_follow_every_write_path(
    backend_store: MemoryStore, actions: list[tuple[object, ...]], mark: int
) -> None:
    store = backend_store
    memory_id = f"m{abs(hash((tuple(actions), mark))) % 10**9}"
    store.ensure_memory(memory_id)
    with store._write(memory_id) as conn:  # a mark among the expiries from the start (a new memory's is 0)
        move_expiry_mark(conn, memory_id, now_ms=mark)
    for step, action in enumerate(actions):
        apply(store, memory_id, action, step)
        check_counts(store, memory_id)
    # The inferred language and its support (index reads, no small-memory shortcut) = the rules,
    # with the mark wherever the actions left it, and moved by the turn itself (cap 0: any fact
    # expiring between the mark and now makes the turn move it).
    every = store.list_fragments(memory_id, status="active")
    for now in CHECKS:
        expected = infer_variables(LANGUAGE, every, now_ms=now).get("language")
        with patch.object(_inference, "_FEW", 0):
            assert infer_from_store(store, memory_id, LANGUAGE, now_ms=now).get("language") == expected
            with patch.object(_inference, "EXPIRY_BACKLOG", 0):
                assert infer_from_store(store, memory_id, LANGUAGE, now_ms=now).get("language") == expected
            check_counts(store, memory_id)
        assert infer_from_store(store, memory_id, LANGUAGE, now_ms=now).get("language") == expected


def check_counts(store: MemoryStore, memory_id: str) -> None:
    """At every check time: exact counts = the full count; a bounded read = it, or ``None`` past its cap."""
    for now in CHECKS:
        expected = full_count(store, memory_id, now)
        with store._read() as conn:
            assert language_counts(conn, memory_id, now_ms=now) == expected
            for cap in (0, 1, 3):
                bounded = bounded_language_counts(conn, memory_id, now_ms=now, cap=cap)
                assert bounded in (None, expected), (cap, bounded, expected)
            assert bounded_language_counts(conn, memory_id, now_ms=now, cap=10**6) == expected


def test_deleting_a_memory_leaves_no_count(backend_store: MemoryStore) -> None:
    store = backend_store
    store.commit_extraction(
        "gone", [FragmentOp(op="add", candidate=_candidate(1, True, False, None))], upto_seq=0, now_ms=NOW
    )
    store.delete_memory("gone")
    with store._read() as conn:
        assert language_counts(conn, "gone", now_ms=NOW) == (0, 0)


def test_an_older_database_gets_its_counts_on_open(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    store = MemoryStore.from_url(str(db))
    ops = [FragmentOp(op="add", candidate=_candidate(n, n % 3 != 0, n % 5 == 0, None)) for n in range(30)]
    store.commit_extraction("m", ops, upto_seq=0, now_ms=NOW)
    expected = full_count(store, "m", NOW)
    store.close()
    import sqlite3

    with sqlite3.connect(db) as conn:  # as a version before the counts left it
        for name in LANGUAGE_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("UPDATE cm_memories SET facts_zh = 0, facts_other = 0")
        conn.execute("DELETE FROM cm_schema_migrations WHERE version >= 2")  # migration 2 brings them
        conn.execute("PRAGMA user_version = 1")
    store = MemoryStore.from_url(str(db))
    try:
        with store._read() as conn:
            assert language_counts(conn, "m", now_ms=NOW) == expected != (0, 0)
        store.commit_extraction(
            "m", [FragmentOp(op="add", candidate=_candidate(99, True, False, None))], upto_seq=0, now_ms=NOW
        )
        with store._read() as conn:  # and the triggers are back
            assert language_counts(conn, "m", now_ms=NOW) == full_count(store, "m", NOW)
    finally:
        store.close()


def test_the_support_read_is_one_index_range(store: MemoryStore) -> None:
    with store._read() as conn:
        compiled = FQ.NEWEST_OF_LANGUAGE.compile(dialect=conn.dialect)
        values = {"mid": "m", "now": NOW, "cjk": 1, "limit": 10}
        params = tuple(
            values.get(k, "active" if k.startswith("status") else 0) for k in compiled.positiontup or []
        )
        plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params))
    assert "ix_cm_fragments_lang" in plan and "TEMP B-TREE" not in plan, plan


def test_a_database_before_the_expiry_mark_gets_it_on_open(tmp_path: Path) -> None:
    """Migration 10 on a file of migration 9: columns, index and triggers added, expired facts counted."""
    import sqlite3

    db = tmp_path / "v9.db"
    store = MemoryStore.from_url(str(db))
    for n in range(12):
        apply(store, "m", ("api_add", n, n % 2 == 0, False, EXPIRIES[n % 4]), n)
    store.close()
    with sqlite3.connect(db) as conn:  # as migration 9 left it: no mark, no family index, old triggers
        for name in LANGUAGE_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP INDEX ix_cm_fragments_family")
        for column in ("expired_through", "expired_zh", "expired_other"):
            conn.execute(f"ALTER TABLE cm_memories DROP COLUMN {column}")
        conn.execute("DELETE FROM cm_schema_migrations WHERE version >= 10")
        conn.execute("PRAGMA user_version = 1")
    store = MemoryStore.from_url(str(db))
    try:
        with store._read() as conn:
            names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
            assert {"ix_cm_fragments_family", *LANGUAGE_TRIGGERS} <= names
        with store._write("m") as conn:
            move_expiry_mark(conn, "m", now_ms=NOW)
        apply(store, "m", ("api_add", 50, True, False, -DAY), 50)  # behind the mark on arrival
        check_counts(store, "m")
    finally:
        store.close()
