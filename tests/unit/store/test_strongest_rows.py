"""The summary's kept fact rows (SQLite) equal the two ``LIMIT`` statements after any order of writes.

``StrongestRows`` keeps each memory's ranked durable and temporary rows (a margin past the limit)
and merges the rows written since its last read, found by the trigger-kept revision
(``store/_fact_revisions.py``). What it must get right depends on the order of writes: a row
leaving a cut list, a new row past the cut, ties in rank, expiry as time moves, deletes. Here
another connection to the file writes in generated orders, with many ties and small limits so
the cut and the margin are crossed often, and after every step the kept answer must equal the
database's.
"""

from __future__ import annotations

import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from convmem_graph.store import MemoryStore
from convmem_graph.store._fact_revisions import FACT_REVISION_TRIGGERS
from convmem_graph.store._summary_facts import StrongestRows

MID = "m1"
NOW = 1_767_000_000_000

_INSERT = (
    "INSERT INTO cm_fragments (memory_id, id, content, category, key, status, transient, expires_at, "
    "origin, confidence, created_at, updated_at, observed_at) "
    "VALUES (?, ?, ?, 'other', ?, 'active', ?, ?, 'extracted', ?, ?, ?, ?)"
)

step = st.one_of(
    st.tuples(
        st.just("insert"),
        st.integers(min_value=1, max_value=12),
        st.sampled_from([0.5, 0.8, 0.9]),
        st.integers(min_value=0, max_value=3),  # observed_at: ties
        st.booleans(),
        st.sampled_from([None, -1, 5, 50]),  # expiry relative to now
    ),
    st.tuples(
        st.just("update"),
        st.integers(min_value=0, max_value=1_000),
        st.sampled_from(["confidence", "observed_at", "status", "transient", "expires_at", "content"]),
        st.integers(min_value=0, max_value=3),
    ),
    st.tuples(st.just("delete"), st.integers(min_value=0, max_value=1_000)),
    st.tuples(st.just("tick"), st.sampled_from([0, 1, 10, 60])),
)


def _value(field: str, n: int, now: int) -> Any:
    return {
        "confidence": [0.5, 0.8, 0.9, 0.95][n],
        "observed_at": n,
        "status": ["active", "deleted", "superseded", "active"][n],
        "transient": n % 2,
        "expires_at": [None, now - 1, now + 5, now + 50][n],
        "content": f"改写 {n}",
    }[field]


def _expected(store: MemoryStore, limit: int, now: int) -> tuple[list[Any], list[Any]]:
    durable, temporary = (
        store.strongest_fragments(MID, limit=limit, now_ms=now, transient=kind) for kind in (False, True)
    )
    return durable, temporary


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=1, max_size=25),
    limit=st.integers(min_value=1, max_value=8),
    margin=st.sampled_from([0, 1, 3]),  # small margins: the cut is crossed often
)
# A kept fact demoted past the cut: the rows after it are unknown, it must not take their place.
@example(steps=[("insert", 5, 0.8, 0, False, None), ("update", 0, "confidence", 0)], limit=1, margin=0)
def test_kept_rows_equal_the_statements_after_any_order_of_writes(
    steps: list[tuple[Any, ...]], limit: int, margin: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.db"
        store = MemoryStore.from_url(str(path))
        store._strongest = StrongestRows(4, margin=margin)
        store.ensure_memory(MID)
        now, made = NOW, 0
        try:
            with closing(sqlite3.connect(path)) as other:
                for kind, *args in steps:
                    ids = [r[0] for r in other.execute("SELECT id FROM cm_fragments ORDER BY id")]
                    with other:
                        if kind == "insert":
                            count, confidence, observed, transient, expiry = args
                            for _ in range(count):
                                made += 1
                                expires = None if expiry is None else now + expiry
                                fid = f"f{made:04d}"
                                row = (MID, fid, f"事实 {made}", f"k:{made}", int(transient), expires)
                                other.execute(_INSERT, (*row, confidence, now, now, observed))
                        elif kind == "update" and ids:
                            fid, field, n = ids[args[0] % len(ids)], args[1], args[2]
                            sql = f"UPDATE cm_fragments SET {field} = ? WHERE id = ?"  # updated_at kept
                            other.execute(sql, (_value(field, n, now), fid))
                        elif kind == "delete" and ids:
                            other.execute("DELETE FROM cm_fragments WHERE id = ?", (ids[args[0] % len(ids)],))
                        elif kind == "tick":
                            now += args[0]
                    assert store.summary_facts(MID, limit=limit, now_ms=now) == _expected(store, limit, now)
        finally:
            store.close()


def test_a_new_file_has_the_revision_triggers(tmp_path: Path) -> None:
    """Set up through the fresh-file script (the migrations' statements played back), as any new store."""
    store = MemoryStore.from_url(str(tmp_path / "m.db"))
    with store.read() as conn:
        names = set(conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'trigger'").scalars())
    store.close()
    assert set(FACT_REVISION_TRIGGERS) <= names


def test_a_merge_without_the_ids_order_never_places_a_row_among_its_ties() -> None:
    """``exact_ids=False`` (a PostgreSQL collation Python cannot follow): a tie reads the lists again."""
    from convmem_graph.store._summary_facts import _rank, _Ranked, _Ties

    def row(fid: str, confidence: float, observed: int) -> tuple[Any, ...]:
        return (fid, "m", "c", "preference", "like:x", "active", 0, None, None, "extracted", None,
                confidence, 1, 1, observed, None, None)  # fmt: skip

    rows = [row("a", 0.9, 5), row("b", 0.8, 5)]
    kept = _Ranked([_rank(r) for r in rows], rows, [None, None], None)  # type: ignore[list-item]
    assert [r[0] for r in kept.merged(set(), [row("c", 0.85, 5)], 8, exact_ids=False).rows] == ["a", "c", "b"]
    with pytest.raises(_Ties):
        kept.merged(set(), [row("B", 0.8, 5)], 8, exact_ids=False)  # ties with "b" in all but the id
    # With the ids' order known it is placed by id, as SQLite orders it.
    assert [r[0] for r in kept.merged(set(), [row("B", 0.8, 5)], 8).rows] == ["a", "B", "b"]
