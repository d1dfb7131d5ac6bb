"""The trigger-kept language counts on a real PostgreSQL (plpgsql trigger): equal to a full count."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from convmem_graph.store import MemoryStore
from convmem_graph.store._lang_counts import language_counts
from tests.unit.store.test_lang_counts import ACTIONS, DAY, NOW, apply, full_count

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def store(pg_url: str) -> Iterator[MemoryStore]:
    s = MemoryStore.from_url(pg_url)
    yield s
    s.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_counts_follow_every_write_path_on_postgres(
    store: MemoryStore, actions: list[tuple[object, ...]]
) -> None:
    memory_id = f"lang{abs(hash(tuple(actions))) % 10**9}"
    store.ensure_memory(memory_id)
    for step, action in enumerate(actions):
        apply(store, memory_id, action, step)
        for now in (NOW - 2 * DAY, NOW):
            with store._read() as conn:
                assert language_counts(conn, memory_id, now_ms=now) == full_count(store, memory_id, now)
    store.delete_memory(memory_id)


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
