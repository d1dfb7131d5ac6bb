"""The episodic index on PostgreSQL: written with the messages, searched per memory, gone with them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from convmem_graph import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.store import MemoryStore
from convmem_graph.store import episodes as E
from tests.unit.test_episodic import T0, msg

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def store(pg_url: str) -> Iterator[MemoryStore]:
    s = MemoryStore.from_url(pg_url)
    yield s
    s.close()


def rows(store: MemoryStore, memory_id: str) -> int:
    with store.engine.connect() as conn:
        return E.count_episode_rows(conn, memory_id)


def test_turns_are_indexed_and_found_by_stem_and_bigram(store: MemoryStore) -> None:
    store.add_messages("pg_a", [msg("1", "I have been running marathons"), msg("2", "我每天在东湖绿道跑步")])
    assert rows(store, "pg_a") == 2
    assert [h.message.id for h in store.search_episodes("pg_a", "does she run races?").hits][:1] == ["1"]
    assert [h.message.id for h in store.search_episodes("pg_a", "在哪里跑步").hits][:1] == ["2"]


def test_search_stays_in_its_memory(store: MemoryStore) -> None:
    store.add_messages("pg_b", [msg("1", "violin recital on Friday")])
    store.add_messages("pg_c", [msg("1", "violin teacher")])
    assert {h.message.memory_id for h in store.search_episodes("pg_b", "violin").hits} == {"pg_b"}


def test_delete_and_purge_leave_no_index_rows(store: MemoryStore) -> None:
    store.add_messages("pg_d", [msg(str(i), f"kayak note {i}", ts=T0 + i) for i in range(10)])
    assert store.purge_messages("pg_d", before_ms=T0 + 100, keep_recent=4, only_processed=False) == 6
    assert rows(store, "pg_d") == 4
    store.delete_memory("pg_d")
    assert rows(store, "pg_d") == 0
    assert store.search_episodes("pg_d", "kayak").hits == []


def test_episodic_off_stores_and_quotes_nothing(pg_url: str) -> None:
    for episodic in (True, False):
        mem = ConvMemory.open(pg_url, config=MemoryConfig(episodic=episodic), clock=lambda: T0)
        memory_id = f"pg_e_{episodic}"
        mem.ingest(memory_id, [{"role": "user", "content": "I went to a ceramics workshop yesterday"}])
        result = mem.payload(memory_id, "openai", query="ceramics workshop", recent_turns=0)
        system = result[0]["content"] if result else ""
        assert ("ceramics workshop yesterday" in system) is episodic
        assert (rows(mem.store, memory_id) > 0) is episodic
        mem.close()
