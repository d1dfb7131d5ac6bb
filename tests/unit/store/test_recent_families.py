"""``extract``'s newest known pets and plans: the first rows of each family's own index.

Issue 24: the per-family read (the 50 most recently updated ``plan:`` or ``pet:`` facts) was the
(memory, status, ckey) range of the whole family, sorted on every run: what still grew between a
100k- and a 1M-message memory (~9k ``plan:`` facts there). It now reads the first rows of a
partial index in its ORDER BY. These tests hold it equal to the range read (ties in update time
included), the plan free of a sort, and SQLite's work flat from 1k to 20k plan facts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.models import FragmentCandidate, FragmentOp
from convmem_graph.nodes._extract_reads import KNOWN_PREFIXES, PER_PREFIX
from convmem_graph.store import MemoryStore
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store.schema import RECENT_FAMILIES

NOW = 1_767_000_000_000


@pytest.fixture()
def store() -> Iterator[MemoryStore]:
    s = MemoryStore.from_url("sqlite://")
    yield s
    s.close()


def _ops(count: int, families: tuple[str, ...], seed: int = 0) -> list[FragmentOp]:
    return [
        FragmentOp(
            op="add",
            candidate=FragmentCandidate(
                content=f"用户打算做事{seed}_{i}。" if i % 2 else f"User plans thing {seed}_{i}.",
                key=f"{families[i % len(families)]}thing{seed}_{i}",
                observed_at=NOW - i * 1000,
            ),
        )
        for i in range(count)
    ]


def _rows(store: MemoryStore, memory_id: str, limit: int, per_prefix: int) -> list[Any]:
    ranges = [FQ.key_range(p) for p in KNOWN_PREFIXES]
    with store.read() as conn:
        return [r.id for r in store.backend.context_fact_rows(conn, memory_id, limit, ranges, per_prefix)]


def test_the_indexed_families_are_the_known_prefixes() -> None:
    assert sorted(RECENT_FAMILIES) == sorted(KNOWN_PREFIXES) == sorted(FQ.RECENTLY_UPDATED_IN_FAMILY)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 3)), min_size=1, max_size=4),
    limit=st.integers(0, 12),
    per_prefix=st.integers(1, 60),
)
def test_the_family_read_is_the_range_read(
    batches: list[tuple[int, int]], limit: int, per_prefix: int
) -> None:
    store = MemoryStore.from_url("sqlite://")
    try:
        # Several commits at a few times: many facts share an update time (ties broken by id).
        for seed, (count, at) in enumerate(batches):
            ops = _ops(count, ("plan:", "pet:", "like:"), seed)
            store.commit_extraction("m", ops, upto_seq=0, now_ms=NOW + at)
        new = _rows(store, "m", limit, per_prefix)
        with patch.object(FQ, "RECENTLY_UPDATED_IN_FAMILY", {}):
            assert _rows(store, "m", limit, per_prefix) == new
    finally:
        store.close()


@pytest.mark.parametrize("prefix", RECENT_FAMILIES)
def test_the_family_read_uses_its_index_in_order(store: MemoryStore, prefix: str) -> None:
    stmt = FQ.RECENTLY_UPDATED_IN_FAMILY[prefix]
    with store._read() as conn:
        compiled = stmt.compile(dialect=conn.dialect)
        names = compiled.positiontup or []
        values = {"mid": "m", "limit": PER_PREFIX}
        params = tuple(values.get(k, "active" if k.startswith("status") else 0) for k in names)
        plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params).fetchall()
    details = " ".join(str(row[-1]) for row in plan)
    assert f"ix_cm_fragments_recent_{prefix[:-1]}" in details, details
    assert "TEMP B-TREE" not in details, details


def _counter(count: list[int]) -> Any:
    def step() -> int:
        count[0] += 1
        return 0

    return step


def test_sqlite_work_does_not_grow_with_the_plan_facts(store: MemoryStore) -> None:
    """SQLite's virtual-machine steps for the per-family reads at 1k and 5k plan facts.

    Only the family ranges (``limit`` 0): the newest-overall read sorts the facts that share the
    newest update time (here one commit's, all of them), a cost of the commit's size, not of this
    change.
    """
    steps: dict[int, int] = {}
    for n in (1_000, 5_000):
        store.commit_extraction(f"m{n}", _ops(n, ("plan:",)), upto_seq=0, now_ms=NOW)
        ranges = [FQ.key_range(p) for p in KNOWN_PREFIXES]
        with store.read() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            count = [0]
            step = _counter(count)
            raw.set_progress_handler(step, 100)
            try:
                rows = store.backend.context_fact_rows(conn, f"m{n}", 0, ranges, PER_PREFIX)
            finally:
                raw.set_progress_handler(None, 0)
        assert len(rows) == PER_PREFIX
        steps[n] = count[0]
    assert steps[5_000] < 2 * steps[1_000] + 20, steps
