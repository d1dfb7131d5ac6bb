"""The block's order of facts by position (only the matched facts ordered) selects what the full walk did.

``build_memory_block`` ranks the snapshot's facts with :class:`FactOrder` kept with the snapshot
and hands ``_select`` only the facts a walk of all of them would act on (``_considered``). These
tests hold the order equal to ``iter_ranked``'s and the whole block (text, included and dropped
ids, flags, part tokens) equal to the one the full walk builds, on random snapshots with ties in
time, expired and expiring facts, long facts in pieces, repeated texts, profile facts a variable
shows, more facts than the scored sample, and every fact cap.
"""

from __future__ import annotations

import random

import pytest

from convmem_graph.models import EpisodeHit, EpisodeSearch, Fragment, MemorySnapshot, Message, VariableValue
from convmem_graph.payloads import memory_block
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block
from convmem_graph.payloads.relevance import FactOrder, iter_ranked

NOW = 1_800_000_000_000
WORDS = ["mango", "chess", "pottery", "jazz", "Lisbon", "runs", "running", "tea", "user", "likes", "cats"]
HANZI = ["成都", "朋友", "羽毛球", "火锅", "饺子", "喜欢", "芒果", "过敏"]
QUERIES = [
    None,
    "",
    "mango",
    "chess pottery",
    "成都 朋友",
    "我喜欢什么",
    "user likes",
    "I like 羽毛球 and chess\nwhat about pottery and tea this weekend?",
    "nothing in common",
]


def _text(rng: random.Random) -> str:
    parts = [rng.choice(WORDS + HANZI) for _ in range(rng.randint(1, 9))]
    return " ".join(parts) + rng.choice([".", "。", ""])


def _snapshot(rng: random.Random, n: int) -> MemorySnapshot:
    fragments: list[Fragment] = []
    texts = [_text(rng) for _ in range(max(n // 3, 1))]  # repeats: facts sharing a text
    while len(fragments) < n:
        k = len(fragments)
        expires = rng.choice([None, None, NOW - rng.randint(1, 10**6), NOW + rng.randint(0, 10**6), NOW])
        common = {
            "memory_id": "m",
            "key": f"k{k}",
            "category": rng.choice(["other", "profile", "plan", "preference"]),
            "transient": expires is not None and rng.random() < 0.7,
            "expires_at": expires,
            "updated_at": rng.randint(0, 30),  # many ties in time
            "confidence": rng.choice([1.0, 0.8]),
        }
        if rng.random() < 0.08 and n - len(fragments) >= 3:  # a long fact in pieces
            first = f"f{k}"
            for p in range(rng.randint(2, 3)):
                fragments.append(
                    Fragment(id=f"f{k + p}", content=_text(rng), part_of=first, part=p, **common)
                )
            continue
        fragments.append(Fragment(id=f"f{k}", content=rng.choice(texts + [_text(rng)]), **common))
    rng.shuffle(fragments)
    profile = [f.id for f in fragments if f.category == "profile"][:2]
    variables = {
        "city": VariableValue(name="city", value="Lisbon", origin="inferred", fragment_ids=profile),
        "name": VariableValue(name="name", value="Lin", origin="manual"),
    }
    hits = [
        EpisodeHit(
            seq=s,
            message=Message(
                id=f"t{s}",
                memory_id="m",
                role="user" if s % 2 else "assistant",
                content=_text(rng),
                channel="im",
                source="message",
                timestamp_ms=NOW - s * 1000,
            ),
            terms=["mango"],
        )
        for s in range(1, rng.randint(1, 6))
    ]
    episodes = rng.choice(
        [None, EpisodeSearch(terms=["mango"], document_frequency={"mango": 3}, total=50, hits=hits)]
    )
    return MemorySnapshot(memory_id="m", fragments=fragments, variables=variables, episodes=episodes)


def _block(snap: MemorySnapshot, options: MemoryBlockOptions, listed: bool) -> dict[str, object]:
    return build_memory_block(snap, options, list_all_dropped=listed).model_dump()


def block_equals_the_full_walk(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of generated snapshots (seeded) equal the blocks of the walk over every fact."""
    rng = random.Random(seed)
    for n in (0, 1, 7, 40, 120, 450 if seed % 4 == 0 else 90):
        snap = _snapshot(rng, n)
        walked = snap.model_copy(deep=True)  # its own cache: nothing kept is shared
        for query in QUERIES:
            for cap, budget in ((50, 300), (0, 300), (3, 2000), (400, 4000), (50, 60)):
                now = rng.choice([None, NOW])
                options = MemoryBlockOptions(query=query, max_fragments=cap, budget_tokens=budget, now_ms=now)
                fast = [_block(snap, options, listed) for listed in (True, False)]
                with monkeypatch.context() as patch:
                    # No kept order: the block walks every fact, as before the order by position.
                    patch.setattr(memory_block, "_facts", lambda snapshot, stats: None)
                    full = [_block(walked, options, listed) for listed in (True, False)]
                assert fast == full, (seed, n, query, cap, budget, now)
        assert "facts" in snap.derived() and "facts" not in walked.derived()


@pytest.mark.parametrize("seed", range(6))
def test_the_block_equals_the_full_walk(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Six seeds here; tests/integration/test_block_fact_order_full.py runs eighteen more.
    block_equals_the_full_walk(seed, monkeypatch)


@pytest.mark.parametrize("seed", range(6))
def test_the_order_by_position_is_iter_ranked(seed: int) -> None:
    rng = random.Random(100 + seed)
    fragments = _snapshot(rng, rng.choice([0, 5, 60, 300])).fragments
    order = FactOrder(fragments)
    for query in QUERIES:
        want = [id(f) for f in iter_ranked(query, fragments, first=len(fragments))]
        ranking = order.ranking(query)
        assert [id(fragments[i]) for i in ranking.prefix(len(fragments))] == want
        assert [id(fragments[i]) for i in ranking.prefix(7)] == want[:7]
        assert sorted(range(len(fragments)), key=ranking.rank) == ranking.prefix(len(fragments))


def test_another_memorys_fact_still_fails_the_block() -> None:
    mine = Fragment(id="a", memory_id="m", content="User likes tea.", key="tea")
    theirs = Fragment(id="b", memory_id="other", content="User likes jazz.", key="jazz")
    snap = MemorySnapshot(memory_id="m", fragments=[mine, theirs])
    with pytest.raises(ValueError, match="belongs to memory 'other'"):
        build_memory_block(snap, MemoryBlockOptions(query="tea"))


def test_one_fact_object_twice_keeps_the_walks_order(monkeypatch: pytest.MonkeyPatch) -> None:
    tea = Fragment(id="a", memory_id="m", content="User likes tea.", key="tea", updated_at=2)
    jazz = Fragment(id="b", memory_id="m", content="User likes jazz.", key="jazz", updated_at=1)
    snap = MemorySnapshot(memory_id="m", fragments=[tea, jazz])
    snap.fragments = [tea, jazz, tea]  # assigned: the same object twice (no validation copies it)
    options = MemoryBlockOptions(query="tea", now_ms=NOW)
    fast = build_memory_block(snap, options).model_dump()
    monkeypatch.setattr(memory_block, "_facts", lambda snapshot, stats: None)
    assert fast == build_memory_block(snap.model_copy(deep=True), options).model_dump()
