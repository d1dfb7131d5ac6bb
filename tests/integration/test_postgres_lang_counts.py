"""The trigger-kept language counts on a real PostgreSQL (plpgsql trigger): equal to a full count.

The same writes as the SQLite property test (expiries, moves of the expiry mark included), checked
at every time of ``CHECKS`` with the exact and the bounded reads.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.store import MemoryStore
from convmem_graph.store._lang_counts import language_counts, move_expiry_mark
from tests.unit.store.test_lang_counts import ACTIONS, CHECKS, NOW, apply, check_counts

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS, mark=st.sampled_from([0, *CHECKS]))
def test_counts_follow_every_write_path_on_postgres(
    pg_store: MemoryStore, actions: list[tuple[object, ...]], mark: int
) -> None:
    memory_id = f"lang{abs(hash((tuple(actions), mark))) % 10**9}"
    pg_store.ensure_memory(memory_id)
    with pg_store._write(memory_id) as conn:
        move_expiry_mark(conn, memory_id, now_ms=mark)
    for step, action in enumerate(actions):
        apply(pg_store, memory_id, action, step)
        check_counts(pg_store, memory_id)
    pg_store.delete_memory(memory_id)


def test_reopening_keeps_one_trigger_and_the_counts(pg_url: str) -> None:
    first = MemoryStore.from_url(pg_url)
    first.ensure_memory("lang_reopen")
    apply(first, "lang_reopen", ("add", 1, True, False, None), 0)
    first.close()
    again = MemoryStore.from_url(
        pg_url
    )  # every PostgreSQL open runs the set-up: no recount, no second trigger
    try:
        with again._read() as conn:
            assert language_counts(conn, "lang_reopen", now_ms=NOW) == (1, 0)
            n = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_trigger WHERE tgname = 'cm_fragments_lang'"
                " AND tgrelid = 'cm_fragments'::regclass"
            ).scalar()
        assert n == 1
    finally:
        again.delete_memory("lang_reopen")
        again.close()
