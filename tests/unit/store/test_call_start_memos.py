"""The hybrid call start's memos: the facts' stored vectors per snapshot, the dense answers per matrix.

A call start with no user input searches its snapshot's context query at every call until the
memory changes; both memos answer such a repeat without redoing the work, and must never answer
a changed memory: hypothesis runs sequences of changes (a new fact, a deleted fact, vectors
written by the embedder, a hand-set variable, new turns, the memory deleted and made again) and
after each compares the payloads of one long-lived ``ConvMemory`` (asked twice: the second call
is answered from the memos) with those of a fresh one opened on the same file, the process'
caches emptied first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.memory import ConvMemory
from convmem_graph.store import _fact_vectors, _vectors
from tests.unit.store.test_fact_vectors import HashedWords

NOW = 1_709_460_000_000 + 86_400_000
QUERIES = ("coffee tea", "python chess weekend", "unknown words")
_WORDS = "tea coffee mango allergy running piano dog cat beach rain python chess paris tokyo".split()
OPS = ("fact", "delete_fact", "embed", "variable", "turns", "remake")


def _open(url: str, emb: HashedWords) -> ConvMemory:
    return ConvMemory.open(url, embeddings=emb, clock=lambda: NOW, embed_in_background=False)


def _payloads(mem: ConvMemory, mid: str) -> list[object]:
    return [mem.payload(mid, "openai", query=q, budget_tokens=300, recent_turns=0) for q in QUERIES]


class _Memory:
    """One memory changed step by step; ``n`` makes every added text new."""

    def __init__(self, mem: ConvMemory, mid: str) -> None:
        self.mem, self.mid, self.n = mem, mid, 0

    def _words(self) -> str:
        self.n += 1
        return " ".join(_WORDS[(self.n * k) % len(_WORDS)] for k in (1, 3, 7))

    def fact(self) -> None:
        self.mem.add_fragment(self.mid, f"User mentioned {self._words()} ({self.n}).")

    def delete_fact(self) -> None:
        facts = self.mem.fragments(self.mid)
        if facts:
            self.mem.delete_fragment(self.mid, facts[0].id)

    def embed(self) -> None:  # what the background embedder does after a change
        self.mem.embed_turns(self.mid)
        self.mem.embed_facts(self.mid)

    def variable(self) -> None:
        self.mem.set_variable(self.mid, "city", f"Paris {self.n}")
        self.n += 1

    def turns(self) -> None:
        base = NOW - 3_600_000 + self.n * 10_000
        said = [{"role": "user", "content": f"I like {self._words()} a lot", "timestamp": base}]
        said.append({"role": "assistant", "content": f"Noted: {self._words()}.", "timestamp": base + 1})
        self.mem.ingest(self.mid, said, source="openai")

    def remake(self) -> None:
        self.mem.delete(self.mid)
        self.turns()
        self.fact()
        self.embed()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(OPS), min_size=1, max_size=7))
def test_memoized_call_starts_equal_a_fresh_memorys(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    url = str(tmp_path_factory.mktemp("memos") / "m.db")
    emb = HashedWords()
    mem = _open(url, emb)
    try:
        memory = _Memory(mem, "u1")
        memory.turns()
        memory.fact()
        memory.fact()
        memory.embed()
        _payloads(mem, "u1")
        for step in steps:
            getattr(memory, step)()
            first = _payloads(mem, "u1")
            again = _payloads(mem, "u1")  # answered from the memos
            # Nothing kept in the process: the fresh memory reads and scans everything itself.
            _vectors._cache.clear()
            _fact_vectors._cache.clear()
            fresh = _open(url, emb)
            try:
                assert first == again == _payloads(fresh, "u1"), steps
            finally:
                fresh.close()
    finally:
        mem.close()


def test_a_repeated_call_start_scans_and_digests_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second call start with the same query scans no vector and digests no fact text."""
    emb = HashedWords()
    mem = _open(str(tmp_path / "m.db"), emb)
    try:
        memory = _Memory(mem, "u1")
        for _ in range(3):
            memory.turns()
            memory.fact()
        memory.embed()
        scans: list[int] = []
        digests: list[str] = []
        nearest, digest = _vectors._nearest, _fact_vectors.content_digest
        monkeypatch.setattr(_vectors, "_nearest", lambda *a, **k: scans.append(1) or nearest(*a, **k))
        monkeypatch.setattr(_fact_vectors, "content_digest", lambda t: digests.append(t) or digest(t))
        first = mem.payload("u1", "openai", query="coffee tea", budget_tokens=300)
        assert len(scans) == 1 and len(digests) == len(mem.fragments("u1"))
        assert mem.payload("u1", "openai", query="coffee tea", budget_tokens=300) == first
        assert len(scans) == 1 and len(digests) == len(mem.fragments("u1"))
        # Another query scans again; the facts' vectors are still those of this snapshot.
        mem.payload("u1", "openai", query="python chess", budget_tokens=300)
        assert len(scans) == 2 and len(digests) == len(mem.fragments("u1"))
        # A new fact embedded: a new snapshot and new fact vectors (digested again).
        memory.fact()
        mem.embed_facts("u1")
        digests.clear()
        assert mem.payload("u1", "openai", query="coffee tea", budget_tokens=300) != first
        assert len(digests) == len(mem.fragments("u1"))
        # New turns embedded: a new matrix, scanned again.
        memory.turns()
        mem.embed_turns("u1")
        scans.clear()
        mem.payload("u1", "openai", query="coffee tea", budget_tokens=300)
        assert len(scans) == 1
    finally:
        mem.close()
