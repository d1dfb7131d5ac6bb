"""Under generic plans, a PostgreSQL turn reads what it touches, not the table (issue 24).

psycopg prepares the store's statements and PostgreSQL plans a prepared statement generically
after five executions. On a table whose statistics make one memory look like most of it, a
generic plan of ``memory_id = $1 ... seq`` walked the seq primary key and filtered by memory: for
a new memory, or a returning one whose last message is older than the big memory's rows, that
read every newer row of the table. Here plans are forced generic from the first execution and
``auto_explain`` reports what each statement read (``benchmarks/pg_generic_plans.py``).

The same with an embeddings model (a deterministic fake: the store's reads do not depend on the
vectors) and ``purge_summarized_messages=True``: the turns' vectors written after each live turn
(the turn before, the gaps between turns, the turns still without a vector) and the retention
purge at the end of each run had the same risky shapes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.pg_generic_plans import PlanCapture, Setup, fill, measure
from convmem_graph.store._episode_search import COUNT_CAP
from tests.backends import fresh_schema

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

#: Messages of the big memory: each statement of the other memories must read far fewer.
BIG = 100_000
#: Small memories written before the big one in the test with vectors: with 4, a generic plan of
#: the reads after a cursor (``memory_id = $1 AND (memory_id, seq) > ($1, $2) ORDER BY seq``)
#: used the (memory_id, seq) index; with 370 (the timing run's count) it walked the primary key
#: over 100,944 rows. (The first test keeps 4: with 370 memories sharing its words, the big
#: memory's call start reads 1,346 postings of one term, which is not this test's question.)
SMALLS = 370
#: Tuples one statement may read: a replay batch writes 200 rows, and the episodic search counts
#: a memory's messages up to ``COUNT_CAP`` (1,000) entries of its index.
BOUND = max(1_000, COUNT_CAP)


#: With vectors and the purge: the big memory's first run purges its 100,000 messages (its
#: cursors are at its end), which is that purge's own work, not a read of the table.
VECTORS_AND_PURGE = Setup(embeddings=True, purge=True)


@pytest.fixture(params=[True, False], ids=["one-memory-statistics", "analyze-statistics"])
def stats(request: pytest.FixtureRequest) -> bool:
    """Whether the statistics say one memory (else ``ANALYZE``'s own)."""
    return bool(request.param)


@pytest.fixture
def skewed(stats: bool, pg_base_url: str) -> Iterator[str]:
    """A schema with small memories, then one of ``BIG`` messages, analyzed (see ``fill``)."""
    with fresh_schema(pg_base_url, "cm_generic") as url:
        fill(url, BIG, 4, one_memory_stats=stats)
        yield url


@pytest.fixture
def skewed_with_vectors(stats: bool, pg_base_url: str) -> Iterator[str]:
    """As ``skewed``, every message with a vector (the big memory's too)."""
    with fresh_schema(pg_base_url, "cm_generic") as url:
        fill(url, BIG, SMALLS, one_memory_stats=stats, setup=VECTORS_AND_PURGE)
        yield url


def test_with_vectors_and_the_purge_a_new_or_small_memory_reads_a_bounded_number_of_rows(
    skewed_with_vectors: str,
) -> None:
    capture = PlanCapture()
    with capture.installed():
        cases = measure(skewed_with_vectors, 200, capture, VECTORS_AND_PURGE)
    over: dict[str, list[tuple[int, int, str]]] = {}
    for case, seen in cases.items():
        assert seen, f"{case}: no plan came back"
        if case.endswith("big"):
            continue
        # Buffers as well, of the statements that do not insert: a scan of rows deleted earlier
        # (dead, not counted as tuples) still reads their pages. An insert's buffers are its
        # index maintenance (a replay batch's 200 rows: ~6,000), not a read.
        heavy = [
            (s.tuples, s.buffers, s.text[:300])
            for s in seen
            if s.tuples > BOUND or (s.buffers > BOUND and "INSERT INTO" not in s.text.upper())
        ]
        if heavy:
            over[case] = heavy
    texts = " ".join(s.text for seen in cases.values() for s in seen)
    # The paths under test ran: the turns' vectors were looked for and the purge deleted.
    assert "cm_turn_vectors" in texts and "DELETE FROM cm_messages" in texts
    assert over == {}, f"statements reading more than {BOUND} tuples or buffers: {over}"


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
