"""The trigger-kept language counts on a real PostgreSQL (plpgsql trigger): equal to a full count.

The property test over every write path runs on both backends, over ``backend_store``, in
``tests/unit/store/test_lang_counts.py``; here what only PostgreSQL's set-up does.
"""

from __future__ import annotations

import pytest

from convmem_graph.store import MemoryStore
from convmem_graph.store._lang_counts import language_counts
from tests.unit.store.test_lang_counts import NOW, apply

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


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
