"""The episodic index on PostgreSQL: written with the messages, searched per memory, gone with them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from convmem_graph import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.store import MemoryStore
from convmem_graph.store.postgres import POSTGRES_EPISODES, pg_index_prefix
from tests.unit.store.test_episodes import T0, msg

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def store(pg_url: str) -> Iterator[MemoryStore]:
    s = MemoryStore.from_url(pg_url)
    yield s
    s.close()


def rows(store: MemoryStore, memory_id: str) -> int:
    with store.engine.connect() as conn:
        return POSTGRES_EPISODES.count(conn, memory_id)


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


def raw_rows(store: MemoryStore, memory_id: str) -> int:
    """Index rows of a memory as stored, orphans included (the index's own count joins them away)."""
    with store.engine.connect() as conn:
        sql = "SELECT count(*) FROM cm_episodes WHERE memory_id = %s"
        return int(conn.exec_driver_sql(sql, (memory_id,)).scalar())


def test_every_delete_path_takes_its_index_rows_along(store: MemoryStore) -> None:
    from convmem_graph.store.transfer import export_memory, import_memory

    first = [msg("1", "Your lesson is at", partial=True), msg("2", "oboe reed", ts=T0 + 1)]
    store.add_messages("pg_o", first)
    store.add_messages("pg_o", [msg("1", "Your lesson is at the cello studio")])  # replaces row 1
    assert raw_rows(store, "pg_o") == 2
    assert [h.message.id for h in store.search_episodes("pg_o", "lesson").hits] == ["1"]
    store.add_messages("pg_o", [msg(str(i), f"kayak note {i}", ts=T0 + i) for i in range(3, 9)])
    assert store.purge_messages("pg_o", before_ms=T0 + 100, keep_recent=3, only_processed=False) == 5
    assert raw_rows(store, "pg_o") == 3
    doc = export_memory(store, "pg_o")
    import_memory(store, doc, replace=True)
    assert raw_rows(store, "pg_o") == 3
    store.delete_memory("pg_o")
    assert raw_rows(store, "pg_o") == 0


def test_an_index_with_the_old_foreign_key_loses_it_on_open(fresh_pg_url: str) -> None:
    first = MemoryStore.from_url(fresh_pg_url)
    with first.engine.begin() as conn:  # as versions before it left the table
        conn.exec_driver_sql(
            "ALTER TABLE cm_episodes ADD CONSTRAINT cm_episodes_seq_fkey "
            "FOREIGN KEY (seq) REFERENCES cm_messages(seq) ON DELETE CASCADE"
        )
    first.close()
    again = MemoryStore.from_url(fresh_pg_url)
    with again.engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'cm_episodes'::regclass AND contype = 'f'"
        ).scalar()
    assert found == 0
    again.add_messages("pg_k", [msg("1", "marimba practice")])
    again.delete_memory("pg_k")
    assert raw_rows(again, "pg_k") == 0
    again.close()


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


def lexemes(store: MemoryStore, memory_id: str) -> dict[str, list[str]]:
    """Each stored turn's index lexemes (memory prefix cut off), by message id."""
    with store.engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT m.id, tsvector_to_array(e.terms) FROM cm_episodes e JOIN cm_messages m USING (seq) "
            "WHERE m.memory_id = %s",
            (memory_id,),
        )
        prefix = pg_index_prefix(memory_id)
        return {mid: sorted(x.removeprefix(prefix) for x in terms) for mid, terms in found}


def test_the_client_makes_the_lexemes_and_the_server_parses_nothing(store: MemoryStore) -> None:
    said = [msg("1", "The twins were swimming and Added three kittens"), msg("2", "她在杭州教书，很喜欢")]
    store.add_messages("pg_f", said)
    # Snowball stems of the words a search keeps (stop words gone), CJK bigrams as they are.
    assert lexemes(store, "pg_f") == {
        "1": ["add", "kitten", "swim", "three", "twin"],
        "2": sorted(["在杭", "喜欢", "州教", "教书", "杭州", "很喜"]),  # 她在: two function characters
    }
    assert [h.message.id for h in store.search_episodes("pg_f", "did they add a kitten?").hits] == ["1"]
    assert [h.message.id for h in store.search_episodes("pg_f", "谁在杭州").hits] == ["2"]


def test_query_text_is_never_tsquery_syntax(store: MemoryStore) -> None:
    store.add_messages("pg_g", [msg("1", "O'Brien said the backslash \\ key broke")])
    for query in ["O'Brien", "back\\slash & | ! :* ( )", "'''", "key:*A"]:
        store.search_episodes("pg_g", query)  # no tsquery syntax error, whatever the user typed
    assert [h.message.id for h in store.search_episodes("pg_g", "brien's key").hits] == ["1"]


def test_an_index_of_an_older_format_is_rebuilt_on_open(fresh_pg_url: str) -> None:
    first = MemoryStore.from_url(fresh_pg_url)
    first.add_messages("pg_h", [msg("1", "my kayak is red"), msg("2", "we were running late")])
    with first.engine.begin() as conn:  # as version 2 left it: lexemes the server stemmed
        conn.exec_driver_sql(
            "UPDATE cm_episodes SET terms = array_to_tsvector(ARRAY(SELECT %s || lexeme "
            "FROM unnest(to_tsvector('english', 'unrelated words')))) ",
            (pg_index_prefix("pg_h"),),
        )
        conn.exec_driver_sql("UPDATE cm_episode_meta SET v = '2' WHERE k = 'pg_version'")
        conn.exec_driver_sql("CREATE INDEX ix_cm_episodes_memory_id ON cm_episodes (memory_id, seq)")
    first.close()
    again = MemoryStore.from_url(fresh_pg_url)
    assert lexemes(again, "pg_h") == {"1": ["kayak", "red"], "2": ["late", "run"]}
    with again.engine.connect() as conn:  # the old per-memory index, which every insert paid for, is gone
        found = conn.exec_driver_sql("SELECT to_regclass('ix_cm_episodes_memory_id') IS NOT NULL").scalar()
    assert found is False
    assert [h.message.id for h in again.search_episodes("pg_h", "kayak").hits] == ["1"]
    again.close()


def test_every_message_field_survives_the_one_statement_insert(store: MemoryStore) -> None:
    tricky = 'quote " backslash \\ newline\n tab\t emoji 🎉 中文 {"json": [1]}'
    sent = msg(
        "1",
        tricky,
        role="assistant",
        turn_id=2**40,
        round_id="r-1",
        speaker_id="agent",
        partial=False,
        interrupted=True,
        original=tricky + " (full)",
        metadata={"k": "值", "n": [1, 2.5, None], "deep": {"t": True}},
    )
    plain = msg("2", "plain", ts=T0 + 1)
    assert store.add_messages("pg_i", [sent, plain]) == ["1", "2"]
    got = {m.id: m for _, m in store.messages_after("pg_i", 0)}
    assert got["1"].model_dump() == sent.model_copy(update={"memory_id": "pg_i"}).model_dump()
    assert got["2"].metadata == {} and got["2"].turn_id is None and got["2"].original is None


def test_a_purge_of_processed_messages_takes_what_both_cursors_passed_in_its_memory_only(
    store: MemoryStore,
) -> None:
    # PostgreSQL names the memory and the cursor by row comparisons (issue 24): the same rows go
    # as with ``memory_id = $1 AND seq <= cursor``; another memory's rows between them stay.
    for i in range(8):
        store.add_messages("pg_p", [msg(f"p{i}", f"kayak note {i}", ts=T0 + i)])
        store.add_messages("pg_q", [msg(f"q{i}", f"canoe note {i}", ts=T0 + i)])
    with store.engine.begin() as conn:
        seqs = [
            int(s)
            for s in conn.exec_driver_sql(
                "SELECT seq FROM cm_messages WHERE memory_id = 'pg_p' ORDER BY seq"
            ).scalars()
        ]
        conn.exec_driver_sql(
            "UPDATE cm_memories SET extracted_seq = %s, summarized_seq = %s WHERE memory_id = 'pg_p'",
            (seqs[5], seqs[4]),
        )
    # At or below both cursors (the first five), less the newest two kept: none of those is.
    assert store.purge_messages("pg_p", before_ms=T0 + 100, keep_recent=2) == 5
    with store.engine.connect() as conn:
        left = conn.exec_driver_sql(
            "SELECT memory_id, count(*) FROM cm_messages WHERE memory_id IN ('pg_p', 'pg_q') GROUP BY 1"
        ).all()
    assert dict(left) == {"pg_p": 3, "pg_q": 8}
    assert rows(store, "pg_p") == 3 and rows(store, "pg_q") == 8
