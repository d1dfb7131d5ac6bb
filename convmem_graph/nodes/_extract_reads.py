"""The facts ``extract`` reads: what the extractor is shown, and what its candidates reconcile with.

Both are shaped for this node alone, so they live beside it rather than in the store's interface:
the node decides which rows it needs (the newest facts, the known pets and plans, the facts
sharing a candidate's canonical key or content), the store's backend how to read them in the
fewest round trips (SQLite: one index lookup per statement; PostgreSQL: the lookups of one
question in one round trip). Each is a bounded set of index ranges of ``cm_fragments``: a turn's
cost does not grow with the facts a memory holds.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from convmem_graph.models import Fragment
from convmem_graph.store import MemoryStore
from convmem_graph.store._derived import norm_hash
from convmem_graph.store._fact_queries import key_range
from convmem_graph.store._fragments import fragments_once
from convmem_graph.text.keys import canonical_key

__all__ = ["KNOWN_PREFIXES", "PER_PREFIX", "known_facts", "related_facts"]

#: Key families the heuristic rules look up among known facts (a pet's name, a plan's date).
KNOWN_PREFIXES = ("pet:", "plan:")
#: Newest facts shown per family of :data:`KNOWN_PREFIXES`, on top of the newest facts overall.
PER_PREFIX = 50


def known_facts(
    store: MemoryStore,
    memory_id: str,
    *,
    limit: int,
    prefixes: Sequence[str] = KNOWN_PREFIXES,
    per_prefix: int = PER_PREFIX,
) -> list[Fragment]:
    """The ``limit`` most recently updated active facts, plus up to ``per_prefix`` under each prefix.

    What an extractor is shown as known facts (a model sees the newest; the heuristic rules look
    up known pets and plans), whatever the size of the memory; each fact once, newest first, then
    each family's own in its order.
    """
    if store.holds_no_facts(memory_id):
        return []  # a memory this run created, no fact written yet: nothing to read
    ranges = [key_range(p) for p in prefixes] if per_prefix > 0 else []
    with store.read_facts() as conn:
        return fragments_once(store.backend.context_fact_rows(conn, memory_id, limit, ranges, per_prefix))


def related_facts(
    store: MemoryStore, memory_id: str, keys: Collection[str], contents: Collection[str]
) -> list[Fragment]:
    """Active facts with one of these keys (compared canonically) or the same normalized content.

    What reconciling candidates with these keys and contents needs: two index lookups, each fact
    once.
    """
    if (not keys and not contents) or store.holds_no_facts(memory_id):
        return []
    ckeys = sorted({canonical_key(k) for k in keys})
    hashes = sorted({norm_hash(c) for c in contents})
    with store.read_facts() as conn:
        return fragments_once(store.backend.related_fact_rows(conn, memory_id, ckeys, hashes))
