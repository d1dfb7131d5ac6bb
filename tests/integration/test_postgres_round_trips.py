"""PostgreSQL-only single-statement reads return what the per-range reads (the SQLite path) return."""

from __future__ import annotations

import uuid

import pytest

from convmem_graph.models import FragmentCandidate, FragmentOp
from convmem_graph.nodes._extract_reads import known_facts
from convmem_graph.store import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def _reference(
    pg_store: MemoryStore, memory_id: str, limit: int, prefixes: tuple[str, ...], per_prefix: int
) -> list[str]:
    """The documented result, from every active fact: the newest ``limit``, then per prefix."""
    order = sorted(
        pg_store.list_fragments(memory_id), key=lambda f: (f.updated_at, f.created_at, f.id), reverse=True
    )
    ids = [f.id for f in order[:limit]] if limit > 0 else []
    for prefix in prefixes:
        for f in [f for f in order if f.key.startswith(prefix)][:per_prefix]:
            if f.id not in ids:
                ids.append(f.id)
    return ids


def test_context_fragments_in_one_statement_equal_the_range_reads(pg_store: MemoryStore) -> None:
    memory_id = f"ctx-{uuid.uuid4().hex[:8]}"
    kinds = ["pet", "plan", "pref", "food"]
    ops = [
        FragmentOp(
            op="add",
            candidate=FragmentCandidate(
                content=f"fact number {i} about {kinds[i % 4]}",
                key=f"{kinds[i % 4]}:thing_{i}",
                observed_at=i,
            ),
        )
        for i in range(40)
    ]
    # Several commits: facts share updated_at within one, so the id breaks the ties.
    for start, now in ((0, 1_000), (15, 2_000), (30, 2_000)):
        pg_store.commit_extraction(memory_id, ops[start : start + 15], upto_seq=0, now_ms=now)
    for limit, prefixes, per_prefix in (
        (0, ("pet:", "plan:"), 50),
        (5, ("pet:",), 3),
        (7, (), 50),
        (3, ("pet:", "plan:", "food:"), 2),
    ):
        got = [
            f.id
            for f in known_facts(pg_store, memory_id, limit=limit, prefixes=prefixes, per_prefix=per_prefix)
        ]
        assert got == _reference(pg_store, memory_id, limit, prefixes, per_prefix), (
            limit,
            prefixes,
            per_prefix,
        )
    pg_store.delete_memory(memory_id)
