"""Fact vectors: stored beside the facts, written off the request path, exact after every change.

:func:`check_fact_vectors_round_trip` runs here on each backend (``backend_url``; PostgreSQL with
the portable turn-vector path) and with pgvector in ``tests/integration/test_postgres_fact_vectors.py``.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from sqlalchemy import text

from convmem_graph.memory import ConvMemory
from convmem_graph.models import FragmentCandidate, FragmentOp, MemorySnapshot
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block
from convmem_graph.payloads.relevance import ranked_with_cosines
from convmem_graph.store.transfer import export_memory, import_memory
from tests.unit.store.test_turn_vectors import ConceptEmbeddings, portable  # noqa: F401 (a fixture)

T0 = 1_709_460_000_000

FACTS = [
    "User has worked with Python and C++ for years.",
    "User adopted a puppy last spring.",
    "User went surfing at the beach.",
    "User finds grey weather dull.",
]
PYTHON = FACTS[0]
QUERY = "What programming languages does the user know?"


def _open(url: str, emb: Embeddings, *, background: bool = False) -> ConvMemory:
    # A clock that moves: facts added one after the other are embedded in that order.
    ticks = itertools.count(T0 + 3_600_000, 1_000)
    return ConvMemory.open(url, embeddings=emb, clock=lambda: next(ticks), embed_in_background=background)


def _add_facts(mem: ConvMemory, mid: str) -> dict[str, str]:
    """The facts added by hand; content -> fragment id."""
    return {f: mem.add_fragment(mid, f, category="other").id for f in FACTS}


def fact_rows(mem: ConvMemory, mid: str | None = None, table: str = "cm_fact_vectors") -> int:
    sql = f"SELECT count(*) FROM {table}" + (" WHERE memory_id = :m" if mid else "")
    with mem.store.engine.connect() as conn:
        return int(conn.execute(text(sql), {"m": mid} if mid else {}).scalar() or 0)


def fact_ids_with_vectors(mem: ConvMemory, mid: str) -> set[str]:
    with mem.store.engine.connect() as conn:
        rows = conn.execute(text("SELECT fragment_id FROM cm_fact_vectors WHERE memory_id = :m"), {"m": mid})
        return {str(r[0]) for r in rows}


def first_by_meaning(mem: ConvMemory, mid: str, emb: Embeddings) -> str:
    """The content of the fact the hybrid order puts first for :data:`QUERY`, from stored vectors."""
    snap = mem.query_snapshot(mid, QUERY)
    assert snap.fact_vectors is not None
    ranked, _ = ranked_with_cosines(QUERY, snap.fragments, emb, first=8, stored=snap.fact_vectors)
    return next(ranked).content


def block(mem: ConvMemory, mid: str) -> str:
    messages = mem.payload(mid, "openai", query=QUERY, budget_tokens=300, recent_turns=0)
    return str(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""


def check_fact_vectors_round_trip(url: str) -> None:
    """Half embedded, resumable, edits, supersede, hand edits, purge, import and delete, on any backend."""
    emb = ConceptEmbeddings()
    mem = _open(url, emb)
    try:
        ids = _add_facts(mem, "u1")
        _add_facts(mem, "u2")
        # Nothing embedded yet: the call start answers by words and embeds no fact, only the query.
        assert all(f in block(mem, "u1") for f in FACTS)
        assert emb.documents == 0
        assert mem.query_snapshot("u1", QUERY).fact_vectors == {}
        # Half embedded (resumable: whole batches, the rest next time). PYTHON was added first.
        assert mem.embed_facts("u1", batch=1, limit=2) == 2
        assert fact_rows(mem, "u1") == 2
        assert ids[PYTHON] in fact_ids_with_vectors(mem, "u1")
        before = emb.documents
        assert all(f in block(mem, "u1") for f in FACTS)
        assert emb.documents == before  # the call start read the stored vectors
        assert first_by_meaning(mem, "u1", emb) == PYTHON
        assert mem.embed_facts("u1") == len(FACTS) - 2
        assert mem.embed_facts("u1") == 0
        assert mem.embed_facts("u2") == len(FACTS)
        assert set(mem.query_snapshot("u1", QUERY).fact_vectors or {}) == set(ids.values())

        # An edit through the store drops the fact's vector in the same transaction; re-embedded once.
        edited = mem.update_fragment("u1", ids[FACTS[3]], content="User finds rainy weather dull.")
        assert edited.id not in fact_ids_with_vectors(mem, "u1")
        assert edited.id not in (mem.query_snapshot("u1", QUERY).fact_vectors or {})
        assert mem.embed_facts("u1") == 1
        # A delete drops it; a supersede drops the old fact's and the new fact waits for its own.
        mem.delete_fragment("u1", ids[FACTS[1]])
        assert ids[FACTS[1]] not in fact_ids_with_vectors(mem, "u1")
        store = mem.store
        op = FragmentOp(
            op="supersede",
            target_id=ids[FACTS[2]],
            candidate=FragmentCandidate(content="User went sailing at sea.", category="other", key="sea"),
        )
        counts = store.commit_extraction("u1", [op], upto_seq=store.max_seq("u1"), now_ms=T0 + 7_200_000)
        assert counts["supersede"] == 1
        assert ids[FACTS[2]] not in fact_ids_with_vectors(mem, "u1")
        assert mem.embed_facts("u1") == 1  # the new fact
        active = {f.id for f in store.list_fragments("u1")}
        assert fact_ids_with_vectors(mem, "u1") == active

        # Hand edits in SQL: a changed text's vector no longer counts and is replaced; a fact row
        # deleted by hand leaves a vector the next pass sweeps.
        with store.engine.begin() as conn:
            conn.execute(
                text("UPDATE cm_fragments SET content = :c WHERE memory_id = 'u1' AND id = :i"),
                {"c": "User writes Rust at work.", "i": ids[PYTHON]},
            )
        mem.lifecycle.run("u1")  # the cached snapshot is rebuilt from the rows
        assert ids[PYTHON] not in (mem.query_snapshot("u1", QUERY).fact_vectors or {})
        assert mem.embed_facts("u1") == 1
        assert ids[PYTHON] in (mem.query_snapshot("u1", QUERY).fact_vectors or {})
        with store.engine.begin() as conn:
            conn.execute(
                text("DELETE FROM cm_fragments WHERE memory_id = 'u1' AND id = :i"), {"i": edited.id}
            )
        assert mem.embed_facts("u1") == 0
        active = {f.id for f in store.list_fragments("u1")}
        assert fact_ids_with_vectors(mem, "u1") == active

        # Retention purge deletes turns, not facts: the facts' vectors stay.
        mem.ingest("u1", [{"role": "user", "content": "hello", "timestamp": T0}], source="openai")
        kept = fact_rows(mem, "u1")
        assert store.purge_messages("u1", before_ms=T0 + 1, keep_recent=0, only_processed=False) == 1
        assert fact_rows(mem, "u1") == kept

        # Import over a memory (replace): its vectors go; the imported facts wait for theirs.
        doc = export_memory(store, "u2")
        import_memory(store, doc, memory_id="u2", replace=True)
        assert fact_rows(mem, "u2") == 0
        assert mem.embed_facts("u2") == len(FACTS)
        # Delete: every vector of the memory goes (and its stamp), the other memory's stay.
        assert mem.delete("u1")
        assert fact_rows(mem, "u1") == 0
        assert fact_rows(mem, "u1", "cm_fact_vector_stamps") == 0
        assert fact_rows(mem, "u2") == len(FACTS)
    finally:
        mem.close()


@pytest.mark.usefixtures("portable")
def test_fact_vectors_round_trip(backend_url: str) -> None:
    check_fact_vectors_round_trip(backend_url)


def test_call_start_embeds_the_query_only(tmp_path: Path) -> None:
    """With a model, a hybrid call start embeds no fact (before: every snapshot fact at every call).

    Public API only, so the same test runs on the start revision, where it fails.
    """
    emb = ConceptEmbeddings()
    mem = ConvMemory.open(str(tmp_path / "m.db"), embeddings=emb, embed_in_background=False)
    try:
        for f in FACTS:
            mem.add_fragment("u1", f)
        for _ in range(3):
            assert PYTHON in block(mem, "u1")
        assert emb.documents == 0
        assert emb.queries == 3
        # With facts and turns embedded, the turns' search and the facts' ranking share one query.
        mem.ingest("u1", [{"role": "user", "content": "I code in Rust", "timestamp": T0}], source="openai")
        mem.embed_turns("u1")
        if hasattr(mem, "embed_facts"):  # this revision's; the start's embeds the facts per call
            mem.embed_facts("u1")
        documents = emb.documents
        assert PYTHON in block(mem, "u1")
        assert emb.queries == 4
        assert emb.documents == documents
    finally:
        mem.close()


def test_background_embedder_embeds_new_and_edited_facts(tmp_path: Path) -> None:
    emb = ConceptEmbeddings()
    mem = _open(str(tmp_path / "m.db"), emb, background=True)
    try:
        ids = _add_facts(mem, "u1")
        assert mem._embedder is not None
        assert mem._embedder.wait_idle(timeout=30)
        assert fact_ids_with_vectors(mem, "u1") == set(ids.values())
        mem.update_fragment("u1", ids[FACTS[3]], content="User finds rainy weather dull.")
        assert mem._embedder.wait_idle(timeout=30)
        assert fact_ids_with_vectors(mem, "u1") == set(ids.values())
        assert emb.documents == len(FACTS) + 1
    finally:
        mem.close()


def test_write_skips_a_fact_edited_while_it_was_embedded(tmp_path: Path) -> None:
    emb = ConceptEmbeddings()
    mem = _open(str(tmp_path / "m.db"), emb)
    try:
        ids = _add_facts(mem, "u1")
        todo = mem.store.missing_fact_vectors("u1", emb.model)
        assert [t for _, t in todo] == FACTS
        mem.store.update_fragment("u1", ids[PYTHON], content="User writes Rust.")
        rows = [
            (fid, t, v) for (fid, t), v in zip(todo, emb.embed_documents([t for _, t in todo]), strict=True)
        ]
        assert mem.store.save_fact_vectors("u1", emb.model, rows) == len(FACTS) - 1
        assert ids[PYTHON] not in fact_ids_with_vectors(mem, "u1")
        assert mem.store.missing_fact_vectors("u1", emb.model) == [(ids[PYTHON], "User writes Rust.")]
    finally:
        mem.close()


def test_stored_vectors_cache_follows_writes_and_deletes(tmp_path: Path) -> None:
    emb = ConceptEmbeddings()
    mem = _open(str(tmp_path / "m.db"), emb)
    try:
        ids = _add_facts(mem, "u1")
        facts = mem.store.list_fragments("u1")
        assert mem.store.stored_fact_vectors("u1", emb.model, facts) == {}
        mem.embed_facts("u1", limit=1)
        assert set(mem.store.stored_fact_vectors("u1", emb.model, facts)) == {ids[PYTHON]}
        mem.embed_facts("u1")
        found = mem.store.stored_fact_vectors("u1", emb.model, facts)
        assert set(found) == set(ids.values())
        assert found[ids[PYTHON]].tolist() == [1.0, 0.0, 0.0, np.float32(0.05)]
        mem.store.delete_fragment("u1", ids[PYTHON])
        assert ids[PYTHON] not in mem.store.stored_fact_vectors("u1", emb.model, facts)
        # Another model's vectors are not this one's.
        assert mem.store.stored_fact_vectors("u1", "other-model", facts) == {}
    finally:
        mem.close()


class HashedWords(Embeddings):
    """Bag of words hashed into 16 axes: small integer counts, exact in float32 (and in float64)."""

    model = "hashed-words-16"

    def _vector(self, text: str) -> list[float]:
        out = [0.0] * 16
        for word in text.lower().replace(".", " ").split():
            out[hashlib.blake2b(word.encode(), digest_size=1).digest()[0] % 16] += 1.0
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


_WORDS = (
    "tea coffee mango allergy running piano dog cat beach rain python chess paris tokyo bike sushi".split()
)


@pytest.fixture(scope="module")
def many_facts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ConvMemory, HashedWords]:
    emb = HashedWords()
    mem = _open(str(tmp_path_factory.mktemp("hybrid") / "m.db"), emb)
    rng = np.random.default_rng(5)
    for i in range(60):
        words = " ".join(rng.choice(_WORDS, size=3, replace=False))
        mem.store.add_fragment("u1", f"User mentioned {words} ({i}).", now_ms=T0 + i)
    mem.lifecycle.run("u1")
    mem.embed_facts("u1")
    return mem, emb


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.sampled_from(_WORDS + ["unknown", "weekend"]), min_size=1, max_size=4),
    budget=st.sampled_from([120, 300, 1000]),
)
def test_hybrid_block_is_the_same_with_stored_and_per_call_vectors(
    many_facts: tuple[ConvMemory, HashedWords], words: list[str], budget: int
) -> None:
    mem, emb = many_facts
    query = " ".join(words)
    snap = mem.query_snapshot("u1", query)
    assert snap.fact_vectors is not None and len(snap.fact_vectors) == len(snap.fragments)
    per_call: MemorySnapshot = snap.model_copy(update={"fact_vectors": None})
    opts = MemoryBlockOptions(budget_tokens=budget, query=query, now_ms=T0 + 3_600_000)
    stored_block = build_memory_block(snap, opts, embeddings=emb)
    per_call_block = build_memory_block(per_call, opts, embeddings=emb)
    assert stored_block.text == per_call_block.text
    assert stored_block.included_fragment_ids == per_call_block.included_fragment_ids
    stored_order, stored_cos = ranked_with_cosines(
        query, snap.fragments, emb, first=64, stored=snap.fact_vectors
    )
    call_order, call_cos = ranked_with_cosines(query, snap.fragments, emb, first=64)
    assert [f.id for f in stored_order] == [f.id for f in call_order]
    assert stored_cos.keys() == call_cos.keys()
    assert all(abs(stored_cos[k] - call_cos[k]) < 1e-12 for k in call_cos)


def test_unembedded_facts_keep_a_neutral_place_and_no_cosine() -> None:
    """A fact with no stored vector gets no cosine; with none stored the lexical order is kept."""
    from convmem_graph.models import Fragment
    from convmem_graph.payloads.relevance import iter_ranked

    emb = ConceptEmbeddings()
    frags = [
        Fragment(id=f"f{i}", memory_id="m", content=c, key=f"k{i}", updated_at=i) for i, c in enumerate(FACTS)
    ]
    lexical, none = ranked_with_cosines(QUERY, frags, emb, first=8, stored={})
    assert none == {}
    assert [f.id for f in lexical] == [f.id for f in iter_ranked(QUERY, frags, first=8)]
    stored = {"f0": emb._vector(FACTS[0]), "f1": emb._vector(FACTS[1])}
    order, cos = ranked_with_cosines(QUERY, frags, emb, first=8, stored=stored)
    assert set(cos) == {"f0", "f1"}
    assert next(order).id == "f0"
    assert emb.documents == 0


def test_background_fact_pass_runs_only_after_facts_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn with no new fact costs no fact pass (one reads every active fact's text)."""
    from convmem_graph.store import turn_embedding

    passes: list[str] = []
    real = turn_embedding.embed_missing_facts

    def counting(store: object, embeddings: Embeddings, memory_id: str, **kw: object) -> int:
        passes.append(memory_id)
        return real(store, embeddings, memory_id, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(turn_embedding, "embed_missing_facts", counting)
    mem = _open(str(tmp_path / "m.db"), ConceptEmbeddings(), background=True)
    try:
        mem.ingest("u1", [{"role": "user", "content": "ok", "timestamp": T0}], source="openai")
        assert mem._embedder is not None and mem._embedder.wait_idle(timeout=30)
        assert passes == []
        mem.add_fragment("u1", PYTHON)
        assert mem._embedder.wait_idle(timeout=30)
        assert passes == ["u1"]
        assert fact_rows(mem, "u1") == 1
    finally:
        mem.close()
