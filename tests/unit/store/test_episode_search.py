"""The episodic search: dates the query names, and identical turns counted once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem_graph.models import Message
from convmem_graph.store import MemoryStore

# 2024-03-03 10:00 UTC
T0 = 1_709_460_000_000
DAY = 86_400_000


def msg(mid: str, content: str, ts: int, role: str = "user") -> Message:
    return Message(id=mid, role=role, content=content, channel="im", source="message", timestamp_ms=ts)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = MemoryStore.from_url(str(tmp_path / "ep.db"))
    yield s
    s.close()


def test_a_named_date_finds_what_was_said_that_day(store: MemoryStore) -> None:
    # Ten days of soup; only one day's turn is the answer, and it never says its date.
    store.add_messages("a", [msg(str(i), f"made soup again, version {i}", T0 + i * DAY) for i in range(10)])
    store.add_messages("b", [msg("x", "made soup", T0 + 4 * DAY)])  # another memory, same day
    found = store.search_episodes("a", "What soup did I make on 7 March 2024?", limit=3)
    assert found.hits[0].message.id == "4"
    assert "@2024-03-07" in found.hits[0].terms
    assert found.document_frequency["@2024-03-07"] == 1
    # A date alone is a search too.
    assert [h.message.id for h in store.search_episodes("a", "2024-03-09", limit=5).hits] == ["6"]


def test_a_whole_month_weighs_less_than_one_day(store: MemoryStore) -> None:
    from convmem_graph.payloads.ranker import Scorer

    store.add_messages("a", [msg(str(i), f"walked the dog {i}", T0 + i * DAY) for i in range(20)])
    day = store.search_episodes("a", "on 5 March 2024", limit=5)
    month = store.search_episodes("a", "in March 2024", limit=5)
    assert Scorer("x", day, []).span_bonus(["@2024-03-05"]) > Scorer("x", month, []).span_bonus(["@2024-03"])


def test_identical_turns_count_once(store: MemoryStore) -> None:
    # A user who says the same thing every day must not use up the candidates.
    same = [msg(f"s{i}", "I love my  Kayak", T0 + i * DAY) for i in range(12)]
    other = [msg(f"o{i}", f"kayak trip number {i} on the lake", T0 + (20 + i) * 1000) for i in range(4)]
    store.add_messages("a", [*same, *other])
    hits = store.search_episodes(
        "a",
        "kayak love",
        limit=5,
    ).hits
    texts = [" ".join(h.message.content.lower().split()) for h in hits]
    assert len(texts) == len(set(texts))
    assert texts.count("i love my kayak") == 1
    assert hits[0].message.id == "s11"  # the newest copy stands for them
    assert len([h for h in hits if h.reply_to is None]) == 5  # the limit is met with other turns
