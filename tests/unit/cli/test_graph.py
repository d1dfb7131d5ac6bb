"""The graph LangGraph Studio loads (langgraph.json) and the ``convmem graph`` command."""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path

import pytest
from langgraph.pregel import Pregel

from convmem_graph.cli import main

ROOT = Path(__file__).resolve().parents[3]
NODES = {"ingest", "normalize", "extract", "update_variables", "summarize", "inject"}


def test_langgraph_json_names_an_importable_compiled_graph() -> None:
    config = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))
    target = config["graphs"]["convmem_lifecycle"]
    path, _, attr = target.partition(":")
    module_name = path.removeprefix("./").removesuffix(".py").replace("/", ".")
    graph = getattr(importlib.import_module(module_name), attr)
    assert isinstance(graph, Pregel)
    assert NODES <= set(graph.get_graph().nodes)
    assert (ROOT / path).is_file()


def test_studio_context_builds_its_own_store_from_json(tmp_path: Path) -> None:
    from convmem_graph.state import MemoryContext, RawInput
    from convmem_graph.studio import graph

    ctx = MemoryContext(
        db_url=str(tmp_path / "studio.db"),
        config={"bot_ids": ["bot"]},  # type: ignore[arg-type]  # as LangGraph passes JSON
        inputs=[[{"role": "user", "content": "I live in Oslo."}]],
    )
    assert isinstance(ctx.inputs[0], RawInput)
    out = graph.invoke({"memory_id": "u1"}, context=ctx)
    assert out["new_message_ids"]
    assert ctx.store.get_variables("u1")["city"].value == "Oslo"


def test_graph_command_mermaid_shows_conditional_edges(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph"]) == 0
    out = capsys.readouterr().out
    assert "graph TD;" in out
    assert "normalize -.-> extract;" in out and "extract -.-> update_variables;" in out
    assert all(node in out for node in NODES)


def test_graph_command_ascii(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph", "--format", "ascii"]) == 0
    assert "update_variables" in capsys.readouterr().out


def test_graph_command_png_without_graphviz_says_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("pygraphviz") is not None:
        assert main(["graph", "--format", "png", "-o", str(tmp_path / "g.png")]) == 0
        assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
        return
    assert main(["graph", "--format", "png", "-o", str(tmp_path / "g.png")]) == 2
    assert "pygraphviz" in capsys.readouterr().err
    assert not (tmp_path / "g.png").exists()
