"""Turn vectors: written off the request path, found by meaning, exact after delete and purge.

The round trip and the older text form run on each backend (``backend_url``; PostgreSQL on its
portable path); pgvector's own tests are in ``tests/integration/test_postgres_turn_vectors.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from sqlalchemy import text

from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message
from convmem_graph.store import MemoryStore, _vectors, migrations
from convmem_graph.store._vectors import dense_search
from convmem_graph.store.transfer import export_memory, import_memory

# Axes of meaning with no shared word between their members: a lexical search cannot link them.
_CONCEPTS = (("programming", "python", "c++", "rust"), ("pet", "dog", "puppy"), ("sea", "beach", "surf"))
T0 = 1_709_460_000_000


class ConceptEmbeddings(Embeddings):
    """A text points along the concepts whose words it holds (plus a small constant axis)."""

    model = "concepts-v1"

    def __init__(self) -> None:
        self.documents = 0
        self.queries = 0

    def _vector(self, text: str) -> list[float]:
        low = text.lower()
        return [float(any(w in low for w in words)) for words in _CONCEPTS] + [0.05]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += len(texts)
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries += 1
        return self._vector(text)


TURNS = [
    "I have worked with Python and C++ for years",
    "We adopted a puppy last spring",
    "Went surfing at the beach on Sunday",
    "The weather was grey all week",
]
QUERY = "What programming languages does the user know?"


def ingest(mem: ConvMemory, mid: str = "u1") -> None:
    mem.ingest(
        mid,
        [{"role": "user", "content": t, "timestamp": T0 + i * 60_000} for i, t in enumerate(TURNS)],
        source="openai",
    )


def block(mem: ConvMemory, mid: str = "u1") -> str:
    messages = mem.payload(mid, "openai", query=QUERY, budget_tokens=300, recent_turns=0)
    return str(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""


def vector_rows(mem: ConvMemory, mid: str | None = None, table: str = "cm_turn_vectors") -> int:
    sql = f"SELECT count(*) FROM {table}" + (" WHERE memory_id = :m" if mid else "")
    with mem.store.engine.connect() as conn:
        return int(conn.execute(text(sql), {"m": mid} if mid else {}).scalar() or 0)


def vector_keys(mem: ConvMemory, table: str) -> set[tuple[str, str, int]]:
    """Every ``(memory_id, model, seq)`` holding a vector in ``table``."""
    with mem.store.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT memory_id, model, seq FROM {table}"))
        return {(str(m), str(model), int(seq)) for m, model, seq in rows}


def orphan_vectors(mem: ConvMemory) -> int:
    """How many rows of ``cm_turn_vectors`` name a turn that is no longer stored."""
    with mem.store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM cm_turn_vectors v WHERE NOT EXISTS (SELECT 1 FROM cm_messages m "
                    "WHERE m.memory_id = v.memory_id AND m.seq = v.seq)"
                )
            ).scalar_one()
        )


def check_vectors_round_trip(url: str, copies: tuple[str, ...] = ()) -> None:
    """The same checks on any backend (the PostgreSQL integration tests run them too).

    ``copies``: tables that must hold a vector for exactly the turns ``cm_turn_vectors`` does
    after each step (pgvector's searchable copy).
    """
    emb = ConceptEmbeddings()
    # Embedded by hand here (half, then the rest); the background worker has tests of its own.
    mem = ConvMemory.open(url, embeddings=emb, clock=lambda: T0 + 3_600_000, embed_in_background=False)
    try:
        ingest(mem)
        ingest(mem, "u2")
        # Not embedded yet: the memory answers by words (none shared), and nothing breaks.
        assert "Python" not in block(mem)
        # Half embedded: the first two turns get vectors, the rest wait (resumable).
        assert mem.embed_turns("u1", batch=1, limit=2) == 2
        assert vector_rows(mem, "u1") == 2
        for copy in copies:
            assert vector_keys(mem, copy) == vector_keys(mem, "cm_turn_vectors")
        assert "Python and C++" in block(mem)
        assert mem.embed_turns("u1") == len(TURNS) - 2  # picks up where it stopped
        assert mem.embed_turns("u1") == 0
        assert mem.embed_turns("u2") == len(TURNS)
        # A turn replaced by a corrected copy (same id): the old row's vector goes with it.
        with mem.store.engine.connect() as conn:
            first = conn.execute(
                text(
                    "SELECT seq, id, role, channel, source, timestamp_ms FROM cm_messages "
                    "WHERE memory_id = 'u2' ORDER BY seq LIMIT 1"
                )
            ).one()
        edited = Message(
            id=first.id,
            role=first.role,
            content=TURNS[0] + " (edited)",
            channel=first.channel,
            source=first.source,
            timestamp_ms=first.timestamp_ms,
        )
        mem.store.add_messages("u2", [edited])
        assert ("u2", emb.model, int(first.seq)) not in vector_keys(mem, "cm_turn_vectors")
        assert vector_rows(mem, "u2") == len(TURNS) - 1
        for copy in copies:
            assert vector_keys(mem, copy) == vector_keys(mem, "cm_turn_vectors")
        assert mem.embed_turns("u2") == 1  # the corrected turn
        # Retention purge: the purged turns' vectors go with them.
        purged = mem.store.purge_messages("u1", before_ms=T0 + 120_000, keep_recent=0, only_processed=False)
        assert purged == 2
        assert vector_rows(mem, "u1") == len(TURNS) - 2
        for copy in copies:
            assert vector_keys(mem, copy) == vector_keys(mem, "cm_turn_vectors")
        assert orphan_vectors(mem) == 0
        # Import over a memory (replace): its old turns' vectors go; the new turns wait for theirs.
        doc = export_memory(mem.store, "u2")
        import_memory(mem.store, doc, memory_id="u2", replace=True)
        assert vector_rows(mem, "u2") == 0
        for copy in copies:
            assert vector_rows(mem, "u2", copy) == 0
        assert mem.embed_turns("u2") == len(TURNS)
        # Delete: every vector of the memory goes, the other memory's stay.
        assert mem.delete("u1")
        assert vector_rows(mem, "u1") == 0
        assert vector_rows(mem, "u2") == len(TURNS)
        for copy in copies:
            assert vector_rows(mem, "u1", copy) == 0
            assert vector_keys(mem, copy) == vector_keys(mem, "cm_turn_vectors")
    finally:
        mem.close()


def _rename_vectors(mem: ConvMemory, tables: tuple[str, ...], old: str, new: str) -> None:
    """Store the vectors under ``old`` as ``new`` in every table (as another text form's)."""
    with mem.store.engine.begin() as conn:
        for table in tables:
            conn.execute(
                text(f"UPDATE {table} SET model = :new WHERE model = :old"), {"new": new, "old": old}
            )


def check_older_text_form(url: str, copies: tuple[str, ...] = ()) -> None:
    """Vectors of an older form of the vector text: not scored, embedded again, replaced; delete exact.

    ``copies``: tables holding a searchable copy of ``cm_turn_vectors`` (pgvector's).
    """
    from convmem_graph.cli.vectors import _status

    emb = ConceptEmbeddings()
    mem = ConvMemory.open(url, embeddings=emb, clock=lambda: T0 + 3_600_000, embed_in_background=False)
    current = _vectors.vector_key(emb.model)
    try:
        for mid in ("u1", "u2"):
            ingest(mem, mid)
            assert mem.embed_turns(mid) == len(TURNS)
        assert "Python and C++" in block(mem)
        # As a store holds them that embedded before the text form had a version: the bare name.
        _rename_vectors(mem, ("cm_turn_vectors", *copies), current, emb.model)
        assert "Python" not in block(mem)  # not scored: the turn is found by its words (none shared)
        assert len(mem.store.missing_turn_vectors("u1", emb.model)) == len(TURNS)
        assert _status(mem, ["u1"])[0]["vectors"] == {}
        # Half embedded again: those turns' old vectors are replaced, the others wait, unscored.
        assert mem.embed_turns("u1", batch=1, limit=2) == 2
        keys = vector_keys(mem, "cm_turn_vectors")
        assert sorted(model for m, model, _ in keys if m == "u1") == sorted([current] * 2 + [emb.model] * 2)
        for copy in copies:
            assert vector_keys(mem, copy) == keys
        assert "Python and C++" in block(mem)
        assert _status(mem, ["u1"])[0]["vectors"] == {emb.model: 2}
        assert mem.embed_turns("u1") == len(TURNS) - 2
        assert {model for m, model, _ in vector_keys(mem, "cm_turn_vectors") if m == "u1"} == {current}
        # Purge and delete take the old form's vectors too.
        purged = mem.store.purge_messages("u2", before_ms=T0 + 120_000, keep_recent=0, only_processed=False)
        assert purged == 2
        assert vector_rows(mem, "u2") == len(TURNS) - 2
        assert orphan_vectors(mem) == 0
        assert mem.delete("u2")
        for table in ("cm_turn_vectors", *copies):
            assert vector_rows(mem, "u2", table) == 0
            assert vector_keys(mem, table) == vector_keys(mem, "cm_turn_vectors")
    finally:
        mem.close()


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable path even on a server with pgvector: the migration finds no extension."""
    monkeypatch.setattr(migrations, "enable_pgvector", lambda conn: False)
    monkeypatch.setattr(_vectors, "pgvector_schema", lambda conn: None)


@pytest.mark.usefixtures("portable")
def test_vectors_of_an_older_text_form_are_not_used_and_are_replaced(backend_url: str) -> None:
    check_older_text_form(backend_url)


def test_a_new_text_form_makes_the_current_vectors_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emb = ConceptEmbeddings()
    mem = ConvMemory.open(
        str(tmp_path / "v.db"), embeddings=emb, clock=lambda: T0 + 3_600_000, embed_in_background=False
    )
    try:
        ingest(mem)
        assert mem.embed_turns("u1") == len(TURNS)
        assert "Python and C++" in block(mem)
        monkeypatch.setattr(_vectors, "TURN_TEXT_VERSION", _vectors.TURN_TEXT_VERSION + 1)
        assert "Python" not in block(mem)
        assert mem.embed_turns("u1") == len(TURNS)
        assert {model for _, model, _ in vector_keys(mem, "cm_turn_vectors")} == {
            _vectors.vector_key(emb.model)
        }
        assert vector_rows(mem, "u1") == len(TURNS)
        assert "Python and C++" in block(mem)
    finally:
        mem.close()


def test_an_upgraded_store_seeks_the_current_forms_newest_vector(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    rng = np.random.default_rng(9)
    store, seqs = _store_with_vectors(str(db), rng.standard_normal((50, 8)).astype(np.float32))
    store.close()
    with closing(sqlite3.connect(db)) as conn:  # as a store before migration 11 left it
        conn.execute("DROP INDEX ix_cm_turn_vectors_model")
        conn.execute("UPDATE cm_turn_vectors SET model = 'rand'")  # and before text forms had versions
        conn.execute("DELETE FROM cm_schema_migrations WHERE version = 11")
        conn.execute("PRAGMA user_version = 0")
        conn.commit()
    store = MemoryStore.from_url(str(db))
    try:
        with store.read() as conn:
            plan = conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT seq FROM cm_turn_vectors WHERE memory_id = 'm' AND model = ? "
                "ORDER BY seq DESC LIMIT 1",
                (_vectors.vector_key("rand"),),
            ).all()
            assert "ix_cm_turn_vectors_model" in " ".join(str(row[-1]) for row in plan)
            assert _vectors._newest(conn, "m", _vectors.vector_key("rand")) == 0
        assert _search(store, rng.standard_normal(8).astype(np.float32), 5) == {}  # old form: unscored
        assert len(store.missing_turn_vectors("m", "rand", limit=100)) == len(seqs)
    finally:
        store.close()


def test_vector_key_keeps_the_column_width() -> None:
    key = _vectors.vector_key("m" * 200)
    assert len(key) == 128 and key.endswith(f"#text{_vectors.TURN_TEXT_VERSION}")
    assert _vectors.current_model(key) == "m" * 122
    assert _vectors.current_model("m" * 128) is None


@pytest.mark.usefixtures("portable")
def test_vectors_round_trip(backend_url: str) -> None:
    check_vectors_round_trip(backend_url)


def test_lexical_only_memory_does_not_find_by_meaning(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "v.db"), clock=lambda: T0 + 3_600_000)
    try:
        ingest(mem)
        assert "Python" not in block(mem)
    finally:
        mem.close()


def test_vectors_of_another_model_are_not_used(tmp_path: Path) -> None:
    url = str(tmp_path / "v.db")
    first = ConvMemory.open(
        url, embeddings=ConceptEmbeddings(), clock=lambda: T0 + 3_600_000, embed_in_background=False
    )
    try:
        ingest(first)
        first.embed_turns("u1")
    finally:
        first.close()

    class Other(ConceptEmbeddings):
        model = "concepts-v2"

    second = ConvMemory.open(url, embeddings=Other(), clock=lambda: T0 + 3_600_000, embed_in_background=False)
    try:
        assert "Python" not in block(second)  # v1 vectors are not v2's
        assert second.embed_turns("u1") == len(TURNS)
        assert "Python and C++" in block(second)
    finally:
        second.close()


def _store_with_vectors(url: str, matrix: np.ndarray, mid: str = "m") -> tuple[MemoryStore, list[int]]:
    """A store whose memory ``mid`` has one turn per row of ``matrix``, each with that row as vector."""
    store = MemoryStore.from_url(url)
    store.ensure_memory(mid)
    store.add_messages(
        mid,
        [
            Message(
                id=f"t{i}",
                role="user",
                content=f"turn {i}",
                channel="im",
                source="message",
                timestamp_ms=T0 + i,
            )
            for i in range(len(matrix))
        ],
    )
    with store.read() as conn:
        seqs = [
            int(s)
            for (s,) in conn.execute(
                text("SELECT seq FROM cm_messages WHERE memory_id = :m ORDER BY seq"), {"m": mid}
            )
        ]
    store.save_turn_vectors(mid, "rand", [(s, row.tolist()) for s, row in zip(seqs, matrix, strict=True)])
    return store, seqs


def _search(store: MemoryStore, query: np.ndarray, k: int, mid: str = "m") -> dict[int, float]:
    with store.read() as conn:
        return dense_search(conn, mid, "rand", query.tolist(), k)


def test_dense_search_keeps_the_exact_float32_top_k(tmp_path: Path) -> None:
    # Random vectors: the hard case for int8 (nearest neighbours barely nearer than the rest).
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((3_000, 384)).astype(np.float32)
    store, seqs = _store_with_vectors(str(tmp_path / "d.db"), matrix)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    try:
        for k in (10, 48):
            found = total = 0
            for q in rng.standard_normal((30, 384)).astype(np.float32):
                exact = unit @ (q / np.linalg.norm(q))
                best = np.argsort(-exact)[:k]
                near = _search(store, q, k)
                assert len(near) == k
                assert list(near.values()) == sorted(near.values(), reverse=True)
                found += len({seqs[i] for i in best} & set(near))
                total += k
                # Cosines of the float16-stored vectors, not of the int8 pass.
                index = {s: i for i, s in enumerate(seqs)}
                assert max(abs(c - exact[index[s]]) for s, c in near.items()) < 2e-3
            assert found / total >= 0.99
    finally:
        store.close()


def test_dense_search_cache_follows_appends_replacements_and_deletes(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((40, 16)).astype(np.float32)
    store, seqs = _store_with_vectors(str(tmp_path / "d.db"), matrix[:20])
    try:
        assert next(iter(_search(store, matrix[3], 1))) == seqs[3]
        key = (id(store.engine), "m", _vectors.vector_key("rand"))
        token = _vectors._cache[key].token
        # Turns stored and embedded later (the background worker's case): appended to the cache.
        store.add_messages(
            "m",
            [
                Message(
                    id=f"u{i}",
                    role="user",
                    content=f"more {i}",
                    channel="im",
                    source="message",
                    timestamp_ms=T0 + 100 + i,
                )
                for i in range(20)
            ],
        )
        with store.read() as conn:
            later = [
                int(s)
                for (s,) in conn.execute(
                    text("SELECT seq FROM cm_messages WHERE memory_id = 'm' AND seq > :s ORDER BY seq"),
                    {"s": seqs[-1]},
                )
            ]
        store.save_turn_vectors(
            "m", "rand", [(s, row.tolist()) for s, row in zip(later, matrix[20:], strict=True)]
        )
        assert next(iter(_search(store, matrix[35], 1))) == later[15]
        cached = _vectors._cache[key]
        assert cached.token == token and len(cached.ids) == 40  # appended, not read again
        # A replaced vector (same seq, new values) renews the token: the new vector is searched.
        store.save_turn_vectors("m", "rand", [(seqs[0], matrix[35].tolist())])
        assert set(_search(store, matrix[35], 2)) == {seqs[0], later[15]}
        # A deleted turn's vector is never returned again.
        store.purge_messages("m", before_ms=T0 + 1, keep_recent=0, only_processed=False)
        assert seqs[0] not in _search(store, matrix[35], 40)
        assert len(_search(store, matrix[35], 100)) == 39
    finally:
        store.close()


class RecordingEmbeddings(ConceptEmbeddings):
    """Keeps every text it was asked to embed as a document."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return super().embed_documents(texts)


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[ConvMemory, RecordingEmbeddings]]:
    """A memory embedding its turns in the foreground with :class:`RecordingEmbeddings`."""
    emb = RecordingEmbeddings()
    mem = ConvMemory.open(str(tmp_path / "m.db"), embeddings=emb, embed_in_background=False)
    try:
        yield mem, emb
    finally:
        mem.close()


def embedded_texts(
    recorded: tuple[ConvMemory, RecordingEmbeddings], turns: list[dict[str, Any]], **kwargs: Any
) -> list[str]:
    """Ingest ``turns`` into ``u1``, embed every one of them, and return the texts embedded."""
    mem, emb = recorded
    start = len(emb.texts)
    mem.ingest("u1", turns, **kwargs)
    assert mem.embed_turns("u1") == len(turns)
    return emb.texts[start:]


def test_a_turn_is_embedded_after_the_turn_before_with_its_date_and_speaker_and_stored_unchanged(
    recorded: tuple[ConvMemory, RecordingEmbeddings],
) -> None:
    turns = [
        {"role": "user", "content": TURNS[0], "timestamp": T0, "name": "James"},
        {"role": "assistant", "content": "Nice!", "timestamp": T0 + 60_000},
        # Chinese: the day at UTC+8, as the quotes read it (17:00 UTC on 3 March is 4 March there).
        {"role": "user", "content": "我养了一只小狗", "timestamp": T0 + 25_200_000, "name": "小明"},
    ]
    assert embedded_texts(recorded, turns, source="openai") == [
        "[3 March 2024] James: I have worked with Python and C++ for years",
        "James: I have worked with Python and C++ for years\n[3 March 2024] Nice!",
        "Nice!\n[2024-03-04] 小明: 我养了一只小狗",
    ]
    # A turn embedded later (its batch starts after turns with vectors) still gets its predecessor.
    later = [{"role": "user", "content": "Rust too", "timestamp": T0 + 30_000_000, "name": "James"}]
    assert embedded_texts(recorded, later) == ["小明: 我养了一只小狗\n[3 March 2024] James: Rust too"]
    # Only the vector saw the prefix: the turn and its quote read as they were written.
    mem = recorded[0]
    stored = [m.content for m in mem.store.recent_messages("u1", 10)]
    assert stored == [TURNS[0], "Nice!", "我养了一只小狗", "Rust too"]
    assert "James: I have" not in block(mem)


def test_a_turn_after_its_own_voice_is_embedded_without_that_turn(
    recorded: tuple[ConvMemory, RecordingEmbeddings],
) -> None:
    # The turn before is context for a reply; after the same voice (same role and speaker) it is
    # mostly another subject, as in a diary of unrelated messages, and is left out.
    turns = [
        {"role": "user", "content": "I won the drawing contest", "timestamp": T0},
        {"role": "user", "content": "My cat is ill", "timestamp": T0 + 60_000},
        {"role": "assistant", "content": "Sorry to hear", "timestamp": T0 + 120_000},
        {"role": "user", "content": "Thanks", "timestamp": T0 + 180_000, "name": "James"},
        {"role": "user", "content": "See you", "timestamp": T0 + 240_000, "name": "James"},
    ]
    assert embedded_texts(recorded, turns, source="openai") == [
        "[3 March 2024] I won the drawing contest",
        "[3 March 2024] My cat is ill",
        "My cat is ill\n[3 March 2024] Sorry to hear",
        "Sorry to hear\n[3 March 2024] James: Thanks",
        "[3 March 2024] James: See you",
    ]


def test_turn_vector_text_reads_the_offset_in_metadata() -> None:
    # 23:30 UTC on 2 March is 3 March at UTC+1; a bad offset falls back to the script's rule.
    ts = 1_709_422_200_000
    assert _vectors.turn_vector_text("Hi", "Ann", ts, {"utc_offset_minutes": 60}) == "[3 March 2024] Ann: Hi"
    assert _vectors.turn_vector_text("Hi", " Ann  Lee ", ts, {"utc_offset_minutes": True}) == (
        "[2 March 2024] Ann Lee: Hi"
    )
    assert _vectors.turn_vector_text("Hi", "", ts, None) == "[2 March 2024] Hi"
    long_before = (None, "x" * 400)
    assert (
        _vectors.turn_vector_text("Hi", "Ann", ts, None, long_before)
        == "x" * 300 + "\n[2 March 2024] Ann: Hi"
    )
