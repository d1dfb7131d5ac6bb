"""What a call start keeps with the parsed snapshot (term counts, neutralized texts) changes no byte.

The ranker's per-text term counts, the block's neutralized variable values and facts and the
variables' script counts are kept with the snapshot the store hands out (one parsed object per
version of the row). These tests hold the payload equal to one built from an empty cache, the
scores equal to BM25 computed from scratch, and the cache to the snapshot's version.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.memory import ConvMemory
from convmem_graph.models import EpisodeSearch, Fragment, MemorySnapshot, VariableValue
from convmem_graph.payloads.memory_block import _fragment_terms, _scored_text, _term_stats, build_memory_block
from convmem_graph.payloads.ranker import Scorer, TermStats, text_terms
from convmem_graph.snapshot import render_call_start

MID = "u1"
NOW = 1_800_000_000_000
QUERIES = [
    "mango",
    "chess pottery",
    "成都 朋友",
    "羽毛球 和 火锅",
    "Lisbon jazz pottery chess mango",
    "我想去成都\nwhat about pottery and jazz this weekend",
    "",
    "nothing in common here",
]
VENDORS = ["openai", "trtc-llmconfig", "agora-custom"]


def _reference_score(query_weights: dict[str, float], avg: float, text: str) -> float:
    """BM25 of one text as the ranker computed it before counts were kept (bag walked per call)."""
    bag = text_terms(text)
    counts: dict[str, int] = {}
    for term in bag:
        if term in query_weights:
            counts[term] = counts.get(term, 0) + 1
    if not counts:
        return 0.0
    norm = 1.2 * (1.0 - 0.75 + 0.75 * len(bag) / avg)
    return sum(query_weights[t] * f * 2.2 / (f + norm) for t, f in counts.items())


def _texts(rng: random.Random, n: int) -> list[str]:
    words = ["mango", "chess", "pottery", "jazz", "Lisbon", "runs", "running", "tea", "user", "likes"]
    hanzi = ["成都", "朋友", "羽毛球", "火锅", "饺子", "喜欢"]
    out = []
    for _ in range(n):
        parts = [rng.choice(words + hanzi) for _ in range(rng.randint(1, 14))]
        out.append(" ".join(parts) + rng.choice([".", "。", ""]))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scores_with_kept_counts_equal_bm25_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    pool = _texts(rng, 60)
    stats = TermStats()  # shared across queries, as the snapshot's is across call starts
    episodes = EpisodeSearch(terms=["mango", "成都"], document_frequency={"mango": 3, "成都": 40}, total=900)
    for query in QUERIES:
        for found in (None, episodes):
            kept = Scorer(query, found, pool, stats)
            fresh = Scorer(query, found, pool)
            for text in pool + _texts(rng, 10):
                want = _reference_score(kept.weights, kept._avg, text) if kept.weights else 0.0
                # Exactly equal: the sum runs over the same terms in the same order.
                assert kept.score(text) == fresh.score(text) == want, (query, text)
            assert kept.weights == fresh.weights


def test_term_stats_start_over_past_their_bound() -> None:
    stats = TermStats(max_entries=3)
    for text in ["a b", "b c", "c d", "d e"]:
        assert stats.get(text) == ({t: 1 for t in text.split()}, 2)
    assert len(stats._entries) == 1  # cleared at the bound, then the fourth text kept
    pool = ["a b", "b c"]
    assert Scorer("b", None, pool, stats).score("a b") == Scorer("b", None, pool).score("a b")


def _memory(tmp_path: Path) -> ConvMemory:
    mem = ConvMemory.open(str(tmp_path / "m.db"))
    mem.ingest(
        MID,
        [
            {"role": "user", "content": "I play chess every Sunday and I love pottery."},
            {"role": "assistant", "content": "Chess and pottery sound relaxing."},
            {"role": "user", "content": "我下周要和朋友去成都吃火锅。"},
            {"role": "assistant", "content": "成都的火锅很好吃！"},
            {"role": "user", "content": "My favourite city is Lisbon, I heard jazz there."},
            {"role": "assistant", "content": "Lisbon has great jazz clubs."},
        ],
    )
    for fact in ["User plays chess on Sundays.", "用户喜欢打羽毛球。", "User's cat is called Niangao."]:
        mem.add_fragment(MID, fact)
    mem.set_variable(MID, "city", "Hangzhou <b>")
    return mem


def _dump(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, default=repr)


def test_payload_is_byte_identical_with_and_without_the_cache(tmp_path: Path) -> None:
    mem = _memory(tmp_path)
    try:
        snap = mem.snapshot(MID)
        assert mem.snapshot(MID) is snap  # the store hands out one parsed snapshot per row version
        for _ in range(2):  # the second round runs on a warm cache
            for query in QUERIES:
                for vendor in VENDORS:
                    options = {"query": query, "budget_tokens": 120}
                    warm = render_call_start(mem.store, snap, vendor, options, config=mem.config, now_ms=NOW)
                    # A deep copy starts with an empty cache: everything derived afresh.
                    cold_snap = snap.model_copy(deep=True)
                    assert cold_snap.derived() == {}
                    cold = render_call_start(
                        mem.store, cold_snap, vendor, options, config=mem.config, now_ms=NOW
                    )
                    assert _dump(warm) == _dump(cold), (query, vendor)
        assert {"term_stats", "neutralized", "script_counts"} <= snap.derived().keys()
        assert snap == snap.model_copy(deep=True)  # a filled cache never makes equal snapshots unequal
        # ConvMemory.payload goes the same way (no fact here expires: the clock does not matter).
        via_memory = mem.payload(MID, "openai", query="chess pottery")
        cold = render_call_start(
            mem.store,
            snap.model_copy(deep=True),
            "openai",
            {"query": "chess pottery"},
            config=mem.config,
            now_ms=mem.lifecycle.clock(),
        )
        assert _dump(via_memory) == _dump(cold)
    finally:
        mem.close()


def test_the_cache_drops_when_the_snapshot_changes(tmp_path: Path) -> None:
    mem = _memory(tmp_path)
    try:
        before = mem.snapshot(MID)
        first = _dump(mem.payload(MID, "openai", query="mango allergy"))
        assert "mango" not in first.lower()
        assert before.derived()  # filled by the call start
        mem.add_fragment(MID, "User is allergic to mango.")
        after = mem.snapshot(MID)
        assert after is not before and after.derived() == {}  # a new version of the row, a new cache
        second = _dump(mem.payload(MID, "openai", query="mango allergy"))
        assert "User is allergic to mango." in second
        assert after.derived()
    finally:
        mem.close()


def test_script_counts_follow_an_assigned_field() -> None:
    snap = MemorySnapshot(
        memory_id="m",
        variables={
            "city": VariableValue(
                name="city", value="Hangzhou and Lisbon and Porto and Rome and Paris", origin="manual"
            )
        },
        fragments=[Fragment(id="f1", memory_id="m", content="用户喜欢猫。", key="cat")],
    )
    assert build_memory_block(snap).language == "en"
    snap.variables = {"city": VariableValue(name="city", value="杭州西湖边上的小城市", origin="manual")}
    assert build_memory_block(snap).language == "zh"  # counted again for the new variables


@pytest.mark.parametrize("seed", [4, 5])
def test_facts_skipped_without_a_look_are_those_scoring_zero(seed: int) -> None:
    rng = random.Random(seed)
    texts = list(dict.fromkeys(_texts(rng, 80)))
    snap = MemorySnapshot(
        memory_id="m",
        fragments=[Fragment(id=f"f{i}", memory_id="m", content=t, key=f"k{i}") for i, t in enumerate(texts)],
    )
    for query in QUERIES:
        scorer = Scorer(query, None, texts, _term_stats(snap))
        _, holders = _fragment_terms(snap, scorer)
        holding = set().union(*(holders.get(t, ()) for t in scorer.weights))
        for text in texts:
            assert (text in holding) == (Scorer(query, None, texts).score(text) > 0.0), (query, text)
    # Another list of fragments assigned: the holders are computed again for it.
    snap.fragments = [Fragment(id="new", memory_id="m", content="User keeps bees.", key="bees")]
    _, holders = _fragment_terms(snap, Scorer("bees", None, ["User keeps bees."], _term_stats(snap)))
    assert holders["bee"] == {"User keeps bees."}


def test_an_inferred_variables_scored_text_follows_its_value() -> None:
    first = VariableValue(name="city", value="Hangzhou", origin="inferred")
    snap = MemorySnapshot(memory_id="m", variables={"city": first})
    text = _scored_text(snap, "city", snap.variables["city"], "en")
    assert text == "City Hangzhou"
    assert _scored_text(snap, "city", snap.variables["city"], "en") is text  # hashed once, kept
    assert _scored_text(snap, "city", snap.variables["city"], "zh") == "城市 Hangzhou"
    snap.variables = {"city": VariableValue(name="city", value="Lisbon", origin="inferred")}
    assert _scored_text(snap, "city", snap.variables["city"], "en") == "City Lisbon"
