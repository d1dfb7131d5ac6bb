"""A LangChain Embeddings given to ConvMemory.open reaches search, the BaseStore and the middleware."""

from __future__ import annotations

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
