"""A call start whose query matches nothing gets the payload kept for such queries, byte for byte.

``render_call_start`` (ranking by words) keeps the rendered vendor payload per snapshot, vendor,
options and block key when the query provably matches nothing (no turn found, no fact in the
facts' order, none of its ranker terms in any text the block scores), and hands out copies.
These tests run call starts in orders hypothesis draws on one snapshot (everything kept shared
across the calls) and hold each payload equal to the one rendered without the kept payloads on
a fresh copy of the snapshot (nothing kept), over queries that match nothing, only a fact, only
a variable, only the summary, only a long fact's joined pieces, only a found turn, only a date,
only a speaker's name, blank queries (the call opening), vendors, budgets, clocks around expiry
times and options; with embeddings the kept payloads are never used; a changed snapshot renders
again.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding

from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.models import EpisodeHit, EpisodeSearch, Fragment, MemorySnapshot, Message, VariableValue
from convmem_graph.payloads import _kept_payloads, memory_block
from convmem_graph.payloads.ranker import query_tokens, text_terms
from convmem_graph.snapshot import render_call_start
from tests.unit.payloads.matchless_snapshots import NOW, harbour_summary, random_facts, random_text

DAY = 86_400_000
#: Queries matching nothing below (``zebra``, ``jazz``, ``chess pottery``, ``饺子``), and queries
#: matching one kind of text each: facts (``mango``), a variable (``Lisbon``), the summary
#: (``harbour``), a long fact's joined pieces only (``苏州``), a found turn (``violin``), a date
#: only (``2027-01-15``), a speaker's name only (``Caroline``), the facts' order only (``芒``: a
#: substring of ``芒果`` there, no ranker term of any text); blank: the call opening.
QUERIES = [
    None,
    "",
    "zebra",
    "jazz",
    "chess pottery",
    "饺子",
    "mango",
    "Lisbon",
    "harbour",
    "苏州",
    "violin",
    "what happened on 2027-01-15",
    "what did Caroline say",
    "芒",
]
CLOCKS = [NOW - 10, NOW, NOW + 5, NOW + 10**7]
CONFIG = MemoryConfig()
VENDORS = ["openai", "trtc-llmconfig", "agora-custom", "agora-llm", "langchain"]


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


class _Reads:
    """An episodic search over a few stored turns: by ranker term, by speaker name, by date."""

    def __init__(self, turns: list[Message]) -> None:
        self.turns = turns
        self.calls = 0

    def search_episodes(self, memory_id: str, query: str, *, limit: int = 32) -> EpisodeSearch:
        self.calls += 1
        tokens = query_tokens(query)
        hits = []
        for seq, msg in enumerate(self.turns, start=1):
            held = sorted(tokens.intersection(text_terms(msg.content)))
            if msg.speaker_id and msg.speaker_id in query:
                held.append(msg.speaker_id.lower())
            if _day(msg.timestamp_ms) in query:
                held.append("@" + _day(msg.timestamp_ms))
            if held:
                hits.append(EpisodeHit(seq=seq, message=msg, terms=held))
        return EpisodeSearch(
            terms=sorted(tokens), document_frequency={t: 1 for t in tokens}, total=40, hits=hits[:limit]
        )


def _message(k: int, content: str, *, speaker: str | None = None, at: int | None = None) -> Message:
    return Message(
        id=f"t{k}",
        memory_id="m",
        role="user" if k % 2 else "assistant",
        content=content,
        channel="im",
        source="message",
        timestamp_ms=at if at is not None else NOW - (100 - k) * 60_000,
        speaker_id=speaker,
    )


def _snapshot(seed: int, *, summary: bool) -> tuple[MemorySnapshot, _Reads]:
    rng = random.Random(seed)
    # With a long fact in two pieces: only the joined text holds the bigram "苏州".
    fragments = random_facts(rng, [0, 3, 30])
    variables = {
        "name": VariableValue(name="name", value="Lin", origin="manual"),
        "city": VariableValue(name="city", value="Lisbon", origin="inferred"),
    }
    recent = [_message(k, random_text(rng)) for k in range(rng.randint(0, 6))]
    stored = [
        _message(50, "I play the violin on Sundays.", speaker="Ann"),
        _message(51, "That sounds lovely.", speaker="Caroline"),
        _message(52, "We went to the museum together.", at=NOW - 200 * DAY),
    ]
    snap = MemorySnapshot(
        memory_id="m",
        fragments=fragments,
        variables=variables,
        summary=harbour_summary() if summary else None,
        recent=recent,
    )
    return snap, _Reads(stored)


def _dump(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, default=repr)


def _without_kept(reads: _Reads, snap: MemorySnapshot, vendor: str, options: dict[str, Any], now: int) -> Any:
    """The payload rendered in full on a fresh copy of the snapshot (nothing kept with it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_kept_payloads, "_proof", lambda *args: None)
        patch.setattr(_kept_payloads, "_proved_again", lambda *args: None)
        return render_call_start(
            reads, snap.model_copy(deep=True), vendor, options, config=CONFIG, now_ms=now
        )


_call = st.tuples(
    st.sampled_from(QUERIES),
    st.sampled_from(VENDORS),
    st.sampled_from([40, 60, 120, 300]),
    st.sampled_from(CLOCKS),
    st.sampled_from([{}, {"recent_turns": 2}, {"persona": "You are Rain."}, {"language": "zh"}]),
)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), summary=st.booleans(), calls=st.lists(_call, min_size=2, max_size=12))
def test_payloads_with_kept_ones_equal_payloads_rendered_in_full(
    seed: int, summary: bool, calls: list[tuple[str | None, str, int, int, dict[str, Any]]]
) -> None:
    snap, reads = _snapshot(seed, summary=summary)
    for query, vendor, budget, now, extra in calls:
        options: dict[str, Any] = {"query": query, "budget_tokens": budget, **extra}
        if vendor == "agora-llm":
            options["llm"] = {"url": "https://llm.example/v1/chat/completions"}
        # A query matching nothing with the same options first: the drawn query then finds a
        # payload kept, and must not get it unless it matches nothing either.
        for q in ("zebra", query):
            opts = {**options, "query": q}
            kept = render_call_start(reads, snap, vendor, opts, config=CONFIG, now_ms=now)
            full = _without_kept(reads, snap, vendor, opts, now)
            assert _dump(kept) == _dump(full), (q, vendor, budget, now, extra)
            # The caller's payload is its own: changing it changes no later payload.
            if isinstance(kept, list) and kept and isinstance(kept[0], dict):
                kept[0]["content"] = "changed"
                kept.append({"role": "user", "content": "changed"})


def test_a_query_matching_nothing_gets_the_kept_payload_without_a_block() -> None:
    snap, reads = _snapshot(5, summary=True)
    options = {"budget_tokens": 300}
    first = render_call_start(reads, snap, "openai", {**options, "query": "jazz"}, config=CONFIG, now_ms=NOW)
    built: list[object] = []
    real = memory_block.build_memory_block

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(args)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("convmem_graph.payloads.openai.build_memory_block", counting)
        again = render_call_start(
            reads, snap, "openai", {**options, "query": "chess pottery"}, config=CONFIG, now_ms=NOW
        )
        assert built == []  # another query matching nothing: no block built
        assert again == first and again is not first
        # A query a variable, the summary, a found turn or a fact holds builds its block.
        for query in ("Lisbon", "harbour", "violin", "mango", "苏州", "what did Caroline say"):
            render_call_start(reads, snap, "openai", {**options, "query": query}, config=CONFIG, now_ms=NOW)
        assert len(built) == 6


def test_embeddings_never_get_a_kept_payload() -> None:
    snap, reads = _snapshot(9, summary=False)
    embeddings = DeterministicFakeEmbedding(size=8)
    for query in ("jazz", "zebra"):
        options = {"query": query, "budget_tokens": 300}
        hybrid = render_call_start(
            reads, snap, "openai", options, config=CONFIG, now_ms=NOW, embeddings=embeddings
        )
        assert "kept_payloads" not in snap.derived()
        fresh = render_call_start(
            reads,
            snap.model_copy(deep=True),
            "openai",
            options,
            config=CONFIG,
            now_ms=NOW,
            embeddings=embeddings,
        )
        assert _dump(hybrid) == _dump(fresh)


def test_a_changed_snapshot_renders_again() -> None:
    snap, reads = _snapshot(3, summary=False)
    options = {"query": "jazz", "budget_tokens": 300}
    render_call_start(reads, snap, "openai", options, config=CONFIG, now_ms=NOW)
    render_call_start(reads, snap, "openai", options, config=CONFIG, now_ms=NOW)
    assert snap.derived()["kept_payloads"]
    # Assigned in place (the kept payloads stay with the object): other recent turns, other facts.
    snap.recent = [_message(90, "A brand new turn about zebras.")]
    assert "A brand new turn about zebras." in _dump(
        render_call_start(reads, snap, "openai", options, config=CONFIG, now_ms=NOW)
    )
    snap.fragments = [
        Fragment(id="new", memory_id="m", content="User keeps bees.", key="bees", updated_at=99)
    ]
    assert "User keeps bees." in _dump(
        render_call_start(reads, snap, "openai", options, config=CONFIG, now_ms=NOW)
    )


def test_a_new_version_of_the_memory_is_not_served_the_kept_payload(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "m.db"))
    try:
        mem.ingest("u1", [{"role": "user", "content": "I play chess every Sunday."}])
        mem.add_fragment("u1", "User plays chess on Sundays.")
        before = [_dump(mem.payload("u1", "openai", query="jazz")) for _ in range(2)]
        assert before[0] == before[1] and "jazz" not in before[0].lower()
        mem.add_fragment("u1", "User loves jazz.")
        assert "User loves jazz." in _dump(mem.payload("u1", "openai", query="jazz"))
        # A query matching nothing on the new version: rendered from the new facts.
        assert "User loves jazz." in _dump(mem.payload("u1", "openai", query="zebra"))
    finally:
        mem.close()


def test_the_key_holds_every_option_and_the_clock() -> None:
    snap, reads = _snapshot(21, summary=True)
    base: dict[str, Any] = {"budget_tokens": 300}
    variations: list[tuple[str, dict[str, Any], int]] = [
        ("openai", {}, NOW),
        ("openai", {"persona": "You are Rain."}, NOW),
        ("openai", {"recent_turns": 1}, NOW),
        ("openai", {"language": "zh"}, NOW),
        ("openai", {"max_fragments": 1}, NOW),
        ("openai", {"budget_tokens": 60}, NOW),
        ("openai", {}, NOW + 10),  # past the expiry of some facts
        ("trtc-llmconfig", {}, NOW),
        ("agora-custom", {"persona": "You are Rain."}, NOW),
    ]
    for vendor, extra, now in variations:
        # Each variation after all the others were kept: only its own key may answer it.
        for query in ("zebra", "jazz"):
            options = {**base, **extra, "query": query}
            kept = render_call_start(reads, snap, vendor, options, config=CONFIG, now_ms=now)
            assert _dump(kept) == _dump(_without_kept(reads, snap, vendor, options, now)), (
                vendor,
                extra,
                now,
            )
    # Variations whose block and payload are the same (a clock before any fact expires, the
    # language the block would pick anyway) may share a key; the rest are kept apart.
    assert len(snap.derived()["kept_payloads"]) >= len(variations) - 2


def test_the_vocabulary_holds_the_terms_of_long_facts_joined_pieces() -> None:
    snap, reads = _snapshot(1, summary=True)
    render_call_start(
        reads, snap, "openai", {"query": "zebra", "budget_tokens": 300}, config=CONFIG, now_ms=NOW
    )
    (kept,) = snap.derived()["matchless"].values()
    # "苏州" only across the two pieces; "harbour" the summary's; "lisbon" the inferred city's.
    assert {"苏州", "harbour", "lisbon", "喝茶"} <= kept.vocabulary
    assert "zebra" not in kept.vocabulary
