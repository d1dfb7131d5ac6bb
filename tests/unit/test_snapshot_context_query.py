"""A call start with no query recalls what the last conversation was about."""

from __future__ import annotations

from pathlib import Path

from convmem_graph import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.snapshot import context_query

T0 = 1_709_460_000_000
WEEK = 7 * 86_400_000


def _fill(mem: ConvMemory) -> None:
    old = [
        "My cello teacher says the recital piece needs a slower second movement",
        "We repainted the kitchen a pale green",
    ]
    mem.ingest(
        "u1",
        [{"role": "user", "content": t, "timestamp": T0 + i * 1000} for i, t in enumerate(old)],
        source="openai",
    )
    filler = [f"Booked the dentist for the {n}th" for n in range(4, 24)]
    mem.ingest(
        "u1",
        [{"role": "user", "content": t, "timestamp": T0 + WEEK + i * 1000} for i, t in enumerate(filler)],
        source="openai",
    )
    new = ["Practising the recital piece every evening now", "the cello strings keep slipping"]
    mem.ingest(
        "u1",
        [{"role": "user", "content": t, "timestamp": T0 + 3 * WEEK + i * 1000} for i, t in enumerate(new)],
        source="openai",
    )


def test_a_call_opening_quotes_what_was_said_weeks_ago_about_the_topic(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "c.db"), clock=lambda: T0 + 3 * WEEK + 60_000)
    try:
        _fill(mem)
        messages = mem.payload("u1", "openai", budget_tokens=300, recent_turns=2)
        system = str(messages[0]["content"])
        assert "second movement" in system  # three weeks old, recalled by the newest turns' topic
        assert "kitchen" not in system
        # The newest turns built the query and are sent as recent turns: not quoted again.
        assert "strings keep slipping" not in system
        # With the episodic tier off, nothing is searched.
        off = ConvMemory.open(str(tmp_path / "c.db"), config=MemoryConfig(episodic=False))
        try:
            assert "second movement" not in str(off.payload("u1", "openai", budget_tokens=300)[0]["content"])
        finally:
            off.close()
    finally:
        mem.close()


def test_the_context_query_ends_with_the_newest_turn(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "c.db"), clock=lambda: T0 + 3 * WEEK + 60_000)
    try:
        _fill(mem)
        query, used = context_query(mem.snapshot("u1"))
        assert query.splitlines()[-1] == "the cello strings keep slipping"
        assert len(used) == 4
        assert context_query(mem.snapshot("u1").model_copy(update={"recent": []})) == ("", frozenset())
    finally:
        mem.close()
