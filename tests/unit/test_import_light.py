"""Import hygiene: the modules a call start needs do not pull in LangGraph, LangChain or LangSmith.

Each import runs in a fresh interpreter (this test process has them loaded already).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("langgraph", "langchain_core", "langchain", "langsmith")

LIGHT_MODULES = [
    "convmem_graph",
    "convmem_graph.config",
    "convmem_graph.tokens",
    "convmem_graph.models",
    "convmem_graph.store",
    "convmem_graph.extractors",
    "convmem_graph.extractors.keys",
]


def _loaded_after(module: str) -> list[str]:
    code = (
        "import importlib, json, sys; importlib.import_module(sys.argv[1]); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, module], capture_output=True, text=True, check=True, timeout=120
    )
    top: list[str] = json.loads(out.stdout)
    return top


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_light_modules_do_not_import_langgraph_or_langchain(module: str) -> None:
    loaded = _loaded_after(module)
    assert not [m for m in HEAVY if m in loaded], f"{module} imports {[m for m in HEAVY if m in loaded]}"


def test_the_check_sees_a_heavy_import() -> None:
    assert "langgraph" in _loaded_after("convmem_graph.graph")


def _fill_memory(db: str) -> None:
    from convmem_graph.memory import ConvMemory

    with ConvMemory.open(db) as mem:
        turn = [
            {"role": "user", "content": "我住在杭州，我对芒果过敏。"},
            {"role": "assistant", "content": "好的"},
        ]
        mem.ingest("m1", turn, source="openai")


def test_a_call_start_imports_no_langgraph_or_langsmith(tmp_path: Path) -> None:
    db = str(tmp_path / "call.db")
    _fill_memory(db)
    code = (
        "import json, sys\n"
        "from convmem_graph.memory import ConvMemory\n"
        "mem = ConvMemory.open(sys.argv[1])\n"
        "body = mem.payload('m1', 'trtc-llmconfig', query='芒果')\n"
        "assert '芒果' in json.dumps(body, ensure_ascii=False)\n"
        "mem.close()\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, db], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert "langgraph" not in loaded and "langsmith" not in loaded


def test_convmem_inject_imports_no_langgraph_or_langsmith(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    _fill_memory(db)
    cmd = [sys.executable, "-X", "importtime", "-m", "convmem_graph", "inject", "m1", "--vendor", "openai"]
    out = subprocess.run([*cmd, "--db", db], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "杭州" in out.stdout
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line
    }
    assert "langgraph" not in imported and "langsmith" not in imported
    assert "convmem_graph" in imported  # the check reads real import lines
