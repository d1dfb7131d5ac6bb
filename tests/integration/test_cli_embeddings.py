"""``--embeddings`` on the command line: replay and ingest embed turns, inject searches by meaning.

Each call is its own ``python -m convmem_graph`` process against a fake OpenAI-compatible
``/v1/embeddings`` on 127.0.0.1 (``tests/fakes/openai_embeddings.py``: a bearer key, text inputs,
vectors in which words of one concept share a dimension). The turn that answers the question
shares no word with it ("Python and C++" vs "programming languages"): only the search by meaning
can put it in the block.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from convmem_graph.store._vectors import vector_key
from tests.fakes.openai_embeddings import FakeEmbeddingsServer
from tests.integration.replay_archives import convmem

pytestmark = pytest.mark.integration

QUESTION = "Which programming languages do I know?"
ANSWER = "I have written Python and C++ for years at the studio."
FILLER = [
    "The weather was grey all weekend, so I stayed home.",
    "My sister called about the wedding plans in June.",
    "We had dumplings and hot soup for dinner.",
    "The bus was late again this morning.",
    "I finished the mystery novel you recommended.",
    "Our neighbour plays the trumpet at night.",
    "I bought new running shoes on Saturday.",
    "The garden needs water every other day now.",
]


@pytest.fixture
def embeddings_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEmbeddingsServer]:
    with FakeEmbeddingsServer() as server:
        # What the OpenAI client reads itself; the child processes inherit them.
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-embeddings")
        monkeypatch.delenv("CONVMEM_EMBEDDINGS", raising=False)
        yield server


def _archive(path: Path) -> Path:
    turns = []
    for k, text in enumerate([*FILLER[:4], ANSWER, *FILLER[4:]]):
        turns.append({"role": "user", "content": text, "timestamp": 1_767_000_000 + 60 * k})
        turns.append({"role": "assistant", "content": "Got it.", "timestamp": 1_767_000_030 + 60 * k})
    path.write_text(json.dumps({"user": "james", "messages": turns}), encoding="utf-8")
    return path


def _ok(proc: object) -> str:
    assert proc.returncode == 0, proc.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in proc.stderr  # type: ignore[attr-defined]
    return str(proc.stdout)  # type: ignore[attr-defined]


def _vectors(db: Path, memory_id: str) -> dict[str, int]:
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT model, count(*) FROM cm_turn_vectors WHERE memory_id = ? GROUP BY model", (memory_id,)
        )
        return dict(rows.fetchall())


def _block(db: Path, tmp_path: Path, *extra: str) -> str:
    out = _ok(
        convmem(
            "inject",
            "m1",
            "--vendor",
            "openai",
            "--query",
            QUESTION,
            "--recent",
            "0",
            "--db",
            db,
            *extra,
            cwd=tmp_path,
        )
    )
    return json.dumps(json.loads(out), ensure_ascii=False)


def test_replay_embeds_every_turn_and_inject_finds_the_answer_by_meaning(
    embeddings_server: FakeEmbeddingsServer, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    archive = _archive(tmp_path / "james.json")
    report = json.loads(
        _ok(
            convmem(
                "replay",
                archive,
                "--memory",
                "m1",
                "--embeddings",
                "openai:fake-embed",
                "--json",
                "--db",
                db,
                "--concurrency",
                "1",
                cwd=tmp_path,
            )
        )
    )
    stored = report["new_messages"]
    assert stored == 2 * (len(FILLER) + 1)
    # Every stored turn got one vector of the named model, each sent once.
    assert report["embedded_turns"] == stored and report["embed_seconds"] >= 0
    assert _vectors(db, "m1") == {vector_key("fake-embed"): stored}
    assert embeddings_server.texts() == stored
    # The answer shares no word with the question: lexical search alone misses it ...
    assert "Python and C++" not in _block(db, tmp_path)
    # ... the search by meaning finds it (the question embedded once per call).
    before = embeddings_server.texts()
    assert "Python and C++" in _block(db, tmp_path, "--embeddings", "openai:fake-embed")
    assert embeddings_server.texts() == before + 1


def test_replay_in_worker_processes_embeds_each_memorys_turns(
    embeddings_server: FakeEmbeddingsServer, tmp_path: Path
) -> None:
    db = tmp_path / "w.db"
    folder = tmp_path / "archive"
    folder.mkdir()
    for name in ("ana", "bo", "cy"):
        doc = json.loads(_archive(tmp_path / f"{name}.json").read_text(encoding="utf-8")) | {"user": name}
        (folder / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")
    report = json.loads(
        _ok(
            convmem(
                "replay",
                folder,
                "--group-by",
                "user",
                "--embeddings",
                "openai:fake-embed",
                "--json",
                "--concurrency",
                "2",
                "--db",
                db,
                cwd=tmp_path,
            )
        )
    )
    # The workers' reports are summed: every stored turn of the three memories, once.
    assert report["memories"] == 3 and report["embedded_turns"] == report["new_messages"] == 54
    assert sum(sum(_vectors(db, m).values()) for m in ("ana", "bo", "cy")) == 54


def test_ingest_embeds_before_it_returns_and_a_bad_name_is_a_clear_error(
    embeddings_server: FakeEmbeddingsServer, tmp_path: Path
) -> None:
    db = tmp_path / "i.db"
    archive = _archive(tmp_path / "james.json")
    out = _ok(
        convmem(
            "ingest",
            "--memory",
            "m1",
            archive,
            "--embeddings",
            "openai:fake-embed",
            "--json",
            "--db",
            db,
            cwd=tmp_path,
        )
    )
    assert json.loads(out)["embedded_turns"] == 18 and _vectors(db, "m1") == {vector_key("fake-embed"): 18}
    bad = convmem(
        "replay",
        archive,
        "--memory",
        "m2",
        "--embeddings",
        "word2vec",
        "--db",
        tmp_path / "b.db",
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--embeddings" in bad.stderr and "unknown embeddings 'word2vec'" in bad.stderr
    assert not (tmp_path / "b.db").exists()  # refused before the database is created
