"""Variable inference's reads cost the same at 1k and at 10k facts of the kind that used to grow them.

Issue 24, item 1 (every per-turn read bounded by what the turn touches): SQLite's virtual-machine
steps for one ``infer_from_store`` call, at 1k and 10k facts, for

- ``language`` in a memory that keeps expired durable facts (the old read subtracted them with a
  count over every one of them, per turn; now the facts expiring since the memory's expiry mark);
- a custom list variable (``like``) over a family of distinct items (the old read took every fact
  of the family and made each a model; now a walk that stops at ``MAX_LIST_ITEMS`` items).

Only public calls, so the file runs against older code too: there both tests fail (the steps grow
about ten-fold from 1k to 10k).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
from convmem_graph.models import FragmentCandidate, FragmentOp, VariableSpec
from convmem_graph.nodes._inference import infer_from_store
from convmem_graph.store import MemoryStore

NOW = 1_767_000_000_000
DAY = 86_400_000
LANGUAGE = [s for s in DEFAULT_VARIABLE_SPECS if s.name == "language"]
LIKE = [VariableSpec(name="like", type="list")]


def _steps(store: MemoryStore, call: Callable[[MemoryStore], Any]) -> tuple[int, Any]:
    """SQLite VM steps (in units of 100) of ``call`` made on one session of ``store``, and its result."""
    count = [0]

    def step() -> int:
        count[0] += 1
        return 0

    with store.session() as s:
        raw = s.connection.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.set_progress_handler(step, 100)
        try:
            result = call(s)
        finally:
            raw.set_progress_handler(None, 0)
    return count[0], result


def _add(store: MemoryStore, memory_id: str, candidates: list[FragmentCandidate]) -> None:
    ops = [FragmentOp(op="add", candidate=c) for c in candidates]
    store.commit_extraction(memory_id, ops, upto_seq=0, now_ms=NOW - DAY)


def test_language_reads_do_not_grow_with_expired_facts() -> None:
    steps: dict[int, int] = {}
    for n in (1_000, 10_000):
        store = MemoryStore.from_url("sqlite://")
        try:
            memory_id = f"m{n}"
            # Durable facts that expired yesterday (an API's facts with an expiry), and 40 live ones.
            expired = [
                FragmentCandidate(
                    content=f"User booked seat {i}.",
                    key=f"plan:seat_{i}",
                    expires_at=NOW - DAY // 2,
                    observed_at=NOW - DAY - i,
                )
                for i in range(n)
            ]
            live = [
                FragmentCandidate(content=f"用户喜欢围棋{i}。", key=f"pref:weiqi_{i}", observed_at=NOW - i)
                for i in range(40)
            ]
            _add(store, memory_id, expired + live)
            first = infer_from_store(store, memory_id, LANGUAGE, now_ms=NOW)  # may move the mark once
            assert first["language"].value == "zh"
            steps[n], again = _steps(
                store, lambda s, m=memory_id: infer_from_store(s, m, LANGUAGE, now_ms=NOW + 1)
            )
            assert again == first
        finally:
            store.close()
    assert steps[10_000] < 2 * steps[1_000] + 20, steps


def test_custom_list_reads_do_not_grow_with_its_family() -> None:
    steps: dict[int, int] = {}
    for n in (1_000, 10_000):
        store = MemoryStore.from_url("sqlite://")
        try:
            memory_id = f"m{n}"
            _add(
                store,
                memory_id,
                [
                    FragmentCandidate(
                        content=f"User likes thing {i}.", key=f"like:thing_{i}", observed_at=NOW - i
                    )
                    for i in range(n)
                ],
            )
            steps[n], guess = _steps(store, lambda s, m=memory_id: infer_from_store(s, m, LIKE, now_ms=NOW))
            assert guess["like"].value == sorted(f"thing {i}" for i in range(20))
        finally:
            store.close()
    assert steps[10_000] < 2 * steps[1_000] + 20, steps
