"""Rows summarize read, reused by inject: the snapshot equals one read afresh, and a write voids them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph._held import HeldRows
from convmem_graph.config import MemoryConfig
from convmem_graph.models import Fragment, Summary
from convmem_graph.runner import Lifecycle
from convmem_graph.snapshot import build_snapshot
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore

NOW = 1_767_000_000_000
DAY = 86_400_000

TURNS = [
    "我住在杭州，是一名护士。",
    "我最近特别喜欢羽毛球，每周都去。",
    "这周我在试着吃素。",
    "I also love hiking and jazz.",
    "我对芒果过敏。",
    "我养了一只猫叫年糕。",
]


def _rank(f: Fragment) -> tuple[bool, float, int, int, str]:
    return (f.transient, -f.confidence, -f.observed_at, -f.updated_at, f.id)


@pytest.mark.parametrize("max_fragments", [2, 5, 200])
def test_the_snapshot_a_run_saves_equals_one_built_from_fresh_reads(
    tmp_path: Path, max_fragments: int
) -> None:
    store = MemoryStore.from_url(str(tmp_path / "m.db"))
    config = MemoryConfig(snapshot_max_fragments=max_fragments)
    lc = Lifecycle(store, config=config, clock=lambda: NOW)
    for i, text in enumerate(TURNS):
        turn = [{"role": "user", "content": text}, {"role": "assistant", "content": f"好的 {i}"}]
        result = lc.run("m1", [RawInput(turn, "openai")], session_ended=i % 2 == 0)
        assert "summarize" in result.node_ms or i % 2  # the path that hands rows to inject
        saved = store.load_snapshot("m1")
        assert saved is not None
        assert saved == build_snapshot(store, "m1", config, now_ms=NOW)
    assert len(store.load_snapshot("m1").fragments) == min(max_fragments, len(store.list_fragments("m1")))  # type: ignore[union-attr]
    store.close()


def test_held_rows_are_used_only_while_the_run_wrote_nothing_since(tmp_path: Path) -> None:
    store = MemoryStore.from_url(str(tmp_path / "m.db"))
    config = MemoryConfig()
    with store.run("m1") as run:
        run.add_fragment("m1", "用户住在杭州。", category="profile", key="profile:city", now_ms=NOW)
        marker = Fragment(id="held", memory_id="m1", content="held row", category="other", key="k:held")
        held = HeldRows(
            writes=run.write_count(),
            durable=[marker],
            transient=[],
            limit=10,
            now_ms=NOW,
            variables={},
            summary=Summary(text="held summary", tokens=2, covers_until_ms=NOW, version=1, updated_at=NOW),
            summary_read=True,
        )
        snap = build_snapshot(run, "m1", config, now_ms=NOW, held=held)
        assert [f.id for f in snap.fragments] == ["held"]  # what the run holds is not read again
        assert snap.summary is not None and snap.summary.text == "held summary"
        run.add_fragment("m1", "用户是护士。", category="profile", key="profile:occupation", now_ms=NOW)
        snap = build_snapshot(run, "m1", config, now_ms=NOW, held=held)
        assert sorted(f.content for f in snap.fragments) == ["用户住在杭州。", "用户是护士。"]
        assert snap.summary is None
    store.close()


_FACT = st.tuples(
    st.booleans(),  # transient
    st.sampled_from([0.5, 0.8, 1.0]),  # confidence
    st.integers(0, 5),  # observed_at (days)
    st.one_of(st.none(), st.integers(0, 10)),  # expires_at (days)
)


@settings(max_examples=300, deadline=None)
@given(
    facts=st.lists(_FACT, max_size=14),
    read_limit=st.integers(1, 8),
    limit=st.integers(1, 12),
    later=st.integers(0, 10),
)
def test_held_strongest_is_the_strongest_read_at_the_later_time_or_none(
    facts: list[tuple[bool, float, int, int | None]], read_limit: int, limit: int, later: int
) -> None:
    frags = [
        Fragment(
            id=f"f{i:02d}",
            memory_id="m",
            content="x",
            category="other",
            key=f"k:{i}",
            transient=transient,
            confidence=confidence,
            observed_at=observed * DAY,
            expires_at=None if expires is None else expires * DAY,
        )
        for i, (transient, confidence, observed, expires) in enumerate(facts)
    ]

    def live(f: Fragment, now: int) -> bool:
        return not f.transient or f.expires_at is None or f.expires_at > now

    read_at, now = 2 * DAY, 2 * DAY + later * DAY // 2
    ranked = sorted((f for f in frags if live(f, read_at)), key=_rank)
    held = HeldRows(
        writes=0,
        durable=[f for f in ranked if not f.transient][:read_limit],
        transient=[f for f in ranked if f.transient][:read_limit],
        limit=read_limit,
        now_ms=read_at,
    )
    truth = sorted((f for f in frags if live(f, now)), key=_rank)[:limit]
    got = held.strongest(limit, now)
    if got is not None:
        assert [f.id for f in got] == [f.id for f in truth]
    if read_limit >= limit and later == 0:
        assert got is not None  # the lifecycle's case (the summary reads more than a snapshot holds)
