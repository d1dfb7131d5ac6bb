"""The episodic search: a query naming a speaker finds that speaker's own turns, not those greeting them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem_graph.models import Message
from convmem_graph.store import MemoryStore
from convmem_graph.store._episode_search import SPEAKER_WINDOW

# 2024-03-03 10:00 UTC
T0 = 1_709_460_000_000
MINUTE = 60_000


def msg(mid: str, content: str, ts: int, role: str, speaker: str | None) -> Message:
    return Message(
        id=mid,
        role=role,  # type: ignore[arg-type]
        content=content,
        channel="im",
        source="message",
        timestamp_ms=ts,
        speaker_id=speaker,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[MemoryStore, str]]:
    if request.param == "sqlite":
        s = MemoryStore.from_url(str(tmp_path / "sp.db"))
        mid = "a"
    else:
        url = os.environ.get("CONVMEM_TEST_POSTGRES_URL")
        if not url:
            pytest.skip("CONVMEM_TEST_POSTGRES_URL is not set")
        s = MemoryStore.from_url(url)
        mid = f"speakers-{uuid.uuid4().hex[:8]}"
    try:
        yield s, mid
    finally:
        if request.param == "postgres":
            s.delete_memory(mid)
        s.close()


def _garden(names: tuple[str, str], own: str, greeting: str, filler: str, n: int = 8) -> list[Message]:
    """``names[0]``'s own answer, then ``n`` newer turns of ``names[1]`` saying her name and the topic.

    She answers each of them with words of no question's (the search reads these next turns
    anyway: that is how it learns who the speakers are).
    """
    ana, bruno = names
    turns = [msg("own", own, T0, "user", ana), msg("gap", filler, T0 + MINUTE, "user", ana)]
    for i in range(n):
        ts = T0 + (10 + 3 * i) * MINUTE
        turns.append(msg(f"greet{i}", greeting.format(i=i), ts, "assistant", bruno))
        turns.append(msg(f"more{i}", f"{filler} {i}", ts + MINUTE, "user", ana))
    return turns


def test_a_named_speakers_own_turn_is_a_candidate(store: tuple[MemoryStore, str]) -> None:
    s, mid = store
    s.add_messages(
        mid,
        _garden(
            ("Ana", "Bruno"),
            "My garden has tomatoes and basil this year.",
            "Ana, your garden photo number {i} looks lovely!",
            "Thanks, the weather is fine.",
        ),
    )
    hits = s.search_episodes(mid, "What does Ana grow in her garden?", limit=3).hits
    # Bruno's eight greetings hold both "ana" and "garden"; Ana's own turn holds "garden" only,
    # so by the words alone it is the ninth turn and never a candidate at 3. Said by Ana, it
    # gains her name's weight and the greetings lose it.
    assert hits[0].message.id == "own"


def test_chinese_speaker_names_count_the_same_way(store: tuple[MemoryStore, str]) -> None:
    s, mid = store
    s.add_messages(
        mid,
        _garden(("小林", "老王"), "我在花园里种番茄。", "小林，你花园第{i}张照片真好看！", "谢谢，天气好。"),
    )
    hits = s.search_episodes(mid, "小林花园种了什么？", limit=3).hits
    assert hits[0].message.id == "own"


def test_opaque_ids_and_unnamed_queries_keep_the_words_order(store: tuple[MemoryStore, str]) -> None:
    s, mid = store
    turns = _garden(
        ("ana_1", "bruno_2"),
        "My garden has tomatoes and basil this year.",
        "ana_1 your garden photo number {i} looks lovely!",
        "Thanks, the weather is fine.",
    )
    s.add_messages(mid, turns)
    # An id with digits or "_" names no one: the turns saying it rank first, newest first.
    ids = [h.message.id for h in s.search_episodes(mid, "What does ana_1 grow in her garden?", limit=3).hits]
    assert ids[:3] == ["greet7", "greet6", "greet5"]
    # A query naming no speaker: the IDF sums' order (the newest of the equal ones first).
    plain = [h.message.id for h in s.search_episodes(mid, "garden photo", limit=3).hits]
    assert plain[:3] == ["greet7", "greet6", "greet5"]


def test_the_window_is_bounded(store: tuple[MemoryStore, str]) -> None:
    s, mid = store
    # The own turn sits below the window (more greetings than 3x the limit + 4): not reached.
    n = SPEAKER_WINDOW * 2 + 4 + 2
    s.add_messages(
        mid,
        _garden(
            ("Ana", "Bruno"),
            "My garden has tomatoes and basil this year.",
            "Ana, your garden photo number {i} looks lovely!",
            "Thanks, the weather is fine.",
            n=n,
        ),
    )
    ids = [h.message.id for h in s.search_episodes(mid, "What does Ana grow in her garden?", limit=2).hits]
    assert "own" not in ids
