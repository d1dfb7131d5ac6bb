"""A LangChain Embeddings given to ConvMemory.open reaches search, the BaseStore and the middleware."""

from __future__ import annotations

import gc
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage

from convmem_graph.memory import ConvMemory
from tests.unit.test_memory import SEEN, RecordingModel

_CONCEPTS = (("fruit", "mango", "kiwi"), ("drink", "tea", "coffee"), ("city", "hangzhou", "lisbon"))


class ConceptEmbeddings(Embeddings):
    """Two-word "concepts" as axes: 'fruit' and 'mango' point the same way, with no shared term."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def _vector(self, text: str) -> list[float]:
        low = text.lower()
        return [float(any(w in low for w in words)) for words in _CONCEPTS] + [0.01]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._vector(text)


@pytest.fixture
def emb() -> ConceptEmbeddings:
    return ConceptEmbeddings()


@pytest.fixture
def mem(tmp_path: Path, emb: ConceptEmbeddings) -> Iterator[ConvMemory]:
    m = ConvMemory.open(str(tmp_path / "e.db"), embeddings=emb)
    m.ingest(
        "u_1",
        [
            {"role": "user", "content": "I'm allergic to mango."},
            {"role": "user", "content": "I live in Hangzhou."},
            {"role": "user", "content": "I drink green tea every morning."},
        ],
        source="openai",
    )
    yield m
    m.close()


def test_search_ranks_by_meaning_with_embeddings(mem: ConvMemory) -> None:
    hits = mem.search("u_1", "any fruit I should avoid?", k=1)
    assert [h.fragment.content for h in hits] == ["User is allergic to mango."]
    assert hits[0].score is None  # placed by embeddings, no shared term
    # Without embeddings the same query shares no term with any fact.
    mem.embeddings = None
    assert mem.search("u_1", "any fruit I should avoid?") == []


def test_store_search_uses_them(mem: ConvMemory, emb: ConceptEmbeddings) -> None:
    found = mem.as_store().search(("memories", "u_1"), query="which fruit?", limit=1)
    assert [i.value["content"] for i in found] == ["User is allergic to mango."]
    assert "which fruit?" in emb.queries


def test_middleware_passes_them_to_the_memory_block(mem: ConvMemory, emb: ConceptEmbeddings) -> None:
    middleware = mem.as_middleware("u_1")
    model = RecordingModel(responses=[AIMessage(content="No mango.")])
    agent = create_agent(model, tools=[], middleware=[middleware])
    SEEN.clear()
    agent.invoke({"messages": [HumanMessage("Suggest a fruit salad")]})
    assert "Suggest a fruit salad" in emb.queries
    assert "mango" in str(SEEN[0][0].content)
    other = ConceptEmbeddings()
    assert mem.as_middleware("u_1", embeddings=other).memory_block("u_1", "a drink?")
    assert other.queries == ["a drink?"] and "a drink?" not in emb.queries


def _wait_embedded(mem: ConvMemory, memory_id: str, model: str, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not mem.store.missing_turn_vectors(memory_id, model):
            return True
        time.sleep(0.02)
    return False


TURNS = [{"role": "user", "content": f"I planted {n} mango trees."} for n in ("two", "three", "four")]


class Gated(ConceptEmbeddings):
    """Embeds only once ``gate`` is set; counts its calls."""

    model = "gated"

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        assert self.gate.wait(20)
        return super().embed_documents(texts)


def test_new_turns_get_vectors_in_the_background(tmp_path: Path) -> None:
    emb = Gated()
    mem = ConvMemory.open(str(tmp_path / "bg.db"), embeddings=emb)
    try:
        result = mem.ingest("u_1", TURNS, source="openai")  # returns while the model is held
        assert result.new_messages == 3
        assert len(mem.store.missing_turn_vectors("u_1", "gated")) == 3
        emb.gate.set()
        assert _wait_embedded(mem, "u_1", "gated")  # without any embed_turns call
        assert mem.embed_turns("u_1") == 0
    finally:
        mem.close()


def test_a_failing_model_does_not_fail_ingest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Broken(ConceptEmbeddings):
        model = "broken"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise RuntimeError("model down")

    mem = ConvMemory.open(str(tmp_path / "bad.db"), embeddings=Broken())
    try:
        with caplog.at_level(logging.WARNING, logger="convmem_graph.store.turn_embedding"):
            assert mem.ingest("u_1", TURNS, source="openai").new_messages == 3
            assert mem._embedder is not None and mem._embedder.wait_idle(timeout=20)
        assert any("background embedding of memory 'u_1' failed" in r.getMessage() for r in caplog.records)
        # Still answered by words.
        assert "mango" in str(mem.payload("u_1", "openai", query="mango trees", recent_turns=0))
    finally:
        mem.close()


def test_close_stops_the_worker_between_batches(tmp_path: Path) -> None:
    class Slow(ConceptEmbeddings):
        model = "slow"

        def __init__(self) -> None:
            super().__init__()
            self.started = threading.Event()

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            self.started.set()
            time.sleep(0.3)
            return super().embed_documents(texts)

    emb = Slow()
    mem = ConvMemory.open(str(tmp_path / "slow.db"), embeddings=emb)
    many = [{"role": "user", "content": f"Turn number {i} about tea."} for i in range(200)]
    mem.ingest("u_1", many, source="openai")
    assert emb.started.wait(20)
    worker = mem._embedder
    assert worker is not None
    mem.close()  # returns after the batch in progress (64 turns), not after all four
    assert worker._thread is not None and not worker._thread.is_alive()
    assert not worker.notify("u_1")
    reopened = ConvMemory.open(str(tmp_path / "slow.db"), embeddings=emb, embed_in_background=False)
    try:
        left = len(reopened.store.missing_turn_vectors("u_1", "slow", limit=1000))
        assert 0 < left < 200
        assert reopened.embed_turns("u_1") == left  # resumable
    finally:
        reopened.close()


def test_no_background_embedding_when_turned_off(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "off.db"), embeddings=ConceptEmbeddings(), embed_in_background=False)
    try:
        mem.ingest("u_1", TURNS, source="openai")
        assert mem._embedder is None
        assert len(mem.store.missing_turn_vectors("u_1", "ConceptEmbeddings")) == 3
    finally:
        mem.close()


def test_a_memory_dropped_without_close_stops_its_worker(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "drop.db"), embeddings=ConceptEmbeddings())
    mem.ingest("u_1", TURNS, source="openai")
    worker = mem._embedder
    assert worker is not None and worker.wait_idle(timeout=20)
    thread = worker._thread
    assert thread is not None and thread.is_alive()
    mem.store.close()  # what close() would do, but the instance is just dropped
    del mem
    gc.collect()
    thread.join(20)
    assert not thread.is_alive()


def test_the_payload_ranks_facts_by_meaning_too(tmp_path: Path) -> None:
    # Only one fact fits (the block with both counts 32 tokens whole); "any fruit I should
    # avoid?" shares no word with the mango allergy and "avoid" with the crowds fact. Before the
    # payload handed the model to the block, the call start's facts were ranked by words alone and
    # the crowds fact came first.
    m = ConvMemory.open(str(tmp_path / "p.db"), embeddings=ConceptEmbeddings(), embed_in_background=False)
    try:
        m.add_fragment("u_1", "User is allergic to mango.")
        m.add_fragment("u_1", "User avoids crowds.")
        # The block reads the facts' stored vectors (written off the request path): until they
        # are written the facts rank by their words, and the call start embeds only the query.
        before = m.payload(
            "u_1", "openai", query="any fruit I should avoid?", budget_tokens=31, recent_turns=0
        )
        assert "crowds" in before[0]["content"] and "mango" not in before[0]["content"]
        assert m.embed_facts("u_1") == 2
        body = m.payload("u_1", "openai", query="any fruit I should avoid?", budget_tokens=31, recent_turns=0)
        assert "mango" in body[0]["content"]
        m.embeddings = None
        lexical = m.payload(
            "u_1", "openai", query="any fruit I should avoid?", budget_tokens=31, recent_turns=0
        )
        assert "crowds" in lexical[0]["content"] and "mango" not in lexical[0]["content"]
    finally:
        m.close()


def test_a_transcript_query_is_searched_by_meaning_through_the_users_lines(tmp_path: Path) -> None:
    # The assistant's line talks of coffee: embedded whole, the transcript points at fruit and
    # drink alike, so by meaning the mango turn and the tea turn tie and neither is quoted (no
    # word of the query is in a turn). The user's lines alone point at fruit: the mango turn.
    emb = ConceptEmbeddings()
    m = ConvMemory.open(str(tmp_path / "t.db"), embeddings=emb, embed_in_background=False)
    try:
        m.ingest(
            "u_1",
            [
                {"role": "user", "content": "I'm allergic to mango."},
                {"role": "user", "content": "I drink green tea every morning."},
                {"role": "user", "content": "I live in Hangzhou."},
            ],
            source="openai",
        )
        assert m.embed_turns("u_1") == 3
        query = "Bart: Packing snacks for a trip.\nAssistant: Coffee keeps you up.\nBart: Any fruit to skip?"
        block = m.memory_block("u_1", query, budget_tokens=200).text
        # Quoted, under its date.
        assert re.search(r"^\d{4}-\d{2}-\d{2} I'm allergic to mango\.$", block, re.MULTILINE)
        assert "I drink green tea" not in block
        assert emb.queries[-1] == "Packing snacks for a trip.\nAny fruit to skip?"
    finally:
        m.close()
