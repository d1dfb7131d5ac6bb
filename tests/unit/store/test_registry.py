"""Delete by construction: every table holding a memory's data is in one registry, and delete empties it.

The live schema is scanned (not a list): every SQLAlchemy table the package declares anywhere is
created next to the store's own, then every table of the database must be classified by
:mod:`convmem_graph.store.registry`, and one with a memory-naming column must be a memory table.
A memory is then planted in every registered table (an ID-card number in its texts, raw inbox
bodies included), deleted, and every column of every table is searched for its id and the number;
on SQLite the file's bytes are searched too after a WAL checkpoint (FTS5 index pages keep deleted
terms unless merged). :class:`TestDeleteRegistry` runs on SQLite and on PostgreSQL (``backend_url``).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    Boolean,
    Connection,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    insert,
    text,
)

import convmem_graph
from convmem_graph.models import Message
from convmem_graph.server.inbox import Inbox, TaskInfo
from convmem_graph.store import MemoryStore
from convmem_graph.store.episodes import EPISODE_TABLE
from convmem_graph.store.registry import (
    CHECKPOINT_TABLES,
    MEMORY_TABLES,
    SHARED_TABLES,
    VECTOR_COPIES,
    inbox_table,
    tasks_table,
)
from convmem_graph.store.schema import memories, messages
from convmem_graph.store.transfer import export_memory

#: An ID-card number: must not survive a delete anywhere in the database (or its file).
PLANTED = "110101199003074512"
#: The number of the memory that is kept (must survive the other's delete).
KEPT_NUMBER = "110101198501011234"
#: Column names that name a user or memory: a table carrying one must be a registered memory table.
MEMORY_COLUMNS = frozenset({"memory_id", "user_id", "thread_id", "human_id", "memory", "owner"})


def declared_tables() -> list[Table]:
    """Every SQLAlchemy table any module of the package declares (each module imported once).

    Found through the modules' names (tables, and every table of a ``MetaData``), not
    ``gc.get_objects()``: the package freezes its import-time heap (``gc.freeze``), whose objects
    that call does not list, and the scan found no table at all.
    """
    found: dict[str, Table] = {}
    for info in pkgutil.walk_packages(convmem_graph.__path__, convmem_graph.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            tables = value.tables.values() if isinstance(value, MetaData) else [value]
            for table in tables:
                if isinstance(table, Table) and table.name.startswith("cm_"):
                    found.setdefault(table.name, table)
    assert len(found) >= len(MEMORY_TABLES), "the scan found fewer tables than the registry lists"
    return list(found.values())


def create_every_table(store: MemoryStore) -> None:
    """Create every declared table in the store's database (the store's own exist already)."""
    Inbox(store)  # the server's own creation path
    metadatas: dict[int, MetaData] = {id(t.metadata): t.metadata for t in declared_tables()}
    with store.schema_transaction() as conn:
        for md in metadatas.values():
            md.create_all(conn, checkfirst=True)


def live_tables(conn: Connection) -> dict[str, dict[str, str]]:
    """Table name -> {column name: declared type}, read from the database catalog."""
    if conn.dialect.name == "sqlite":
        names = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        ).scalars()
        return {
            n: {r[1]: str(r[2]) for r in conn.exec_driver_sql(f'PRAGMA table_info("{n}")')}
            for n in list(names)
        }
    rows = conn.exec_driver_sql(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    )
    out: dict[str, dict[str, str]] = {}
    for table, column, kind in rows:
        out.setdefault(table, {})[column] = kind
    return out


def _is_episode_index(name: str) -> bool:
    # The episodic index (and on SQLite its FTS5 shadow tables), deleted through the messages.
    return name == EPISODE_TABLE or name.startswith(EPISODE_TABLE + "_")


def unregistered(tables: dict[str, dict[str, str]]) -> list[str]:
    """Problems: tables the registry does not classify, or memory tables it does not delete from."""
    memory_tables = {e.table.name: e.column for e in MEMORY_TABLES}
    problems = []
    for name, columns in sorted(tables.items()):
        if _is_episode_index(name) or name in VECTOR_COPIES:
            continue
        naming = MEMORY_COLUMNS.intersection(columns)
        if name in CHECKPOINT_TABLES:
            if CHECKPOINT_TABLES[name] not in columns:
                problems.append(f"{name}: checkpoint column {CHECKPOINT_TABLES[name]} is missing")
        elif name in memory_tables:
            if memory_tables[name] not in columns:
                problems.append(f"{name}: registered column {memory_tables[name]} is missing")
        elif name in SHARED_TABLES:
            continue  # declared, with its reason, to hold no memory's data
        elif naming:
            problems.append(f"{name}: has {sorted(naming)} but is not a registered memory table")
        else:
            problems.append(f"{name}: neither a memory table nor a declared shared table")
    return problems


def _value(table: Table, column: Any, memory_id: str, n: int, number: str) -> Any:
    """A value for ``column`` of a planted row: the memory id, the planted text, or a filler."""
    entry = next(e for e in MEMORY_TABLES if e.table is table)
    if column.name == entry.column:
        return memory_id
    kind = column.type
    if isinstance(kind, JSON):
        return {"v": f"{number} {memory_id}"}
    if isinstance(kind, Boolean):
        return True
    if isinstance(kind, Float):
        return 1.0
    if isinstance(kind, LargeBinary):  # turn vectors: the planted text as the blob's bytes
        return f"{number} {memory_id}".encode()
    if isinstance(kind, Integer):
        return n
    if isinstance(kind, String | Text):
        length = getattr(kind, "length", None)
        if length is None or length >= 64:
            return f"{number} {memory_id} {column.name}"
        return f"{column.name[:8]}{n}"[:length]
    raise AssertionError(f"no planted value for {table.name}.{column.name} ({kind!r})")


def _message(message_id: str, content: str, at_ms: int) -> Message:
    return Message(
        id=message_id, role="user", content=content, channel="im", source="message", timestamp_ms=at_ms
    )


def plant(store: MemoryStore, memory_id: str, n: int, number: str = PLANTED) -> None:
    """Put rows of ``memory_id`` into every registered table, the number in every text."""
    store.add_messages(
        memory_id,
        [_message(f"m-{memory_id}", f"我的身份证号是 {number}", 1_700_000_000_000 + n)],
    )
    inbox = Inbox(store)
    task = f"task-{memory_id}"
    # A TRTC delivery stored before its task was mapped names only the task.
    inbox.add("trtc", f"k-{memory_id}", f'{{"Text": "身份证 {number}"}}', task_id=task, event=903)
    inbox.add("proxy", f"proxy-{memory_id}", f'{{"q": "{number}"}}', memory_id=memory_id)
    inbox.save_task(TaskInfo(task_id=task, memory_id=memory_id, human_id=f"u-{memory_id}"))
    with store.schema_transaction() as conn:
        for entry in MEMORY_TABLES:
            table = entry.table
            if table is memories or table is messages or table is inbox_table or table is tasks_table:
                continue  # written through their own code above
            row = {
                c.name: _value(table, c, memory_id, n, number)
                for c in table.columns
                if c is not table.autoincrement_column
            }
            conn.execute(insert(table).values(**row))


def find(conn: Connection, tables: dict[str, dict[str, str]], needle: str) -> list[str]:
    """Every ``table.column`` of the database whose value contains ``needle``."""
    sqlite = conn.dialect.name == "sqlite"
    hits = []
    for name, columns in tables.items():
        if sqlite and name == EPISODE_TABLE:
            continue  # the FTS5 table itself reads no stored text; its shadow tables are searched
        for col, kind in columns.items():
            if sqlite:
                sql = f'SELECT count(*) FROM "{name}" WHERE instr(CAST("{col}" AS BLOB), CAST(? AS BLOB)) > 0'
                found = conn.exec_driver_sql(sql, (needle,)).scalar()
            elif kind == "bytea":  # checkpoint blobs: the needle's UTF-8 bytes
                sql = f'SELECT count(*) FROM "{name}" WHERE position(convert_to(%s, \'UTF8\') in "{col}") > 0'
                found = conn.exec_driver_sql(sql, (needle,)).scalar()
            else:
                sql = f'SELECT count(*) FROM "{name}" WHERE strpos(CAST("{col}" AS TEXT), %s) > 0'
                found = conn.exec_driver_sql(sql, (needle,)).scalar()
            if found:
                hits.append(f"{name}.{col}")
    return hits


class TestDeleteRegistry:
    """The registry and delete contract, on each backend (``backend_url``: a database of the test's own).

    The catalog scan must see only this test's tables: on PostgreSQL the test's schema.
    """

    @pytest.fixture
    def url(self, backend_url: str) -> str:
        return backend_url

    @pytest.fixture
    def store(self, url: str) -> Iterator[MemoryStore]:
        s = MemoryStore.from_url(url)
        try:
            create_every_table(s)
            yield s
        finally:
            s.close()

    def test_every_table_is_classified(self, store: MemoryStore) -> None:
        with store.read() as conn:
            tables = live_tables(conn)
        assert {"cm_serve_inbox", "cm_serve_tasks", "cm_replay_progress", "cm_im_pull_cursors"} <= set(tables)
        assert unregistered(tables) == []

    def test_scan_catches_an_unregistered_memory_table(self, store: MemoryStore) -> None:
        with store.schema_transaction() as conn:
            conn.execute(text("CREATE TABLE cm_new_feature (id INTEGER PRIMARY KEY, memory_id TEXT)"))
        with store.read() as conn:
            assert unregistered(live_tables(conn)) == [
                "cm_new_feature: has ['memory_id'] but is not a registered memory table"
            ]
        with store.schema_transaction() as conn:
            conn.execute(text("DROP TABLE cm_new_feature"))

    def test_delete_leaves_nothing_of_the_memory(self, store: MemoryStore) -> None:
        gone, kept = "mem_gone_7f3a", "mem_kept_91c2"
        plant(store, gone, 1)
        plant(store, kept, 2, KEPT_NUMBER)
        with store.read() as conn:
            tables = live_tables(conn)
            before = set(find(conn, tables, gone))
        planted_in = {f"{e.table.name}.{e.column}" for e in MEMORY_TABLES}
        assert planted_in <= before, "every registered table holds the memory before the delete"

        assert store.delete_memory(gone) is True

        with store.read() as conn:
            assert find(conn, tables, gone) == []
            kept_hits = set(find(conn, tables, kept))
        assert planted_in <= kept_hits, "the other memory keeps every row"
        with store.read() as conn:
            assert find(conn, tables, PLANTED) == []
            assert find(conn, tables, KEPT_NUMBER), "the other memory's number is still stored"

    def test_convmemory_delete_leaves_nothing_checkpoints_included(self, url: str) -> None:
        """Through ``ConvMemory``: the lifecycle's checkpoints of the memory go too."""
        from convmem_graph.memory import ConvMemory

        mem = ConvMemory.open(url)
        try:
            create_every_table(mem.store)
            gone, kept = "mem_gone_c4d1", "mem_kept_e8b0"
            for mid, number in ((gone, PLANTED), (kept, KEPT_NUMBER)):
                doc = {
                    "user": mid,
                    "messages": [{"role": "user", "content": f"我的身份证号是 {number}，我住在杭州"}],
                }
                mem.ingest(mid, doc, source="openai")
                plant(mem.store, mid, 3 if mid == gone else 4, number)
            with mem.store.read() as conn:
                tables = live_tables(conn)
                assert {t for t in CHECKPOINT_TABLES if t in tables}, "the lifecycle wrote checkpoints"
                assert any(h.split(".")[0] in CHECKPOINT_TABLES for h in find(conn, tables, gone))
            assert unregistered(tables) == []
            assert mem.delete(gone) is True
            with mem.store.read() as conn:
                assert find(conn, tables, gone) == []
                assert find(conn, tables, PLANTED) == []
                assert any(h.split(".")[0] in CHECKPOINT_TABLES for h in find(conn, tables, kept))
        finally:
            mem.close()


def _checkpoint(path: Path) -> None:
    """Move the WAL into the main file and empty it (another connection, as an operator would)."""
    with closing(sqlite3.connect(path)) as conn:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    assert busy == 0


def test_sqlite_file_keeps_no_deleted_term(tmp_path: Path) -> None:
    """After delete and a WAL checkpoint, the number is in none of the file's bytes (FTS5 pages too)."""
    path = tmp_path / "convmem.db"
    store = MemoryStore.from_url(str(path))
    try:
        create_every_table(store)
        gone = "mem_gone_7f3a"
        plant(store, gone, 1)
        # Another memory's indexed text, so the index is not simply empty after the delete.
        store.add_messages("mem_other", [_message("m-other", "我住在杭州 西湖区", 5)])
        _checkpoint(path)
        assert PLANTED.encode() in path.read_bytes()  # the check below can fail
        store.delete_memory(gone)
        _checkpoint(path)
        data = path.read_bytes() + b"".join(
            p.read_bytes() for p in tmp_path.glob("convmem.db-*") if p.is_file()
        )
        assert data.count(PLANTED.encode()) == 0
        assert data.count(gone.encode()) == 0
    finally:
        store.close()


def _error_page(operator: str) -> dict[str, Any]:
    """An IM ``admin_getroammsg`` exchange the reader refuses (an error envelope), naming the user."""
    return {
        "request": {"Operator_Account": operator, "Peer_Account": "@RBT#xiaoyu", "MaxCnt": 100},
        "response": {"ActionStatus": "FAIL", "ErrorCode": 90001, "ErrorInfo": f"bad {PLANTED}"},
    }


@pytest.mark.parametrize("shards", [1, 2])
def test_unreadable_im_page_is_the_named_users_dead_letter(tmp_path: Path, shards: int) -> None:
    """A refused IM page whose request names the user is that memory's dead letter; delete removes it."""
    from convmem_graph.replay import Replayer
    from convmem_graph.runner import Lifecycle

    archive = tmp_path / "im.jsonl"
    # A line of its own (unattributed otherwise: the file fed no memory) and one other user's page.
    archive.write_text(
        json.dumps(_error_page("u_10086")) + "\n" + json.dumps(_error_page("u_20000")) + "\n",
        encoding="utf-8",
    )
    store = MemoryStore.from_url(str(tmp_path / "c.db"))
    try:
        for shard in range(shards):
            Replayer(Lifecycle(store), group_by="user", source="tencent_im", shard=(shard, shards)).run(
                [archive]
            )
        assert [d.error for d in store.list_dead_letters("u_10086")] == [
            f"{archive}:1: error envelope: ErrorCode 90001 ErrorInfo 'bad {PLANTED}'"
        ]
        assert len(store.list_dead_letters("u_20000")) == 1
        store.delete_memory("u_10086")
        assert store.list_dead_letters("u_10086") == []
        with store.read() as conn:
            hits = find(conn, live_tables(conn), "u_10086")
        assert hits == []
        assert len(store.list_dead_letters("u_20000")) == 1
    finally:
        store.close()


# The registry also says, for every memory table, how an export carries it or why it does not.
def test_every_memory_table_is_exported_or_says_why_not() -> None:
    for entry in MEMORY_TABLES:
        assert (entry.export is None) != (entry.not_exported == ""), entry.table.name
        if entry.export is not None:
            columns = set(entry.table.c.keys())
            assert set(entry.export.order) <= columns and entry.export.drop <= columns, entry.table.name


def test_an_export_has_a_key_per_exported_table() -> None:
    with MemoryStore.from_url(":memory:") as store:
        store.add_fragment("u1", "Likes tea", category="preference")
        doc = export_memory(store, "u1")
    keys = {e.export.key for e in MEMORY_TABLES if e.export is not None}
    assert keys <= set(doc) and len(keys) == sum(e.export is not None for e in MEMORY_TABLES)
    assert [f["content"] for f in doc["fragments"]] == ["Likes tea"]
