"""PostgreSQL stores a memory's cached snapshot compressed with lz4 (migration 17)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from convmem_graph.models import MemorySnapshot, Message
from convmem_graph.store import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

T0 = 1_700_000_000_000


def _has_lz4(store: MemoryStore) -> bool:
    with store.engine.connect() as conn:
        sql = "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        return bool(conn.exec_driver_sql(sql).scalar())


def test_a_saved_snapshot_is_stored_with_lz4_and_reads_back_the_same(fresh_pg_store: MemoryStore) -> None:
    store = fresh_pg_store
    if not _has_lz4(store):
        pytest.skip("this PostgreSQL server was built without lz4")
    # Big enough to be compressed (over the ~2 kB TOAST threshold), as a replayed memory's is.
    turns = [
        Message(
            id=f"m{i}",
            role="user",
            content=f"I went hiking near lake {i} with my sister",
            channel="im",
            source="message",
            timestamp_ms=T0 + i,
        )
        for i in range(60)
    ]
    store.add_messages("mem", turns)
    snap = MemorySnapshot(memory_id="mem", recent=store.recent_messages("mem", 60))
    store.save_snapshot("mem", snap, now_ms=T0 + 100)
    with store.engine.connect() as conn:
        declared = conn.execute(
            text(
                "SELECT attcompression FROM pg_attribute "
                "WHERE attrelid = 'cm_snapshots'::regclass AND attname = 'data'"
            )
        ).scalar()
        stored = conn.execute(
            text("SELECT pg_column_compression(data) FROM cm_snapshots WHERE memory_id = 'mem'")
        ).scalar()
    assert declared == "l"
    assert stored == "lz4"
    assert store.load_snapshot("mem") == snap
