"""The summary's fact read on a real PostgreSQL: the server's own triggers, rollbacks and collation.

The full memory's history and the memory made again by another store run on both backends, over
``backend_url``, in ``tests/unit/nodes/test_summary_facts.py``.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from convmem_graph.config import MemoryConfig
from convmem_graph.runner import Lifecycle
from convmem_graph.snapshot import _FACT_MARGIN
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.store import postgres as postgres_module
from convmem_graph.store._fact_revisions import PG_FACT_REVISION_TRIGGERS
from convmem_graph.store._summary_facts import PG_READS
from convmem_graph.store.postgres import _ids_bytewise
from convmem_graph.store.urls import libpq_url
from tests.unit.nodes.test_summary_facts import (
    FULL_MEMORY_STEPS,
    MID,
    NOW,
    TURNS,
    _Clock,
    _full_memory,
    _old_reads,
    check_history,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


# -- the kept lists on PostgreSQL (migration 16's fact revisions) ----------------------------------


class _FactRows:
    """Rows the server returned to statements that read ``cm_fragments``, counted at psycopg's cursor."""

    def __init__(self, monkeypatch: Any) -> None:
        self.rows = 0
        real = psycopg.Cursor.execute

        def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            out = real(cursor, query, *args, **kwargs)
            text = str(query)
            if text.lstrip().upper().startswith(("SELECT", "WITH")) and "cm_fragments" in text:
                self.rows += max(cursor.rowcount, 0)
            return out

        monkeypatch.setattr(psycopg.Cursor, "execute", execute)


def test_a_live_turn_of_a_full_memory_reads_only_the_facts_it_wrote_on_postgres(
    fresh_pg_url: str, monkeypatch: Any
) -> None:
    """Past the first turn, a turn's fact reads return tens of rows, not the ~400 strongest again.

    Before migration 16 the summary's read alone returned both lists (2 x 203 rows here) every
    turn that refreshed the summary, whatever the turn changed.
    """
    store = _full_memory(fresh_pg_url, facts=700)
    clock = _Clock()
    lc = Lifecycle(store, config=MemoryConfig(), clock=clock)
    limit = MemoryConfig().summary_budget_tokens // 4 + _FACT_MARGIN
    counted = _FactRows(monkeypatch)
    per_turn = []
    try:
        for i, text in enumerate(TURNS):
            clock.now += 1_000
            turn = [{"role": "user", "content": text}, {"role": "assistant", "content": f"嗯 {i}"}]
            before = counted.rows
            result = lc.run(MID, [RawInput(turn, "openai")], session_ended=True)
            per_turn.append(counted.rows - before)
            assert "summarize" in result.node_ms  # the summary was refreshed: its facts were read
            got = store.summary_facts(MID, limit=limit, now_ms=clock.now)
            assert got == _old_reads(store, limit, clock.now)
    finally:
        monkeypatch.undo()
        store.close()
    # The turn's other fact reads (the extraction context's 50 newest plans, the related facts,
    # inference's pages) return ~100 rows here; the summary's two lists alone were ~240-340 more.
    assert max(per_turn[1:]) < 150, per_turn


def test_rows_written_behind_the_store_are_read_again_on_postgres(fresh_pg_url: str) -> None:
    """Another connection's edit (``updated_at`` kept), insert and delete: the triggers move the revision."""
    store = _full_memory(fresh_pg_url, facts=300)
    limit = 60
    assert store.summary_facts(MID, limit=limit, now_ms=NOW) == _old_reads(store, limit, NOW)
    top = store.summary_facts(MID, limit=limit, now_ms=NOW)[0]
    with psycopg.connect(libpq_url(fresh_pg_url), autocommit=True) as other:
        edit = "UPDATE cm_fragments SET content = 'edited' WHERE memory_id = %s AND id = %s"
        other.execute(edit, (MID, top[3].id))
        assert store.summary_facts(MID, limit=limit, now_ms=NOW) == _old_reads(store, limit, NOW)
        other.execute(
            "INSERT INTO cm_fragments (memory_id, id, content, category, key, status, transient, "
            "source_message_ids, origin, confidence, created_at, updated_at, observed_at) "
            "VALUES (%s, 'f_raw', 'raw', 'preference', 'like:raw', 'active', false, '[]', 'manual', "
            "0.99, %s, %s, %s)",
            (MID, NOW, NOW, NOW),
        )
        assert store.summary_facts(MID, limit=limit, now_ms=NOW) == _old_reads(store, limit, NOW)
        other.execute("DELETE FROM cm_fragments WHERE memory_id = %s AND id = %s", (MID, top[0].id))
        assert store.summary_facts(MID, limit=limit, now_ms=NOW) == _old_reads(store, limit, NOW)
    kept = store._strongest
    assert kept.delta_reads >= 2  # the edit and the insert merged; the delete read the lists again
    store.close()


def test_rows_read_inside_a_run_that_rolled_back_are_not_kept_on_postgres(fresh_pg_url: str) -> None:
    """A failed run takes its revisions back; a fact another store writes next takes the same number."""
    store = _full_memory(fresh_pg_url, facts=300)
    limit = 40
    assert store.summary_facts(MID, limit=limit, now_ms=NOW)[0]
    with pytest.raises(DBAPIError), store.run(MID) as s:
        s.add_fragment(MID, "用户喜欢喝绿茶。", key="pref:绿茶", now_ms=NOW + 5)
        durable, _ = s.summary_facts(MID, limit=limit, now_ms=NOW + 5)
        assert durable[0].content == "用户喜欢喝绿茶。"  # read inside the run's transaction
        with s.read() as conn:
            conn.exec_driver_sql("SELECT 1 / 0")  # the server fails the transaction: all rolled back
    other = MemoryStore.from_url(fresh_pg_url)
    other.add_fragment(MID, "User has a dog named Rex.", key="pet:rex", now_ms=NOW + 6)
    other.close()
    assert store.summary_facts(MID, limit=limit, now_ms=NOW + 6) == _old_reads(store, limit, NOW + 6)
    store.close()


def test_without_a_bytewise_id_order_ties_are_read_again(fresh_pg_url: str, monkeypatch: Any) -> None:
    """Under a collation Python cannot follow, rows equal but for the id are never placed by Python.

    The generated facts tie in rank (``ties=True``); the history holds the read equal to the
    database's own order after every step, with the merge told the ids' order is unknown.
    """
    monkeypatch.setattr(postgres_module, "_ids_bytewise", lambda conn: False)
    store = MemoryStore.from_url(fresh_pg_url)
    store.summary_facts(MID, limit=5, now_ms=NOW)
    assert store._backend._fact_reads is PG_READS and not PG_READS.exact_ids
    store.close()
    check_history([("bulk", "mixed", 500, 3), *FULL_MEMORY_STEPS], 300, url=fresh_pg_url)


def test_this_server_orders_ids_bytewise(fresh_pg_store: MemoryStore) -> None:
    """The test server's ``C.UTF-8`` database: the merge places tied rows by id itself."""
    with fresh_pg_store.read() as conn:
        assert _ids_bytewise(conn)
        names = {r[0] for r in conn.exec_driver_sql("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
    assert set(PG_FACT_REVISION_TRIGGERS) <= names
