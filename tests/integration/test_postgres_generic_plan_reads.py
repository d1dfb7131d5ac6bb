"""Under generic plans, a PostgreSQL turn reads what it touches, not the table (issue 24).

psycopg prepares the store's statements and PostgreSQL plans a prepared statement generically
after five executions. On a table whose statistics make one memory look like most of it, a
generic plan of ``memory_id = $1 ... seq`` walked the seq primary key and filtered by memory: for
a new memory, or a returning one whose last message is older than the big memory's rows, that
read every newer row of the table. Here plans are forced generic from the first execution and
``auto_explain`` reports what each statement read (``benchmarks/pg_generic_plans.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.pg_generic_plans import PlanCapture, fill, measure
from convmem_graph.store._episode_search import COUNT_CAP
from tests.backends import fresh_schema

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

#: Messages of the big memory: each statement of the other memories must read far fewer.
BIG = 100_000
#: Tuples one statement may read: a replay batch writes 200 rows, and the episodic search counts
#: a memory's messages up to ``COUNT_CAP`` (1,000) entries of its index.
BOUND = max(1_000, COUNT_CAP)


@pytest.fixture(params=[True, False], ids=["one-memory-statistics", "analyze-statistics"])
def skewed(request: pytest.FixtureRequest, pg_base_url: str) -> Iterator[str]:
    """A schema with small memories, then one of ``BIG`` messages, analyzed (see ``fill``)."""
    with fresh_schema(pg_base_url, "cm_generic") as url:
        fill(url, BIG, 4, one_memory_stats=request.param)
        yield url


def test_a_turn_a_call_start_and_a_replay_batch_read_a_bounded_number_of_rows(skewed: str) -> None:
    capture = PlanCapture()
    with capture.installed():
        cases = measure(skewed, 200, capture)
    assert set(cases) == {
        f"{kind}, {case}"
        for kind in ("live turn", "call start", "replay batch")
        for case in ("a new", "b small", "c big")
    }
    over: dict[str, list[tuple[int, str]]] = {}
    for case, seen in cases.items():
        assert seen, f"{case}: no plan came back"
        # Each statement's own reads: a scan of the big memory's rows (or of the table) would be
        # ~BIG; the big memory's own turn is held to the same bound (its batch, not its history).
        heavy = [(s.tuples, s.text[:200]) for s in seen if s.tuples > BOUND]
        if heavy:
            over[case] = heavy
    assert over == {}, f"statements reading more than {BOUND} tuples: {over}"
