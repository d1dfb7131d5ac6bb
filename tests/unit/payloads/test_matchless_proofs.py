"""A no-match call start reuses its proof per snapshot and options, and a write ends it.

``render_kept`` keeps, per (vendor, options but the query), the proof that an earlier query
matched nothing (``memory_block.MatchlessProof``); the next call with other such options asks
the proof whether it holds for its own query and clock instead of building the block options,
the language and the key again. These tests hold every payload equal to a fresh process's
(a new ``ConvMemory`` on the same file, nothing kept) over drawn sequences of writes (a new fact,
a new message, a variable set by hand, a fact deleted, the memory deleted and made again) and
call starts; and check that the proof is used, and refused when the query, the clock or the
snapshot's parts say otherwise. The date spans' pre-filter is held to the full pattern run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph import _query_dates
from convmem_graph._query_dates import date_spans
from convmem_graph.memory import ConvMemory
from convmem_graph.payloads import _kept_payloads

NOW = 1_800_000_000_000
#: No-match queries at the start, and queries the writes below can make match.
QUERIES = ["zebra", "jazz", "chess pottery", "Lisbon", "饺子", "mango", "成都 朋友"]
FACTS = ["User loves jazz.", "User eats 饺子 on Fridays.", "User keeps a zebra.", "User plays chess."]
MESSAGES = ["I went to Lisbon last week.", "我和朋友在成都吃了饺子。", "My zebra likes mangoes.", "Hello!"]
CITIES = ["Lisbon", "Porto", "成都"]
VENDORS = ["openai", "trtc-llmconfig", "agora-custom"]


def _dump(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, default=repr)


def _open(path: Path) -> ConvMemory:
    return ConvMemory.open(str(path), clock=lambda: NOW)


def _seed(mem: ConvMemory) -> None:
    mem.ingest("u1", [{"role": "user", "content": "I like hiking in the mountains."}])
    mem.add_fragment("u1", "User likes hiking.")


def _fresh_payload(path: Path, vendor: str, query: str) -> str:
    """The payload a new process renders: a new ``ConvMemory`` on the file, nothing kept."""
    fresh = _open(path)
    try:
        return _dump(fresh.payload("u1", vendor, query=query, budget_tokens=300))
    finally:
        fresh.close()


_op = st.one_of(
    st.tuples(st.just("call"), st.sampled_from(QUERIES), st.sampled_from(VENDORS)),
    st.tuples(st.just("fact"), st.sampled_from(FACTS)),
    st.tuples(st.just("message"), st.sampled_from(MESSAGES)),
    st.tuples(st.just("variable"), st.sampled_from(CITIES)),
    st.tuples(st.just("delete_fact")),
    st.tuples(st.just("delete_memory")),
)


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=8))
def test_call_starts_after_writes_equal_a_fresh_process(
    tmp_path_factory: pytest.TempPathFactory, ops: list[Any]
) -> None:
    path = tmp_path_factory.mktemp("proofs") / "m.db"
    mem = _open(path)
    try:
        _seed(mem)
        for query in QUERIES[:3]:  # no-match calls first: proofs kept for the writes to end
            mem.payload("u1", "openai", query=query, budget_tokens=300)
        for op in ops:
            kind = op[0]
            if kind == "call":
                _, query, vendor = op
                got = _dump(mem.payload("u1", vendor, query=query, budget_tokens=300))
                assert got == _fresh_payload(path, vendor, query), (ops, op)
            elif kind == "fact":
                mem.add_fragment("u1", op[1])
            elif kind == "message":
                mem.ingest("u1", [{"role": "user", "content": op[1]}])
            elif kind == "variable":
                mem.set_variable("u1", "city", op[1])
            elif kind == "delete_fact":
                facts = mem.fragments("u1")
                if facts:
                    mem.delete_fragment("u1", facts[-1].id)
            else:
                mem.delete("u1")
                _seed(mem)
        # Every query once more after the last write, on every vendor.
        for query in QUERIES:
            for vendor in VENDORS:
                got = _dump(mem.payload("u1", vendor, query=query, budget_tokens=300))
                assert got == _fresh_payload(path, vendor, query), (ops, query, vendor)
    finally:
        mem.close()


def test_a_second_no_match_query_is_answered_by_the_proof(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = _open(tmp_path / "m.db")
    try:
        _seed(mem)
        first = _dump(mem.payload("u1", "openai", query="zebra", budget_tokens=300))
        second = _dump(mem.payload("u1", "openai", query="zebra", budget_tokens=300))
        assert first == second
        # The proof answers: no block options are built for another no-match query.
        built: list[str] = []
        real = _kept_payloads.block_options

        def counting(vendor: str, options: Any, now_ms: Any) -> Any:
            built.append(str(options.get("query")))
            return real(vendor, options, now_ms)

        monkeypatch.setattr(_kept_payloads, "block_options", counting)
        assert _dump(mem.payload("u1", "openai", query="chess pottery", budget_tokens=300)) == first
        assert built == []
        # Other options: no proof yet for them, the full path runs (its block, then the proof).
        mem.payload("u1", "openai", query="jazz", budget_tokens=200)
        assert built == ["jazz", "jazz"]
        mem.payload("u1", "openai", query="Lisbon", budget_tokens=200)
        assert built == ["jazz", "jazz"]
        # A query matching a fact: the proof refuses it, the full path renders the fact.
        assert "hiking" in _dump(mem.payload("u1", "openai", query="hiking", budget_tokens=300))
        assert built[-1] == "hiking"
        assert mem.payload("u1", "openai", query="Lisbon", budget_tokens=300) is not None
        assert built[-1] == "hiking"  # the proof still answers a no-match query after it
        # A new fact: a new snapshot, the proof is not the new one's; the payload holds the fact.
        mem.add_fragment("u1", "User keeps a zebra.")
        built.clear()
        assert "zebra" in _dump(mem.payload("u1", "openai", query="jazz", budget_tokens=300))
        assert built == ["jazz", "jazz"]  # the full path, then the new proof asked for again
    finally:
        mem.close()


def test_the_proof_counts_the_facts_expired_by_now() -> None:
    from convmem_graph.models import Fragment, MemorySnapshot
    from convmem_graph.snapshot import render_call_start
    from tests.unit.payloads.test_kept_payloads import CONFIG, _Reads

    facts = [
        Fragment(
            id="a",
            memory_id="m",
            content="User is in Rome this week.",
            key="trip",
            updated_at=1,
            expires_at=NOW + 5,
        ),
        Fragment(id="b", memory_id="m", content="User likes tea.", key="tea", updated_at=2),
    ]
    snap = MemorySnapshot(memory_id="m", fragments=facts)
    reads = _Reads([])
    options = {"query": "zebra", "budget_tokens": 300}
    for _ in range(2):
        before = _dump(render_call_start(reads, snap, "openai", options, config=CONFIG, now_ms=NOW))
    (proof,) = snap.derived()[_kept_payloads._PROOFS].values()
    assert proof.holds(snap, "jazz", NOW + 4) and not proof.holds(snap, "jazz", NOW + 5)
    assert not proof.holds(snap, "tea", NOW)  # a fact holds the query's word
    after = _dump(
        render_call_start(reads, snap, "openai", {**options, "query": "jazz"}, config=CONFIG, now_ms=NOW + 5)
    )
    assert "Rome" in before and "Rome" not in after
    assert not proof.holds(snap, "jazz", None)  # no clock: the expired facts are not counted
    # Parts assigned in place (the derived values stay with the object): not the proof's parts.
    assert proof.holds(snap, "jazz", NOW)
    snap.variables = {}
    assert not proof.holds(snap, "jazz", NOW)


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(
            [
                "19",
                "20",
                "2023",
                "1999",
                "2",
                "0",
                "8",
                "-",
                " ",
                "年",
                "月",
                "日",
                "号",
                "August",
                "Aug.",
                "19th",
                ",",
                "x",
                "٢٠",
            ]
        ),
        max_size=12,
    ).map("".join)
)
def test_date_spans_pre_filter_equals_the_patterns(text: str) -> None:
    expected_patterns = _query_dates._CENTURIES
    with pytest.MonkeyPatch.context() as patch:
        # "" is in every text: the pre-filter never answers, the seven patterns always run.
        patch.setattr(_query_dates, "_CENTURIES", ("", ""))
        full = date_spans(text)
    assert _query_dates._CENTURIES == expected_patterns
    assert date_spans(text) == full


def test_derived_values_are_shared_by_shallow_copies_only() -> None:
    from convmem_graph.models import MemorySnapshot

    for snap in (MemorySnapshot(memory_id="m"), MemorySnapshot.model_construct(memory_id="m")):
        values = snap.derived()
        values["k"] = 1
        assert snap.derived() is values
        assert snap.model_copy(update={"episodes": None}).derived() is values
        assert snap.model_copy(deep=True).derived() == {}
        # Equal snapshots stay equal whatever their caches hold.
        assert MemorySnapshot(memory_id="m") == snap.model_copy(deep=True)


@settings(max_examples=200, deadline=None)
@given(
    contents=st.lists(
        st.lists(
            st.sampled_from(
                ["jazz", "pottery123", "potter", "芒果", "饺子", " ", "User ", "likes ", "İ", "."]
            ),
            max_size=18,  # within a fact's 200 characters
        ).map("".join),
        max_size=6,
    ),
    query=st.one_of(
        st.none(),
        st.lists(st.sampled_from(["jazz", "pottery", "芒", "饺子 ", "zebra", " ", "likes", "i"])).map(
            "".join
        ),
    ),
)
def test_fact_order_matches_says_whether_the_ranking_matched(contents: list[str], query: str | None) -> None:
    from convmem_graph.models import Fragment
    from convmem_graph.payloads.relevance import FactOrder

    facts = [
        Fragment(id=f"f{i}", memory_id="m", content=c or ".", key=f"k{i}", updated_at=i)
        for i, c in enumerate(contents)
    ]
    order = FactOrder(facts)
    assert order.matches(query) == bool(order.ranking(query).matched)
