"""Optional tables on SQLite: made by their first write, and delete / purge / export exact without them.

See :mod:`convmem_graph.store._optional`. A new file has none of the optional tables; each
feature's first write makes its own, as declared (the DDL the migrations made before), once even
when two processes race for it; the delete, the retention purge and the export of a memory are
as exact with any subset of them made as with all (a hypothesis over which features wrote what,
for which of two memories). Two processes: ``tests/integration/test_optional_tables_processes.py``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, func, select
from sqlalchemy.schema import CreateIndex, CreateTable

from convmem_graph.models import Message
from convmem_graph.server.bailian_meta import NodeMetaStore
from convmem_graph.server.bailian_schemas import ProfileSchemaStore
from convmem_graph.server.inbox import Inbox, TaskInfo
from convmem_graph.store import MemoryStore
from convmem_graph.store._optional import OPTIONAL_TABLE_NAMES, ensure_tables, present
from convmem_graph.store.engine import execute_upsert
from convmem_graph.store.registry import (
    MEMORY_TABLES,
    OPTIONAL_TABLES,
    inbox_table,
    pull_cursors,
    tasks_table,
)
from convmem_graph.store.transfer import export_memory

T0 = 1_767_268_800_000
MODEL = "probe-model"


def _tables(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _message(mid: str, n: int) -> Message:
    return Message(
        id=f"{mid}-{n}",
        role="user",
        content=f"I like tea {n}",
        channel="im",
        source="message",
        timestamp_ms=T0 + n,
    )


def _turn_vector(store: MemoryStore, mid: str, n: int) -> None:
    store.add_messages(mid, [_message(mid, n)])
    store.save_turn_vectors(mid, MODEL, [(store.max_seq(mid), [1.0, 0.5 + n])])


def _fact_vector(store: MemoryStore, mid: str, n: int) -> None:
    fact = store.add_fragment(mid, f"User likes green tea number {n}.")
    assert store.save_fact_vectors(mid, MODEL, [(fact.id, fact.content, [0.5, float(n)])]) == 1


def _dead_letter(store: MemoryStore, mid: str, n: int) -> None:
    store.ensure_memory(mid)
    assert store.add_dead_letter(mid, source="openai", raw=f"raw {mid} {n}", error="unparsable")


def _inbox(store: MemoryStore, mid: str, n: int) -> None:
    inbox = Inbox(store)
    inbox.add("proxy", f"k-{mid}-{n}", '{"q": 1}', memory_id=mid, status="done")
    # A TRTC delivery stored before its task was mapped names only the task.
    inbox.add("trtc", f"t-{mid}-{n}", "{}", task_id=f"task-{mid}", status="done")
    inbox.save_task(TaskInfo(task_id=f"task-{mid}", memory_id=mid))


def _pull_cursor(store: MemoryStore, mid: str, n: int) -> None:
    # What ``convmem pull im`` writes after a pull (cli/pull.py), without the IM client.
    with store.transaction() as conn:
        ensure_tables(conn, pull_cursors)
        row = {"user_id": f"u-{mid}", "bot_id": f"b{n}", "last_time": n, "memory_id": mid}
        execute_upsert(conn, pull_cursors, ("user_id", "bot_id"), row)


def _node_meta(store: MemoryStore, mid: str, n: int) -> None:
    NodeMetaStore(store).merge(mid, f"node-{n}", {"location_name": f"place {n}"})


#: Each feature's first write and the optional tables it makes.
FEATURES: dict[str, tuple[Callable[[MemoryStore, str, int], None], set[str]]] = {
    "turn vectors": (_turn_vector, {"cm_turn_vectors", "cm_turn_vector_stamps"}),
    "fact vectors": (_fact_vector, {"cm_fact_vectors", "cm_fact_vector_stamps"}),
    "dead letters": (_dead_letter, {"cm_dead_letters"}),
    "inbox": (_inbox, {"cm_serve_inbox", "cm_serve_tasks"}),
    "pull cursors": (_pull_cursor, {"cm_im_pull_cursors"}),
    "node meta": (_node_meta, {"cm_bailian_node_meta"}),
}


def test_a_new_file_has_none_of_the_optional_tables(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store = MemoryStore.from_url(str(path))
    try:
        store.add_messages("m", [_message("m", 1)])
        assert store.list_dead_letters("m") == []
        assert store.missing_turn_vectors("m", MODEL) != []  # every turn lacks a vector
        assert store.dense_episodes("m", MODEL, [1.0, 0.0], limit=3).hits == []
        assert store.missing_fact_vectors("m", MODEL) == []
        assert export_memory(store, "m")["dead_letters"] == []
        assert store.delete_memory("m") is True
    finally:
        store.close()
    assert _tables(path) & OPTIONAL_TABLE_NAMES == set()
    assert {t.name for t in OPTIONAL_TABLES} == OPTIONAL_TABLE_NAMES


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_a_first_write_makes_its_tables_as_declared(tmp_path: Path, feature: str) -> None:
    path = tmp_path / "f.db"
    write, made = FEATURES[feature]
    store = MemoryStore.from_url(str(path))
    try:
        write(store, "m", 1)
        write(store, "m", 2)  # the second finds them
    finally:
        store.close()
    assert _tables(path) & OPTIONAL_TABLE_NAMES == made
    # The very statements SQLAlchemy's create_all (the migrations' step) gives these tables.
    scratch = create_engine("sqlite://")
    wanted: dict[str, str] = {}
    with scratch.connect() as conn:
        for table in (t for t in OPTIONAL_TABLES if t.name in made):
            wanted[table.name] = str(CreateTable(table).compile(dialect=conn.dialect)).strip()
            for index in table.indexes:
                wanted[str(index.name)] = str(CreateIndex(index).compile(dialect=conn.dialect)).strip()
    with closing(sqlite3.connect(path)) as conn:
        names = tuple(wanted)
        marks = ", ".join("?" * len(names))
        rows = conn.execute(f"SELECT name, sql FROM sqlite_master WHERE name IN ({marks})", names)
        found = {str(n): str(s).strip() for n, s in rows}
    assert found == wanted


def _rows_of(store: MemoryStore, memory_id: str) -> dict[str, int]:
    """Rows naming ``memory_id`` in every registered table that exists (deliveries through their task too)."""
    out: dict[str, int] = {}
    with store.read() as conn:
        for entry in MEMORY_TABLES:
            table = entry.table
            if not present(conn, table):
                continue
            where = table.c[entry.column] == memory_id
            if table is inbox_table and present(conn, tasks_table):
                where = where | table.c.task_id.in_(
                    select(tasks_table.c.task_id).where(tasks_table.c.memory_id == memory_id)
                )
            out[table.name] = int(
                conn.execute(select(func.count()).select_from(table).where(where)).scalar_one()
            )
    return out


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(sorted(FEATURES)), st.sampled_from(["gone", "kept"])), max_size=8
    )
)
def test_delete_and_purge_are_exact_with_any_optional_tables_made(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[str, str]]
) -> None:
    path = tmp_path_factory.mktemp("opt") / "m.db"
    store = MemoryStore.from_url(str(path))
    try:
        for mid in ("gone", "kept"):
            store.add_messages(mid, [_message(mid, 0)])
        for n, (feature, mid) in enumerate(writes, start=1):
            FEATURES[feature][0](store, mid, n)
        made = set().union(*(FEATURES[f][1] for f, _ in writes))
        assert _tables(path) & OPTIONAL_TABLE_NAMES == made
        kept_before = _rows_of(store, "kept")
        exported: dict[str, Any] = export_memory(store, "kept")
        assert len(exported["dead_letters"]) == sum(
            1 for f, m in writes if (f, m) == ("dead letters", "kept")
        )

        assert store.delete_memory("gone") is True
        assert set(_rows_of(store, "gone").values()) <= {0}
        assert _rows_of(store, "kept") == kept_before
        # The retention purge of the other memory, its turn vectors with its turns.
        store.purge_messages("kept", before_ms=T0 + 10_000, keep_recent=0, only_processed=False)
        after = _rows_of(store, "kept")
        assert after["cm_messages"] == 0
        assert after.get("cm_turn_vectors", 0) == 0
        assert _tables(path) & OPTIONAL_TABLE_NAMES == made  # reads and deletes made none
    finally:
        store.close()


def test_two_connections_racing_the_first_writes_make_each_table_once(tmp_path: Path) -> None:
    """Two stores on one file (two engines, their own connections), each thread writing every feature."""
    path = str(tmp_path / "race.db")
    stores = [MemoryStore.from_url(path) for _ in range(2)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(store: MemoryStore, name: str) -> None:
        try:
            barrier.wait(timeout=30)
            for n in range(2):
                for feature, (write, _) in sorted(FEATURES.items()):
                    write(store, f"{name}-{feature.replace(' ', '-')}", n)
            ProfileSchemaStore(store)
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(s, f"t{i}")) for i, s in enumerate(stores)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert _tables(Path(path)) & OPTIONAL_TABLE_NAMES == OPTIONAL_TABLE_NAMES
        for name in ("t0", "t1"):
            assert len(stores[0].list_dead_letters(f"{name}-dead-letters")) == 2
            assert stores[1].missing_turn_vectors(f"{name}-turn-vectors", MODEL) == []
    finally:
        for s in stores:
            s.close()


FIXTURE = Path(__file__).parents[2] / "fixtures" / "store_v0_1_0.sqlite"


def test_an_older_file_keeps_its_optional_tables_and_their_rows(tmp_path: Path) -> None:
    """A v0.1.0 file: the optional tables it had stay with their rows; the ones it lacked wait for a write."""
    path = tmp_path / "old.db"
    path.write_bytes(FIXTURE.read_bytes())

    def counts() -> dict[str, int]:
        with closing(sqlite3.connect(path)) as conn:
            names = _tables(path) & OPTIONAL_TABLE_NAMES
            return {n: int(conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0]) for n in names}

    before = counts()
    assert set(before) >= {"cm_dead_letters", "cm_serve_inbox", "cm_im_pull_cursors"}
    assert "cm_turn_vectors" not in before  # that version had no vectors
    store = MemoryStore.from_url(str(path))
    try:
        assert counts() == before  # the open's migrations made none and dropped none
        assert len(store.list_dead_letters("mem_fixture")) == before["cm_dead_letters"]
        assert store.delete_memory("mem_fixture") is True
        assert set(_rows_of(store, "mem_fixture").values()) <= {0}
        _turn_vector(store, "mem_new", 1)  # the first vectors make their tables in the old file too
    finally:
        store.close()
    assert {"cm_turn_vectors", "cm_turn_vector_stamps"} <= _tables(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
