"""A call start's kept snapshot (SQLite) is never stale, whatever writes its row and in what order.

The store and the call-start reader keep the parsed snapshot with the memory's trigger-kept
snapshot revision (``store/_snapshot_revisions.py``) and fetch the row again only when the
revision read by key differs. What they must get right depends on the order of events: writes
through this store, another store on the file, raw SQL on another connection (update, delete,
``INSERT OR REPLACE``), the memory row deleted and made again (with its old revision copied, or
the snapshot changed while it was missing), a write read inside its own transaction and then
rolled back (its revision is given again to the next write), the checkpointer's commits to other
tables. After every call, the payload equals the one a cold reader (a new connection, nothing
kept) renders from the file, for both ways of naming the file (a path, a ``sqlite:///`` URL).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from convmem_graph.memory import ConvMemory
from convmem_graph.models import Fragment, MemorySnapshot, Summary
from convmem_graph.snapshot import render_call_start
from convmem_graph.store import MemoryStore
from convmem_graph.store._snapshot_revisions import SNAPSHOT_REVISION_TRIGGERS, read_snapshot_row
from convmem_graph.store.sqlite_reader import SqliteSnapshotReader

MID = "m"
NOW = 1_767_000_000_000
THINGS = ["kayaking", "pottery", "jazz", "火锅"]
QUERIES = ["", "pottery", "jazz 火锅", "nothing at all"]


class _Rollback(Exception):
    pass


def _variant(k: int) -> MemorySnapshot:
    """Snapshot ``k``: its own fact and summary, so every variant renders another payload."""
    thing = THINGS[k]
    fact = Fragment(id=f"f{k}", memory_id=MID, content=f"User likes {thing}", key=f"like:{thing}")
    summary = Summary(text=f"They talked about {thing}.", tokens=6, covers_until_ms=NOW - 1)
    return MemorySnapshot(memory_id=MID, fragments=[fact], summary=summary)


def _cold(path: Path, query: str, config: Any) -> Any:
    reader = SqliteSnapshotReader.open(path)
    assert reader is not None
    with reader:
        snap = reader.load_snapshot(MID)
        assert snap is not None  # the call just made rebuilt a missing one
        return render_call_start(reader, snap, "openai", {"query": query}, config=config, now_ms=NOW)


step = st.one_of(
    st.tuples(st.just("call"), st.sampled_from(QUERIES)),
    st.tuples(st.sampled_from(["own_save", "other_save", "raw_update", "raw_replace"]), st.integers(0, 3)),
    st.tuples(st.just("raw_delete")),
    st.tuples(st.just("other_messages")),
    st.tuples(st.just("memory_row_again"), st.sampled_from([None, 0, 1, 2, 3])),
    st.tuples(st.just("rolled_back"), st.integers(0, 3), st.sampled_from([None, "other_save", "raw_update"])),
    st.tuples(st.just("checkpoint_commit")),
)


def _run(tmp: Path, as_url: bool, steps: list[tuple[Any, ...]]) -> None:
    path = tmp / "mem.db"
    name = f"sqlite:///{path}" if as_url else str(path)
    mem = ConvMemory.open(name, clock=lambda: NOW)
    other = MemoryStore.from_url(str(path))
    kept_reader = SqliteSnapshotReader.open(path)
    assert kept_reader is not None
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute("CREATE TABLE IF NOT EXISTS fake_checkpoints (k INTEGER)")
        mem.store.save_snapshot(MID, _variant(0), now_ms=NOW)
        for n, event in enumerate([*steps, ("call", "pottery")]):
            kind = event[0]
            if kind == "call":
                got = mem.payload(MID, "openai", query=event[1])
                want = _cold(path, event[1], mem.config)
                assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True), (n, event)
                kept = kept_reader.load_snapshot(MID)
                assert kept == mem.store.load_snapshot(MID), (n, event)
            elif kind == "own_save":
                mem.store.save_snapshot(MID, _variant(event[1]), now_ms=NOW)
            elif kind == "other_save":
                other.save_snapshot(MID, _variant(event[1]), now_ms=NOW)
            elif kind == "raw_update":
                data = _variant(event[1]).model_dump_json()
                raw.execute("UPDATE cm_snapshots SET data = ? WHERE memory_id = ?", (data, MID))
            elif kind == "raw_replace":
                data = _variant(event[1]).model_dump_json()
                raw.execute(
                    "INSERT OR REPLACE INTO cm_snapshots (memory_id, data, updated_at) VALUES (?, ?, ?)",
                    (MID, data, NOW),
                )
            elif kind == "raw_delete":
                raw.execute("DELETE FROM cm_snapshots WHERE memory_id = ?", (MID,))
            elif kind == "other_messages":
                other.add_messages(MID, [])  # nothing new: the snapshot stays
                raw.execute("UPDATE cm_memories SET updated_at = updated_at + 1 WHERE memory_id = ?", (MID,))
            elif kind == "memory_row_again":
                # The row made again with its old values (its old revision included), the
                # snapshot changed in between when drawn.
                cur = raw.execute("SELECT * FROM cm_memories WHERE memory_id = ?", (MID,))
                row, cols = cur.fetchone(), [d[0] for d in cur.description]
                raw.execute("DELETE FROM cm_memories WHERE memory_id = ?", (MID,))
                if event[1] is not None:
                    data = _variant(event[1]).model_dump_json()
                    raw.execute("UPDATE cm_snapshots SET data = ? WHERE memory_id = ?", (data, MID))
                if row is not None:
                    marks = ", ".join("?" * len(cols))
                    raw.execute(f"INSERT INTO cm_memories ({', '.join(cols)}) VALUES ({marks})", row)
            elif kind == "rolled_back":
                # Read inside the write's own transaction, then rolled back: the revision it
                # read is given again to the next write (here another writer's).
                try:
                    with mem.store.session() as session, session.transaction():
                        session.save_snapshot(MID, _variant(event[1]), now_ms=NOW)
                        assert session.load_snapshot(MID) == _variant(event[1])
                        raise _Rollback
                except _Rollback:
                    pass
                if event[2] == "other_save":
                    other.save_snapshot(MID, _variant((event[1] + 1) % 4), now_ms=NOW)
                elif event[2] == "raw_update":
                    data = _variant((event[1] + 1) % 4).model_dump_json()
                    raw.execute("UPDATE cm_snapshots SET data = ? WHERE memory_id = ?", (data, MID))
            elif kind == "checkpoint_commit":
                raw.execute("INSERT INTO fake_checkpoints VALUES (?)", (n,))
    finally:
        raw.close()
        kept_reader.close()
        other.close()
        mem.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=14), as_url=st.booleans())
# The rolled-back write's revision given again to another writer's different snapshot.
@example(steps=[("call", "pottery"), ("rolled_back", 2, "other_save")], as_url=False)
@example(steps=[("call", "pottery"), ("rolled_back", 2, "raw_update")], as_url=True)
# The snapshot changed while its memory row was missing, the row put back with its old revision.
@example(steps=[("call", "jazz 火锅"), ("memory_row_again", 3)], as_url=False)
@example(steps=[("call", ""), ("raw_update", 2), ("call", ""), ("raw_replace", 1)], as_url=True)
def test_call_starts_equal_a_cold_reader_after_any_order_of_writes(
    steps: list[tuple[Any, ...]], as_url: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _run(Path(tmp), as_url, steps)


def test_the_variants_render_different_payloads(tmp_path: Path) -> None:
    # Otherwise the comparison above could not see a stale snapshot.
    mem = ConvMemory.open(str(tmp_path / "v.db"), clock=lambda: NOW)
    try:
        payloads = set()
        for k in range(len(THINGS)):
            mem.store.save_snapshot(MID, _variant(k), now_ms=NOW)
            payloads.add(json.dumps(mem.payload(MID, "openai", query="pottery"), sort_keys=True))
        assert len(payloads) == len(THINGS)
    finally:
        mem.close()


def test_an_unchanged_row_is_not_fetched_again(tmp_path: Path) -> None:
    store = MemoryStore.from_url(str(tmp_path / "s.db"))
    try:
        store.save_snapshot(MID, _variant(1), now_ms=NOW)
        first = store.load_snapshot(MID)
        with closing(sqlite3.connect(tmp_path / "s.db")) as conn:
            found = read_snapshot_row(conn, MID, None)
            assert found is not None and found.data is not None and found.committed
            again = read_snapshot_row(conn, MID, found.rev)
            assert again is not None and again.data is None and again.rev == found.rev
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert set(SNAPSHOT_REVISION_TRIGGERS) <= names
        assert store.load_snapshot(MID) is first  # the kept object, by its revision
    finally:
        store.close()


def test_a_lost_clock_reads_the_row_every_time(tmp_path: Path) -> None:
    # No clock row: the trigger stamps NULL, and readers compare the row's bytes instead.
    store = MemoryStore.from_url(str(tmp_path / "c.db"))
    try:
        store.save_snapshot(MID, _variant(0), now_ms=NOW)
        assert store.load_snapshot(MID) == _variant(0)
        with closing(sqlite3.connect(tmp_path / "c.db", isolation_level=None)) as conn:
            conn.execute("DELETE FROM cm_snapshot_clock")
            conn.execute(
                "UPDATE cm_snapshots SET data = ? WHERE memory_id = ?", (_variant(3).model_dump_json(), MID)
            )
            found = read_snapshot_row(conn, MID, None)
            assert found is not None and found.rev is None
        assert store.load_snapshot(MID) == _variant(3)
        reader = SqliteSnapshotReader.open(tmp_path / "c.db")
        assert reader is not None
        with reader:
            assert reader.load_snapshot(MID) == _variant(3)
            assert reader.load_snapshot(MID) == _variant(3)
    finally:
        store.close()


@pytest.mark.parametrize("as_url", [False, True])
def test_call_start_reads_share_one_connection_kept_apart_from_the_pool(tmp_path: Path, as_url: bool) -> None:
    path = tmp_path / "p.db"
    store = MemoryStore.from_url(f"sqlite:///{path}" if as_url else str(path))
    try:
        store.save_snapshot(MID, _variant(2), now_ms=NOW)
        checkouts: list[int] = []
        event.listen(store.engine, "checkout", lambda *a: checkouts.append(1))
        store.load_snapshot(MID)
        store.search_episodes(MID, "jazz")
        counts = [len(checkouts)]
        for _ in range(3):
            checkouts.clear()
            with store.call_start_reads():
                assert store.load_snapshot(MID) == _variant(2)
                store.search_episodes(MID, "jazz")
            counts.append(len(checkouts))
        # Two checkouts alone; one for the first call start, whose connection the next ones reuse.
        assert counts == [2, 1, 0, 0]
        kept = store._spare[0][1]
    finally:
        store.close()
    with pytest.raises(sqlite3.ProgrammingError):  # closed with the store
        kept.execute("SELECT 1")
